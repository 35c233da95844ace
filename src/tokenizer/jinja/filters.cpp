// Jinja filters with jinja2's semantics; tojson is transformers' override (json.dumps, no HTML escaping).
#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/text.h"

namespace ferry::jinja {
namespace {

bool bool_arg(const CallArgs& a, size_t i, const char* name, bool def) {
  const Value* v = a.get(i, name);
  return v ? truthy(*v) : def;
}

// jinja2's make_attrgetter: "a.b.0" looks up item by item (integers for digit parts).
Value attr_path(Interpreter& in, const Value& obj, const std::string& path) {
  Value cur = obj;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits = !part.empty() && part.size() < 18 && std::all_of(part.begin(), part.end(), ::isdigit);
    cur = in.get_item(cur, digits ? Value::integer(std::stoll(part)) : Value::string(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

Value attr_or_int_path(Interpreter& in, const Value& obj, const Value& attribute) {
  if (attribute.is_integral()) return in.get_item(obj, attribute);
  return attr_path(in, obj, to_str(attribute));
}

// Sort/unique key: lowercased strings unless case-sensitive.
Value fold_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(ascii_lower(v.s));
  return v;
}

std::string jinja_title(const std::string& s) {
  // jinja2: words split on runs of [-\s({\[<]; each word's first char upper, rest lower.
  auto cps = decode_utf8(s);
  bool word_start = true;
  for (auto& c : cps) {
    const bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || is_py_space(c);
    if (sep) {
      word_start = true;
      continue;
    }
    c = word_start ? to_upper_cp(c) : to_lower_cp(c);
    word_start = false;
  }
  return encode_utf8(cps);
}

std::string indent_filter(const std::string& s_in, const std::string& pad, bool first, bool blank) {
  const std::string s = s_in + "\n";
  std::vector<std::string> lines;  // str.splitlines() on \n, \r\n, \r
  std::string cur;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      lines.push_back(cur);
      cur.clear();
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      cur += s[i];
    }
  }
  if (!cur.empty()) lines.push_back(cur);
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) rv += "\n" + pad;
      rv += lines[i];
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? lines[i] : pad + lines[i]);
  }
  if (first) rv = pad + rv;
  return rv;
}

double py_round(double x, int64_t ndigits) {
  const double m = std::pow(10.0, static_cast<double>(ndigits));
  const double y = x * m;
  double r = std::nearbyint(y);  // default rounding mode: half to even, as Python's round
  if (std::fabs(y - std::trunc(y)) != 0.5) r = std::round(y);
  return r / m;
}

std::string printf_format(const std::string& f, const List& args) {
  std::string out;
  size_t k = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out += f[i];
      continue;
    }
    if (i + 1 >= f.size()) fail("format: incomplete format");
    const char c = f[++i];
    if (c == '%') {
      out += '%';
      continue;
    }
    if (k >= args.size()) fail("format: not enough arguments for format string");
    const Value& v = args[k++];
    if (c == 's') out += to_str(v);
    else if (c == 'r') out += repr(v);
    else if (c == 'd' || c == 'i') out += std::to_string(v.is_integral() ? v.as_int() : static_cast<int64_t>(v.as_double()));
    else fail("format: unsupported format character '{}'", c);
  }
  return out;
}

}  // namespace

