#include "grammar/json_schema.h"

#include <cmath>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "core/check.h"
#include "grammar/gbnf.h"
#include "grammar/number_range.h"
#include "grammar/regex.h"

namespace ferry::grammar {

namespace {

using Json = nlohmann::ordered_json;

constexpr int kMaxSchemaDepth = 64;
constexpr size_t kMaxSchemaBytes = 1 << 20;

// Primitive rules, emitted on first use (name -> body).
const std::map<std::string, std::string>& primitives() {
  static const std::map<std::string, std::string> kRules = {
      {"ws", "[ \\t\\n]{0,20}"},
      {"json-char", "[^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})"},
      {"json-string", "\"\\\"\" json-char* \"\\\"\""},
      {"json-int", "\"-\"? (\"0\" | [1-9] [0-9]{0,15})"},
      {"json-integer", "json-int"},
      {"json-number", "json-int (\".\" [0-9]{1,15})? ([eE] [-+]? [0-9]{1,2})?"},
      {"json-boolean", "\"true\" | \"false\""},
      {"json-null", "\"null\""},
      {"json-value", "json-object | json-array | json-string | json-number | json-boolean | json-null"},
      {"json-object",
       "\"{\" ws (json-string ws \":\" ws json-value ws (\",\" ws json-string ws \":\" ws json-value ws)*)? \"}\""},
      {"json-array", "\"[\" ws (json-value ws (\",\" ws json-value ws)*)? \"]\""},
      {"hex", "[0-9a-fA-F]"},
      {"uuid", "\"\\\"\" hex{8} \"-\" hex{4} \"-\" hex{4} \"-\" hex{4} \"-\" hex{12} \"\\\"\""},
      {"date-body",
       "[0-9]{4} \"-\" ((\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01]) | (\"0\" [469] | "
       "\"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\") | \"02-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]))"},
      {"time-body",
       "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? (\"Z\" | [+-] ([01] "
       "[0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])"},
      {"date", "\"\\\"\" date-body \"\\\"\""},
      {"time", "\"\\\"\" time-body \"\\\"\""},
      {"date-time", "\"\\\"\" date-body \"T\" time-body \"\\\"\""},
      {"email", "\"\\\"\" [a-zA-Z0-9._%+-]{1,64} \"@\" [a-zA-Z0-9-]{1,63} (\".\" [a-zA-Z0-9-]{1,63}){1,4} \"\\\"\""},
  };
  return kRules;
}

// Which primitives a primitive uses (so emitting one emits its dependencies).
const std::map<std::string, std::vector<std::string>>& primitive_deps() {
  static const std::map<std::string, std::vector<std::string>> kDeps = {
      {"json-string", {"json-char"}},
      {"json-integer", {"json-int"}},
      {"json-number", {"json-int"}},
      {"json-value", {"json-object", "json-array", "json-string", "json-number", "json-boolean", "json-null"}},
      {"json-object", {"ws", "json-string", "json-value"}},
      {"json-array", {"ws", "json-value"}},
      {"uuid", {"hex"}},
      {"date", {"date-body"}},
      {"time", {"time-body"}},
      {"date-time", {"date-body", "time-body"}},
  };
  return kDeps;
}

const std::set<std::string>& annotations() {
  static const std::set<std::string> k = {"title", "description", "default", "examples", "$schema", "$id",
                                          "$comment", "deprecated", "readOnly", "writeOnly", "$defs",
                                          "definitions", "strict"};
  return k;
}

const std::set<std::string>& supported() {
  static const std::set<std::string> k = {"type", "properties", "required", "additionalProperties", "items",
                                          "minItems", "maxItems", "enum", "const", "pattern", "format",
                                          "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum",
                                          "exclusiveMaximum", "anyOf", "oneOf", "allOf", "$ref", "uniqueItems"};
  return k;
}

bool json_type_matches(const Json& v, const std::string& type) {
  if (type == "string") return v.is_string();
  if (type == "integer") return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  if (type == "number") return v.is_number();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  return false;
}

class Converter {
 public:
  Converter(const Json& root, std::string_view rule_prefix) : root_(root), rule_prefix_(rule_prefix) {}

