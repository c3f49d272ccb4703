// See flag_names.h.
#include "flag_names.h"

namespace kvcache::tools {
namespace {

bool names_field(std::string_view m, std::string_view field) {
  for (size_t at = m.find(field); at != std::string_view::npos; at = m.find(field, at + 1)) {
    const bool starts = at == 0 || m[at - 1] == ' ';
    const std::string_view rest = m.substr(at + field.size());
    if (starts && (rest.starts_with(" =") || rest.starts_with("[") || rest.starts_with(":")))
      return true;
  }
  return false;
}

}  // namespace

std::string flag_message(const Status& s,
                         std::initializer_list<std::span<const FieldFlag>> tables) {
  for (std::span<const FieldFlag> table : tables)
    for (const FieldFlag& f : table)
      if (names_field(s.message(), f.field)) return std::string(f.flag) + ": " + s.message();
  return s.message();
}

}  // namespace kvcache::tools
