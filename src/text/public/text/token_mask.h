// Grammar-constrained decoding over a vocabulary: the token trie of a tokenizer's token bytes,
// the allowed-token mask of a matcher state (the trie walked against the matcher, masks cached
// per state) and a per-completion cursor that forks by copy and rewinds by token. Layer: text.
// Token bytes are Tokenizer::decode_one (so a token may span several JSON lexemes or end inside
// a UTF-8 character); tokens that print nothing are never allowed, end-of-generation tokens
// only where the document is complete. It does not sample (the engine's Sampler applies masks).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "text/grammar_matcher.h"
#include "text/tokenizer.h"

namespace kvcache::text {

// Copyable value sharing immutable tables; thread-safety: immutable after construction.
class TokenTrie {
 public:
  // From each id's decode_one bytes; eog = the ids that end generation (tokenizer.eog_ids()).
  static TokenTrie from_tokenizer(const Tokenizer& tokenizer);
  // From explicit token bytes (tests): pieces[id], eog ids.
  static TokenTrie from_pieces(std::vector<std::string> pieces, std::vector<int32_t> eog);

  int32_t n_tokens() const { return static_cast<int32_t>(t_->pieces.size()); }
  const std::string& bytes(int32_t id) const { return t_->pieces[id]; }
  const std::vector<int32_t>& eog() const { return t_->eog; }
  bool is_eog(int32_t id) const;
  int64_t n_nodes() const { return static_cast<int64_t>(t_->byte.size()); }

 private:
  friend class TokenMasker;
  // Nodes in depth-first preorder (node 0 = the root, no byte): a walk visits i+1 next or
  // skips a rejected subtree by jumping to end[i].
  struct Tables {
    std::vector<std::string> pieces;    // by token id
    std::vector<int32_t> eog;           // sorted
    std::vector<uint8_t> byte;          // edge byte into the node
    std::vector<int32_t> depth;         // root 0
    std::vector<int32_t> end;           // one past the node's subtree
    std::vector<int32_t> token_begin;   // tokens ending here: ids[token_begin[i], token_begin[i+1])
    std::vector<int32_t> ids;
  };
  std::shared_ptr<const Tables> t_;
};

// The masks of one matcher over one vocabulary. Thread-safety: every method locks (the
// matcher's lock); masks are shared immutable vectors.
class TokenMasker {
 public:
  TokenMasker(std::shared_ptr<GrammarMatcher> matcher, TokenTrie trie);

  using Mask = std::shared_ptr<const std::vector<uint64_t>>;  // bit id set = allowed
  // Tokens whose bytes keep the output a prefix of a document, plus end-of-generation tokens
  // when s is complete. O(trie nodes visited) on a cache miss; cached per state (at most
  // 16 MiB of masks per masker, then the cache starts over).
  Mask mask(GrammarState s);
  // The state after token `id` (kDeadState when not allowed). An end-of-generation token leaves
  // a complete state as it is.
  GrammarState advance(GrammarState s, int32_t id);
  GrammarMatcher& matcher() { return *matcher_; }
  const TokenTrie& trie() const { return trie_; }
  int64_t cached_masks() const;

 private:
  std::shared_ptr<GrammarMatcher> matcher_;
  TokenTrie trie_;
  std::unordered_map<GrammarState, Mask> cache_;  // under the matcher's lock
};

inline bool mask_allows(std::span<const uint64_t> mask, int32_t id) {
  return (mask[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1;
}

// One completion's place in the grammar: the state after each accepted token (a stack), so a
// fork is a copy and a rewind pops. Copyable value; not thread-safe (the masker it shares is).
class GrammarCursor {
 public:
  explicit GrammarCursor(std::shared_ptr<TokenMasker> masker);
  // Starting from `start` (a state of the masker's matcher, e.g. after text generated before
  // the grammar switched on) instead of the matcher's start.
  GrammarCursor(std::shared_ptr<TokenMasker> masker, GrammarState start);

  TokenMasker::Mask allowed() const { return masker_->mask(state()); }
  // Takes token `id`; false (and nothing changes) when the mask does not allow it.
  bool accept(int32_t id);
  // Back to the state before the last `tokens` accepted tokens (clamped to the start).
  void rewind(size_t tokens);
  size_t accepted() const { return states_.size() - 1; }
  GrammarState state() const { return states_.back(); }
  bool complete() const { return masker_->matcher().complete(state()); }
  // Complete and no byte may follow: generation has nothing left to choose.
  bool finished() const;

 private:
  std::shared_ptr<TokenMasker> masker_;
  std::vector<GrammarState> states_;  // states_[k] = after k accepted tokens
};

}  // namespace kvcache::text