  std::string run() {
    const std::string root = visit(root_, "root", 0);
    std::string out = "root ::= " + root + "\n";
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out;
  }

 private:
  std::string use(const std::string& primitive) {
    if (rules_.contains(primitive)) return primitive;
    rules_[primitive] = primitives().at(primitive);
    if (auto it = primitive_deps().find(primitive); it != primitive_deps().end()) {
      for (const auto& d : it->second) use(d);
    }
    return primitive;
  }

  std::string add_rule(const std::string& hint, const std::string& body) {
    std::string name;
    for (char c : hint) name += (std::isalnum(static_cast<unsigned char>(c)) ? c : '-');
    if (name.empty() || name.size() > 40) name = "r";
    name = rule_prefix_ + name;
    std::string unique = name;
    for (int n = 1; rules_.contains(unique) || primitives().contains(unique) || unique == "root"; ++n) {
      unique = name + "-" + std::to_string(n);
    }
    rules_[unique] = body;
    return unique;
  }

  static std::string literal(const Json& v) { return gbnf_literal(v.dump(), RegexTarget::Raw); }

  static std::string alternatives(const std::vector<std::string>& alts) {
    if (alts.empty()) return "[]";
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return out + ")";
  }

  // The JSON kinds a schema can produce (bits: object, array, string, number, boolean, null), for oneOf.
  static constexpr unsigned kAllKinds = 63;
  unsigned kinds(const Json& s, int depth) {
    if (depth > kMaxSchemaDepth || !s.is_object()) return kAllKinds;
    auto kind_of = [](const Json& v) -> unsigned {
      return v.is_object() ? 1 : v.is_array() ? 2 : v.is_string() ? 4 : v.is_number() ? 8 : v.is_boolean() ? 16 : 32;
    };
    if (s.contains("$ref") && s["$ref"].is_string()) {
      const std::string path = s["$ref"].get<std::string>();
      if (path == "#") return depth == 0 ? kAllKinds : kinds(root_, depth + 1);
      for (const char* section : {"$defs", "definitions"}) {
        const std::string prefix = std::string("#/") + section + "/";
        if (path.rfind(prefix, 0) == 0 && root_.contains(section) && root_[section].contains(path.substr(prefix.size()))) {
          return kinds(root_[section][path.substr(prefix.size())], depth + 1);
        }
      }
      return kAllKinds;
    }
    unsigned k = 0;
    for (const char* a : {"anyOf", "oneOf", "allOf"}) {
      if (!s.contains(a) || !s[a].is_array()) continue;
      for (const auto& b : s[a]) k |= kinds(b, depth + 1);
      return k;
    }
    if (s.contains("const")) return kind_of(s["const"]);
    if (s.contains("enum") && s["enum"].is_array()) {
      for (const auto& v : s["enum"]) k |= kind_of(v);
      return k;
    }
    if (!s.contains("type")) return kAllKinds;
    std::vector<std::string> types;
    if (s["type"].is_string()) types.push_back(s["type"].get<std::string>());
    if (s["type"].is_array()) for (const auto& t : s["type"]) if (t.is_string()) types.push_back(t.get<std::string>());
    for (const auto& t : types) {
      k |= t == "object" ? 1 : t == "array" ? 2 : t == "string" ? 4 : (t == "number" || t == "integer") ? 8
           : t == "boolean" ? 16 : 32;
    }
    return k;
  }

