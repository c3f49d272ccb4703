// The lazily built pushdown matcher. See grammar_matcher.h.
#include "text/grammar_matcher.h"

#include <algorithm>

namespace kvcache::text {
namespace {

constexpr int kMaxExpandDepth = 4096;  // deeper is a grammar bug: check() refuses the loops

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

}  // namespace

size_t GrammarMatcher::FrameHash::operator()(const Frame& f) const {
  uint64_t h = mix(static_cast<uint32_t>(f.rule), static_cast<uint32_t>(f.alt));
  h = mix(h, static_cast<uint32_t>(f.pos));
  h = mix(h, static_cast<uint32_t>(f.count));
  return mix(h, static_cast<uint32_t>(f.parent));
}

size_t GrammarMatcher::VecHash::operator()(const std::vector<int32_t>& v) const {
  uint64_t h = v.size();
  for (int32_t x : v) h = mix(h, static_cast<uint32_t>(x));
  return h;
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar)
    : grammar_(std::move(grammar)) {
  std::vector<int32_t> tops;
  bool complete = false;
  for (int32_t a = 0; a < static_cast<int32_t>(grammar_->alts(grammar_->root()).size()); ++a)
    expand(grammar_->root(), a, 0, 0, -1, tops, complete, 0);
  start_ = intern(std::move(tops), complete);
}

int32_t GrammarMatcher::frame(const Frame& f) {
  auto [it, added] = frame_ids_.try_emplace(f, static_cast<int32_t>(frames_.size()));
  if (added) frames_.push_back(f);
  return it->second;
}

// Every stack reachable from the frame (rule, alt, pos, count) over `parent` without reading a
// byte: tops waiting on a byte set go to `tops`; an emptied stack sets `complete`.
void GrammarMatcher::expand(int32_t rule, int32_t alt, int32_t pos, int32_t count,
                            int32_t parent, std::vector<int32_t>& tops, bool& complete,
                            int depth) {
  if (depth > kMaxExpandDepth) return;
  const GrammarSeq& seq = grammar_->alts(rule)[alt];
  if (pos == static_cast<int32_t>(seq.size())) {  // this frame is done: return to the parent
    if (parent < 0) {
      complete = true;
      return;
    }
    const Frame p = frames_[parent];
    const GrammarElement& at = grammar_->alts(p.rule)[p.alt][p.pos];
    if (at.kind == GrammarElement::Kind::kRule)
      expand(p.rule, p.alt, p.pos + 1, 0, p.parent, tops, complete, depth + 1);
    else
      expand(p.rule, p.alt, p.pos, p.count + 1, p.parent, tops, complete, depth + 1);
    return;
  }
  const GrammarElement& e = seq[pos];
  switch (e.kind) {
    case GrammarElement::Kind::kBytes:
      tops.push_back(frame({rule, alt, pos, 0, parent}));
      return;
    case GrammarElement::Kind::kRule: {
      // A reference that ends its alternative is a tail call: the callee returns straight to
      // this frame's parent, so chains of rules (a long key's trie) keep stacks shallow.
      const bool tail = pos + 1 == static_cast<int32_t>(seq.size());
      const int32_t id = tail ? parent : frame({rule, alt, pos, 0, parent});
      for (int32_t a = 0; a < static_cast<int32_t>(grammar_->alts(e.index).size()); ++a)
        expand(e.index, a, 0, 0, id, tops, complete, depth + 1);
      return;
    }
    case GrammarElement::Kind::kRepeat: {
      // Past the minimum an unbounded count no longer matters: saturate it so that states
      // repeat (a long string is one state, not one per character).
      if (e.max < 0) count = std::min(count, e.min);
      if (e.max < 0 || count < e.max) {
        const int32_t id = frame({rule, alt, pos, count, parent});
        for (int32_t a = 0; a < static_cast<int32_t>(grammar_->alts(e.index).size()); ++a)
          expand(e.index, a, 0, 0, id, tops, complete, depth + 1);
      }
      if (count >= e.min) expand(rule, alt, pos + 1, 0, parent, tops, complete, depth + 1);
      return;
    }
  }
}

GrammarState GrammarMatcher::intern(std::vector<int32_t> tops, bool complete) {
  std::sort(tops.begin(), tops.end());
  tops.erase(std::unique(tops.begin(), tops.end()), tops.end());
  if (tops.empty() && !complete) return kDeadState;
  tops.push_back(complete ? -1 : -2);  // the key carries the flag
  auto [it, added] = set_ids_.try_emplace(tops, static_cast<int32_t>(sets_.size()));
  if (added) {
    tops.pop_back();
    Set s;
    s.complete = complete;
    for (int32_t t : tops) {
      const Frame& f = frames_[t];
      s.next.merge(grammar_->set(grammar_->alts(f.rule)[f.alt][f.pos].index));
    }
    s.tops = std::move(tops);
    sets_.push_back(std::move(s));
  }
  return it->second;
}

GrammarState GrammarMatcher::advance_locked(GrammarState s, uint8_t byte) {
  if (s < 0 || !sets_[s].next.has(byte)) return kDeadState;
  const uint64_t key = (static_cast<uint64_t>(s) << 8) | byte;
  if (auto it = next_.find(key); it != next_.end()) return it->second;
  std::vector<int32_t> tops;
  bool complete = false;
  const std::vector<int32_t> from = sets_[s].tops;  // sets_ may grow below
  for (int32_t t : from) {
    const Frame f = frames_[t];
    if (!grammar_->set(grammar_->alts(f.rule)[f.alt][f.pos].index).has(byte)) continue;
    expand(f.rule, f.alt, f.pos + 1, 0, f.parent, tops, complete, 0);
  }
  const GrammarState to = intern(std::move(tops), complete);
  next_.emplace(key, to);
  return to;
}

GrammarState GrammarMatcher::advance(GrammarState s, uint8_t byte) {
  auto l = lock();
  return advance_locked(s, byte);
}

GrammarState GrammarMatcher::advance(GrammarState s, std::string_view bytes) {
  auto l = lock();
  for (char c : bytes) s = advance_locked(s, static_cast<uint8_t>(c));
  return s;
}

bool GrammarMatcher::complete(GrammarState s) const {
  if (s < 0) return false;
  auto l = lock();
  return sets_[s].complete;
}

ByteSet GrammarMatcher::next_bytes(GrammarState s) const {
  if (s < 0) return {};
  auto l = lock();
  return sets_[s].next;
}

int64_t GrammarMatcher::n_states() const {
  auto l = lock();
  return static_cast<int64_t>(sets_.size());
}

}  // namespace kvcache::text
