// JSON in and out: from_json builds template values; to_json is Python's json.dumps.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/check.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/text.h"

namespace ferry::jinja {
namespace {

constexpr int kMaxJsonDepth = 256;

void dump_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (char32_t cp : decode_utf8(s)) {
    switch (cp) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default: {
        char buf[16];
        if (cp < 0x20 || (ensure_ascii && cp >= 0x7F)) {
          if (cp >= 0x10000) {
            const char32_t v = cp - 0x10000;
            std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                          static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
          } else {
            std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
          }
          out += buf;
        } else {
          utf8_append(out, cp);
        }
      }
    }
  }
  out += '"';
}

std::string float_json(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
  return format_float(f);
}

std::string key_string(const Value& k) {
  switch (k.kind) {
    case Kind::kString: return k.s;
    case Kind::kBool: return k.b ? "true" : "false";
    case Kind::kInt: return std::to_string(k.i);
    case Kind::kFloat: return float_json(k.f);
    case Kind::kNone: return "null";
    default: fail("keys must be str, int, float, bool or None, not {}", type_name(k));
  }
}

void dump(std::string& out, const Value& v, const JsonFormat& fmt, int level) {
  if (level > kMaxJsonDepth) fail("tojson: value nested too deeply");
  auto newline = [&](int lvl) {
    out += '\n';
    for (int i = 0; i < lvl; ++i) out += *fmt.indent;
  };
  switch (v.kind) {
    case Kind::kNone: out += "null"; return;
    case Kind::kBool: out += v.b ? "true" : "false"; return;
    case Kind::kInt: out += std::to_string(v.i); return;
    case Kind::kFloat: out += float_json(v.f); return;
    case Kind::kString: dump_string(out, v.s, fmt.ensure_ascii); return;
    case Kind::kList:
    case Kind::kTuple: {
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      bool first = true;
      for (const Value& x : *v.list) {
        if (!first) out += fmt.item_separator;
        first = false;
        if (fmt.indent) newline(level + 1);
        dump(out, x, fmt, level + 1);
      }
      if (fmt.indent) newline(level);
      out += ']';
      return;
    }
    case Kind::kDict: {
      if (v.dict->items.empty()) {
        out += "{}";
        return;
      }
      std::vector<std::pair<std::string, const Value*>> items;
      for (const auto& [k, x] : v.dict->items) items.emplace_back(key_string(k), &x);
      if (fmt.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      out += '{';
      bool first = true;
      for (const auto& [k, x] : items) {
        if (!first) out += fmt.item_separator;
        first = false;
        if (fmt.indent) newline(level + 1);
        dump_string(out, k, fmt.ensure_ascii);
        out += fmt.key_separator;
        dump(out, *x, fmt, level + 1);
      }
      if (fmt.indent) newline(level);
      out += '}';
      return;
    }
    default: fail("Object of type {} is not JSON serializable", type_name(v));
  }
}

Value convert(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxJsonDepth) fail("context JSON nested too deeply");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::number(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::number(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      for (const auto& x : j) items.push_back(convert(x, depth + 1));
      return Value::make_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (const auto& [k, x] : j.items()) d.items.emplace_back(Value::string(k), convert(x, depth + 1));
      return Value::make_dict(std::move(d));
    }
    default: return Value::none();
  }
}

}  // namespace

std::string to_json(const Value& v, const JsonFormat& format) {
  std::string out;
  dump(out, v, format, 0);
  return out;
}

Value from_json(const nlohmann::ordered_json& j) { return convert(j, 0); }

}  // namespace ferry::jinja
