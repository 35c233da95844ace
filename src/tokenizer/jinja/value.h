// Values of the Jinja engine, with Python's semantics (jinja2 runs on Python objects): None, bool, int, float,
// str, list, tuple, dict (insertion ordered), namespace, callables, and jinja2's Undefined.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ferry::jinja {

class Interpreter;
struct Value;

enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kTuple, kDict, kNamespace, kFunction, kGenerator };
// kGenerator: what jinja2's map/select/items filters return (iterable once, no len(), not JSON-serializable).

using List = std::vector<Value>;

// Dict: insertion-ordered pairs; lookups are linear (template dicts are small).
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  const Value* find(const Value& key) const;
  const Value* find(const std::string& key) const;
  void set(Value key, Value value);
};

// Arguments of a call: positional then keyword, as written at the call site.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The argument at `index` or named `name`, or nullptr.
  const Value* get(size_t index, const std::string& name) const;
};

using NativeFn = std::function<Value(Interpreter&, const CallArgs&)>;
struct Function {
  std::string name;
  NativeFn fn;
};

struct Value {
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0.0;
  std::string s;                        // kString; for kUndefined the name that was looked up (for messages)
  bool safe = false;                    // kString: a markupsafe.Markup (from |safe or |escape)
  std::shared_ptr<const List> list;     // kList, kTuple, kGenerator (immutable: the sandbox forbids mutation)
  std::shared_ptr<const Dict> dict;     // kDict
  std::shared_ptr<Dict> ns;             // kNamespace (mutable through {% set ns.x = ... %})
  std::shared_ptr<const Function> fn;   // kFunction

  static Value undefined(std::string hint = {});
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value number(double v);
  static Value string(std::string v);
  static Value make_list(List items);
  static Value make_tuple(List items);
  static Value make_generator(List items);
  static Value make_dict(Dict d);
  static Value make_namespace(Dict d);
  static Value function(std::string name, NativeFn fn);

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_number() const { return kind == Kind::kBool || kind == Kind::kInt || kind == Kind::kFloat; }
  bool is_integral() const { return kind == Kind::kBool || kind == Kind::kInt; }
  bool is_sequence() const { return kind == Kind::kList || kind == Kind::kTuple; }
  bool is_dict() const { return kind == Kind::kDict; }
  double as_double() const;   // numbers only
  int64_t as_int() const;     // bool/int only
  const List& items() const;  // list/tuple only
};

// Python's type name, for error messages ("str", "int", "list", "dict", ...).
const char* type_name(const Value& v);
bool truthy(const Value& v);
// Python's ==, with jinja2's Undefined (equal only to Undefined).
bool equals(const Value& a, const Value& b);
// Python's <, throwing ferry::Error for unorderable types. Returns <0, 0, >0.
int compare(const Value& a, const Value& b);
// str(v) and repr(v) as Python prints them (Undefined prints as "").
std::string to_str(const Value& v);
std::string repr(const Value& v);
std::string format_float(double v);  // Python's repr(float)
std::string html_escape(const std::string& s);  // markupsafe.escape

}  // namespace ferry::jinja
