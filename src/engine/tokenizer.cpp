// Raw-byte and GPT-2 byte-level BPE tokenizers. See tokenizer.h.
//
// The pre-tokenizer approximates GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// by byte classes: ASCII letters and every byte >= 0x80 count as letters (so UTF-8 words stay
// whole), ASCII digits as numbers, space/tab/newline/CR/VT/FF as whitespace, the rest as
// punctuation. A whitespace run followed by a non-space leaves its last space to the next piece.
#include "engine/tokenizer.h"

#include <climits>
#include <utility>

namespace kvcache::engine {
namespace {

enum class Cls { kLetter, kDigit, kSpace, kOther };

Cls classify(unsigned char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80) return Cls::kLetter;
  if (c >= '0' && c <= '9') return Cls::kDigit;
  if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f')
    return Cls::kSpace;
  return Cls::kOther;
}

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// Code point of the alphabet's character for byte b (GPT-2: printable bytes map to
// themselves, the rest to 256, 257, ... in byte order).
uint32_t alphabet_cp(uint8_t b) {
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
  if (printable) return b;
  uint32_t n = 0;
  for (uint32_t x = 0; x < b; ++x) {
    const bool p = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE;
    if (!p) ++n;
  }
  return 256 + n;
}

// Reverse map: UTF-8 of an alphabet character -> byte.
const std::unordered_map<std::string, uint8_t>& unicode_to_byte() {
  static const auto* map = [] {
    auto* m = new std::unordered_map<std::string, uint8_t>();
    for (int b = 0; b < 256; ++b) (*m)[byte_to_unicode(static_cast<uint8_t>(b))] = static_cast<uint8_t>(b);
    return m;
  }();
  return *map;
}

// Length of the UTF-8 sequence starting with byte c (1 for invalid lead bytes).
size_t utf8_len(unsigned char c) {
  if (c >= 0xF0 && c < 0xF8) return 4;
  if (c >= 0xE0) return c < 0xF0 ? 3 : 1;
  if (c >= 0xC0) return 2;
  return 1;
}

}  // namespace

std::string byte_to_unicode(uint8_t b) { return utf8(alphabet_cp(b)); }

std::vector<std::string_view> pretokenize(std::string_view text) {
  std::vector<std::string_view> out;
  const size_t n = text.size();
  size_t i = 0;
  auto cls = [&](size_t k) { return classify(static_cast<unsigned char>(text[k])); };
  while (i < n) {
    const size_t start = i;
    if (text[i] == '\'' && i + 1 < n) {  // contractions
      static constexpr std::string_view kSuffixes[] = {"re", "ve", "ll", "s", "t", "m", "d"};
      bool hit = false;
      for (std::string_view s : kSuffixes)
        if (text.substr(i + 1, s.size()) == s) {
          out.push_back(text.substr(i, 1 + s.size()));
          i += 1 + s.size();
          hit = true;
          break;
        }
      if (hit) continue;
    }
    size_t j = i;
    if (text[j] == ' ' && j + 1 < n && cls(j + 1) != Cls::kSpace) ++j;  // optional space
    const Cls c = cls(j);
    if (c == Cls::kSpace) {
      while (j < n && cls(j) == Cls::kSpace) ++j;
      // \s+(?!\S): leave the last space for the following word.
      if (j < n && j - start > 1) --j;
      out.push_back(text.substr(start, j - start));
      i = j;
      continue;
    }
    while (j < n && cls(j) == c) ++j;
    out.push_back(text.substr(start, j - start));
    i = j;
  }
  return out;
}

Tokenizer Tokenizer::bytes() { return Tokenizer(); }

Result<Tokenizer> Tokenizer::bpe(std::vector<std::string> tokens,
                                 const std::vector<std::string>& merges) {
  Tokenizer t;
  t.kind_ = Kind::kBpe;
  for (size_t i = 0; i < tokens.size(); ++i)
    t.ids_.emplace(tokens[i], static_cast<int32_t>(i));  // first spelling wins
  t.tokens_ = std::move(tokens);
  for (size_t r = 0; r < merges.size(); ++r) {
    const size_t sp = merges[r].find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 >= merges[r].size())
      return invalid_argument("tokenizer: tokenizer.ggml.merges[" + std::to_string(r) +
                              "] = \"" + merges[r] + "\", expected \"left right\"");
    t.merge_rank_.emplace(merges[r], static_cast<int32_t>(r));
  }
  return t;
}

