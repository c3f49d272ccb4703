// A context-free grammar over bytes, the target of schema compilation (json_schema.h) and the
// input of the byte matcher (grammar_matcher.h). Layer: text. Rules are lists of alternatives;
// an alternative is a sequence of byte sets, rule references and bounded repetitions of a rule.
// check() refuses what the matcher cannot run (left recursion, a repeated rule that can match
// nothing, dangling references). It does not parse any grammar notation.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kvcache::text {

// A set of byte values (256 bits). Copyable value.
struct ByteSet {
  std::array<uint64_t, 4> bits{};
  void add(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {  // [lo, hi], inclusive
    for (int b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
  }
  bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  bool empty() const { return (bits[0] | bits[1] | bits[2] | bits[3]) == 0; }
  void merge(const ByteSet& o) {
    for (int i = 0; i < 4; ++i) bits[i] |= o.bits[i];
  }
  bool operator==(const ByteSet&) const = default;
  static ByteSet of(uint8_t b) {
    ByteSet s;
    s.add(b);
    return s;
  }
  static ByteSet range(uint8_t lo, uint8_t hi) {
    ByteSet s;
    s.add_range(lo, hi);
    return s;
  }
};

struct GrammarElement {
  enum class Kind : uint8_t { kBytes, kRule, kRepeat };
  Kind kind = Kind::kBytes;
  int32_t index = 0;  // kBytes: Grammar::sets index; kRule/kRepeat: rule id
  int32_t min = 0;    // kRepeat: at least min and at most max matches of the rule
  int32_t max = 0;    // kRepeat: -1 = unbounded
};
using GrammarSeq = std::vector<GrammarElement>;

// Copyable value; thread-safety: immutable once built (the matcher shares it).
class Grammar {
 public:
  // A new rule with no alternatives yet (a rule must get at least one before check()).
  int32_t add_rule(std::string name);
  void add_alt(int32_t rule, GrammarSeq seq);
  // Element builders (byte sets are interned).
  GrammarElement bytes(const ByteSet& set);
  GrammarElement byte(uint8_t b) { return bytes(ByteSet::of(b)); }
  static GrammarElement ref(int32_t rule) { return {GrammarElement::Kind::kRule, rule, 0, 0}; }
  static GrammarElement repeat(int32_t rule, int32_t min, int32_t max) {
    return {GrammarElement::Kind::kRepeat, rule, min, max};
  }
  // The bytes of `text`, one element each.
  GrammarSeq literal(std::string_view text);
  // A rule matching exactly `text` (interned: the same text gives the same rule).
  int32_t literal_rule(std::string_view text);
  // A rule whose alternatives are the given sequences.
  int32_t rule_of(std::string name, std::vector<GrammarSeq> alts);

  void set_root(int32_t rule) { root_ = rule; }
  int32_t root() const { return root_; }
  int32_t n_rules() const { return static_cast<int32_t>(rules_.size()); }
  const std::string& name(int32_t rule) const { return rules_[rule].name; }
  const std::vector<GrammarSeq>& alts(int32_t rule) const { return rules_[rule].alts; }
  const ByteSet& set(int32_t index) const { return sets_[index]; }

  // InvalidArgument naming the rule: no root, a rule with no alternative, a reference out of
  // range, a repetition with max < min or of a rule that can match the empty string, left
  // recursion (a rule reachable from itself before any byte is read).
  Status check() const;

 private:
  struct Rule {
    std::string name;
    std::vector<GrammarSeq> alts;
  };
  std::vector<Rule> rules_;
  std::vector<ByteSet> sets_;
  std::map<std::string, int32_t, std::less<>> literals_;  // literal_rule's interning
  int32_t root_ = -1;
};

}  // namespace kvcache::text
