// Shared by the JSON Schema compiler (json_schema.cpp): the keyword tables, JSON pointer
// spelling and errors, a schema's types and listed values, the allOf merge of two schema
// objects and the oneOf exclusivity test. Layer: text; internal. They work on the schema's
// JSON only (no grammar); references inside stay references.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace kvcache::text::json_schema {

using SchemaJson = nlohmann::ordered_json;  // keeps the client's property order

// Assertions the compiler does not enforce: refused, never ignored.
inline constexpr const char* kUnsupported[] = {
    "patternProperties", "propertyNames", "if", "then", "else", "not", "uniqueItems",
    "multipleOf", "dependentRequired", "dependentSchemas", "dependencies", "minProperties",
    "maxProperties", "contains", "minContains", "maxContains", "unevaluatedProperties",
    "unevaluatedItems", "$dynamicRef", "$recursiveRef"};

// Assertions it enforces (the rest of a schema's keys are annotations or unknown: ignored).
const std::set<std::string>& assertion_keys();
bool has_assertions(const SchemaJson& s);
// "the root" for "", else the pointer.
std::string at(const std::string& ptr);
// ptr + "/" + key with ~0 / ~1 escapes.
std::string child(const std::string& ptr, std::string_view key);
// InvalidArgument "JSON Schema at <ptr>: <what>".
Status bad(const std::string& ptr, const std::string& what);
// "type" as a list of names (a string gives one; non-strings are dropped).
std::vector<std::string> type_list(const SchemaJson& t);

// The types a schema admits: "type" (number covering integer), else those its keywords imply
// (properties -> object, items -> array, minLength -> string, minimum -> number), else all.
// InvalidArgument naming ptr/type for an unknown type name.
Result<std::vector<std::string>> schema_types(const SchemaJson& s, const std::string& ptr);
// const as one value, enum's values; nullopt when the schema lists none.
std::optional<std::vector<SchemaJson>> listed_values(const SchemaJson& s);
// The JSON type of a value ("integer" for an integral number).
std::string value_type(const SchemaJson& v);
// No document can match both (flattened) schemas: their types differ, their listed values
// differ, or a property both require has disjoint listed values. False when unsure.
bool schemas_disjoint(const SchemaJson& a, const SchemaJson& b);

// Both schemas at once (allOf), for what one schema object can say: properties (a shared
// name becomes an allOf), required (union), type and enum (intersection), bounds (the tighter),
// additionalProperties and items (false wins, else allOf); equal values and annotations pass.
// Each side's additionalProperties first governs the properties only the other side declares
// (as in JSON Schema, where it sees only its own object's properties): false makes them false.
// InvalidArgument naming `ptr` when the two disagree otherwise (two anyOf, two patterns, ...).
Result<SchemaJson> merge_schemas(SchemaJson a, const SchemaJson& b, const std::string& ptr);

}  // namespace kvcache::text::json_schema
