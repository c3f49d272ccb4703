// JSON text the way Jinja's tojson filter writes it (Python json.dumps with sort_keys, ", " and
// ": " separators or an indent, ASCII only, and < > & ' as \u escapes), so built-in chat
// templates can match a model's Jinja template byte for byte. Layer: text; internal to the
// chat template renderers. Floats use the shortest round-trip digits (Python's repr for the
// usual values); it does not read JSON.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace kvcache::text {

// indent < 0: one line; else newlines and `indent` spaces per level (",", ": " separators).
std::string py_tojson(const nlohmann::ordered_json& v, int indent = -1);

}  // namespace kvcache::text
