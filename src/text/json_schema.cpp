// The JSON Schema compiler: schema -> grammar rules. See json_schema.h; the lexemes are in
// json_grammar_parts.cpp, the pattern subset in json_regex.cpp.
#include "text/json_schema.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <mutex>
#include <map>
#include <optional>
#include <set>

#include "core/str_cat.h"
#include "text/json_grammar_parts.h"
#include "text/json_schema_merge.h"

namespace kvcache::text {
namespace {

using namespace json_schema;
using json = SchemaJson;

constexpr int kMaxMergeDepth = 32;
constexpr int kMaxDepth = 256;  // subschemas inside subschemas (bounds the compiler's stack)

class SchemaCompiler {
 public:
  explicit SchemaCompiler(const json& root)
      : root_(root), g_(std::make_shared<Grammar>()), parts_(*g_) {}

  Result<std::shared_ptr<const Grammar>> run() {
    KVCACHE_ASSIGN_OR_RETURN(const int32_t r, compile(root_, ""));
    g_->set_root(r);
    KVCACHE_RETURN_IF_ERROR_CTX(g_->check(), "JSON Schema");
    return std::shared_ptr<const Grammar>(g_);
  }

 private:
  Result<int32_t> compile(const json& s, const std::string& ptr) {
    if (depth_ >= kMaxDepth)
      return bad(ptr, str_cat("subschemas nest deeper than ", kMaxDepth));
    ++depth_;
    Result<int32_t> r = compile_at_depth(s, ptr);
    --depth_;
    return r;
  }

  Result<int32_t> compile_at_depth(const json& s, const std::string& ptr) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return parts_.value();
      return bad(ptr, "the schema false admits no value");
    }
    if (!s.is_object())
      return bad(ptr, str_cat("the schema is ", s.type_name(), ", expected an object or a boolean"));
    for (const char* k : kUnsupported)
      if (s.contains(k))
        return invalid_argument(str_cat("unsupported JSON Schema keyword '", k, "' at ", at(ptr)));
    if (s.contains("allOf") || (s.contains("$ref") && has_assertions(without(s, "$ref")))) {
      KVCACHE_ASSIGN_OR_RETURN(json flat, flatten(s, ptr, 0));
      return compile(flat, ptr);
    }
    if (s.contains("$ref")) return ref_rule(s["$ref"], child(ptr, "$ref"));
    if (s.contains("anyOf") || s.contains("oneOf")) return alternatives(s, ptr);
    std::vector<GrammarSeq> alts;
    if (s.contains("const") || s.contains("enum")) {
      KVCACHE_ASSIGN_OR_RETURN(std::vector<json> values, enum_values(s, ptr));
      for (const json& v : values) alts.push_back({Grammar::ref(g_->literal_rule(v.dump()))});
    } else {
      KVCACHE_ASSIGN_OR_RETURN(std::vector<std::string> types, schema_types(s, ptr));
      for (const std::string& t : types) {
        KVCACHE_ASSIGN_OR_RETURN(const int32_t r, typed(s, t, ptr));
        alts.push_back({Grammar::ref(r)});
      }
    }
    if (s.contains("nullable") && !s["nullable"].is_boolean())
      return bad(child(ptr, "nullable"), "expected a boolean");
    if (s.value("nullable", false)) alts.push_back({Grammar::ref(parts_.null())});
    return g_->rule_of(str_cat("schema ", at(ptr)), std::move(alts));
  }

  // const / enum values, those of the schema's type when it has one. Beside them only type
  // and nullable are checked: another assertion (minLength, pattern, ...) is refused rather
  // than left unchecked against the values.
  Result<std::vector<json>> enum_values(const json& s, const std::string& ptr) {
    const char* key = s.contains("const") ? "const" : "enum";
    if (!s.contains("const") && (!s["enum"].is_array() || s["enum"].empty()))
      return bad(child(ptr, "enum"), "expected a non-empty list");
    for (const auto& [k, v] : s.items())
      if (assertion_keys().count(k) != 0 && k != "const" && k != "enum" && k != "type" &&
          k != "nullable")
        return bad(ptr, str_cat("'", k, "' beside '", key, "' is not supported"));
    std::vector<json> values = *listed_values(s);
    if (s.contains("const") && s.contains("enum") &&
        (!s["enum"].is_array() ||
         std::find(s["enum"].begin(), s["enum"].end(), s["const"]) == s["enum"].end()))
      return bad(ptr, "the 'const' value is not among the 'enum' values");
    if (s.contains("type")) {
      KVCACHE_ASSIGN_OR_RETURN(std::vector<std::string> types, schema_types(s, ptr));
      std::set<std::string> ok(types.begin(), types.end());
      if (ok.count("number")) ok.insert("integer");
      std::erase_if(values, [&](const json& v) { return ok.count(value_type(v)) == 0; });
      if (values.empty()) return bad(ptr, str_cat("no '", key, "' value has the schema's type"));
    }
    return values;
  }