  // oneOf is generated as anyOf, which is exact only when no value matches two branches: branches must
  // produce different JSON kinds, or both be enum/const lists with no common value.
  void check_one_of(const Json& branches) {
    auto literals = [](const Json& b) -> std::optional<std::vector<Json>> {
      if (!b.is_object()) return std::nullopt;
      if (b.contains("const")) return std::vector<Json>{b["const"]};
      if (b.contains("enum") && b["enum"].is_array()) return std::vector<Json>(b["enum"].begin(), b["enum"].end());
      return std::nullopt;
    };
    for (size_t i = 0; i < branches.size(); ++i) {
      for (size_t j = i + 1; j < branches.size(); ++j) {
        const auto li = literals(branches[i]), lj = literals(branches[j]);
        if (li && lj) {
          for (const auto& a : *li) {
            for (const auto& b : *lj) {
              FERRY_CHECK(a != b, "json schema: 'oneOf' branches {} and {} both allow {} (unsupported; use anyOf)", i,
                          j, a.dump());
            }
          }
          continue;
        }
        FERRY_CHECK((kinds(branches[i], 1) & kinds(branches[j], 1)) == 0,
                    "json schema: 'oneOf' branches {} and {} may match the same value (unsupported: only branches of "
                    "different JSON types or disjoint enums; use anyOf)",
                    i, j);
      }
    }
  }

  std::string ref(const std::string& path, int depth) {
    if (auto it = refs_.find(path); it != refs_.end()) return it->second;
    const Json* target = nullptr;
    if (path == "#") {
      target = &root_;
    } else if (path.rfind("#/$defs/", 0) == 0 || path.rfind("#/definitions/", 0) == 0) {
      const std::string section = path.rfind("#/$defs/", 0) == 0 ? "$defs" : "definitions";
      const std::string name = path.substr(section.size() + 3);
      FERRY_CHECK(root_.contains(section) && root_[section].is_object() && root_[section].contains(name),
                  "json schema: $ref '{}' does not resolve", path);
      target = &root_[section][name];
    } else {
      fail("json schema: $ref '{}' is unsupported (only '#', '#/$defs/...' and '#/definitions/...')", path);
    }
    const std::string name = add_rule("def-" + path.substr(path.rfind('/') + 1), "[]");
    refs_[path] = name;
    rules_[name] = visit(*target, name, depth + 1);
    return name;
  }

