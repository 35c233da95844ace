// Interpreter: renders a TemplateAst against a set of global variables, with jinja2's scoping rules
// (for-loop bodies and macros get their own scope; if-blocks do not) and hard limits so hostile templates
// end in ferry::Error instead of hanging or exhausting memory.
#pragma once

#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "core/check.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace ferry::jinja {

struct RenderLimits {
  size_t max_output_bytes = size_t{16} << 20;  // any rendered buffer, and any string value
  size_t max_list_items = size_t{1} << 20;     // any list built by the template
  int max_call_depth = 64;                     // nested macro / filter-block calls
  uint64_t max_steps = 5'000'000;              // statements + loop iterations + calls, in total
  int64_t max_range = 100'000;                 // items one range() may produce
  // Bytes of the strings and lists built while rendering, in total (values copy: a list of one string
  // repeated holds that many copies), so memory stays bounded whatever the per-value limits allow.
  uint64_t max_total_bytes = uint64_t{256} << 20;
};

// The wall clock strftime_now() reads; tests pass a fixed one.
using Clock = std::function<std::tm()>;
std::tm local_now();

// raise_exception(msg) from a template: what() is exactly msg.
class RaisedError : public Error {
 public:
  using Error::Error;
};

struct Scope {
  std::shared_ptr<Scope> parent;
  std::unordered_map<std::string, Value> vars;
  const Value* find(const std::string& name) const;
};

class Interpreter {
 public:
  Interpreter(RenderLimits limits, Clock clock);
  ~Interpreter();  // empties every namespace made while rendering: a namespace can hold itself (a cycle)
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Renders `ast` with `globals` (the context) visible as variables.
  std::string render(const TemplateAst& ast, const Dict& globals);

  // Pieces used by filters, tests and builtins.
  Value call(const Value& callee, const CallArgs& args);
  Value get_attr(const Value& obj, const std::string& name);
  Value get_item(const Value& obj, const Value& key);
  Value apply_filter(const std::string& name, const Value& input, const CallArgs& args);
  bool apply_test(const std::string& name, const Value& input, const CallArgs& args);
  void step();                                  // counts work; throws past max_steps
  void check_string(const std::string& s) const;  // throws past max_output_bytes
  void check_list(size_t n) const;                // throws past max_list_items
  void charge(uint64_t bytes);                    // counts bytes built; throws past max_total_bytes
  Value charged(Value v);                         // charge(copy_bytes(v)), then v
  const RenderLimits& limits() const { return limits_; }
  std::tm now() const { return clock_(); }
  void track_namespace(const Value& ns) { namespaces_.push_back(ns.ns); }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec_body(const Body& body, const std::shared_ptr<Scope>& scope, std::string& out);
  Flow exec(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out);
  Flow exec_for(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out);
  void exec_set(const Stmt& s, const std::shared_ptr<Scope>& scope);
  Value make_macro(const Stmt& s, const std::shared_ptr<Scope>& scope);
  Value call_macro(const Stmt& macro, const std::shared_ptr<Scope>& closure, const CallArgs& args,
                   const Value* caller);
  std::string render_body(const Body& body, const std::shared_ptr<Scope>& scope);
  void emit(std::string& out, const std::string& text) const;

  Value eval(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value eval_binary(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value eval_compare(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value eval_slice(const Expr& e, const std::shared_ptr<Scope>& scope);
  CallArgs eval_args(const Expr& e, size_t first, const std::shared_ptr<Scope>& scope);
  Value eval_filter(const Expr& e, const std::shared_ptr<Scope>& scope, const Value* block_input);

  RenderLimits limits_;
  Clock clock_;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
  uint64_t charged_bytes_ = 0;
  std::vector<std::weak_ptr<Dict>> namespaces_;
};

// Python binary operators on values (also used by filters such as sum).
Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b);
// Iterates a value as a for-loop would (dict -> keys, str -> characters, Undefined -> nothing).
List iterate(const Value& v);
bool contains(const Value& container, const Value& item);
// The bytes building (or copying) v costs: a string's bytes; a list's or dict's items, each a Value plus
// its string (nested lists and dicts are shared, not copied).
uint64_t copy_bytes(const Value& v);

}  // namespace ferry::jinja