Result<Tokenizer> Tokenizer::from_gguf(const gguf::GgufFile& file, int32_t vocab) {
  Result<std::string> model = file.get_string("tokenizer.ggml.model");
  if (!model.ok()) {
    if (model.status().code() != StatusCode::kNotFound) return model.status();
    if (vocab < 256)
      return invalid_argument("tokenizer: raw-byte tokens need vocab >= 256, the model has " +
                              std::to_string(vocab));
    return bytes();
  }
  if (*model != "gpt2")
    return invalid_argument("tokenizer: tokenizer.ggml.model = \"" + *model +
                            "\" is not supported, expected \"gpt2\" (or no key for raw bytes)");
  Result<std::vector<std::string>> tokens = file.get_string_array("tokenizer.ggml.tokens");
  if (!tokens.ok()) return Status(tokens.status().code(), "tokenizer: " + tokens.status().message());
  if (tokens->size() > static_cast<size_t>(vocab))
    return invalid_argument("tokenizer: tokenizer.ggml.tokens has " +
                            std::to_string(tokens->size()) + " entries, the model's vocab is " +
                            std::to_string(vocab));
  std::vector<std::string> merges;
  Result<std::vector<std::string>> m = file.get_string_array("tokenizer.ggml.merges");
  if (m.ok()) merges = std::move(*m);
  else if (m.status().code() != StatusCode::kNotFound) return m.status();
  return bpe(std::move(*tokens), merges);
}

void Tokenizer::bpe_word(std::string_view word, std::vector<int32_t>& out, bool& ok) const {
  std::vector<std::string> sym;
  for (unsigned char c : word) sym.push_back(byte_to_unicode(c));
  while (sym.size() > 1) {
    int32_t best = INT32_MAX;
    size_t at = 0;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      auto it = merge_rank_.find(sym[i] + " " + sym[i + 1]);
      if (it != merge_rank_.end() && it->second < best) {
        best = it->second;
        at = i;
      }
    }
    if (best == INT32_MAX) break;
    sym[at] += sym[at + 1];
    sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
  for (const std::string& s : sym) {
    auto it = ids_.find(s);
    if (it != ids_.end()) {
      out.push_back(it->second);
      continue;
    }
    // A merged symbol without a token: fall back to its characters.
    for (size_t k = 0; k < s.size();) {
      const size_t len = utf8_len(static_cast<unsigned char>(s[k]));
      auto ch = ids_.find(s.substr(k, len));
      if (ch == ids_.end()) ok = false;
      else out.push_back(ch->second);
      k += len;
    }
  }
}

Result<std::vector<int32_t>> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  if (kind_ == Kind::kBytes) {
    for (unsigned char c : text) out.push_back(c);
    return out;
  }
  bool ok = true;
  for (std::string_view piece : pretokenize(text)) bpe_word(piece, out, ok);
  if (!ok)
    return invalid_argument("tokenizer encode: the vocabulary lacks a byte token needed for \"" +
                            std::string(text.substr(0, 40)) + "\"");
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  if (kind_ == Kind::kBytes) {
    for (int32_t id : ids)
      if (id >= 0 && id < 256) out += static_cast<char>(id);
    return out;
  }
  const auto& rev = unicode_to_byte();
  for (int32_t id : ids) {
    if (id < 0 || id >= static_cast<int32_t>(tokens_.size())) continue;
    const std::string& s = tokens_[id];
    for (size_t k = 0; k < s.size();) {
      const size_t len = utf8_len(static_cast<unsigned char>(s[k]));
      auto it = rev.find(s.substr(k, len));
      if (it != rev.end()) out += static_cast<char>(it->second);
      else out += s.substr(k, len);  // not in the alphabet (special token): as written
      k += len;
    }
  }
  return out;
}

}  // namespace kvcache::engine