  std::string visit(const Json& s, const std::string& hint, int depth) {
    FERRY_CHECK(depth <= kMaxSchemaDepth, "json schema: nested deeper than {} levels", kMaxSchemaDepth);
    if (s.is_boolean()) {
      FERRY_CHECK(s.get<bool>(), "json schema: the schema 'false' matches nothing (at '{}')", hint);
      return use("json-value");
    }
    FERRY_CHECK(s.is_object(), "json schema: a schema must be an object or a boolean (at '{}')", hint);
    for (const auto& [key, value] : s.items()) {
      FERRY_CHECK(annotations().contains(key) || supported().contains(key), "json schema: unsupported keyword '{}'",
                  key);
    }
    auto has = [&](const char* k) { return s.contains(k); };
    auto only = [&](const char* what, std::initializer_list<const char*> allowed) {
      for (const auto& [key, value] : s.items()) {
        if (annotations().contains(key) || key == what) continue;
        bool ok = false;
        for (const char* a : allowed) ok = ok || key == a;
        FERRY_CHECK(ok, "json schema: '{}' together with '{}' is unsupported", key, what);
      }
    };
    if (has("$ref")) {
      only("$ref", {});
      FERRY_CHECK(s["$ref"].is_string(), "json schema: '$ref' must be a string");
      return ref(s["$ref"].get<std::string>(), depth);
    }
    for (const char* k : {"anyOf", "oneOf"}) {
      if (!has(k)) continue;
      only(k, {});
      FERRY_CHECK(s[k].is_array() && !s[k].empty(), "json schema: '{}' must be a non-empty array", k);
      if (std::string_view(k) == "oneOf") check_one_of(s[k]);
      std::vector<std::string> alts;
      for (size_t i = 0; i < s[k].size(); ++i) alts.push_back(visit(s[k][i], hint + "-" + std::to_string(i), depth + 1));
      return add_rule(hint, alternatives(alts));
    }
    if (has("allOf")) {
      only("allOf", {});
      FERRY_CHECK(s["allOf"].is_array() && s["allOf"].size() == 1,
                  "json schema: 'allOf' with more than one schema is unsupported");
      return visit(s["allOf"][0], hint, depth + 1);
    }
    std::vector<std::string> types;
    if (has("type")) {
      if (s["type"].is_string()) {
        types.push_back(s["type"].get<std::string>());
      } else {
        FERRY_CHECK(s["type"].is_array() && !s["type"].empty(), "json schema: 'type' must be a string or a list");
        for (const auto& t : s["type"]) {
          FERRY_CHECK(t.is_string(), "json schema: 'type' entries must be strings");
          types.push_back(t.get<std::string>());
        }
      }
      for (const auto& t : types) {
        FERRY_CHECK(t == "string" || t == "number" || t == "integer" || t == "boolean" || t == "null" ||
                        t == "object" || t == "array",
                    "json schema: unknown type '{}'", t);
      }
    }
    if (has("const") || has("enum")) {
      const char* k = has("const") ? "const" : "enum";
      only(k, {"type"});
      std::vector<Json> values;
      if (has("const")) {
        values.push_back(s["const"]);
      } else {
        FERRY_CHECK(s["enum"].is_array() && !s["enum"].empty(), "json schema: 'enum' must be a non-empty array");
        for (const auto& v : s["enum"]) values.push_back(v);
      }
      std::vector<std::string> alts;
      for (const auto& v : values) {
        bool ok = types.empty();
        for (const auto& t : types) ok = ok || json_type_matches(v, t);
        if (ok) alts.push_back(literal(v));
      }
      FERRY_CHECK(!alts.empty(), "json schema: no '{}' value has the schema's type (at '{}')", k, hint);
      return add_rule(hint, alternatives(alts));
    }
    if (types.empty()) {
      if (has("properties") || has("additionalProperties") || has("required")) types.push_back("object");
      else if (has("items") || has("minItems") || has("maxItems")) types.push_back("array");
      else if (has("pattern") || has("format") || has("minLength") || has("maxLength")) types.push_back("string");
      else if (has("minimum") || has("maximum") || has("exclusiveMinimum") || has("exclusiveMaximum")) types.push_back("number");
      else return use("json-value");
    }
    std::vector<std::string> alts;
    for (const auto& t : types) alts.push_back(visit_type(s, t, hint, depth));
    return alts.size() == 1 ? alts[0] : add_rule(hint, alternatives(alts));
  }

  std::string visit_type(const Json& s, const std::string& type, const std::string& hint, int depth) {
    if (type == "boolean") return use("json-boolean");
    if (type == "null") return use("json-null");
    if (type == "string") return visit_string(s, hint);
    if (type == "number" || type == "integer") return visit_number(s, type == "integer", hint);
    if (type == "array") return visit_array(s, hint, depth);
    return visit_object(s, hint, depth);
  }

  static std::optional<int64_t> count(const Json& s, const char* k) {
    if (!s.contains(k)) return std::nullopt;
    FERRY_CHECK(s[k].is_number_unsigned() || (s[k].is_number_integer() && s[k].get<int64_t>() >= 0),
                "json schema: '{}' must be a non-negative integer", k);
    const auto v = s[k].get<int64_t>();
    FERRY_CHECK(v <= static_cast<int64_t>(kMaxRepetition), "json schema: '{}' of {} is above the supported {}", k,
                v, kMaxRepetition);
    return v;
  }

