#include "tokenizer/jinja/parser.h"

#include <charconv>
#include <cstdlib>
#include <initializer_list>

#include "core/check.h"
#include "tokenizer/jinja/lexer.h"

namespace ferry::jinja {
namespace {

constexpr int kMaxNesting = 128;  // nested blocks / expression depth; bounds recursion on hostile input

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  TemplateAst run() {
    TemplateAst ast;
    std::string end;
    ast.body = parse_body({}, &end);
    return ast;
  }

 private:
  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxNesting) p.error(p.cur(), "template nesting too deep");
    }
    ~DepthGuard() { --p.depth_; }
  };

  // Left-leaning chains (a + b + c, x|f|g, x.a.b, x[0][1], x is not none is not none, ...) are parsed by
  // loops, but each iteration nests the tree one level deeper, and evaluating or freeing the tree recurses
  // on that depth: every iteration counts against the same nesting bound as recursion does.
  struct ChainGuard {
    Parser& p;
    int n = 0;
    explicit ChainGuard(Parser& parser) : p(parser) {}
    void step() {
      ++n;
      if (++p.depth_ > kMaxNesting) p.error(p.cur(), "template nesting too deep");
    }
    ~ChainGuard() { p.depth_ -= n; }
  };

  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t k = 1) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  void advance() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }

  [[noreturn]] void error(const Token& t, const std::string& msg) const {
    fail("chat template: line {} col {}: {}", t.line, t.col, msg);
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::kEof: return "end of template";
      case TokenType::kBlockEnd: return "'%}'";
      case TokenType::kVarEnd: return "'}}'";
      case TokenType::kText: return "text";
      case TokenType::kString: return "string literal";
      default: return "'" + t.value + "'";
    }
  }

  bool is_op(const char* op) const { return cur().type == TokenType::kOp && cur().value == op; }
  bool is_name(const char* name) const { return cur().type == TokenType::kName && cur().value == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    advance();
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) error(cur(), fmt::format("expected '{}', got {}", op, describe(cur())));
  }
  void expect_block_end() {
    if (cur().type != TokenType::kBlockEnd) error(cur(), fmt::format("expected '%}}', got {}", describe(cur())));
    advance();
  }
  std::string expect_name() {
    if (cur().type != TokenType::kName) error(cur(), fmt::format("expected a name, got {}", describe(cur())));
    std::string n = cur().value;
    advance();
    return n;
  }

  ExprPtr make(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // ---- statements ----

  // Parses statements until a block whose first name is in `ends` (left unconsumed after the name; *end gets it).
  Body parse_body(std::initializer_list<const char*> ends, std::string* end) {
    DepthGuard guard(*this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == TokenType::kEof) {
        if (ends.size() == 0) return body;
        std::string names;
        for (const char* e : ends) names += std::string(names.empty() ? "" : " or ") + "'" + e + "'";
        error(t, fmt::format("unexpected end of template, expected {}", names));
      }
      if (t.type == TokenType::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kText;
        s->line = t.line;
        s->text = t.value;
        body.push_back(std::move(s));
        advance();
      } else if (t.type == TokenType::kVarBegin) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->line = t.line;
        advance();
        s->expr = parse_tuple(true);
        if (cur().type != TokenType::kVarEnd) error(cur(), fmt::format("expected '}}}}', got {}", describe(cur())));
        advance();
        body.push_back(std::move(s));
      } else if (t.type == TokenType::kBlockBegin) {
        const Token& name = peek();
        if (name.type != TokenType::kName) error(name, "expected a statement name after '{%'");
        for (const char* e : ends) {
          if (name.value == e) {
            *end = name.value;
            advance();
            advance();
            return body;
          }
        }
        advance();
        body.push_back(parse_statement());
      } else {
        error(t, fmt::format("unexpected {}", describe(t)));
      }
    }
  }

  StmtPtr parse_statement() {
    const Token& t = cur();
    const std::string name = t.value;
    auto s = std::make_unique<Stmt>();
    s->line = t.line;
    advance();
    if (name == "if") return parse_if(std::move(s));
    if (name == "for") return parse_for(std::move(s));
    if (name == "set") return parse_set(std::move(s));
    if (name == "macro") return parse_macro(std::move(s));
    if (name == "call") return parse_call_block(std::move(s));
    if (name == "filter") return parse_filter_block(std::move(s));
    if (name == "break" || name == "continue") {
      s->kind = name == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      expect_block_end();
      return s;
    }
    if (name == "generation") {
      s->kind = StmtKind::kScope;
      expect_block_end();
      std::string end;
      s->body = parse_body({"endgeneration"}, &end);
      expect_block_end();
      return s;
    }
    if (name == "do") {
      s->kind = StmtKind::kSet;  // evaluated for effect, result discarded
      s->expr = parse_tuple(true);
      expect_block_end();
      return s;
    }
    error(t, fmt::format("unknown or unsupported statement '{}'", name));
  }

  StmtPtr parse_if(StmtPtr s) {
    s->kind = StmtKind::kIf;
    ExprPtr cond = parse_tuple(true);
    expect_block_end();
    while (true) {
      std::string end;
      Body body = parse_body({"elif", "else", "endif"}, &end);
      s->branches.emplace_back(std::move(cond), std::move(body));
      if (end == "elif") {
        cond = parse_tuple(true);
        expect_block_end();
        continue;
      }
      if (end == "else") {
        expect_block_end();
        s->else_body = parse_body({"endif"}, &end);
      }
      expect_block_end();
      return s;
    }
  }

  StmtPtr parse_for(StmtPtr s) {
    s->kind = StmtKind::kFor;
    const bool paren = skip_op("(");
    s->targets.push_back(expect_name());
    while (skip_op(",")) {
      if (is_name("in") || is_op(")")) break;
      s->targets.push_back(expect_name());
    }
    if (paren) expect_op(")");
    if (!skip_name("in")) error(cur(), fmt::format("expected 'in', got {}", describe(cur())));
    s->expr = parse_tuple(false);
    if (skip_name("if")) s->cond = parse_tuple(true);
    if (skip_name("recursive")) error(cur(), "recursive loops are not supported");
    expect_block_end();
    std::string end;
    s->body = parse_body({"else", "endfor"}, &end);
    if (end == "else") {
      expect_block_end();
      s->else_body = parse_body({"endfor"}, &end);
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_set(StmtPtr s) {
    s->kind = StmtKind::kSet;
    std::string first = expect_name();
    if (skip_op(".")) {  // ns.attr = value
      s->targets.push_back(first);
      s->text = expect_name();
      expect_op("=");
      s->expr = parse_tuple(true);
      expect_block_end();
      return s;
    }
    s->targets.push_back(first);
    while (skip_op(",")) s->targets.push_back(expect_name());
    if (skip_op("=")) {
      s->expr = parse_tuple(true);
      expect_block_end();
      return s;
    }
    if (s->targets.size() != 1) error(cur(), "expected '=' in set statement");
    s->block_set = true;
    if (is_op("|")) s->expr = parse_filter_chain(nullptr);
    expect_block_end();
    std::string end;
    s->body = parse_body({"endset"}, &end);
    expect_block_end();
    return s;
  }

  std::vector<Param> parse_params() {
    std::vector<Param> params;
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      Param p;
      p.name = expect_name();
      if (skip_op("=")) p.default_value = parse_expression(true);
      params.push_back(std::move(p));
    }
    expect_op(")");
    return params;
  }

  StmtPtr parse_macro(StmtPtr s) {
    s->kind = StmtKind::kMacro;
    s->text = expect_name();
    s->params = parse_params();
    expect_block_end();
    std::string end;
    s->body = parse_body({"endmacro"}, &end);
    if (cur().type == TokenType::kName) advance();  // {% endmacro name %}
    expect_block_end();
    return s;
  }

  StmtPtr parse_call_block(StmtPtr s) {
    s->kind = StmtKind::kCallBlock;
    if (is_op("(")) s->params = parse_params();
    s->expr = parse_expression(true);
    if (s->expr->kind != ExprKind::kCall) error(cur(), "expected a call in {% call %}");
    expect_block_end();
    std::string end;
    s->body = parse_body({"endcall"}, &end);
    expect_block_end();
    return s;
  }

  StmtPtr parse_filter_block(StmtPtr s) {
    s->kind = StmtKind::kFilterBlock;
    s->expr = parse_filter_chain(nullptr, /*leading_pipe=*/false);
    expect_block_end();
    std::string end;
    s->body = parse_body({"endfilter"}, &end);
    expect_block_end();
    return s;
  }

  // ---- expressions ----

  ExprPtr parse_tuple(bool with_condexpr) {
    const int line = cur().line;
    ExprPtr first = parse_expression(with_condexpr);
    if (!is_op(",")) return first;
    auto t = make(ExprKind::kTuple, line);
    t->args.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().type == TokenType::kVarEnd || cur().type == TokenType::kBlockEnd || is_op(")") || is_name("if"))
        break;
      t->args.push_back(parse_expression(with_condexpr));
    }
    return t;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this);
    if (!with_condexpr) return parse_or();
    ExprPtr expr = parse_or();
    ChainGuard chain(*this);
    while (is_name("if")) {
      chain.step();
      const int line = cur().line;
      advance();
      ExprPtr cond = parse_or();
      ExprPtr else_expr;
      if (skip_name("else")) else_expr = parse_expression(true);
      auto c = make(ExprKind::kCondition, line);
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(expr));
      c->args.push_back(std::move(else_expr));
      expr = std::move(c);
    }
    return expr;
  }

  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r, int line) {
    auto e = make(ExprKind::kBinary, line);
    e->name = op;
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    ChainGuard chain(*this);
    while (is_name("or")) {
      chain.step();
      const int line = cur().line;
      advance();
      l = binary("or", std::move(l), parse_and(), line);
    }
    return l;
  }

  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    ChainGuard chain(*this);
    while (is_name("and")) {
      chain.step();
      const int line = cur().line;
      advance();
      l = binary("and", std::move(l), parse_not(), line);
    }
    return l;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      const int line = cur().line;
      advance();
      auto e = make(ExprKind::kNot, line);
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = cur().line;
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == TokenType::kOp &&
          (is_op("==") || is_op("!=") || is_op("<") || is_op(">") || is_op("<=") || is_op(">="))) {
        op = cur().value;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().type == TokenType::kName && peek().value == "in") {
        op = "notin";
        advance();
        advance();
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(ExprKind::kCompare, line);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    ChainGuard chain(*this);
    while (is_op("+") || is_op("-")) {
      chain.step();
      const std::string op = cur().value;
      const int line = cur().line;
      advance();
      l = binary(op, std::move(l), parse_concat(), line);
    }
    return l;
  }

  ExprPtr parse_concat() {
    ExprPtr l = parse_math2();
    ChainGuard chain(*this);
    while (is_op("~")) {
      chain.step();
      const int line = cur().line;
      advance();
      l = binary("~", std::move(l), parse_math2(), line);
    }
    return l;
  }

  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    ChainGuard chain(*this);
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      chain.step();
      const std::string op = cur().value;
      const int line = cur().line;
      advance();
      l = binary(op, std::move(l), parse_pow(), line);
    }
    return l;
  }

  ExprPtr parse_pow() {
    ExprPtr l = parse_unary(true);
    ChainGuard chain(*this);
    while (is_op("**")) {
      chain.step();
      const int line = cur().line;
      advance();
      l = binary("**", std::move(l), parse_unary(true), line);
    }
    return l;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    const int line = cur().line;
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      const bool neg = cur().value == "-";
      advance();
      node = make(neg ? ExprKind::kNeg : ExprKind::kPos, line);
      node->args.push_back(parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    const int line = t.line;
    if (t.type == TokenType::kName) {
      const std::string& n = t.value;
      ExprPtr e = make(ExprKind::kLiteral, line);
      if (n == "true" || n == "True") {
        e->literal = Value::boolean(true);
      } else if (n == "false" || n == "False") {
        e->literal = Value::boolean(false);
      } else if (n == "none" || n == "None") {
        e->literal = Value::none();
      } else {
        e->kind = ExprKind::kName;
        e->name = n;
      }
      advance();
      return e;
    }
    if (t.type == TokenType::kString) {
      std::string s = t.value;
      advance();
      while (cur().type == TokenType::kString) {  // adjacent literals concatenate
        s += cur().value;
        advance();
      }
      ExprPtr e = make(ExprKind::kLiteral, line);
      e->literal = Value::string(std::move(s));
      return e;
    }
    if (t.type == TokenType::kInt || t.type == TokenType::kFloat) {
      ExprPtr e = make(ExprKind::kLiteral, line);
      if (t.type == TokenType::kInt) {
        int64_t v = 0;
        const auto r = std::from_chars(t.value.data(), t.value.data() + t.value.size(), v);
        if (r.ec != std::errc()) error(t, "integer literal out of range");
        e->literal = Value::integer(v);
      } else {
        e->literal = Value::number(std::strtod(t.value.c_str(), nullptr));
      }
      advance();
      return e;
    }
    if (is_op("(")) {
      advance();
      if (skip_op(")")) return make(ExprKind::kTuple, line);
      ExprPtr e = parse_tuple(true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      advance();
      ExprPtr e = make(ExprKind::kList, line);
      while (!is_op("]")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("]")) break;
        e->args.push_back(parse_expression(true));
      }
      expect_op("]");
      return e;
    }
    if (is_op("{")) {
      advance();
      ExprPtr e = make(ExprKind::kDict, line);
      while (!is_op("}")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("}")) break;
        e->args.push_back(parse_expression(true));
        expect_op(":");
        e->args.push_back(parse_expression(true));
      }
      expect_op("}");
      return e;
    }
    error(t, fmt::format("unexpected {}", describe(t)));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    ChainGuard chain(*this);
    while (true) {
      chain.step();
      const int line = cur().line;
      if (is_op(".")) {
        advance();
        auto e = make(ExprKind::kGetAttr, line);
        if (cur().type == TokenType::kName) {
          e->name = cur().value;
          advance();
        } else if (cur().type == TokenType::kInt) {
          e->kind = ExprKind::kGetItem;
          auto idx = make(ExprKind::kLiteral, line);
          idx->literal = Value::integer(std::atoll(cur().value.c_str()));
          advance();
          e->args.push_back(std::move(node));
          e->args.push_back(std::move(idx));
          node = std::move(e);
          continue;
        } else {
          error(cur(), "expected an attribute name after '.'");
        }
        e->args.push_back(std::move(node));
        node = std::move(e);
      } else if (is_op("[")) {
        advance();
        node = parse_subscript(std::move(node), line);
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj, int line) {
    ExprPtr parts[3];
    bool slice = false;
    int part = 0;
    while (!is_op("]")) {
      if (is_op(":")) {
        slice = true;
        if (++part > 2) error(cur(), "too many ':' in subscript");
        advance();
        continue;
      }
      if (parts[part]) error(cur(), "expected ']'");
      parts[part] = parse_expression(true);
      if (!slice && is_op(",")) {  // d[a, b] -> tuple key
        auto t = make(ExprKind::kTuple, line);
        t->args.push_back(std::move(parts[part]));
        while (skip_op(",")) {
          if (is_op("]")) break;
          t->args.push_back(parse_expression(true));
        }
        parts[part] = std::move(t);
      }
    }
    expect_op("]");
    if (!slice) {
      if (!parts[0]) error(cur(), "empty subscript");
      auto e = make(ExprKind::kGetItem, line);
      e->args.push_back(std::move(obj));
      e->args.push_back(std::move(parts[0]));
      return e;
    }
    auto e = make(ExprKind::kSlice, line);
    e->args.push_back(std::move(obj));
    for (auto& p : parts) e->args.push_back(std::move(p));
    return e;
  }

  // Parses "(args, kw=args)" into e (args appended after whatever e already has).
  void parse_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (cur().type == TokenType::kName && peek().type == TokenType::kOp && peek().value == "=") {
        std::string key = cur().value;
        advance();
        advance();
        e.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!e.kwargs.empty()) error(cur(), "positional argument after keyword argument");
        e.args.push_back(parse_expression(true));
      }
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = make(ExprKind::kCall, cur().line);
    e->args.push_back(std::move(callee));
    parse_args(*e);
    return e;
  }

  std::string parse_dotted_name() {
    std::string n = expect_name();
    while (is_op(".") && peek().type == TokenType::kName) {
      advance();
      n += "." + cur().value;
      advance();
    }
    return n;
  }

  ExprPtr parse_filter_chain(ExprPtr input, bool leading_pipe = true) {
    bool first = true;
    ChainGuard chain(*this);
    while ((first && !leading_pipe) || is_op("|")) {
      chain.step();
      if (!(first && !leading_pipe)) advance();
      first = false;
      const int line = cur().line;
      auto f = make(ExprKind::kFilter, line);
      f->name = parse_dotted_name();
      f->args.push_back(std::move(input));
      if (is_op("(")) parse_args(*f);
      input = std::move(f);
    }
    return input;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    ChainGuard chain(*this);
    while (true) {
      chain.step();
      if (is_op("|")) {
        node = parse_filter_chain(std::move(node));
      } else if (is_name("is")) {
        const int line = cur().line;
        advance();
        auto t = make(ExprKind::kTest, line);
        if (skip_name("not")) t->negated = true;
        t->name = parse_dotted_name();
        t->args.push_back(std::move(node));
        if (is_op("(")) {
          parse_args(*t);
        } else if ((cur().type == TokenType::kName || cur().type == TokenType::kString ||
                    cur().type == TokenType::kInt || cur().type == TokenType::kFloat || is_op("[") || is_op("{")) &&
                   !(is_name("else") || is_name("or") || is_name("and") || is_name("is") || is_name("if") ||
                     is_name("in") || is_name("not"))) {
          ExprPtr arg = parse_primary();
          t->args.push_back(parse_postfix(std::move(arg)));
        }
        node = std::move(t);
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

TemplateAst parse_template(const std::string& source) { return Parser(tokenize(source)).run(); }

}  // namespace ferry::jinja
