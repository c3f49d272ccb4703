// UTF-8 decoding and Unicode general categories for the tokenizers. Layer: engine.
// Categories come from the generated range table (unicode_tables.h, Unicode 14); White_Space
// is the published property list. Invalid UTF-8 decodes one byte at a time to U+FFFD so that
// every byte of the input belongs to exactly one code point. No normalization, no case folding.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvcache::text {

// Mirrors the codes written by scripts/gen_unicode_tables.py.
enum class UnicodeCat : uint8_t {
  kUnassigned = 0, kLu = 1, kLl = 2, kLt = 3, kLm = 4, kLo = 5, kMark = 6, kNumber = 7,
  kPunct = 8, kSymbol = 9, kSeparator = 10, kOther = 11,
};

UnicodeCat unicode_cat(uint32_t cp);  // O(log ranges)
inline bool is_letter(UnicodeCat c) { return c >= UnicodeCat::kLu && c <= UnicodeCat::kLo; }
bool is_white_space(uint32_t cp);     // the Unicode White_Space property (regex \s)

// Length of the UTF-8 sequence a lead byte announces (1 for a stray continuation byte).
size_t utf8_len(unsigned char lead);
std::string utf8_encode(uint32_t cp);
std::string hex_byte(uint8_t b);  // "0x41": for messages naming a byte

// Code points of `text` with the byte offset where each starts (offsets.size() = cps.size()+1,
// the last entry = text.size()).
struct CodePoints {
  std::vector<uint32_t> cps;
  std::vector<uint32_t> offsets;
};
CodePoints utf8_decode(std::string_view text);

}  // namespace kvcache::text
