// Python methods of str, dict and list values that the sandbox allows (no mutation).
#include <algorithm>

#include "core/check.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/text.h"

namespace ferry::jinja {
namespace {

const std::string& str_arg(const CallArgs& a, size_t i, const char* name, const char* method) {
  const Value* v = a.get(i, name);
  if (!v || !v->is_string()) fail("str.{}() expects a string argument '{}'", method, name);
  return v->s;
}

std::vector<std::string> split_ws(const std::string& s, int64_t maxsplit) {
  std::vector<std::string> out;
  const auto cps = decode_utf8(s);
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && is_py_space(cps[i])) ++i;
    if (i >= cps.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      size_t e = cps.size();
      while (e > i && is_py_space(cps[e - 1])) --e;
      out.push_back(encode_utf8(std::vector<char32_t>(cps.begin() + i, cps.begin() + e)));
      return out;
    }
    size_t j = i;
    while (j < cps.size() && !is_py_space(cps[j])) ++j;
    out.push_back(encode_utf8(std::vector<char32_t>(cps.begin() + i, cps.begin() + j)));
    i = j;
  }
  return out;
}

std::vector<std::string> split_sep(const std::string& s, const std::string& sep, int64_t maxsplit) {
  if (sep.empty()) fail("empty separator");
  std::vector<std::string> out;
  size_t start = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    const size_t p = s.find(sep, start);
    if (p == std::string::npos) break;
    out.push_back(s.substr(start, p - start));
    start = p + sep.size();
  }
  out.push_back(s.substr(start));
  return out;
}

Value string_list(const std::vector<std::string>& parts) {
  List items;
  for (const auto& p : parts) items.push_back(Value::string(p));
  return Value::make_list(std::move(items));
}

std::string py_title(const std::string& s) {
  auto cps = decode_utf8(s);
  bool prev_alpha = false;
  for (auto& c : cps) {
    const bool alpha = is_alpha_cp(c);
    c = alpha ? (prev_alpha ? to_lower_cp(c) : to_upper_cp(c)) : c;
    prev_alpha = alpha;
  }
  return encode_utf8(cps);
}

std::string py_capitalize(const std::string& s) {
  auto cps = decode_utf8(s);
  for (size_t i = 0; i < cps.size(); ++i) cps[i] = i == 0 ? to_upper_cp(cps[i]) : to_lower_cp(cps[i]);
  return encode_utf8(cps);
}

bool affix_match(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const std::string& a) {
    if (a.size() > s.size()) return false;
    return prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (affix.is_string()) return one(affix.s);
  if (affix.kind == Kind::kTuple) {
    for (const Value& v : affix.items()) {
      if (!v.is_string()) fail("tuple for startswith/endswith must only contain str");
      if (one(v.s)) return true;
    }
    return false;
  }
  fail("startswith/endswith first arg must be str or a tuple of str, not {}", type_name(affix));
}

int64_t opt_int(const CallArgs& a, size_t i, const char* name, int64_t def) {
  const Value* v = a.get(i, name);
  if (!v || v->is_none()) return def;
  return v->as_int();
}

