// Byte-level BPE merging by rank. See tokenizer_bpe.h.
#include "text/tokenizer_bpe.h"

#include <queue>

#include "core/str_cat.h"
#include "text/unicode.h"

namespace kvcache::text {
namespace {

bool printable(uint32_t b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

// Code point of byte b's alphabet character (GPT-2: printable bytes map to themselves, the
// rest to 256, 257, ... in byte order).
uint32_t alphabet_cp(uint8_t b) {
  if (printable(b)) return b;
  uint32_t n = 0;
  for (uint32_t x = 0; x < b; ++x)
    if (!printable(x)) ++n;
  return 256 + n;
}

struct Sym {
  int32_t id;           // token; -1 = a byte without a token
  int32_t prev, next;   // neighbours; -1 = none
  uint32_t start, len;  // bytes of the word
};

struct Pair {
  int32_t rank;
  int32_t left, right;
  int32_t left_id, right_id;  // ids when queued: stale entries no longer match
};

struct PairOrder {  // lowest rank first; among equals the leftmost
  bool operator()(const Pair& a, const Pair& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

uint64_t key(int32_t l, int32_t r) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
}

}  // namespace

std::string byte_to_unicode(uint8_t b) { return utf8_encode(alphabet_cp(b)); }

int byte_from_unicode(uint32_t cp) {
  static const auto* table = [] {
    auto* t = new std::array<int16_t, 512>();
    t->fill(-1);
    for (int b = 0; b < 256; ++b)
      (*t)[alphabet_cp(static_cast<uint8_t>(b))] = static_cast<int16_t>(b);
    return t;
  }();
  return cp < table->size() ? (*table)[cp] : -1;
}

Result<BpeEncoder> BpeEncoder::build(const Vocab& vocab, const std::vector<std::string>& merges,
                                     PreTokenizer pre, bool ignore_merges) {
  BpeEncoder e(vocab, std::move(pre));
  e.ignore_merges_ = ignore_merges;
  for (int b = 0; b < 256; ++b)
    e.byte_ids_[static_cast<size_t>(b)] = vocab.find(byte_to_unicode(static_cast<uint8_t>(b)));
  e.merges_.reserve(merges.size());
  std::string joined;
  for (size_t r = 0; r < merges.size(); ++r) {
    const std::string& m = merges[r];
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos || sp + 1 >= m.size())
      return invalid_argument(str_cat("tokenizer: tokenizer.ggml.merges[", r,
                                      "] = \"", m, "\", expected \"left right\""));
    const std::string_view left = std::string_view(m).substr(0, sp);
    const std::string_view right = std::string_view(m).substr(sp + 1);
    joined.assign(left).append(right);
    const int32_t l = vocab.find(left), rt = vocab.find(right), res = vocab.find(joined);
    if (l < 0 || rt < 0 || res < 0) continue;
    e.merges_.emplace(key(l, rt), Merge{static_cast<int32_t>(r), res});  // first rank wins
  }
  return e;
}

Status BpeEncoder::encode(std::string_view text, std::vector<int32_t>& out) const {
  for (std::string_view word : pre_.split(text)) KVCACHE_RETURN_IF_ERROR(encode_word(word, out));
  return ok_status();
}

Status BpeEncoder::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    std::string spelled;
    for (unsigned char c : word) spelled += byte_to_unicode(c);
    const int32_t whole = vocab_->find(spelled);
    if (whole >= 0) {
      out.push_back(whole);
      return ok_status();
    }
  }
  std::vector<Sym> syms(word.size());
  for (size_t i = 0; i < word.size(); ++i) {
    const auto k = static_cast<int32_t>(i);
    syms[i] = {byte_ids_[static_cast<unsigned char>(word[i])], k - 1,
               i + 1 < word.size() ? k + 1 : -1, static_cast<uint32_t>(i), 1};
  }
  std::priority_queue<Pair, std::vector<Pair>, PairOrder> queue;
  auto try_pair = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0 || syms[l].id < 0 || syms[r].id < 0) return;
    auto it = merges_.find(key(syms[l].id, syms[r].id));
    if (it != merges_.end()) queue.push({it->second.rank, l, r, syms[l].id, syms[r].id});
  };
  for (size_t i = 1; i < syms.size(); ++i)
    try_pair(static_cast<int32_t>(i) - 1, static_cast<int32_t>(i));
  while (!queue.empty()) {
    const Pair p = queue.top();
    queue.pop();
    Sym& l = syms[p.left];
    Sym& r = syms[p.right];
    if (l.len == 0 || r.len == 0 || l.next != p.right || l.id != p.left_id || r.id != p.right_id)
      continue;
    l.id = merges_.at(key(p.left_id, p.right_id)).result;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = p.left;
    try_pair(l.prev, p.left);
    try_pair(p.left, l.next);
  }
  for (int32_t i = syms.empty() ? -1 : 0; i >= 0; i = syms[i].next) {
    if (syms[i].id >= 0) {
      out.push_back(syms[i].id);
    } else if (vocab_->unk >= 0) {
      out.push_back(vocab_->unk);
    } else {
      const auto byte = static_cast<uint8_t>(word[syms[i].start]);
      return invalid_argument("tokenizer encode: the vocabulary has no token for byte " +
                              hex_byte(byte) + " and no unknown token");
    }
  }
  return ok_status();
}

std::string bpe_piece_text(const Vocab& vocab, int32_t id) {
  const TokenType ty = vocab.type(id);
  if (ty == TokenType::kControl || ty == TokenType::kUnused) return {};
  const std::string& t = vocab.tokens[static_cast<size_t>(id)];
  std::string out;
  for (size_t i = 0; i < t.size();) {
    const size_t len = std::min(utf8_len(static_cast<unsigned char>(t[i])), t.size() - i);
    const CodePoints cp = utf8_decode(std::string_view(t).substr(i, len));
    const int b = cp.cps.size() == 1 ? byte_from_unicode(cp.cps[0]) : -1;
    if (b >= 0) out += static_cast<char>(b);
    else out.append(t, i, len);  // not in the alphabet: as written
    i += len;
  }
  return out;
}

}  // namespace kvcache::text
