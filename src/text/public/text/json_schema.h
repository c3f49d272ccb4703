// JSON Schema -> a grammar of the compact JSON documents that validate against it, for
// constrained decoding (docs/server.md, "Structured output", lists the subset). Layer: text.
// Supported: type (and lists), properties, required, additionalProperties, enum, const,
// items, prefixItems, minItems/maxItems, minLength/maxLength, minimum/maximum/exclusive*,
// anyOf/oneOf (as alternatives), allOf (merged), $ref (local pointers, recursion),
// format date/time/date-time/uuid/email, pattern (a regex subset), nullable. Annotations and
// keywords outside the vocabulary are ignored; an assertion keyword it does not enforce is an
// error naming the keyword and its JSON pointer. The grammar may generate a subset of the
// valid documents (properties in schema order, no whitespace), never an invalid one.
#pragma once

#include <memory>
#include <string_view>

#include "core/status.h"
#include "text/grammar.h"

namespace kvcache::engine {

// InvalidArgument with a message such as "unsupported JSON Schema keyword 'uniqueItems' at
// /properties/tags", "schema is not valid JSON: ..." or "... at /items: minItems 3 >
// maxItems 2". The pointer is "/"-separated with ~0/~1 escapes; the root reads "at the root".
Result<std::shared_ptr<const Grammar>> compile_json_schema(std::string_view schema_json);

// Any JSON object (response_format {"type": "json_object"}): compact, any nesting.
std::shared_ptr<const Grammar> json_object_grammar();

// Any JSON value.
std::shared_ptr<const Grammar> json_value_grammar();

}  // namespace kvcache::engine