  static json without(const json& s, const char* key) {
    json out = s;
    out.erase(key);
    return out;
  }

  Result<int32_t> typed(const json& s, const std::string& t, const std::string& ptr) {
    if (t == "object") return object(s, ptr);
    if (t == "array") return array(s, ptr);
    if (t == "string") return string(s, ptr);
    if (t == "integer" || t == "number") return number(s, ptr, t == "integer");
    if (t == "boolean") return parts_.boolean();
    return parts_.null();
  }

  // A local reference ("#", "#/$defs/x", "#/definitions/x", any "#/..." pointer).
  Result<const json*> resolve(const json& ref, const std::string& ptr) {
    if (!ref.is_string()) return bad(ptr, "$ref must be a string");
    const std::string r = ref.get<std::string>();
    if (r.empty() || r[0] != '#')
      return bad(ptr, str_cat("$ref '", r, "' is not a local reference (\"#...\")"));
    const json* at_node = &root_;
    size_t i = 1;
    while (i < r.size()) {
      if (r[i] != '/') return bad(ptr, str_cat("$ref '", r, "' is not a JSON pointer"));
      size_t j = r.find('/', i + 1);
      if (j == std::string::npos) j = r.size();
      std::string tok = r.substr(i + 1, j - i - 1), key;
      for (size_t k = 0; k < tok.size(); ++k) {
        if (tok[k] == '~' && k + 1 < tok.size()) key += tok[++k] == '1' ? '/' : '~';
        else key += tok[k];
      }
      if (at_node->is_object() && at_node->contains(key)) {
        at_node = &(*at_node)[key];
      } else if (at_node->is_array() && !key.empty() &&
                 key.find_first_not_of("0123456789") == std::string::npos &&
                 std::stoul(key) < at_node->size()) {
        at_node = &(*at_node)[std::stoul(key)];
      } else {
        return bad(ptr, str_cat("$ref '", r, "' points at nothing"));
      }
      i = j;
    }
    return at_node;
  }

  Result<int32_t> ref_rule(const json& ref, const std::string& ptr) {
    KVCACHE_ASSIGN_OR_RETURN(const json* target, resolve(ref, ptr));
    const std::string key = ref.get<std::string>();
    if (auto it = refs_.find(key); it != refs_.end()) return it->second;
    const int32_t r = g_->add_rule("ref " + key);  // before the body: it may refer back
    refs_.emplace(key, r);
    KVCACHE_ASSIGN_OR_RETURN(const int32_t body, compile(*target, key.substr(1)));
    g_->add_alt(r, {Grammar::ref(body)});
    return r;
  }

  // The schema with its top-level $ref and allOf merged in (the references inside stay).
  Result<json> flatten(const json& s, const std::string& ptr, int depth) {
    if (depth > kMaxMergeDepth)
      return bad(ptr, str_cat("allOf/$ref nest deeper than ", kMaxMergeDepth, " (a cycle?)"));
    if (s.is_boolean()) {
      if (s.get<bool>()) return json::object();
      return bad(ptr, "the schema false admits no value");
    }
    if (!s.is_object()) return bad(ptr, "expected a schema object");
    for (const char* k : kUnsupported)
      if (s.contains(k))
        return invalid_argument(str_cat("unsupported JSON Schema keyword '", k, "' at ", at(ptr)));
    json out = s;
    out.erase("allOf");
    out.erase("$ref");
    if (s.contains("$ref")) {
      KVCACHE_ASSIGN_OR_RETURN(const json* target, resolve(s["$ref"], child(ptr, "$ref")));
      KVCACHE_ASSIGN_OR_RETURN(json t, flatten(*target, s["$ref"].get<std::string>().substr(1), depth + 1));
      KVCACHE_ASSIGN_OR_RETURN(out, merge_schemas(std::move(out), t, ptr));
    }
    if (s.contains("allOf")) {
      const json& all = s["allOf"];
      if (!all.is_array() || all.empty()) return bad(child(ptr, "allOf"), "expected a non-empty list");
      for (size_t i = 0; i < all.size(); ++i) {
        const std::string p = child(child(ptr, "allOf"), std::to_string(i));
        KVCACHE_ASSIGN_OR_RETURN(json f, flatten(all[i], p, depth + 1));
        KVCACHE_ASSIGN_OR_RETURN(out, merge_schemas(std::move(out), f, p));
      }
    }
    return out;
  }