  std::string visit_string(const Json& s, const std::string& hint) {
    if (s.contains("format")) {
      FERRY_CHECK(s["format"].is_string(), "json schema: 'format' must be a string");
      const std::string f = s["format"].get<std::string>();
      FERRY_CHECK(f == "date-time" || f == "date" || f == "time" || f == "uuid" || f == "email",
                  "json schema: string format '{}' is unsupported", f);
      FERRY_CHECK(!s.contains("pattern") && !s.contains("minLength") && !s.contains("maxLength"),
                  "json schema: 'format' together with pattern/minLength/maxLength is unsupported");
      return use(f);
    }
    if (s.contains("pattern")) {
      FERRY_CHECK(s["pattern"].is_string(), "json schema: 'pattern' must be a string");
      FERRY_CHECK(!s.contains("minLength") && !s.contains("maxLength"),
                  "json schema: 'pattern' together with minLength/maxLength is unsupported");
      return add_rule(hint, "\"\\\"\" " + regex_to_gbnf(s["pattern"].get<std::string>(), RegexTarget::JsonString) +
                                " \"\\\"\"");
    }
    const auto min = count(s, "minLength"), max = count(s, "maxLength");
    if (!min && !max) return use("json-string");
    use("json-char");
    const std::string rep = "{" + std::to_string(min.value_or(0)) + "," + (max ? std::to_string(*max) : "") + "}";
    return add_rule(hint, "\"\\\"\" json-char" + rep + " \"\\\"\"");
  }

  static std::optional<int64_t> bound(const Json& s, const char* k, bool integer, bool upper) {
    if (!s.contains(k)) return std::nullopt;
    FERRY_CHECK(s[k].is_number(), "json schema: '{}' must be a number", k);
    const double v = s[k].get<double>();
    FERRY_CHECK(std::isfinite(v) && std::fabs(v) <= static_cast<double>(kMaxMagnitude),
                "json schema: '{}' of {} is beyond the supported magnitude", k, v);
    if (std::floor(v) != v) {
      FERRY_CHECK(integer, "json schema: a fractional '{}' ({}) on a number is unsupported", k, v);
      return static_cast<int64_t>(upper ? std::floor(v) : std::ceil(v));
    }
    return static_cast<int64_t>(v);
  }

  std::string visit_number(const Json& s, bool integer, const std::string& hint) {
    auto lo = bound(s, "minimum", integer, false), hi = bound(s, "maximum", integer, true);
    const auto xlo = bound(s, "exclusiveMinimum", integer, false), xhi = bound(s, "exclusiveMaximum", integer, true);
    if (!lo && !hi && !xlo && !xhi) return use(integer ? "json-integer" : "json-number");
    bool lo_ex = false, hi_ex = false;
    if (xlo && (!lo || *xlo >= *lo)) {
      // an exclusive fractional bound was rounded up (integers): x > 2.5 is x >= 3
      const bool frac = std::floor(s["exclusiveMinimum"].get<double>()) != s["exclusiveMinimum"].get<double>();
      lo = frac ? *xlo : *xlo;
      lo_ex = !frac;
    }
    if (xhi && (!hi || *xhi <= *hi)) {
      const bool frac = std::floor(s["exclusiveMaximum"].get<double>()) != s["exclusiveMaximum"].get<double>();
      hi = *xhi;
      hi_ex = !frac;
    }
    if (integer) {
      if (lo && lo_ex) *lo += 1;
      if (hi && hi_ex) *hi -= 1;
      return add_rule(hint, integer_range_gbnf(lo, hi));
    }
    return add_rule(hint, number_range_gbnf(lo, lo_ex, hi, hi_ex));
  }

  std::string visit_array(const Json& s, const std::string& hint, int depth) {
    if (s.contains("uniqueItems")) {
      FERRY_CHECK(s["uniqueItems"].is_boolean() && !s["uniqueItems"].get<bool>(),
                  "json schema: 'uniqueItems' true is unsupported");
    }
    const std::string item = s.contains("items") ? visit(s["items"], hint + "-item", depth + 1) : use("json-value");
    const int64_t min = count(s, "minItems").value_or(0);
    const auto max = count(s, "maxItems");
    use("ws");
    if (max && *max < min) return add_rule(hint, "[]");
    if (max && *max == 0) return add_rule(hint, "\"[\" ws \"]\"");
    const std::string more = "(\",\" ws " + item + " ws){" + std::to_string(std::max<int64_t>(min - 1, 0)) + "," +
                             (max ? std::to_string(*max - 1) : "") + "}";
    std::string body = item + " ws " + more;
    if (min == 0) body = "(" + body + ")?";
    return add_rule(hint, "\"[\" ws " + body + " \"]\"");
  }