// str.format with {} / {0} / {name} fields (no format specs beyond the field name).
std::string py_format(Interpreter& in, const std::string& fmt_str, const CallArgs& a) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t i = 0; i < fmt_str.size(); ++i) {
    const char c = fmt_str[i];
    if (c == '{' && i + 1 < fmt_str.size() && fmt_str[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < fmt_str.size() && fmt_str[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      const size_t e = fmt_str.find('}', i);
      if (e == std::string::npos) fail("Single '{{' encountered in format string");
      std::string field = fmt_str.substr(i + 1, e - i - 1);
      const size_t colon = field.find(':');
      if (colon != std::string::npos) field.resize(colon);
      const Value* v = nullptr;
      if (field.empty()) {
        v = auto_idx < a.positional.size() ? &a.positional[auto_idx] : nullptr;
        ++auto_idx;
      } else if (std::all_of(field.begin(), field.end(), ::isdigit)) {
        const size_t idx = std::stoul(field.substr(0, 9));
        v = idx < a.positional.size() ? &a.positional[idx] : nullptr;
      } else {
        for (const auto& [k, x] : a.keyword)
          if (k == field) v = &x;
      }
      if (!v) fail("format(): missing argument for field '{}'", field);
      out += to_str(*v);
      in.check_string(out);
      i = e;
    } else {
      out += c;
    }
  }
  return out;
}

Value string_method(const std::string& s, const std::string& name) {
  auto bind = [&](auto fn) {
    return Value::function("str." + name, [s, fn](Interpreter& in, const CallArgs& a) { return fn(in, s, a); });
  };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool l = name != "rstrip", r = name != "lstrip";
    return bind([l, r](Interpreter&, const std::string& self, const CallArgs& a) {
      const Value* chars = a.get(0, "chars");
      if (chars && chars->is_string()) return Value::string(py_strip_chars(self, chars->s, l, r));
      return Value::string(py_strip(self, l, r));
    });
  }
  if (name == "split" || name == "rsplit") {
    return bind([](Interpreter&, const std::string& self, const CallArgs& a) {
      const Value* sep = a.get(0, "sep");
      const int64_t maxsplit = opt_int(a, 1, "maxsplit", -1);
      if (!sep || sep->is_none()) return string_list(split_ws(self, maxsplit));
      if (!sep->is_string()) fail("must be str or None, not {}", type_name(*sep));
      return string_list(split_sep(self, sep->s, maxsplit));
    });
  }
  if (name == "splitlines") {
    return bind([](Interpreter&, const std::string& self, const CallArgs&) {
      std::vector<std::string> out;
      std::vector<char32_t> cur;
      const auto cps = decode_utf8(self);
      for (size_t i = 0; i < cps.size(); ++i) {
        if (is_line_break(cps[i])) {
          out.push_back(encode_utf8(cur));
          cur.clear();
          if (cps[i] == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
        } else {
          cur.push_back(cps[i]);
        }
      }
      if (!cur.empty()) out.push_back(encode_utf8(cur));
      return string_list(out);
    });
  }
  if (name == "startswith" || name == "endswith") {
    const bool prefix = name == "startswith";
    return bind([prefix](Interpreter&, const std::string& self, const CallArgs& a) {
      const Value* affix = a.get(0, "prefix");
      if (!affix) fail("startswith/endswith takes at least 1 argument");
      return Value::boolean(affix_match(self, *affix, prefix));
    });
  }
  if (name == "upper") return bind([](Interpreter&, const std::string& self, const CallArgs&) { return Value::string(ascii_upper(self)); });
  if (name == "lower") return bind([](Interpreter&, const std::string& self, const CallArgs&) { return Value::string(ascii_lower(self)); });
  if (name == "title") return bind([](Interpreter&, const std::string& self, const CallArgs&) { return Value::string(py_title(self)); });
  if (name == "capitalize")
    return bind([](Interpreter&, const std::string& self, const CallArgs&) { return Value::string(py_capitalize(self)); });
  if (name == "replace") {
    return bind([](Interpreter& in, const std::string& self, const CallArgs& a) {
      const std::string& from = str_arg(a, 0, "old", "replace");
      const std::string& to = str_arg(a, 1, "new", "replace");
      int64_t count = opt_int(a, 2, "count", -1);
      std::string out;
      if (from.empty()) {
        const auto cps = decode_utf8(self);
        for (size_t i = 0; i <= cps.size(); ++i) {
          if (count != 0) {
            out += to;
            --count;
          }
          if (i < cps.size()) utf8_append(out, cps[i]);
          in.check_string(out);
        }
        return Value::string(out);
      }
      size_t start = 0;
      while (count != 0) {
        const size_t p = self.find(from, start);
        if (p == std::string::npos) break;
        out.append(self, start, p - start);
        out += to;
        in.check_string(out);
        start = p + from.size();
        --count;
      }
      out.append(self, start);
      return Value::string(out);
    });
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    return bind([name](Interpreter&, const std::string& self, const CallArgs& a) {
      const std::string& sub = str_arg(a, 0, "sub", name.c_str());
      if (name == "count") {
        if (sub.empty()) return Value::integer(static_cast<int64_t>(count_code_points(self)) + 1);
        int64_t n = 0;
        for (size_t p = self.find(sub); p != std::string::npos; p = self.find(sub, p + sub.size())) ++n;
        return Value::integer(n);
      }
      const size_t p = name[0] == 'r' ? self.rfind(sub) : self.find(sub);
      if (p == std::string::npos) {
        if (name.find("index") != std::string::npos) fail("substring not found");
        return Value::integer(-1);
      }
      return Value::integer(static_cast<int64_t>(count_code_points(std::string_view(self).substr(0, p))));
    });
  }
  if (name == "join") {
    return bind([](Interpreter& in, const std::string& self, const CallArgs& a) {
      const Value* seq = a.get(0, "iterable");
      if (!seq) fail("str.join() takes exactly one argument");
      std::string out;
      bool first = true;
      for (const Value& v : iterate(*seq)) {
        if (!v.is_string()) fail("sequence item: expected str instance, {} found", type_name(v));
        if (!first) out += self;
        first = false;
        out += v.s;
        in.check_string(out);
      }
      return Value::string(out);
    });
  }
  if (name == "format") {
    return bind([](Interpreter& in, const std::string& self, const CallArgs& a) {
      return Value::string(py_format(in, self, a));
    });
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const bool prefix = name == "removeprefix";
    return bind([prefix](Interpreter&, const std::string& self, const CallArgs& a) {
      const std::string& x = str_arg(a, 0, "affix", "removeprefix");
      if (affix_match(self, Value::string(x), prefix))
        return Value::string(prefix ? self.substr(x.size()) : self.substr(0, self.size() - x.size()));
      return Value::string(self);
    });
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "islower" ||
      name == "isupper") {
    return bind([name](Interpreter&, const std::string& self, const CallArgs&) {
      const auto cps = decode_utf8(self);
      if (cps.empty()) return Value::boolean(false);
      bool cased = false;
      for (char32_t c : cps) {
        const bool digit = c >= '0' && c <= '9';
        const bool alpha = is_alpha_cp(c);
        if (name == "isdigit" && !digit) return Value::boolean(false);
        if (name == "isalpha" && !alpha) return Value::boolean(false);
        if (name == "isalnum" && !(alpha || digit)) return Value::boolean(false);
        if (name == "isspace" && !is_py_space(c)) return Value::boolean(false);
        if (name == "islower" && to_lower_cp(c) != c) return Value::boolean(false);
        if (name == "isupper" && to_upper_cp(c) != c) return Value::boolean(false);
        if (to_lower_cp(c) != to_upper_cp(c)) cased = true;
      }
      if (name == "islower" || name == "isupper") return Value::boolean(cased);
      return Value::boolean(true);
    });
  }
  return Value::undefined();
}

Value dict_method(const Value& self, const std::string& name) {
  auto d = self.dict;
  if (name == "get") {
    return Value::function("dict.get", [d](Interpreter&, const CallArgs& a) {
      const Value* k = a.get(0, "key");
      if (!k) fail("get expected at least 1 argument, got 0");
      if (const Value* v = d->find(*k)) return *v;
      const Value* def = a.get(1, "default");
      return def ? *def : Value::none();
    });
  }
  if (name == "items" || name == "keys" || name == "values") {
    return Value::function("dict." + name, [d, name](Interpreter&, const CallArgs&) {
      List out;
      for (const auto& [k, v] : d->items) {
        if (name == "items") out.push_back(Value::make_tuple({k, v}));
        else out.push_back(name == "keys" ? k : v);
      }
      return Value::make_list(std::move(out));
    });
  }
  if (name == "copy") return Value::function("dict.copy", [self](Interpreter&, const CallArgs&) { return self; });
  return Value::undefined();
}

Value list_method(const Value& self, const std::string& name) {
  if (name == "index" || name == "count") {
    return Value::function("list." + name, [self, name](Interpreter&, const CallArgs& a) {
      const Value* x = a.get(0, "value");
      if (!x) fail("list.{}() takes exactly one argument", name);
      int64_t n = 0;
      for (size_t i = 0; i < self.items().size(); ++i) {
        if (!equals(self.items()[i], *x)) continue;
        if (name == "index") return Value::integer(static_cast<int64_t>(i));
        ++n;
      }
      if (name == "index") fail("{} is not in list", repr(*x));
      return Value::integer(n);
    });
  }
  if (name == "copy") return Value::function("list.copy", [self](Interpreter&, const CallArgs&) { return self; });
  return Value::undefined();
}

}  // namespace

Value method_of(const Value& obj, const std::string& name) {
  switch (obj.kind) {
    case Kind::kString: return string_method(obj.s, name);
    case Kind::kDict: return dict_method(obj, name);
    case Kind::kList:
    case Kind::kTuple: return list_method(obj, name);
    default: return Value::undefined();
  }
}

}  // namespace ferry::jinja
