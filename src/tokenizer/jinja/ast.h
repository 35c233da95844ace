// Syntax tree of a parsed template: expressions and statements, each with the line it came from.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace ferry::jinja {

enum class ExprKind {
  kLiteral,     // literal
  kName,        // name
  kList,        // args: items
  kTuple,       // args: items
  kDict,        // args: key, value, key, value, ...
  kGetAttr,     // args[0].name
  kGetItem,     // args[0][args[1]]
  kSlice,       // args[0][args[1]:args[2]:args[3]] (null parts allowed)
  kCall,        // args[0](args[1..], kwargs)
  kFilter,      // args[0]|name(args[1..], kwargs); args[0] null inside {% filter %} blocks
  kTest,        // args[0] is [not] name(args[1..], kwargs)
  kNot,         // not args[0]
  kNeg,         // -args[0]
  kPos,         // +args[0]
  kBinary,      // args[0] <name> args[1]: + - * / // % ** ~ and or in notin
  kCompare,     // args[0] ops[0] args[1] ops[1] args[2] ...
  kCondition,   // args[1] if args[0] else args[2] (args[2] may be null)
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind;
  int line = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
};

enum class StmtKind {
  kText,         // text
  kOutput,       // {{ expr }}
  kIf,           // branches: (cond, body)..., else_body
  kFor,          // targets in expr [if cond] body else_body
  kSet,          // targets = expr   | ns.attr = expr   | block form: body (+ filter)
  kMacro,        // name(params) body
  kCallBlock,    // {% call(params) expr %} body
  kFilterBlock,  // {% filter expr %} body
  kBreak,
  kContinue,
  kScope,        // a plain body (e.g. {% generation %})
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Param {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;                  // kText; kSet: attribute name for ns.attr; kMacro: name
  ExprPtr expr;                      // value / iterable / call / filter chain
  ExprPtr cond;                      // for-loop filter
  std::vector<std::string> targets;  // loop variables or set targets
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf
  Body body;
  Body else_body;
  std::vector<Param> params;  // kMacro, kCallBlock
  bool block_set = false;     // {% set x %}...{% endset %}
};

struct TemplateAst {
  Body body;
};

}  // namespace ferry::jinja
