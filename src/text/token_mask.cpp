// Token trie, cached allowed-token masks and the per-completion cursor. See token_mask.h.
#include "text/token_mask.h"

#include <algorithm>
#include <numeric>

namespace kvcache::text {
namespace {

// The mask cache holds at most this many bytes (then it restarts): 2,600 masks of a 50K
// vocabulary, 870 of a 150K one.
constexpr size_t kMaxCachedMaskBytes = size_t{16} << 20;

}  // namespace

TokenTrie TokenTrie::from_tokenizer(const Tokenizer& tokenizer) {
  std::vector<std::string> pieces(static_cast<size_t>(tokenizer.n_tokens()));
  for (int32_t id = 0; id < tokenizer.n_tokens(); ++id) pieces[id] = tokenizer.decode_one(id);
  return from_pieces(std::move(pieces), tokenizer.eog_ids());
}

TokenTrie TokenTrie::from_pieces(std::vector<std::string> pieces, std::vector<int32_t> eog) {
  auto t = std::make_shared<Tables>();
  std::sort(eog.begin(), eog.end());
  t->eog = std::move(eog);
  std::vector<int32_t> order;
  for (int32_t id = 0; id < static_cast<int32_t>(pieces.size()); ++id)
    if (!pieces[id].empty() && !std::binary_search(t->eog.begin(), t->eog.end(), id))
      order.push_back(id);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return pieces[a] < pieces[b]; });
  // Sorted pieces visit the trie in preorder: each piece pops the path to its common prefix
  // with the previous one and appends nodes for the rest.
  std::vector<std::vector<int32_t>> ends(1);  // tokens ending at each node
  t->byte.push_back(0);
  t->depth.push_back(0);
  t->end.push_back(0);
  std::vector<int32_t> path{0};  // node at each depth of the current piece
  const std::string* prev = nullptr;
  auto close_to = [&](size_t depth) {
    while (path.size() > depth + 1) {
      t->end[path.back()] = static_cast<int32_t>(t->byte.size());
      path.pop_back();
    }
  };
  for (int32_t id : order) {
    const std::string& p = pieces[id];
    size_t lcp = 0;
    if (prev != nullptr)
      while (lcp < p.size() && lcp < prev->size() && p[lcp] == (*prev)[lcp]) ++lcp;
    close_to(lcp);
    for (size_t k = lcp; k < p.size(); ++k) {
      const auto node = static_cast<int32_t>(t->byte.size());
      t->byte.push_back(static_cast<uint8_t>(p[k]));
      t->depth.push_back(static_cast<int32_t>(k + 1));
      t->end.push_back(0);
      ends.emplace_back();
      path.push_back(node);
    }
    ends[path.back()].push_back(id);
    prev = &p;
  }
  close_to(0);
  t->end[0] = static_cast<int32_t>(t->byte.size());
  t->token_begin.push_back(0);
  for (const std::vector<int32_t>& e : ends) {
    t->ids.insert(t->ids.end(), e.begin(), e.end());
    t->token_begin.push_back(static_cast<int32_t>(t->ids.size()));
  }
  t->pieces = std::move(pieces);
  TokenTrie trie;
  trie.t_ = std::move(t);
  return trie;
}

bool TokenTrie::is_eog(int32_t id) const {
  return std::binary_search(t_->eog.begin(), t_->eog.end(), id);
}

TokenMasker::TokenMasker(std::shared_ptr<GrammarMatcher> matcher, TokenTrie trie)
    : matcher_(std::move(matcher)), trie_(std::move(trie)) {}

TokenMasker::Mask TokenMasker::mask(GrammarState s) {
  auto lock = matcher_->lock();
  if (auto it = cache_.find(s); it != cache_.end()) return it->second;
  const TokenTrie::Tables& t = *trie_.t_;
  auto bits = std::make_shared<std::vector<uint64_t>>((t.pieces.size() + 63) / 64, 0);
  auto set = [&](int32_t id) { (*bits)[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63); };
  if (s >= 0) {
    std::vector<GrammarState> at(1, s);  // state at each depth of the walk
    const auto n = static_cast<int32_t>(t.byte.size());
    for (int32_t i = 1; i < n;) {
      const int32_t d = t.depth[i];
      const GrammarState next = matcher_->advance_locked(at[d - 1], t.byte[i]);
      if (next == kDeadState) {
        i = t.end[i];
        continue;
      }
      if (static_cast<int32_t>(at.size()) <= d) at.resize(d + 1);
      at[d] = next;
      for (int32_t k = t.token_begin[i]; k < t.token_begin[i + 1]; ++k) set(t.ids[k]);
      ++i;
    }
    if (matcher_->complete_locked(s))
      for (int32_t id : t.eog) set(id);
  }
  if ((cache_.size() + 1) * bits->size() * sizeof(uint64_t) > kMaxCachedMaskBytes) cache_.clear();
  Mask m = std::move(bits);
  cache_.emplace(s, m);
  return m;
}

GrammarState TokenMasker::advance(GrammarState s, int32_t id) {
  if (s < 0 || id < 0 || id >= trie_.n_tokens()) return kDeadState;
  if (trie_.is_eog(id)) return matcher_->complete(s) ? s : kDeadState;
  const std::string& bytes = trie_.bytes(id);
  if (bytes.empty()) return kDeadState;
  return matcher_->advance(s, bytes);
}

int64_t TokenMasker::cached_masks() const {
  auto lock = matcher_->lock();
  return static_cast<int64_t>(cache_.size());
}

GrammarCursor::GrammarCursor(std::shared_ptr<TokenMasker> masker)
    : masker_(std::move(masker)), states_{masker_->matcher().start()} {}

GrammarCursor::GrammarCursor(std::shared_ptr<TokenMasker> masker, GrammarState start)
    : masker_(std::move(masker)), states_{start} {}

bool GrammarCursor::accept(int32_t id) {
  const GrammarState next = masker_->advance(state(), id);
  if (next == kDeadState) return false;
  states_.push_back(next);
  return true;
}

void GrammarCursor::rewind(size_t tokens) {
  states_.resize(states_.size() - std::min(tokens, states_.size() - 1));
}

bool GrammarCursor::finished() const {
  return complete() && masker_->matcher().next_bytes(state()).empty();
}

}  // namespace kvcache::text
