#include "tokenizer/jinja/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/check.h"
#include "tokenizer/jinja/text.h"

namespace ferry::jinja {

const Value* Dict::find(const Value& key) const {
  for (const auto& [k, v] : items)
    if (equals(k, key)) return &v;
  return nullptr;
}

const Value* Dict::find(const std::string& key) const {
  for (const auto& [k, v] : items)
    if (k.kind == Kind::kString && k.s == key) return &v;
  return nullptr;
}

void Dict::set(Value key, Value value) {
  for (auto& [k, v] : items)
    if (equals(k, key)) {
      v = std::move(value);
      return;
    }
  items.emplace_back(std::move(key), std::move(value));
}

const Value* CallArgs::get(size_t index, const std::string& name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [k, v] : keyword)
    if (k == name) return &v;
  return nullptr;
}

Value Value::undefined(std::string hint) {
  Value v;
  v.s = std::move(hint);
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::kNone;
  return v;
}
Value Value::boolean(bool x) {
  Value v;
  v.kind = Kind::kBool;
  v.b = x;
  return v;
}
Value Value::integer(int64_t x) {
  Value v;
  v.kind = Kind::kInt;
  v.i = x;
  return v;
}
Value Value::number(double x) {
  Value v;
  v.kind = Kind::kFloat;
  v.f = x;
  return v;
}
Value Value::string(std::string x) {
  Value v;
  v.kind = Kind::kString;
  v.s = std::move(x);
  return v;
}
Value Value::make_list(List items) {
  Value v;
  v.kind = Kind::kList;
  v.list = std::make_shared<const List>(std::move(items));
  return v;
}
Value Value::make_tuple(List items) {
  Value v;
  v.kind = Kind::kTuple;
  v.list = std::make_shared<const List>(std::move(items));
  return v;
}
Value Value::make_generator(List items) {
  Value v;
  v.kind = Kind::kGenerator;
  v.list = std::make_shared<const List>(std::move(items));
  return v;
}
Value Value::make_dict(Dict d) {
  Value v;
  v.kind = Kind::kDict;
  v.dict = std::make_shared<const Dict>(std::move(d));
  return v;
}
Value Value::make_namespace(Dict d) {
  Value v;
  v.kind = Kind::kNamespace;
  v.ns = std::make_shared<Dict>(std::move(d));
  return v;
}
Value Value::function(std::string name, NativeFn fn) {
  Value v;
  v.kind = Kind::kFunction;
  v.fn = std::make_shared<const Function>(Function{std::move(name), std::move(fn)});
  return v;
}

double Value::as_double() const {
  switch (kind) {
    case Kind::kBool: return b ? 1.0 : 0.0;
    case Kind::kInt: return static_cast<double>(i);
    case Kind::kFloat: return f;
    default: fail("expected a number, got {}", type_name(*this));
  }
}

int64_t Value::as_int() const {
  if (kind == Kind::kBool) return b ? 1 : 0;
  if (kind == Kind::kInt) return i;
  fail("expected an integer, got {}", type_name(*this));
}

const List& Value::items() const {
  FERRY_ASSERT(list != nullptr);
  return *list;
}

const char* type_name(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return "list";
    case Kind::kTuple: return "tuple";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "Namespace";
    case Kind::kFunction: return "function";
    case Kind::kGenerator: return "generator";
  }
  return "?";
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return v.b;
    case Kind::kInt: return v.i != 0;
    case Kind::kFloat: return v.f != 0.0;
    case Kind::kString: return !v.s.empty();
    case Kind::kList:
    case Kind::kTuple: return !v.list->empty();
    case Kind::kDict: return !v.dict->items.empty();
    case Kind::kNamespace:
    case Kind::kFunction:
    case Kind::kGenerator: return true;
  }
  return false;
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return a.s == b.s;
    case Kind::kList:
    case Kind::kTuple: {
      if (a.list->size() != b.list->size()) return false;
      for (size_t i = 0; i < a.list->size(); ++i)
        if (!equals((*a.list)[i], (*b.list)[i])) return false;
      return true;
    }
    case Kind::kDict: {
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, v] : a.dict->items) {
        const Value* other = b.dict->find(k);
        if (!other || !equals(v, *other)) return false;
      }
      return true;
    }
    case Kind::kNamespace: return a.ns == b.ns;
    case Kind::kFunction: return a.fn == b.fn;
    case Kind::kGenerator: return a.list == b.list;
    default: return false;
  }
}

int compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) {
      const int64_t x = a.as_int(), y = b.as_int();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    const double x = a.as_double(), y = b.as_double();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) return a.s < b.s ? -1 : (a.s > b.s ? 1 : 0);
  if (a.kind == b.kind && a.is_sequence()) {
    const auto& x = *a.list;
    const auto& y = *b.list;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  fail("'<' not supported between instances of '{}' and '{}'", type_name(a), type_name(b));
}

std::string format_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  // sci: [-]d[.ddd]e[+-]XX
  const size_t e_pos = sci.find('e');
  std::string mant = sci.substr(0, e_pos);
  const int exp = std::stoi(sci.substr(e_pos + 1));
  bool neg = false;
  if (!mant.empty() && mant[0] == '-') {
    neg = true;
    mant.erase(0, 1);
  }
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out;
  if (exp >= -4 && exp < 16) {  // Python repr uses fixed notation for 1e-4 <= |v| < 1e16
    if (exp < 0) {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out = digits + std::string(static_cast<size_t>(exp + 1 - static_cast<int>(digits.size())), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exp + 1)) + "." + digits.substr(static_cast<size_t>(exp + 1));
    }
    return neg ? "-" + out : out;
  }
  out = digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char eb[16];
  std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  out += eb;
  return neg ? "-" + out : out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

std::string repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t cp : decode_utf8(s)) {
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp < 0xA0) || cp == 0xAD) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\x%02x", static_cast<unsigned>(cp));
      out += b;
    } else {
      utf8_append(out, cp);
    }
  }
  out += quote;
  return out;
}

constexpr int kMaxReprDepth = 64;  // a namespace can contain itself

std::string repr_at(const Value& v, int depth);

}  // namespace

std::string repr(const Value& v) { return repr_at(v, 0); }

namespace {

std::string repr_at(const Value& v, int depth) {
  if (depth > kMaxReprDepth) return "...";
  auto repr = [depth](const Value& x) { return repr_at(x, depth + 1); };
  switch (v.kind) {
    case Kind::kString: return repr_string(v.s);
    case Kind::kList:
    case Kind::kTuple: {
      const bool tuple = v.kind == Kind::kTuple;
      std::string out = tuple ? "(" : "[";
      for (size_t i = 0; i < v.list->size(); ++i) {
        if (i) out += ", ";
        out += repr((*v.list)[i]);
      }
      if (tuple && v.list->size() == 1) out += ",";
      out += tuple ? ")" : "]";
      return out;
    }
    case Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, x] : v.dict->items) {
        if (!first) out += ", ";
        first = false;
        out += repr(k) + ": " + repr(x);
      }
      return out + "}";
    }
    case Kind::kNamespace: {
      std::string out = "<Namespace {";
      bool first = true;
      for (const auto& [k, x] : v.ns->items) {
        if (!first) out += ", ";
        first = false;
        out += repr(k) + ": " + repr(x);
      }
      return out + "}>";
    }
    default: return to_str(v);
  }
}

}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return v.b ? "True" : "False";
    case Kind::kInt: return std::to_string(v.i);
    case Kind::kFloat: return format_float(v.f);
    case Kind::kString: return v.s;
    case Kind::kFunction: return "<function " + v.fn->name + ">";
    case Kind::kGenerator: return "<generator object>";
    default: return repr(v);
  }
}

}  // namespace ferry::jinja
