// SentencePiece merging by score. See tokenizer_spm.h.
#include "text/tokenizer_spm.h"

#include <cstdio>
#include <queue>

#include "text/unicode.h"

namespace kvcache::text {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

struct SpmSym {
  uint32_t start, len;  // bytes of the normalized text; len 0 = merged away
  int32_t prev, next;   // neighbours; -1 = none
};

struct SpmPair {
  float score;
  int32_t left, right;
  uint32_t len;  // left.len + right.len when queued: stale entries no longer match
};

struct SpmPairOrder {  // best score first; among equals the leftmost
  bool operator()(const SpmPair& a, const SpmPair& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

SpmEncoder::SpmEncoder(const Vocab& vocab) : vocab_(&vocab) {
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    byte_ids_[static_cast<size_t>(b)] = vocab.find(name);
  }
}

Status SpmEncoder::encode(std::string_view raw, bool space_prefix,
                          std::vector<int32_t>& out) const {
  if (raw.empty()) return ok_status();
  std::string text;
  text.reserve(raw.size() * 3 + 3);
  if (space_prefix) text += kSpace;
  for (char c : raw) {
    if (c == ' ') text += kSpace;
    else text += c;
  }
  std::vector<SpmSym> syms;
  for (size_t i = 0; i < text.size();) {
    const size_t len = std::min(utf8_len(static_cast<unsigned char>(text[i])), text.size() - i);
    const auto k = static_cast<int32_t>(syms.size());
    syms.push_back({static_cast<uint32_t>(i), static_cast<uint32_t>(len), k - 1, k + 1});
    i += len;
  }
  syms.back().next = -1;
  const std::vector<float>& scores = vocab_->scores;
  std::priority_queue<SpmPair, std::vector<SpmPair>, SpmPairOrder> queue;
  auto try_pair = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const uint32_t len = syms[l].len + syms[r].len;
    const int32_t id = vocab_->find(std::string_view(text).substr(syms[l].start, len));
    if (id < 0) return;
    queue.push({scores.empty() ? 0.0f : scores[static_cast<size_t>(id)], l, r, len});
  };
  for (size_t i = 1; i < syms.size(); ++i)
    try_pair(static_cast<int32_t>(i) - 1, static_cast<int32_t>(i));
  while (!queue.empty()) {
    const SpmPair p = queue.top();
    queue.pop();
    SpmSym& l = syms[p.left];
    SpmSym& r = syms[p.right];
    if (l.len == 0 || r.len == 0 || l.next != p.right || l.len + r.len != p.len) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = p.left;
    try_pair(l.prev, p.left);
    try_pair(p.left, l.next);
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) {
    const std::string_view piece = std::string_view(text).substr(syms[i].start, syms[i].len);
    const int32_t id = vocab_->find(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (unsigned char b : piece) {
      const int32_t byte_id = byte_ids_[b] >= 0 ? byte_ids_[b] : vocab_->unk;
      if (byte_id < 0)
        return invalid_argument("tokenizer encode: no piece, byte token or unknown token for " +
                                hex_byte(b) + " in \"" + std::string(piece) + "\"");
      out.push_back(byte_id);
    }
  }
  return ok_status();
}

std::string spm_piece_text(const Vocab& vocab, int32_t id) {
  const std::string& t = vocab.tokens[static_cast<size_t>(id)];
  switch (vocab.type(id)) {
    case TokenType::kControl:
    case TokenType::kUnused:
      return {};
    case TokenType::kUnknown:
      return "\xEF\xBF\xBD";
    case TokenType::kByte:
      if (t.size() == 6 && t.rfind("<0x", 0) == 0 && t[5] == '>') {
        const int hi = hex_digit(t[3]), lo = hex_digit(t[4]);
        if (hi >= 0 && lo >= 0) return std::string(1, static_cast<char>(hi * 16 + lo));
      }
      return t;
    case TokenType::kUserDefined:
      return t;
    default: {
      std::string s;
      for (size_t i = 0; i < t.size();) {
        if (t.compare(i, kSpace.size(), kSpace) == 0) {
          s += ' ';
          i += kSpace.size();
        } else {
          s += t[i++];
        }
      }
      return s;
    }
  }
}

}  // namespace kvcache::text
