// Global functions of transformers' chat-template environment.
#include <ctime>

#include "core/check.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"

namespace ferry::jinja {
namespace {

Dict dict_from_args(const CallArgs& a, const char* what) {
  Dict d;
  for (const Value& p : a.positional) {
    if (p.is_dict()) {
      for (const auto& [k, v] : p.dict->items) d.set(k, v);
    } else if (p.is_sequence()) {
      for (const Value& pair : p.items()) {
        if (!pair.is_sequence() || pair.items().size() != 2) fail("{}(): sequence items must be pairs", what);
        d.set(pair.items()[0], pair.items()[1]);
      }
    } else {
      fail("{}(): cannot build a mapping from {}", what, type_name(p));
    }
  }
  for (const auto& [k, v] : a.keyword) d.set(Value::string(k), v);
  return d;
}

Value range_fn(Interpreter& in, const CallArgs& a) {
  for (const Value& v : a.positional)
    if (!v.is_integral()) fail("range(): '{}' object cannot be interpreted as an integer", type_name(v));
  int64_t start = 0, stop = 0, step = 1;
  if (a.positional.size() == 1) {
    stop = a.positional[0].as_int();
  } else if (a.positional.size() == 2 || a.positional.size() == 3) {
    start = a.positional[0].as_int();
    stop = a.positional[1].as_int();
    if (a.positional.size() == 3) step = a.positional[2].as_int();
  } else {
    fail("range() expects 1 to 3 integer arguments");
  }
  if (step == 0) fail("range() arg 3 must not be zero");
  const long double count_ld =
      step > 0 ? (stop > start ? (static_cast<long double>(stop) - start + step - 1) / step : 0)
               : (start > stop ? (static_cast<long double>(start) - stop - step - 1) / -step : 0);
  if (count_ld > static_cast<long double>(in.limits().max_range))
    fail("range() of {} items exceeds the limit of {}", static_cast<double>(count_ld), in.limits().max_range);
  List out;
  for (int64_t v = start; step > 0 ? v < stop : v > stop; v += step) out.push_back(Value::integer(v));
  return Value::make_list(std::move(out));
}

Value strftime_fn(Interpreter& in, const CallArgs& a) {
  const Value* f = a.get(0, "format");
  if (!f || !f->is_string()) fail("strftime_now() expects a format string");
  if (f->s.size() > 256) fail("strftime_now() format too long");
  const std::tm tm = in.now();
  std::string buf(1024, '\0');
  const size_t n = std::strftime(buf.data(), buf.size(), f->s.c_str(), &tm);
  buf.resize(n);
  return Value::string(buf);
}

}  // namespace

void add_builtins(std::unordered_map<std::string, Value>& vars) {
  vars["range"] = Value::function("range", range_fn);
  vars["namespace"] = Value::function("namespace", [](Interpreter& in, const CallArgs& a) {
    Dict d = dict_from_args(a, "namespace");
    for (const auto& [k, v] : d.items)
      if (k.is_string() && !k.s.empty() && k.s[0] == '_') fail("cannot store underscore-prefixed attribute '{}'", k.s);
    Value ns = Value::make_namespace(std::move(d));
    in.track_namespace(ns);
    return ns;
  });
  vars["dict"] = Value::function("dict", [](Interpreter&, const CallArgs& a) {
    return Value::make_dict(dict_from_args(a, "dict"));
  });
  vars["raise_exception"] = Value::function("raise_exception", [](Interpreter&, const CallArgs& a) -> Value {
    const Value* m = a.get(0, "message");
    throw RaisedError(m ? to_str(*m) : std::string("raise_exception() called"));
  });
  vars["strftime_now"] = Value::function("strftime_now", strftime_fn);
}

}  // namespace ferry::jinja
