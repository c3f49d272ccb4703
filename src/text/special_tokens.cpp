#include "text/special_tokens.h"

#include <algorithm>

namespace kvcache::server {

SpecialTokens::SpecialTokens(std::vector<std::pair<std::string, int32_t>> tokens)
    : tokens_(std::move(tokens)) {
  std::erase_if(tokens_, [](const auto& t) { return t.first.empty(); });
  std::stable_sort(tokens_.begin(), tokens_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

SpecialTokens SpecialTokens::from_gguf(const gguf::GgufFile* file) {
  if (file == nullptr) return SpecialTokens();
  Result<std::vector<std::string>> names = file->get_string_array("tokenizer.ggml.tokens");
  Result<std::vector<int64_t>> types = file->get_int_array("tokenizer.ggml.token_type");
  if (!names.ok() || !types.ok() || names->size() != types->size()) return SpecialTokens();
  std::vector<std::pair<std::string, int32_t>> specials;
  for (size_t i = 0; i < names->size(); ++i)
    if ((*types)[i] == 3 || (*types)[i] == 4)  // control, user-defined
      specials.emplace_back((*names)[i], static_cast<int32_t>(i));
  return SpecialTokens(std::move(specials));
}

Result<std::vector<int32_t>> SpecialTokens::encode(
    const engine::Tokenizer& tokenizer, std::string_view text,
    std::span<const std::pair<size_t, size_t>> plain) const {
  std::vector<int32_t> out;
  auto add_text = [&](std::string_view part) -> Status {
    if (part.empty()) return ok_status();
    // Plain text between the specials matched here: no BOS/EOS, no special-token parsing.
    engine::EncodeOptions o;
    o.add_special = false;
    o.parse_special = false;
    Result<std::vector<int32_t>> ids = tokenizer.encode(part, o);
    if (!ids.ok()) return ids.status();
    out.insert(out.end(), ids->begin(), ids->end());
    return ok_status();
  };
  // One pass; a position is tried only when some spelling starts with its byte.
  bool first[256] = {};
  for (const auto& t : tokens_) first[static_cast<uint8_t>(t.first[0])] = true;
  size_t from = 0, range = 0;  // range: the first plain range not wholly before `at`
  for (size_t at = 0; at < text.size(); ++at) {
    if (!first[static_cast<uint8_t>(text[at])]) continue;
    while (range < plain.size() && plain[range].second <= at) ++range;
    const size_t next_plain = range < plain.size() ? plain[range].first : text.size();
    if (next_plain <= at) continue;  // inside message content
    for (const auto& t : tokens_) {  // longest first
      if (at + t.first.size() > next_plain || text.compare(at, t.first.size(), t.first) != 0)
        continue;
      KVCACHE_RETURN_IF_ERROR(add_text(text.substr(from, at - from)));
      out.push_back(t.second);
      from = at + t.first.size();
      at = from - 1;
      break;
    }
  }
  KVCACHE_RETURN_IF_ERROR(add_text(text.substr(from)));
  return out;
}

}  // namespace kvcache::server
