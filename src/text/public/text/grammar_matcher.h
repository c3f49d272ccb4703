// The byte matcher of a grammar: a pushdown recognizer whose states are built lazily and
// interned, so a state is an integer — advancing is a table lookup once seen, a fork is a copy
// of an int and a rewind is going back to an earlier int. Layer: text. A state is the set of
// parse stacks alive after the bytes read so far, each stack a chain of interned frames
// (rule, alternative, position, repeat count, parent frame) whose top waits on a byte set.
// It does not know tokens (token_mask.h maps a vocabulary onto it).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/grammar.h"

namespace kvcache::text {

using GrammarState = int32_t;
inline constexpr GrammarState kDeadState = -1;  // no document starts with the bytes read

// Thread-safety: every method locks; states are shared by all callers (forks of a request and
// every request given the same compiled grammar).
class GrammarMatcher {
 public:
  // `grammar` must have passed Grammar::check().
  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar);

  GrammarState start() const { return start_; }
  // The state after `byte`; kDeadState when the byte cannot continue any document (or s is
  // dead). Amortized O(1) for a transition seen before.
  GrammarState advance(GrammarState s, uint8_t byte);
  GrammarState advance(GrammarState s, std::string_view bytes);
  // The bytes read so far form a whole document.
  bool complete(GrammarState s) const;
  // Bytes that continue some document from s (empty: s is complete and nothing may follow).
  ByteSet next_bytes(GrammarState s) const;
  // States built so far (memory grows with the distinct states a caller visits).
  int64_t n_states() const;
  const Grammar& grammar() const { return *grammar_; }

  // For the token mask's walk (token_mask.cpp): one advance under a lock the caller holds.
  std::unique_lock<std::mutex> lock() const { return std::unique_lock<std::mutex>(mu_); }
  GrammarState advance_locked(GrammarState s, uint8_t byte);
  bool complete_locked(GrammarState s) const { return sets_[s].complete; }

 private:
  struct Frame {
    int32_t rule, alt, pos, count, parent;  // parent frame id; -1 = bottom of the stack
    bool operator==(const Frame&) const = default;
  };
  struct FrameHash {
    size_t operator()(const Frame& f) const;
  };
  struct Set {
    std::vector<int32_t> tops;  // frame ids waiting on a byte, sorted
    bool complete = false;      // some stack is empty: a document ends here
    ByteSet next;               // union of the tops' byte sets
  };
  struct VecHash {
    size_t operator()(const std::vector<int32_t>& v) const;
  };

  int32_t frame(const Frame& f);
  void expand(int32_t rule, int32_t alt, int32_t pos, int32_t count, int32_t parent,
              std::vector<int32_t>& tops, bool& complete, int depth);
  GrammarState intern(std::vector<int32_t> tops, bool complete);

  std::shared_ptr<const Grammar> grammar_;
  mutable std::mutex mu_;
  std::vector<Frame> frames_;
  std::unordered_map<Frame, int32_t, FrameHash> frame_ids_;
  std::vector<Set> sets_;
  std::unordered_map<std::vector<int32_t>, int32_t, VecHash> set_ids_;  // key: tops + complete
  std::unordered_map<uint64_t, GrammarState> next_;  // (state << 8 | byte) -> state
  GrammarState start_ = kDeadState;
};

}  // namespace kvcache::text