  std::string visit_object(const Json& s, const std::string& hint, int depth) {
    use("ws");
    const Json empty = Json::object();
    const Json& props = s.contains("properties") ? s["properties"] : empty;
    FERRY_CHECK(props.is_object(), "json schema: 'properties' must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      FERRY_CHECK(s["required"].is_array(), "json schema: 'required' must be an array");
      for (const auto& r : s["required"]) {
        FERRY_CHECK(r.is_string(), "json schema: 'required' entries must be strings");
        FERRY_CHECK(props.contains(r.get<std::string>()),
                    "json schema: required property '{}' is not in 'properties' (unsupported)", r.get<std::string>());
        required.insert(r.get<std::string>());
      }
    }
    const Json additional = s.contains("additionalProperties") ? s["additionalProperties"] : Json();
    if (props.empty()) {
      if (!additional.is_null() && additional.is_boolean() && !additional.get<bool>()) {
        return add_rule(hint, "\"{\" ws \"}\"");
      }
      const std::string value =
          additional.is_object() ? visit(additional, hint + "-value", depth + 1) : use("json-value");
      const std::string kv = use("json-string") + " ws \":\" ws " + value + " ws";
      return add_rule(hint, "\"{\" ws (" + kv + " (\",\" ws " + kv + ")*)? \"}\"");
    }
    FERRY_CHECK(additional.is_null() || (additional.is_boolean() && !additional.get<bool>()),
                "json schema: 'additionalProperties' other than false next to 'properties' is unsupported");
    // kv[i]: "key" ws ":" ws value; tail(i, first): the properties from i on, a comma before all but the first.
    std::vector<std::string> kvs, names;
    for (const auto& [key, value] : props.items()) {
      const std::string v = visit(value, hint + "-" + key, depth + 1);
      kvs.push_back(add_rule(hint + "-" + key + "-kv", literal(Json(key)) + " ws \":\" ws " + v));
      names.push_back(key);
    }
    const size_t n = kvs.size();
    std::vector<std::string> tail_first(n + 1), tail_rest(n + 1);
    tail_first[n] = tail_rest[n] = "\"\"";
    for (size_t i = n; i-- > 0;) {
      const bool req = required.contains(names[i]);
      const std::string with_rest = kvs[i] + " ws " + tail_rest[i + 1];
      const std::string rest_body = "\",\" ws " + with_rest;
      tail_rest[i] = add_rule(hint + "-tail", req ? rest_body : rest_body + " | " + tail_rest[i + 1]);
      tail_first[i] = add_rule(hint + "-head", req ? with_rest : with_rest + " | " + tail_first[i + 1]);
    }
    return add_rule(hint, "\"{\" ws " + tail_first[0] + " \"}\"");
  }

  const Json& root_;
  std::string rule_prefix_;  // before every rule name but root and the primitives
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> refs_;
};

}  // namespace

std::string json_schema_to_gbnf(std::string_view schema_json, std::string_view rule_prefix) {
  for (const char c : rule_prefix)
    FERRY_CHECK(std::isalnum(static_cast<unsigned char>(c)) || c == '-', "json schema: bad rule prefix '{}'", rule_prefix);
  FERRY_CHECK(schema_json.size() <= kMaxSchemaBytes, "json schema: larger than {} bytes", kMaxSchemaBytes);
  Json schema;
  try {
    schema = Json::parse(schema_json, nullptr, true, false);
  } catch (const Json::exception& e) {
    fail("json schema: not valid JSON ({})", e.what());
  }
  return Converter(schema, rule_prefix).run();
}

Grammar compile_json_schema(std::string_view schema_json) { return parse_gbnf(json_schema_to_gbnf(schema_json)); }

Grammar compile_json_object() { return compile_json_schema(R"({"type": "object"})"); }

}  // namespace ferry::grammar
