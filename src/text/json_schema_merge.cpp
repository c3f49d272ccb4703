// The JSON Schema compiler's shared helpers: types, listed values, the allOf merge and the
// oneOf exclusivity test. See json_schema_merge.h.
#include "text/json_schema_merge.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "core/str_cat.h"

namespace kvcache::text::json_schema {

// Assertions it enforces (the rest of a schema's keys are annotations or unknown: ignored).
const std::set<std::string>& assertion_keys() {
  static const std::set<std::string> keys = {
      "type", "properties", "required", "additionalProperties", "enum", "const", "items",
      "prefixItems", "additionalItems", "minItems", "maxItems", "minLength", "maxLength",
      "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "anyOf", "oneOf", "allOf",
      "$ref", "format", "pattern", "nullable"};
  return keys;
}

std::string at(const std::string& ptr) { return ptr.empty() ? "the root" : ptr; }

std::string child(const std::string& ptr, std::string_view key) {
  std::string out = ptr + "/";
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

Status bad(const std::string& ptr, const std::string& what) {
  return invalid_argument(str_cat("JSON Schema at ", at(ptr), ": ", what));
}

bool has_assertions(const SchemaJson& s) {
  for (const auto& [k, v] : s.items())
    if (assertion_keys().count(k) != 0) return true;
  return false;
}

std::vector<std::string> type_list(const SchemaJson& t) {
  std::vector<std::string> out;
  if (t.is_string()) out.push_back(t.get<std::string>());
  if (t.is_array())
    for (const SchemaJson& x : t)
      if (x.is_string()) out.push_back(x.get<std::string>());
  return out;
}

namespace {

// `x`'s additionalProperties (when not true) governs the properties `y` declares that `x` does
// not: false forbids them (their schema becomes false), a schema joins theirs under allOf.
void apply_additional(const SchemaJson& x, SchemaJson& y) {
  if (!x.contains("additionalProperties") || x["additionalProperties"] == true) return;
  if (!y.contains("properties") || !y["properties"].is_object()) return;
  const SchemaJson& ap = x["additionalProperties"];
  const SchemaJson none = SchemaJson::object();
  const SchemaJson& declared = x.contains("properties") ? x["properties"] : none;
  for (auto& [name, ps] : y["properties"].items()) {
    if (declared.is_object() && declared.contains(name)) continue;
    ps = ap == false ? SchemaJson(false) : SchemaJson{{"allOf", SchemaJson::array({ps, ap})}};
  }
}

// Two parts' array keywords: a part's `items` covers the positions past its own prefixItems
// (absent: any value), so when the prefixes differ both parts get the position-wise merge:
// prefixItems[i] = both parts' schemas at i, items = both parts' items. Draft-4 tuples
// (`items` as a list) are left to the key-by-key merge.
void merge_tuples(SchemaJson& a, SchemaJson& b) {
  const bool pa = a.contains("prefixItems"), pb = b.contains("prefixItems");
  if (!pa && !pb) return;
  if ((pa && !a["prefixItems"].is_array()) || (pb && !b["prefixItems"].is_array()) ||
      (a.contains("items") && a["items"].is_array()) || (b.contains("items") && b["items"].is_array()))
    return;
  const SchemaJson any(true);
  const SchemaJson& ia = a.contains("items") ? a["items"] : any;
  const SchemaJson& ib = b.contains("items") ? b["items"] : any;
  if (pa && pb && a["prefixItems"] == b["prefixItems"] && ia == ib) return;
  auto both = [](const SchemaJson& x, const SchemaJson& y) {
    if (x == true || x == y) return y;
    if (y == true) return x;
    return SchemaJson{{"allOf", SchemaJson::array({x, y})}};
  };
  auto at = [](const SchemaJson& s, bool has, size_t i, const SchemaJson& items) {
    return has && i < s["prefixItems"].size() ? s["prefixItems"][i] : items;
  };
  const size_t n = std::max(pa ? a["prefixItems"].size() : 0, pb ? b["prefixItems"].size() : 0);
  SchemaJson prefix = SchemaJson::array();
  for (size_t i = 0; i < n; ++i) prefix.push_back(both(at(a, pa, i, ia), at(b, pb, i, ib)));
  const SchemaJson items = both(ia, ib);
  for (SchemaJson* s : {&a, &b}) {
    (*s)["prefixItems"] = prefix;
    if (items != true) (*s)["items"] = items;
    else s->erase("items");  // the engine then ends the array after the prefix (a narrowing)
  }
}

}  // namespace

Result<SchemaJson> merge_schemas(SchemaJson a, const SchemaJson& b_in, const std::string& ptr) {
  SchemaJson b = b_in;
  const SchemaJson a_in = a;
  apply_additional(a_in, b);
  apply_additional(b_in, a);
  merge_tuples(a, b);
  static const std::set<std::string> lower = {"minimum", "minLength", "minItems",
                                              "exclusiveMinimum"};
  static const std::set<std::string> upper = {"maximum", "maxLength", "maxItems",
                                              "exclusiveMaximum"};
  for (const auto& [k, v] : b.items()) {
    if (!a.contains(k)) {
      a[k] = v;
      continue;
    }
    SchemaJson& old = a[k];
    if (old == v || assertion_keys().count(k) == 0) continue;  // equal, or an annotation
    if (k == "properties" && old.is_object() && v.is_object()) {
      for (const auto& [name, ps] : v.items())
        old[name] = old.contains(name) ? SchemaJson{{"allOf", SchemaJson::array({old[name], ps})}} : ps;
    } else if (k == "required" && old.is_array() && v.is_array()) {
      for (const SchemaJson& n : v)
        if (std::find(old.begin(), old.end(), n) == old.end()) old.push_back(n);
    } else if (k == "type") {
      std::vector<std::string> x = type_list(old), y = type_list(v), both;
      for (const std::string& t : x)
        for (const std::string& u : y)
          if (t == u || (t == "integer" && u == "number")) both.push_back(t);
          else if (t == "number" && u == "integer") both.push_back(u);
      if (both.empty()) return bad(ptr, "allOf: no type satisfies every schema");
      old = both;
    } else if (k == "enum" && old.is_array() && v.is_array()) {
      SchemaJson keep = SchemaJson::array();
      for (const SchemaJson& e : old)
        if (std::find(v.begin(), v.end(), e) != v.end()) keep.push_back(e);
      if (keep.empty()) return bad(ptr, "allOf: no enum value satisfies every schema");
      old = keep;
    } else if ((lower.count(k) || upper.count(k)) && old.is_number() && v.is_number()) {
      const bool lo = lower.count(k) != 0;
      if ((v.get<double>() > old.get<double>()) == lo) old = v;
    } else if ((k == "additionalProperties" || k == "items") && old.is_boolean() &&
               v.is_boolean()) {
      old = old.get<bool>() && v.get<bool>();
    } else if ((k == "additionalProperties" || k == "items") && (old == true || v == false)) {
      old = v;
    } else if ((k == "additionalProperties" || k == "items") && (v == true || old == false)) {
    } else if (k == "additionalProperties" || k == "items") {
      old = SchemaJson{{"allOf", SchemaJson::array({old, v})}};
    } else {
      return bad(ptr, str_cat("allOf: the merged schemas disagree on '", k,
                              "' (only one anyOf/oneOf, pattern, format, const per object)"));
    }
  }
  return a;
}

Result<std::vector<std::string>> schema_types(const SchemaJson& s, const std::string& ptr) {
  static const std::set<std::string> known = {"object", "array", "string", "integer",
                                              "number", "boolean", "null"};
  std::vector<std::string> types;
  if (s.contains("type")) {
    const SchemaJson& t = s["type"];
    types = type_list(t);
    if (types.empty() || (t.is_array() && types.size() != t.size()))
      return bad(child(ptr, "type"), "expected a type name or a list of them");
    for (const std::string& n : types)
      if (known.count(n) == 0) return bad(child(ptr, "type"), str_cat("unknown type '", n, "'"));
    if (std::count(types.begin(), types.end(), "number") != 0)
      types.erase(std::remove(types.begin(), types.end(), "integer"), types.end());
    return types;
  }
  auto any = [&](std::initializer_list<const char*> keys) {
    for (const char* k : keys)
      if (s.contains(k)) return true;
    return false;
  };
  if (any({"properties", "required", "additionalProperties"})) types.push_back("object");
  if (any({"items", "prefixItems", "additionalItems", "minItems", "maxItems"}))
    types.push_back("array");
  if (any({"minLength", "maxLength", "pattern", "format"})) types.push_back("string");
  if (any({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}))
    types.push_back("number");
  if (types.empty()) types = {"object", "array", "string", "number", "boolean", "null"};
  return types;
}

std::optional<std::vector<SchemaJson>> listed_values(const SchemaJson& s) {
  if (!s.is_object()) return std::nullopt;
  if (s.contains("const")) return std::vector<SchemaJson>{s["const"]};
  if (s.contains("enum") && s["enum"].is_array())
    return std::vector<SchemaJson>(s["enum"].begin(), s["enum"].end());
  return std::nullopt;
}

std::string value_type(const SchemaJson& v) {
  if (v.is_number_integer() || v.is_number_unsigned() ||
      (v.is_number_float() && v.get<double>() == std::floor(v.get<double>())))
    return "integer";
  return v.type_name();  // null, boolean, string, object, array, number
}

namespace {

std::set<std::string> types_admitted(const SchemaJson& s) {
  std::set<std::string> out;
  if (auto values = listed_values(s)) {
    for (const SchemaJson& v : *values) out.insert(value_type(v));
  } else if (Result<std::vector<std::string>> t = schema_types(s, ""); t.ok()) {
    out.insert(t->begin(), t->end());
  }
  if (s.value("nullable", false) == true) out.insert("null");
  if (out.count("number")) out.insert("integer");  // an integer is a number too
  return out;
}

}  // namespace

bool schemas_disjoint(const SchemaJson& a, const SchemaJson& b) {
  const std::set<std::string> ta = types_admitted(a), tb = types_admitted(b);
  bool overlap = false;
  for (const std::string& t : ta) overlap = overlap || tb.count(t) != 0;
  if (!overlap) return true;
  auto apart = [](const std::optional<std::vector<SchemaJson>>& x,
                  const std::optional<std::vector<SchemaJson>>& y) {
    if (!x || !y) return false;
    for (const SchemaJson& v : *x)
      if (std::find(y->begin(), y->end(), v) != y->end()) return false;
    return true;
  };
  if (apart(listed_values(a), listed_values(b))) return true;
  if (!a.contains("required") || !b.contains("required") || !a.contains("properties") ||
      !b.contains("properties"))
    return false;
  for (const SchemaJson& name : a["required"]) {
    if (!name.is_string() || std::find(b["required"].begin(), b["required"].end(), name) ==
                                 b["required"].end())
      continue;
    const std::string n = name.get<std::string>();
    if (a["properties"].contains(n) && b["properties"].contains(n) &&
        apart(listed_values(a["properties"][n]), listed_values(b["properties"][n])))
      return true;
  }
  return false;
}

}  // namespace kvcache::text::json_schema
