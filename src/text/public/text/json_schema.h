// JSON Schema -> a grammar of the compact JSON documents that validate against it, for
// constrained decoding. Layer: text. The supported subset (type, properties, required,
// additionalProperties, enum/const, items/prefixItems, counts, lengths, bounds, anyOf/oneOf/
// allOf, local $ref with recursion, five formats, a regex subset, nullable) is listed in
// docs/server.md. It may generate fewer documents than the schema admits, never one it
// rejects; an assertion it cannot enforce is an error naming the keyword and JSON pointer.
#pragma once

#include <memory>
#include <string_view>

#include "core/status.h"
#include "text/grammar.h"

namespace kvcache::text {

// InvalidArgument with a message such as "unsupported JSON Schema keyword 'uniqueItems' at
// /properties/tags", "schema is not valid JSON: ..." or "... at /items: minItems 3 >
// maxItems 2". The pointer is "/"-separated with ~0/~1 escapes; the root reads "at the root".
// Thread-safe; the same schema text (one of the last 16 compiled, up to 64 KB) returns the
// same grammar object.
Result<std::shared_ptr<const Grammar>> compile_json_schema(std::string_view schema_json);

// Any JSON object (response_format {"type": "json_object"}): compact, any nesting.
std::shared_ptr<const Grammar> json_object_grammar();

// Any JSON value.
std::shared_ptr<const Grammar> json_value_grammar();

}  // namespace kvcache::text