Value Interpreter::apply_filter(const std::string& name, const Value& v, const CallArgs& a) {
  step();
  const Value* a0 = a.positional.empty() ? nullptr : &a.positional[0];
  if (name == "safe") {
    Value m = Value::string(to_str(v));
    m.safe = true;
    return m;
  }
  if (name == "trim") {
    const Value* chars = a.get(0, "chars");
    if (chars && chars->is_string()) return Value::string(py_strip_chars(to_str(v), chars->s, true, true));
    return Value::string(py_strip(to_str(v), true, true));
  }
  if (name == "upper") return Value::string(ascii_upper(to_str(v)));
  if (name == "lower") return Value::string(ascii_lower(to_str(v)));
  if (name == "capitalize") return call(method_of(Value::string(to_str(v)), "capitalize"), {});
  if (name == "title") return Value::string(jinja_title(to_str(v)));
  if (name == "string") return Value::string(to_str(v));
  if (name == "escape" || name == "e" || name == "forceescape") {
    if (v.is_string() && v.safe && name != "forceescape") return v;
    Value m = Value::string(html_escape(to_str(v)));
    m.safe = true;
    return m;
  }
  if (name == "length" || name == "count") {
    switch (v.kind) {
      case Kind::kString: return Value::integer(static_cast<int64_t>(count_code_points(v.s)));
      case Kind::kList:
      case Kind::kTuple: return Value::integer(static_cast<int64_t>(v.list->size()));
      case Kind::kDict: return Value::integer(static_cast<int64_t>(v.dict->items.size()));
      case Kind::kUndefined: return Value::integer(0);
      default: fail("object of type '{}' has no len()", type_name(v));
    }
  }
  if (name == "default" || name == "d") {
    const Value* def = a.get(0, "default_value");
    const bool boolean = bool_arg(a, 1, "boolean", false);
    if (v.is_undefined() || (boolean && !truthy(v))) return def ? *def : Value::string("");
    return v;
  }
  if (name == "first" || name == "last") {
    if (v.is_undefined()) return Value::undefined("no first item");
    if (name == "last" && v.kind == Kind::kGenerator) fail("'generator' object is not reversible");
    List items = iterate(v);
    if (items.empty()) return Value::undefined(name == "first" ? "No first item, sequence was empty." : "No last item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value::make_list(iterate(v));
  if (name == "reverse") {
    if (v.is_string()) {
      auto cps = decode_utf8(v.s);
      std::reverse(cps.begin(), cps.end());
      return Value::string(encode_utf8(cps));
    }
    List items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::make_list(std::move(items));
  }
  if (name == "join") {
    const Value* sep = a.get(0, "d");
    const Value* attribute = a.get(1, "attribute");
    const std::string d = sep ? to_str(*sep) : "";
    std::string out;
    bool first = true;
    for (const Value& item : iterate(v)) {
      if (!first) out += d;
      first = false;
      out += to_str(attribute && !attribute->is_none() ? attr_or_int_path(*this, item, *attribute) : item);
      check_string(out);
    }
    return Value::string(out);
  }
  if (name == "tojson") {
    JsonFormat f;
    f.ensure_ascii = bool_arg(a, 0, "ensure_ascii", false);
    const Value* indent = a.get(1, "indent");
    if (indent && !indent->is_none()) {
      if (indent->is_string()) {
        f.indent = indent->s;
      } else {
        const int64_t n = indent->as_int();
        if (n > 64) fail("tojson: indent {} too large", n);
        f.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, n)), ' ');
      }
      f.item_separator = ",";
    }
    const Value* seps = a.get(2, "separators");
    if (seps && !seps->is_none()) {
      if (!seps->is_sequence() || seps->items().size() != 2 || !seps->items()[0].is_string() ||
          !seps->items()[1].is_string())
        fail("tojson: separators must be a pair of strings");
      f.item_separator = seps->items()[0].s;
      f.key_separator = seps->items()[1].s;
    }
    f.sort_keys = bool_arg(a, 3, "sort_keys", false);
    std::string s = to_json(v, f);
    check_string(s);
    return Value::string(std::move(s));
  }
  if (name == "int") {
    const Value* def = a.get(0, "default");
    const Value fallback = def ? *def : Value::integer(0);
    if (v.is_integral()) return Value::integer(v.as_int());
    if (v.kind == Kind::kFloat) {
      if (!std::isfinite(v.f) || std::fabs(v.f) >= 9.2e18) return fallback;
      return Value::integer(static_cast<int64_t>(v.f));
    }
    if (v.is_string()) {
      const std::string s = py_strip(v.s, true, true);
      try {
        size_t used = 0;
        const long long x = std::stoll(s, &used, 10);
        if (used == s.size()) return Value::integer(x);
        const double d = std::stod(s, &used);
        if (used == s.size() && std::isfinite(d) && std::fabs(d) < 9.2e18) return Value::integer(static_cast<int64_t>(d));
      } catch (const std::exception&) {
      }
    }
    return fallback;
  }
  if (name == "float") {
    const Value* def = a.get(0, "default");
    const Value fallback = def ? *def : Value::number(0.0);
    if (v.is_number()) return Value::number(v.as_double());
    if (v.is_string()) {
      const std::string s = py_strip(v.s, true, true);
      try {
        size_t used = 0;
        const double d = std::stod(s, &used);
        if (used == s.size()) return Value::number(d);
      } catch (const std::exception&) {
      }
    }
    return fallback;
  }
  if (name == "abs") {
    if (v.kind == Kind::kFloat) return Value::number(std::fabs(v.f));
    const int64_t x = v.as_int();
    if (x == INT64_MIN) fail("integer overflow");
    return Value::integer(x < 0 ? -x : x);
  }
  if (name == "round") {
    const int64_t precision = a.get(0, "precision") ? a.get(0, "precision")->as_int() : 0;
    const Value* method = a.get(1, "method");
    const std::string m = method ? to_str(*method) : "common";
    const double x = v.as_double();
    if (precision > 300 || precision < -300) return Value::number(x);
    const double scale = std::pow(10.0, static_cast<double>(precision));
    if (m == "common") return Value::number(py_round(x, precision));
    if (m == "floor") return Value::number(std::floor(x * scale) / scale);
    if (m == "ceil") return Value::number(std::ceil(x * scale) / scale);
    fail("method must be common, ceil or floor");
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::make_list({});
    if (!v.is_dict()) fail("Can only get item pairs from a mapping.");
    return Value::make_generator(iterate(call(method_of(v, "items"), {})));
  }
  if (name == "dictsort") {
    if (!v.is_dict()) fail("You can only sort by either \"key\" or \"value\" on a mapping");
    const bool cs = bool_arg(a, 0, "case_sensitive", false);
    const Value* by = a.get(1, "by");
    const bool by_value = by && to_str(*by) == "value";
    const bool rev = bool_arg(a, 2, "reverse", false);
    List pairs;
    for (const auto& [k, x] : v.dict->items) pairs.push_back(Value::make_tuple({k, x}));
    std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& p, const Value& q) {
      const int c = compare(fold_key(p.items()[by_value], cs), fold_key(q.items()[by_value], cs));
      return rev ? c > 0 : c < 0;
    });
    return Value::make_list(std::move(pairs));
  }
  if (name == "replace") {
    CallArgs m;
    m.positional = a.positional;
    for (const auto& [k, x] : a.keyword) m.keyword.emplace_back(k, x);
    return call(method_of(Value::string(to_str(v)), "replace"), m);
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    const bool attr = name.size() > 6;
    const bool keep = name[0] == 's';
    size_t next = 0;
    std::string attribute;
    if (attr) {
      if (!a0) fail("{}: missing attribute name", name);
      attribute = to_str(*a0);
      next = 1;
    }
    std::string test;
    CallArgs test_args;
    if (next < a.positional.size()) {
      test = to_str(a.positional[next]);
      test_args.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(next + 1), a.positional.end());
    }
    List out;
    const List items = (v.is_none() || !truthy(v)) ? List{} : iterate(v);  // jinja2: "if value: for item in value"
    for (const Value& item : items) {
      const Value x = attr ? attr_path(*this, item, attribute) : item;
      const bool r = test.empty() ? truthy(x) : apply_test(test, x, test_args);
      if (r == keep) out.push_back(item);
    }
    return Value::make_generator(std::move(out));
  }
  if (name == "map") {
    List out;
    const Value* attribute = nullptr;
    const Value* def = nullptr;
    for (const auto& [k, x] : a.keyword) {
      if (k == "attribute") attribute = &x;
      if (k == "default") def = &x;
    }
    const List items = (v.is_none() || !truthy(v)) ? List{} : iterate(v);  // jinja2: "if value: for item in value"
    if (attribute) {
      for (const Value& item : items) {
        Value x = attr_or_int_path(*this, item, *attribute);
        out.push_back(x.is_undefined() && def ? *def : x);
      }
      return Value::make_generator(std::move(out));
    }
    if (!a0) fail("map: missing filter name or attribute");
    const std::string filter = to_str(*a0);
    CallArgs fargs;
    fargs.positional.assign(a.positional.begin() + 1, a.positional.end());
    fargs.keyword = a.keyword;
    for (const Value& item : items) out.push_back(apply_filter(filter, item, fargs));
    return Value::make_generator(std::move(out));
  }
  if (name == "unique" || name == "sort" || name == "max" || name == "min") {
    const bool cs = bool_arg(a, name == "sort" ? 1 : 0, "case_sensitive", false);
    const Value* attribute = a.get(name == "sort" ? 2 : 1, "attribute");
    List items = iterate(v);
    auto key = [&](const Value& item) {
      return fold_key(attribute && !attribute->is_none() ? attr_or_int_path(*this, item, *attribute) : item, cs);
    };
    if (name == "unique") {
      List out, seen;
      for (const Value& item : items) {
        Value k = key(item);
        bool dup = false;
        for (const Value& s : seen) dup = dup || equals(s, k);
        if (dup) continue;
        seen.push_back(k);
        out.push_back(item);
        step();
      }
      return Value::make_generator(std::move(out));
    }
    if (name == "sort") {
      const bool rev = bool_arg(a, 0, "reverse", false);
      std::vector<std::pair<Value, Value>> keyed;
      for (const Value& item : items) keyed.emplace_back(key(item), item);
      std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& p, const auto& q) {
        const int c = compare(p.first, q.first);
        return rev ? c > 0 : c < 0;
      });
      List out;
      for (auto& [k, item] : keyed) out.push_back(std::move(item));
      return Value::make_list(std::move(out));
    }
    if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
    size_t best = 0;
    for (size_t i = 1; i < items.size(); ++i) {
      const int c = compare(key(items[i]), key(items[best]));
      if (name == "max" ? c > 0 : c < 0) best = i;
    }
    return items[best];
  }
  if (name == "sum") {
    const Value* attribute = a.get(0, "attribute");
    const Value* start = a.get(1, "start");
    Value acc = start ? *start : Value::integer(0);
    for (const Value& item : iterate(v))
      acc = binary_op(*this, "+", acc, attribute && !attribute->is_none() ? attr_or_int_path(*this, item, *attribute) : item);
    return acc;
  }
  if (name == "batch") {
    if (!a0 || !a0->is_integral() || a0->as_int() <= 0) fail("batch: linecount must be a positive integer");
    const size_t n = static_cast<size_t>(a0->as_int());
    const Value* fill = a.get(1, "fill_with");
    List out, cur;
    for (const Value& item : iterate(v)) {
      cur.push_back(item);
      if (cur.size() == n) {
        out.push_back(Value::make_list(std::move(cur)));
        cur.clear();
      }
    }
    if (!cur.empty()) {
      if (fill && !fill->is_none())
        while (cur.size() < n) cur.push_back(*fill);
      out.push_back(Value::make_list(std::move(cur)));
    }
    return Value::make_generator(std::move(out));
  }
  if (name == "indent") {
    const Value* width = a.get(0, "width");
    std::string pad = "    ";
    if (width) {
      if (width->is_string()) {
        pad = width->s;
      } else {
        const int64_t n = width->as_int();
        if (n > 1024) fail("indent: width {} too large", n);
        pad = std::string(static_cast<size_t>(std::max<int64_t>(0, n)), ' ');
      }
    }
    std::string s = indent_filter(to_str(v), pad, bool_arg(a, 1, "first", false), bool_arg(a, 2, "blank", false));
    check_string(s);
    return Value::string(std::move(s));
  }
  if (name == "center") {
    const int64_t width = a0 ? a0->as_int() : 80;
    const std::string s = to_str(v);
    const int64_t len = static_cast<int64_t>(count_code_points(s));
    if (width <= len) return Value::string(s);
    if (width > 1 << 20) fail("center: width {} too large", width);
    const int64_t marg = width - len;
    const int64_t left = marg / 2 + (marg & width & 1);
    return Value::string(std::string(static_cast<size_t>(left), ' ') + s +
                         std::string(static_cast<size_t>(marg - left), ' '));
  }
  if (name == "wordcount") {
    int64_t n = 0;
    bool in_word = false;
    for (char32_t c : decode_utf8(to_str(v))) {
      const bool w = c == '_' || (c >= '0' && c <= '9') || is_alpha_cp(c);
      if (w && !in_word) ++n;
      in_word = w;
    }
    return Value::integer(n);
  }
  if (name == "attr") {
    if (!a0) fail("attr: missing attribute name");
    return get_attr(v, to_str(*a0));
  }
  if (name == "format") {
    std::string s = printf_format(to_str(v), a.positional);
    check_string(s);
    return Value::string(std::move(s));
  }
  fail("no filter named '{}'", name);
}

}  // namespace ferry::jinja
