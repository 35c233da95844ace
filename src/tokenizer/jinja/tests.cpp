// Jinja tests ("x is defined", "x is divisibleby 3", ...), with jinja2's definitions on Python values.
#include "core/check.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/text.h"

namespace ferry::jinja {
namespace {

const Value& arg(const CallArgs& a, size_t i, const std::string& test) {
  if (i >= a.positional.size()) {
    if (!a.keyword.empty() && i == a.positional.size()) return a.keyword[0].second;
    fail("test '{}' needs an argument", test);
  }
  return a.positional[i];
}

int64_t int_of(const Value& v, const std::string& test) {
  if (!v.is_integral()) fail("test '{}' expects an integer, got {}", test, type_name(v));
  return v.as_int();
}

}  // namespace

bool Interpreter::apply_test(const std::string& name, const Value& v, const CallArgs& a) {
  step();
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind == Kind::kInt;
  if (name == "float") return v.kind == Kind::kFloat;
  if (name == "boolean") return v.kind == Kind::kBool;
  if (name == "true") return v.kind == Kind::kBool && v.b;
  if (name == "false") return v.kind == Kind::kBool && !v.b;
  if (name == "mapping") return v.is_dict();
  if (name == "iterable")
    return v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined() || v.kind == Kind::kGenerator;
  if (name == "sequence") return v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined();
  if (name == "callable") return v.kind == Kind::kFunction;
  if (name == "escaped") return false;
  if (name == "odd" || name == "even") {
    const int64_t x = int_of(v, name);
    return ((x % 2) != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    const Value& d = arg(a, 0, name);
    if (v.is_integral() && d.is_integral()) {
      if (d.as_int() == 0) fail("integer division or modulo by zero");
      return binary_op(*this, "%", v, d).as_int() == 0;
    }
    return binary_op(*this, "%", v, d).as_double() == 0;
  }
  if (name == "lower" || name == "upper") {
    const std::string s = to_str(v);
    const std::string t = name == "lower" ? ascii_lower(s) : ascii_upper(s);
    bool cased = false;
    for (char32_t c : decode_utf8(s)) cased = cased || to_lower_cp(c) != to_upper_cp(c);
    return cased && s == t;
  }
  if (name == "sameas") {
    const Value& o = arg(a, 0, name);
    if (v.kind != o.kind) return false;
    switch (v.kind) {
      case Kind::kList:
      case Kind::kTuple: return v.list == o.list;
      case Kind::kDict: return v.dict == o.dict;
      default: return equals(v, o);
    }
  }
  if (name == "in") return contains(arg(a, 0, name), v);
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, arg(a, 0, name));
  if (name == "ne" || name == "!=") return !equals(v, arg(a, 0, name));
  if (name == "lt" || name == "lessthan" || name == "<") return compare(v, arg(a, 0, name)) < 0;
  if (name == "le" || name == "<=") return compare(v, arg(a, 0, name)) <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return compare(v, arg(a, 0, name)) > 0;
  if (name == "ge" || name == ">=") return compare(v, arg(a, 0, name)) >= 0;
  fail("no test named '{}'", name);
}

}  // namespace ferry::jinja
