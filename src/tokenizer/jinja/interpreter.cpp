#include "tokenizer/jinja/interpreter.h"

#include <cmath>

#include "core/check.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/text.h"

namespace ferry::jinja {

// Errors from inside a statement, already carrying the template line.
class LocatedError : public Error {
 public:
  using Error::Error;
};

std::tm local_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  return tm;
}

const Value* Scope::find(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

Interpreter::Interpreter(RenderLimits limits, Clock clock) : limits_(limits), clock_(std::move(clock)) {
  if (!clock_) clock_ = local_now;
}

Interpreter::~Interpreter() {
  for (auto& weak : namespaces_)
    if (auto ns = weak.lock()) ns->items.clear();
}

void Interpreter::step() {
  if (++steps_ > limits_.max_steps) fail("template exceeded {} evaluation steps", limits_.max_steps);
}

void Interpreter::check_string(const std::string& s) const {
  if (s.size() > limits_.max_output_bytes) fail("template output exceeds {} bytes", limits_.max_output_bytes);
}

void Interpreter::check_list(size_t n) const {
  if (n > limits_.max_list_items) fail("template list exceeds {} items", limits_.max_list_items);
}

void Interpreter::charge(uint64_t bytes) {
  charged_bytes_ += bytes;
  if (charged_bytes_ > limits_.max_total_bytes)
    fail("template built more than {} bytes of values in total", limits_.max_total_bytes);
}

Value Interpreter::charged(Value v) {
  charge(copy_bytes(v));
  return v;
}

namespace {

uint64_t list_bytes(const List& items) {
  uint64_t n = 0;
  for (const Value& x : items) n += sizeof(Value) + x.s.size();
  return n;
}

}  // namespace

uint64_t copy_bytes(const Value& v) {
  switch (v.kind) {
    case Kind::kString: return v.s.size();
    case Kind::kList:
    case Kind::kTuple:
    case Kind::kGenerator: return list_bytes(*v.list);
    case Kind::kDict: {
      uint64_t n = 0;
      for (const auto& [k, x] : v.dict->items) n += 2 * sizeof(Value) + k.s.size() + x.s.size();
      return n;
    }
    default: return 0;
  }
}

void Interpreter::emit(std::string& out, const std::string& text) const {
  if (out.size() + text.size() > limits_.max_output_bytes)
    fail("template output exceeds {} bytes", limits_.max_output_bytes);
  out += text;
}

std::string Interpreter::render(const TemplateAst& ast, const Dict& globals) {
  auto builtins = std::make_shared<Scope>();
  add_builtins(builtins->vars);
  auto root = std::make_shared<Scope>();
  root->parent = builtins;
  for (const auto& [k, v] : globals.items)
    if (k.is_string()) root->vars[k.s] = v;
  std::string out;
  try {
    exec_body(ast.body, root, out);
  } catch (const LocatedError& e) {
    throw Error(e.what());
  }
  return out;
}

std::string Interpreter::render_body(const Body& body, const std::shared_ptr<Scope>& scope) {
  std::string out;
  exec_body(body, scope, out);
  return out;
}

Interpreter::Flow Interpreter::exec_body(const Body& body, const std::shared_ptr<Scope>& scope, std::string& out) {
  for (const auto& s : body) {
    const Flow f = exec(*s, scope, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out) {
  try {
    step();
    switch (s.kind) {
      case StmtKind::kText: emit(out, s.text); return Flow::kNormal;
      case StmtKind::kOutput: emit(out, to_str(eval(*s.expr, scope))); return Flow::kNormal;
      case StmtKind::kIf:
        for (const auto& [cond, body] : s.branches)
          if (truthy(eval(*cond, scope))) return exec_body(body, scope, out);
        return exec_body(s.else_body, scope, out);
      case StmtKind::kFor: return exec_for(s, scope, out);
      case StmtKind::kSet: exec_set(s, scope); return Flow::kNormal;
      case StmtKind::kMacro: scope->vars[s.text] = make_macro(s, scope); return Flow::kNormal;
      case StmtKind::kCallBlock: {
        const Expr& call_expr = *s.expr;
        Value callee = eval(*call_expr.args[0], scope);
        CallArgs args = eval_args(call_expr, 1, scope);
        const Stmt* block = &s;
        std::shared_ptr<Scope> closure = scope;
        Value caller = Value::function("caller", [block, closure](Interpreter& in, const CallArgs& a) {
          return in.call_macro(*block, closure, a, nullptr);
        });
        args.keyword.emplace_back("caller", caller);
        emit(out, to_str(call(callee, args)));
        return Flow::kNormal;
      }
      case StmtKind::kFilterBlock: {
        if (++call_depth_ > limits_.max_call_depth) fail("template call depth exceeds {}", limits_.max_call_depth);
        Value body = Value::string(render_body(s.body, scope));
        --call_depth_;
        emit(out, to_str(eval_filter(*s.expr, scope, &body)));
        return Flow::kNormal;
      }
      case StmtKind::kBreak: return Flow::kBreak;
      case StmtKind::kContinue: return Flow::kContinue;
      case StmtKind::kScope: return exec_body(s.body, scope, out);
    }
  } catch (const LocatedError&) {
    throw;
  } catch (const RaisedError&) {
    throw;
  } catch (const Error& e) {
    throw LocatedError(fmt::format("chat template: line {}: {}", s.line, e.what()));
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec_for(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out) {
  const Value iterable = eval(*s.expr, scope);
  if (iterable.is_none() || iterable.is_number() || iterable.kind == Kind::kFunction)
    fail("'{}' object is not iterable", type_name(iterable));
  List all = iterate(iterable);
  charge(list_bytes(all));
  auto bind = [&](Scope& sc, const Value& item) {
    if (s.targets.size() == 1) {
      sc.vars[s.targets[0]] = item;
      return;
    }
    List parts = iterate(item);
    if (!(item.is_sequence() || item.is_string()) || parts.size() != s.targets.size())
      fail("cannot unpack {} into {} loop variables", repr(item), s.targets.size());
    for (size_t i = 0; i < parts.size(); ++i) sc.vars[s.targets[i]] = parts[i];
  };
  List items;
  if (s.cond) {
    for (const Value& item : all) {
      step();
      auto tmp = std::make_shared<Scope>();
      tmp->parent = scope;
      bind(*tmp, item);
      if (truthy(eval(*s.cond, tmp))) items.push_back(item);
    }
  } else {
    items = std::move(all);
  }
  if (items.empty()) return exec_body(s.else_body, scope, out);
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t idx = 0; idx < n; ++idx) {
    step();
    auto body_scope = std::make_shared<Scope>();
    body_scope->parent = scope;
    Dict loop;
    loop.set(Value::string("index"), Value::integer(idx + 1));
    loop.set(Value::string("index0"), Value::integer(idx));
    loop.set(Value::string("revindex"), Value::integer(n - idx));
    loop.set(Value::string("revindex0"), Value::integer(n - idx - 1));
    loop.set(Value::string("first"), Value::boolean(idx == 0));
    loop.set(Value::string("last"), Value::boolean(idx == n - 1));
    loop.set(Value::string("length"), Value::integer(n));
    loop.set(Value::string("depth"), Value::integer(1));
    loop.set(Value::string("depth0"), Value::integer(0));
    if (idx > 0) loop.set(Value::string("previtem"), items[static_cast<size_t>(idx - 1)]);
    if (idx + 1 < n) loop.set(Value::string("nextitem"), items[static_cast<size_t>(idx + 1)]);
    loop.set(Value::string("cycle"), Value::function("cycle", [idx](Interpreter&, const CallArgs& a) {
               if (a.positional.empty()) fail("no items for cycling given");
               return a.positional[static_cast<size_t>(idx) % a.positional.size()];
             }));
    body_scope->vars["loop"] = Value::make_dict(std::move(loop));
    bind(*body_scope, items[static_cast<size_t>(idx)]);
    const Flow f = exec_body(s.body, body_scope, out);
    if (f == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

void Interpreter::exec_set(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  if (!s.text.empty()) {  // ns.attr = value
    const Value* target = scope->find(s.targets[0]);
    if (!target || target->kind != Kind::kNamespace)
      fail("cannot assign attribute '{}' on non-namespace object '{}'", s.text, s.targets[0]);
    if (!s.text.empty() && s.text[0] == '_') fail("cannot store underscore-prefixed attribute '{}'", s.text);
    Value v = eval(*s.expr, scope);
    target->ns->set(Value::string(s.text), std::move(v));
    return;
  }
  Value v;
  if (s.block_set) {
    if (++call_depth_ > limits_.max_call_depth) fail("template call depth exceeds {}", limits_.max_call_depth);
    Value body = Value::string(render_body(s.body, scope));
    --call_depth_;
    v = s.expr ? eval_filter(*s.expr, scope, &body) : body;
  } else {
    v = eval(*s.expr, scope);
  }
  if (s.targets.empty()) return;  // {% do %}
  if (s.targets.size() == 1) {
    scope->vars[s.targets[0]] = std::move(v);
    return;
  }
  List parts = iterate(v);
  if (parts.size() != s.targets.size())
    fail("cannot unpack {} values into {} names", parts.size(), s.targets.size());
  for (size_t i = 0; i < parts.size(); ++i) scope->vars[s.targets[i]] = parts[i];
}

Value Interpreter::make_macro(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  const Stmt* macro = &s;
  std::weak_ptr<Scope> weak = scope;  // the scope holds the macro: a strong ref would be a cycle
  return Value::function(s.text, [macro, weak](Interpreter& in, const CallArgs& args) {
    auto closure = weak.lock();
    if (!closure) fail("macro '{}' called after its scope ended", macro->text);
    return in.call_macro(*macro, closure, args, nullptr);
  });
}

Value Interpreter::call_macro(const Stmt& macro, const std::shared_ptr<Scope>& closure, const CallArgs& args,
                              const Value*) {
  if (++call_depth_ > limits_.max_call_depth) fail("template call depth exceeds {}", limits_.max_call_depth);
  auto sc = std::make_shared<Scope>();
  sc->parent = closure;
  if (args.positional.size() > macro.params.size())
    fail("macro '{}' takes not more than {} argument(s)", macro.text, macro.params.size());
  for (size_t i = 0; i < macro.params.size(); ++i) {
    const Param& p = macro.params[i];
    if (i < args.positional.size()) {
      sc->vars[p.name] = args.positional[i];
    } else {
      sc->vars[p.name] = p.default_value ? eval(*p.default_value, sc) : Value::undefined(p.name);
    }
  }
  for (const auto& [k, v] : args.keyword) {
    bool found = k == "caller";
    for (size_t i = 0; i < macro.params.size(); ++i)
      if (macro.params[i].name == k) {
        if (i < args.positional.size()) fail("macro '{}' got multiple values for argument '{}'", macro.text, k);
        found = true;
      }
    if (!found) fail("macro '{}' takes no keyword argument '{}'", macro.text, k);
    sc->vars[k] = v;
  }
  std::string out;
  exec_body(macro.body, sc, out);
  --call_depth_;
  return Value::string(std::move(out));
}

Value Interpreter::call(const Value& callee, const CallArgs& args) {
  step();
  if (callee.kind != Kind::kFunction) {
    if (callee.is_undefined())
      fail("'{}' is undefined", callee.s.empty() ? std::string("value") : callee.s);
    fail("'{}' object is not callable", type_name(callee));
  }
  return callee.fn->fn(*this, args);
}

// ---- expressions ----

CallArgs Interpreter::eval_args(const Expr& e, size_t first, const std::shared_ptr<Scope>& scope) {
  CallArgs a;
  for (size_t i = first; i < e.args.size(); ++i) a.positional.push_back(eval(*e.args[i], scope));
  for (const auto& [k, v] : e.kwargs) a.keyword.emplace_back(k, eval(*v, scope));
  return a;
}

Value Interpreter::eval_filter(const Expr& e, const std::shared_ptr<Scope>& scope, const Value* block_input) {
  Value input = e.args[0] ? (e.args[0]->kind == ExprKind::kFilter ? eval_filter(*e.args[0], scope, block_input)
                                                                  : eval(*e.args[0], scope))
                          : (block_input ? *block_input : Value::undefined());
  CallArgs a = eval_args(e, 1, scope);
  return apply_filter(e.name, input, a);
}

Value Interpreter::eval(const Expr& e, const std::shared_ptr<Scope>& scope) {
  switch (e.kind) {
    case ExprKind::kLiteral: return e.literal;
    case ExprKind::kName: {
      const Value* v = scope->find(e.name);
      return v ? *v : Value::undefined(e.name);
    }
    case ExprKind::kList:
    case ExprKind::kTuple: {
      List items;
      for (const auto& a : e.args) items.push_back(eval(*a, scope));
      return charged(e.kind == ExprKind::kList ? Value::make_list(std::move(items)) : Value::make_tuple(std::move(items)));
    }
    case ExprKind::kDict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) d.set(eval(*e.args[i], scope), eval(*e.args[i + 1], scope));
      return charged(Value::make_dict(std::move(d)));
    }
    case ExprKind::kGetAttr: return get_attr(eval(*e.args[0], scope), e.name);
    case ExprKind::kGetItem: return get_item(eval(*e.args[0], scope), eval(*e.args[1], scope));
    case ExprKind::kSlice: return eval_slice(e, scope);
    case ExprKind::kCall: {
      Value callee = eval(*e.args[0], scope);
      return charged(call(callee, eval_args(e, 1, scope)));
    }
    case ExprKind::kFilter: return charged(eval_filter(e, scope, nullptr));
    case ExprKind::kTest: {
      Value input = eval(*e.args[0], scope);
      const bool r = apply_test(e.name, input, eval_args(e, 1, scope));
      return Value::boolean(r != e.negated);
    }
    case ExprKind::kNot: return Value::boolean(!truthy(eval(*e.args[0], scope)));
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      Value v = eval(*e.args[0], scope);
      if (!v.is_number()) fail("bad operand type for unary {}: '{}'", e.kind == ExprKind::kNeg ? '-' : '+', type_name(v));
      if (e.kind == ExprKind::kPos) return v.kind == Kind::kBool ? Value::integer(v.as_int()) : v;
      if (v.kind == Kind::kFloat) return Value::number(-v.f);
      if (v.as_int() == INT64_MIN) fail("integer overflow");
      return Value::integer(-v.as_int());
    }
    case ExprKind::kBinary: return charged(eval_binary(e, scope));
    case ExprKind::kCompare: return eval_compare(e, scope);
    case ExprKind::kCondition: {
      if (truthy(eval(*e.args[0], scope))) return eval(*e.args[1], scope);
      return e.args[2] ? eval(*e.args[2], scope) : Value::undefined();
    }
  }
  return Value::undefined();
}

Value Interpreter::eval_binary(const Expr& e, const std::shared_ptr<Scope>& scope) {
  if (e.name == "and") {
    Value l = eval(*e.args[0], scope);
    return truthy(l) ? eval(*e.args[1], scope) : l;
  }
  if (e.name == "or") {
    Value l = eval(*e.args[0], scope);
    return truthy(l) ? l : eval(*e.args[1], scope);
  }
  Value l = eval(*e.args[0], scope);
  Value r = eval(*e.args[1], scope);
  return binary_op(*this, e.name, l, r);
}

Value Interpreter::eval_compare(const Expr& e, const std::shared_ptr<Scope>& scope) {
  Value left = eval(*e.args[0], scope);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.args[i + 1], scope);
    const std::string& op = e.ops[i];
    bool r;
    if (op == "==") {
      r = equals(left, right);
    } else if (op == "!=") {
      r = !equals(left, right);
    } else if (op == "in") {
      r = contains(right, left);
    } else if (op == "notin") {
      r = !contains(right, left);
    } else {
      if (left.is_undefined() || right.is_undefined()) fail("'{}' is undefined", left.is_undefined() ? left.s : right.s);
      const int c = compare(left, right);
      r = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
    }
    if (!r) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

namespace {

int64_t slice_bound(const Value& v, int64_t n, int64_t step, bool is_start) {
  if (v.is_none() || v.is_undefined()) {
    if (step > 0) return is_start ? 0 : n;
    return is_start ? n - 1 : -1;
  }
  int64_t x = v.as_int();
  if (x < 0) {
    x += n;
    if (x < 0) x = step > 0 ? 0 : -1;
  } else if (x >= n) {
    x = step > 0 ? n : n - 1;
  }
  return x;
}

}  // namespace

Value Interpreter::eval_slice(const Expr& e, const std::shared_ptr<Scope>& scope) {
  Value obj = eval(*e.args[0], scope);
  Value parts[3];
  for (int i = 0; i < 3; ++i) parts[i] = e.args[i + 1] ? eval(*e.args[i + 1], scope) : Value::none();
  for (auto& p : parts)
    if (!(p.is_none() || p.is_integral())) fail("slice indices must be integers or None");
  const int64_t step = parts[2].is_none() ? 1 : parts[2].as_int();
  if (step == 0) fail("slice step cannot be zero");
  auto pick = [&](int64_t n, auto&& take) {
    const int64_t start = slice_bound(parts[0], n, step, true);
    const int64_t stop = slice_bound(parts[1], n, step, false);
    if (step > 0)
      for (int64_t i = start; i < stop; i += step) take(static_cast<size_t>(i));
    else
      for (int64_t i = start; i > stop; i += step) take(static_cast<size_t>(i));
  };
  if (obj.is_string()) {
    const auto cps = decode_utf8(obj.s);
    std::vector<char32_t> out;
    pick(static_cast<int64_t>(cps.size()), [&](size_t i) { out.push_back(cps[i]); });
    return Value::string(encode_utf8(out));
  }
  if (obj.is_sequence()) {
    const List& items = obj.items();
    List out;
    pick(static_cast<int64_t>(items.size()), [&](size_t i) { out.push_back(items[i]); });
    return obj.kind == Kind::kTuple ? Value::make_tuple(std::move(out)) : Value::make_list(std::move(out));
  }
  if (obj.is_undefined()) fail("'{}' is undefined", obj.s);
  fail("'{}' object is not subscriptable", type_name(obj));
}

Value Interpreter::get_item(const Value& obj, const Value& key) {
  switch (obj.kind) {
    case Kind::kUndefined: fail("'{}' is undefined", obj.s.empty() ? std::string("value") : obj.s);
    case Kind::kDict: {
      if (const Value* v = obj.dict->find(key)) return *v;
      if (key.is_string()) {
        Value m = method_of(obj, key.s);
        if (!m.is_undefined()) return m;
      }
      return Value::undefined(fmt::format("dict object has no element {}", repr(key)));
    }
    case Kind::kNamespace: {
      if (const Value* v = obj.ns->find(key)) return *v;
      return Value::undefined();
    }
    case Kind::kList:
    case Kind::kTuple:
    case Kind::kString: {
      if (!key.is_integral()) {
        if (key.is_string()) return get_attr(obj, key.s);
        return Value::undefined();
      }
      int64_t idx = key.as_int();
      if (obj.is_string()) {
        const auto cps = decode_utf8(obj.s);
        const int64_t n = static_cast<int64_t>(cps.size());
        if (idx < 0) idx += n;
        if (idx < 0 || idx >= n) return Value::undefined("string index out of range");
        std::string out;
        utf8_append(out, cps[static_cast<size_t>(idx)]);
        return Value::string(out);
      }
      const int64_t n = static_cast<int64_t>(obj.list->size());
      if (idx < 0) idx += n;
      if (idx < 0 || idx >= n) return Value::undefined("list index out of range");
      return (*obj.list)[static_cast<size_t>(idx)];
    }
    default:
      if (key.is_string()) return get_attr(obj, key.s);
      return Value::undefined();
  }
}

Value Interpreter::get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind) {
    case Kind::kUndefined:
      fail("'{}' is undefined", obj.s.empty() ? std::string("value") : obj.s);
    case Kind::kDict: {
      Value m = method_of(obj, name);
      if (!m.is_undefined()) return m;
      if (const Value* v = obj.dict->find(name)) return *v;
      return Value::undefined(fmt::format("dict object has no attribute '{}'", name));
    }
    case Kind::kNamespace: {
      if (const Value* v = obj.ns->find(name)) return *v;
      return Value::undefined(fmt::format("Namespace object has no attribute '{}'", name));
    }
    default: {
      Value m = method_of(obj, name);
      if (!m.is_undefined()) return m;
      return Value::undefined(fmt::format("{} object has no attribute '{}'", type_name(obj), name));
    }
  }
}

// ---- operators ----

List iterate(const Value& v) {
  switch (v.kind) {
    case Kind::kGenerator:
    case Kind::kList:
    case Kind::kTuple: return *v.list;
    case Kind::kDict: {
      List keys;
      for (const auto& [k, x] : v.dict->items) keys.push_back(k);
      return keys;
    }
    case Kind::kNamespace: {
      List keys;
      for (const auto& [k, x] : v.ns->items) keys.push_back(k);
      return keys;
    }
    case Kind::kString: {
      List chars;
      for (char32_t cp : decode_utf8(v.s)) {
        std::string c;
        utf8_append(c, cp);
        chars.push_back(Value::string(std::move(c)));
      }
      return chars;
    }
    case Kind::kUndefined: return {};
    default: fail("'{}' object is not iterable", type_name(v));
  }
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case Kind::kString:
      if (!item.is_string()) fail("'in <string>' requires string as left operand, not {}", type_name(item));
      return container.s.find(item.s) != std::string::npos;
    case Kind::kList:
    case Kind::kTuple:
    case Kind::kGenerator:
      for (const Value& x : *container.list)
        if (equals(x, item)) return true;
      return false;
    case Kind::kDict: return container.dict->find(item) != nullptr;
    case Kind::kNamespace: return container.ns->find(item) != nullptr;
    case Kind::kUndefined: return false;
    default: fail("argument of type '{}' is not iterable", type_name(container));
  }
}

namespace {

Value checked_int(bool overflow, const int64_t& v) {
  if (overflow) fail("integer overflow");
  return Value::integer(v);
}

Value repeat(Interpreter& in, const Value& seq, int64_t n) {
  if (n <= 0) return seq.is_string() ? Value::string("") : (seq.kind == Kind::kTuple ? Value::make_tuple({}) : Value::make_list({}));
  if (seq.is_string()) {
    if (seq.s.size() * static_cast<uint64_t>(n) > in.limits().max_output_bytes || n > int64_t{1} << 40)
      fail("template string exceeds {} bytes", in.limits().max_output_bytes);
    in.charge(seq.s.size() * static_cast<uint64_t>(n));
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.s;
    return Value::string(std::move(out));
  }
  if (seq.list->size() * static_cast<uint64_t>(n) > in.limits().max_list_items || n > int64_t{1} << 40)
    fail("template list exceeds {} items", in.limits().max_list_items);
  in.charge(copy_bytes(seq) * static_cast<uint64_t>(n));
  List out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.list->begin(), seq.list->end());
  return seq.kind == Kind::kTuple ? Value::make_tuple(std::move(out)) : Value::make_list(std::move(out));
}

double floor_mod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

}  // namespace

Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string s = to_str(a) + to_str(b);
    in.check_string(s);
    return Value::string(std::move(s));
  }
  if (a.is_undefined() || b.is_undefined())
    fail("'{}' is undefined", a.is_undefined() ? (a.s.empty() ? "value" : a.s) : (b.s.empty() ? "value" : b.s));
  const char c0 = op[0];
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      // markupsafe: Markup + str escapes the str operand, and the result stays Markup.
      const bool safe = a.safe || b.safe;
      std::string s = (safe && !a.safe ? html_escape(a.s) : a.s) + (safe && !b.safe ? html_escape(b.s) : b.s);
      in.check_string(s);
      Value r = Value::string(std::move(s));
      r.safe = safe;
      return r;
    }
    if (a.is_sequence() && a.kind == b.kind) {
      in.check_list(a.list->size() + b.list->size());
      List out = *a.list;
      out.insert(out.end(), b.list->begin(), b.list->end());
      return a.kind == Kind::kTuple ? Value::make_tuple(std::move(out)) : Value::make_list(std::move(out));
    }
  }
  if (op == "*") {
    if ((a.is_string() || a.is_sequence()) && b.is_integral()) return repeat(in, a, b.as_int());
    if ((b.is_string() || b.is_sequence()) && a.is_integral()) return repeat(in, b, a.as_int());
  }
  if (!a.is_number() || !b.is_number())
    fail("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b));
  const bool ints = a.is_integral() && b.is_integral();
  if (ints) {
    const int64_t x = a.as_int(), y = b.as_int();
    int64_t r = 0;
    if (op == "+") return checked_int(__builtin_add_overflow(x, y, &r), r);  // r by reference: read after
    if (op == "-") return checked_int(__builtin_sub_overflow(x, y, &r), r);
    if (op == "*") return checked_int(__builtin_mul_overflow(x, y, &r), r);
    if (op == "//" || op == "%") {
      if (y == 0) fail("integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) fail("integer overflow");
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        q -= 1;
        m += y;
      }
      return Value::integer(op == "//" ? q : m);
    }
    if (op == "**" && y >= 0) {
      int64_t acc = 1;
      for (int64_t i = 0; i < y; ++i) {
        if (__builtin_mul_overflow(acc, x, &acc)) fail("integer overflow");
        if (acc == 0 || acc == 1) break;
        if (acc == -1) {
          acc = ((y - i - 1) % 2 == 0) ? -1 : 1;
          break;
        }
      }
      return Value::integer(acc);
    }
  }
  const double x = a.as_double(), y = b.as_double();
  if (op == "+") return Value::number(x + y);
  if (op == "-") return Value::number(x - y);
  if (op == "*") return Value::number(x * y);
  if (op == "/") {
    if (y == 0) fail("division by zero");
    return Value::number(x / y);
  }
  if (op == "//") {
    if (y == 0) fail("float floor division by zero");
    return Value::number(std::floor(x / y));
  }
  if (op == "%") {
    if (y == 0) fail("float modulo");
    return Value::number(floor_mod(x, y));
  }
  if (op == "**") return Value::number(std::pow(x, y));
  (void)c0;
  fail("unsupported operator {}", op);
}

}  // namespace ferry::jinja