  Result<int32_t> alternatives(const json& s, const std::string& ptr) {
    if (s.contains("anyOf") && s.contains("oneOf"))
      return bad(ptr, "anyOf and oneOf in one schema");
    const char* key = s.contains("anyOf") ? "anyOf" : "oneOf";
    const json& list = s[key];
    if (!list.is_array() || list.empty()) return bad(child(ptr, key), "expected a non-empty list");
    const json rest = without(s, key);
    const bool merge_rest = has_assertions(rest);
    if (std::string_view(key) == "oneOf") KVCACHE_RETURN_IF_ERROR(check_exclusive(list, rest, ptr));
    std::vector<GrammarSeq> alts;
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string p = child(child(ptr, key), std::to_string(i));
      int32_t r;
      if (merge_rest) {
        KVCACHE_ASSIGN_OR_RETURN(json a, flatten(rest, ptr, 0));
        KVCACHE_ASSIGN_OR_RETURN(json b, flatten(list[i], p, 0));
        KVCACHE_ASSIGN_OR_RETURN(json m, merge_schemas(std::move(a), b, p));
        KVCACHE_ASSIGN_OR_RETURN(r, compile(m, p));
      } else {
        KVCACHE_ASSIGN_OR_RETURN(r, compile(list[i], p));
      }
      alts.push_back({Grammar::ref(r)});
    }
    return g_->rule_of(str_cat(key, " ", at(ptr)), std::move(alts));
  }

  // oneOf is enforced as alternatives, which is sound only when no document matches two
  // branches: refused unless every two branches differ in type or in the const/enum values
  // of a property both require (a discriminator).
  Status check_exclusive(const json& list, const json& rest, const std::string& ptr) {
    std::vector<json> flat;
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string p = child(child(ptr, "oneOf"), std::to_string(i));
      KVCACHE_ASSIGN_OR_RETURN(json a, flatten(rest, ptr, 0));
      KVCACHE_ASSIGN_OR_RETURN(json b, flatten(list[i], p, 0));
      KVCACHE_ASSIGN_OR_RETURN(json m, merge_schemas(std::move(a), b, p));
      flat.push_back(std::move(m));
    }
    for (size_t i = 0; i < flat.size(); ++i)
      for (size_t j = i + 1; j < flat.size(); ++j)
        if (!schemas_disjoint(flat[i], flat[j]))
          return bad(child(ptr, "oneOf"),
                     str_cat("branches ", i, " and ", j, " may both match (oneOf is enforced "
                             "only between branches of different types or with a required "
                             "property of different const/enum values; anyOf is not "
                             "exclusive)"));
    return ok_status();
  }

  Result<int64_t> count(const json& s, const char* key, const std::string& ptr, int64_t dflt) {
    if (!s.contains(key)) return dflt;
    const json& v = s[key];
    if (!v.is_number() || v.get<double>() < 0 || v.get<double>() != std::floor(v.get<double>()) ||
        v.get<double>() > 1e6)
      return bad(child(ptr, key), str_cat("expected an integer in [0, 1000000], got ", v.dump()));
    return static_cast<int64_t>(v.get<double>());
  }

  Result<int32_t> object(const json& s, const std::string& ptr) {
    const json empty = json::object();
    const json& props = s.contains("properties") ? s["properties"] : empty;
    if (!props.is_object()) return bad(child(ptr, "properties"), "expected an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return bad(child(ptr, "required"), "expected a list of names");
      for (const json& n : s["required"]) {
        if (!n.is_string()) return bad(child(ptr, "required"), "expected a list of names");
        required.insert(n.get<std::string>());
      }
    }
    struct Prop {
      std::string name;
      int32_t value;
      bool required;
    };
    std::vector<Prop> list;
    std::vector<std::string> names;
    for (const auto& [name, ps] : props.items()) {
      names.push_back(name);
      const std::string p = child(child(ptr, "properties"), name);
      if (ps.is_boolean() && !ps.get<bool>()) {
        if (required.count(name)) return bad(p, "a required property whose schema is false");
        continue;
      }
      KVCACHE_ASSIGN_OR_RETURN(const int32_t v, compile(ps, p));
      list.push_back({name, v, required.count(name) != 0});
    }
    // Required but not declared: additionalProperties governs its value.
    for (const std::string& name : required) {
      if (props.contains(name)) continue;
      const json ap = s.contains("additionalProperties") ? s["additionalProperties"] : json(true);
      if (ap == false)
        return bad(ptr, str_cat("required property '", name, "' is not declared and "
                                "additionalProperties is false"));
      KVCACHE_ASSIGN_OR_RETURN(const int32_t v, compile(ap, child(ptr, "additionalProperties")));
      names.push_back(name);
      list.push_back({name, v, true});
    }
    // Extra properties: generated only when additionalProperties allows them explicitly, or
    // when nothing is declared (then absent means any object).
    std::optional<int32_t> extra;
    if (s.contains("additionalProperties")) {
      const json& ap = s["additionalProperties"];
      if (!(ap.is_boolean() && !ap.get<bool>())) {
        KVCACHE_ASSIGN_OR_RETURN(const int32_t v, compile(ap, child(ptr, "additionalProperties")));
        extra = v;
      }
    } else if (names.empty()) {
      extra = parts_.value();
    }
    const auto n = static_cast<int32_t>(list.size());
    std::vector<int32_t> first(n + 1), after(n + 1);  // F_i: nothing written yet; A_i: some
    if (extra) {
      const int32_t key = names.empty() ? parts_.string_any() : parts_.key_excluding(names);
      const int32_t x = g_->rule_of("extra_member", {{Grammar::ref(key), g_->byte(':'), Grammar::ref(*extra)}});
      const int32_t cx = g_->rule_of("more_extra", {{g_->byte(','), Grammar::ref(x)}});
      first[n] = g_->rule_of("extras", {{}, {Grammar::ref(x), Grammar::repeat(cx, 0, -1)}});
      after[n] = g_->rule_of("more_extras", {{Grammar::repeat(cx, 0, -1)}});
    } else {
      first[n] = after[n] = g_->rule_of("no_extras", {{}});
    }
    for (int32_t i = n - 1; i >= 0; --i) {
      GrammarSeq kv = g_->literal(json(list[i].name).dump() + ":");
      kv.push_back(Grammar::ref(list[i].value));
      const int32_t member = g_->rule_of("member " + list[i].name, {kv});
      std::vector<GrammarSeq> f = {{Grammar::ref(member), Grammar::ref(after[i + 1])}};
      std::vector<GrammarSeq> a = {{g_->byte(','), Grammar::ref(member), Grammar::ref(after[i + 1])}};
      if (!list[i].required) {
        f.push_back({Grammar::ref(first[i + 1])});
        a.push_back({Grammar::ref(after[i + 1])});
      }
      first[i] = g_->rule_of("members", std::move(f));
      after[i] = g_->rule_of("more_members", std::move(a));
    }
    return g_->rule_of(str_cat("object ", at(ptr)),
                       {{g_->byte('{'), Grammar::ref(first[0]), g_->byte('}')}});
  }

  Result<int32_t> array(const json& s, const std::string& ptr) {
    const json* prefix = nullptr;
    const json* rest = nullptr;
    std::string prefix_key = "prefixItems", rest_key = "items";
    if (s.contains("prefixItems")) {
      prefix = &s["prefixItems"];
      if (s.contains("items")) rest = &s["items"];
    } else if (s.contains("items") && s["items"].is_array()) {
      prefix = &s["items"];
      prefix_key = "items";
      rest_key = "additionalItems";
      if (s.contains("additionalItems")) rest = &s["additionalItems"];
    } else if (s.contains("items")) {
      rest = &s["items"];
    }
    if (prefix != nullptr && !prefix->is_array()) return bad(child(ptr, prefix_key), "expected a list");
    KVCACHE_ASSIGN_OR_RETURN(const int64_t min, count(s, "minItems", ptr, 0));
    KVCACHE_ASSIGN_OR_RETURN(const int64_t max, count(s, "maxItems", ptr, -1));
    if (max >= 0 && min > max) return bad(ptr, str_cat("minItems ", min, " > maxItems ", max));
    std::vector<int32_t> items;
    if (prefix != nullptr)
      for (size_t i = 0; i < prefix->size(); ++i) {
        KVCACHE_ASSIGN_OR_RETURN(const int32_t r, compile((*prefix)[i], child(child(ptr, prefix_key), std::to_string(i))));
        items.push_back(r);
      }
    const auto k = static_cast<int64_t>(items.size());
    // Items after the prefix: absent means any value without a prefix, none after one.
    std::optional<int32_t> more;
    if (rest != nullptr && !(rest->is_boolean() && !rest->get<bool>())) {
      KVCACHE_ASSIGN_OR_RETURN(const int32_t r, compile(*rest, child(ptr, rest_key)));
      more = r;
    } else if (rest == nullptr && prefix == nullptr) {
      more = parts_.value();
    }
    std::vector<GrammarSeq> tail;
    if (more && (max < 0 || k < max)) {
      const int32_t cr = g_->rule_of("more_items", {{g_->byte(','), Grammar::ref(*more)}});
      const auto lo = static_cast<int32_t>(std::max<int64_t>(0, min - k - (k == 0 ? 1 : 0)));
      const auto hi = static_cast<int32_t>(max < 0 ? -1 : max - k - (k == 0 ? 1 : 0));
      if (k == 0) {
        if (min == 0) tail.push_back({});
        tail.push_back({Grammar::ref(*more), Grammar::repeat(cr, lo, hi)});
      } else {
        tail.push_back({Grammar::repeat(cr, lo, hi)});
      }
    } else {
      if (min > k)
        return bad(ptr, str_cat("minItems ", min, " needs more items than the ", k,
                                " that the schema allows"));
      tail.push_back({});
    }
    int32_t next = g_->rule_of("items_tail", std::move(tail));
    for (int64_t i = k - 1; i >= 0; --i) {
      std::vector<GrammarSeq> alts;
      if (i >= min) alts.push_back({});
      if (max < 0 || i < max) {
        GrammarSeq seq;
        if (i > 0) seq.push_back(g_->byte(','));
        seq.push_back(Grammar::ref(items[i]));
        seq.push_back(Grammar::ref(next));
        alts.push_back(std::move(seq));
      }
      next = g_->rule_of(str_cat("items_from_", i), std::move(alts));
    }
    return g_->rule_of(str_cat("array ", at(ptr)), {{g_->byte('['), Grammar::ref(next), g_->byte(']')}});
  }

  Result<int32_t> string(const json& s, const std::string& ptr) {
    if (s.contains("format") && s["format"].is_string())
      if (auto f = parts_.format(s["format"].get<std::string>())) {  // others: annotations
        for (const char* k : {"pattern", "minLength", "maxLength"})
          if (s.contains(k))
            return bad(ptr, str_cat("'", k, "' together with format '",
                                    s["format"].get<std::string>(), "' is not supported"));
        return *f;
      }
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) return bad(child(ptr, "pattern"), "expected a string");
      if (s.contains("minLength") || s.contains("maxLength"))
        return bad(ptr, "'pattern' together with 'minLength'/'maxLength' is not supported");
      Result<int32_t> r = parts_.pattern(s["pattern"].get<std::string>());
      if (!r.ok()) return bad(child(ptr, "pattern"), r.status().message());
      return r;
    }
    KVCACHE_ASSIGN_OR_RETURN(const int64_t min, count(s, "minLength", ptr, 0));
    KVCACHE_ASSIGN_OR_RETURN(const int64_t max, count(s, "maxLength", ptr, -1));
    if (max >= 0 && min > max) return bad(ptr, str_cat("minLength ", min, " > maxLength ", max));
    return parts_.string_sized(static_cast<int32_t>(min), static_cast<int32_t>(max));
  }

  Result<int32_t> number(const json& s, const std::string& ptr, bool integer) {
    std::optional<double> lo, hi;
    bool lo_excl = false, hi_excl = false;
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
      if (s.contains(k) && !s[k].is_number() && !s[k].is_boolean())
        return bad(child(ptr, k), "expected a number");
    if (s.contains("minimum") && s["minimum"].is_number()) lo = s["minimum"].get<double>();
    if (s.contains("maximum") && s["maximum"].is_number()) hi = s["maximum"].get<double>();
    if (s.contains("exclusiveMinimum")) {
      const json& e = s["exclusiveMinimum"];
      if (e.is_boolean()) lo_excl = e.get<bool>() && lo;  // draft 4: modifies minimum
      else if (!lo || e.get<double>() >= *lo) lo = e.get<double>(), lo_excl = true;
    }
    if (s.contains("exclusiveMaximum")) {
      const json& e = s["exclusiveMaximum"];
      if (e.is_boolean()) hi_excl = e.get<bool>() && hi;
      else if (!hi || e.get<double>() <= *hi) hi = e.get<double>(), hi_excl = true;
    }
    Result<int32_t> r = 0;
    if (integer) {
      std::optional<int64_t> ilo, ihi;
      if (lo && std::isfinite(*lo) && std::fabs(*lo) <= 2e18)
        ilo = static_cast<int64_t>(lo_excl ? std::floor(*lo) + 1 : std::ceil(*lo));
      else if (lo) return bad(child(ptr, "minimum"), "beyond the supported +-1e18");
      if (hi && std::isfinite(*hi) && std::fabs(*hi) <= 2e18)
        ihi = static_cast<int64_t>(hi_excl ? std::ceil(*hi) - 1 : std::floor(*hi));
      else if (hi) return bad(child(ptr, "maximum"), "beyond the supported +-1e18");
      r = parts_.integer_range(ilo, ihi);
    } else if (!lo && !hi) {
      return parts_.number_any();
    } else {
      r = parts_.number_range(lo, lo_excl, hi, hi_excl);
    }
    if (!r.ok()) return bad(ptr, r.status().message());
    return r;
  }

  const json& root_;
  std::shared_ptr<Grammar> g_;
  JsonGrammarParts parts_;
  std::map<std::string, int32_t> refs_;  // "$ref" string -> its rule
  int depth_ = 0;                         // compile() calls in progress
};

}  // namespace

Result<std::shared_ptr<const Grammar>> compile_json_schema(std::string_view schema_json) {
  // The last few grammars by schema text: a client that repeats its schema gets the same
  // grammar, so the executor's matcher and mask cache carry over between its requests.
  constexpr size_t kRecent = 16;
  static std::mutex mu;
  static std::deque<std::pair<std::string, std::shared_ptr<const Grammar>>> recent;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (auto it = recent.begin(); it != recent.end(); ++it)
      if (it->first == schema_json) {
        auto hit = *it;
        recent.erase(it);
        recent.push_front(hit);
        return hit.second;
      }
  }
  const json root = json::parse(schema_json, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return invalid_argument("JSON Schema: the schema is not valid JSON");
  Result<std::shared_ptr<const Grammar>> g = SchemaCompiler(root).run();
  if (g.ok() && schema_json.size() <= (size_t{64} << 10)) {
    std::lock_guard<std::mutex> lock(mu);
    recent.emplace_front(std::string(schema_json), *g);
    if (recent.size() > kRecent) recent.pop_back();
  }
  return g;
}

std::shared_ptr<const Grammar> json_object_grammar() {
  static const std::shared_ptr<const Grammar> g = [] {
    auto out = std::make_shared<Grammar>();
    JsonGrammarParts parts(*out);
    out->set_root(parts.object_any());
    return out;
  }();
  return g;
}

std::shared_ptr<const Grammar> json_value_grammar() {
  static const std::shared_ptr<const Grammar> g = [] {
    auto out = std::make_shared<Grammar>();
    JsonGrammarParts parts(*out);
    out->set_root(parts.value());
    return out;
  }();
  return g;
}

}  // namespace kvcache::text
