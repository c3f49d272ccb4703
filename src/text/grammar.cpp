// Grammar building and its checks. See grammar.h.
#include "text/grammar.h"

#include <functional>

#include "core/str_cat.h"

namespace kvcache::text {

int32_t Grammar::add_rule(std::string name) {
  rules_.push_back(Rule{std::move(name), {}});
  return static_cast<int32_t>(rules_.size()) - 1;
}

void Grammar::add_alt(int32_t rule, GrammarSeq seq) { rules_[rule].alts.push_back(std::move(seq)); }

GrammarElement Grammar::bytes(const ByteSet& set) {
  for (size_t i = 0; i < sets_.size(); ++i)
    if (sets_[i] == set) return {GrammarElement::Kind::kBytes, static_cast<int32_t>(i), 0, 0};
  sets_.push_back(set);
  return {GrammarElement::Kind::kBytes, static_cast<int32_t>(sets_.size()) - 1, 0, 0};
}

GrammarSeq Grammar::literal(std::string_view text) {
  GrammarSeq seq;
  for (char c : text) seq.push_back(byte(static_cast<uint8_t>(c)));
  return seq;
}

int32_t Grammar::literal_rule(std::string_view text) {
  auto it = literals_.find(text);
  if (it != literals_.end()) return it->second;
  const int32_t r = rule_of(str_cat("lit:", text), {literal(text)});
  literals_.emplace(std::string(text), r);
  return r;
}

int32_t Grammar::rule_of(std::string name, std::vector<GrammarSeq> alts) {
  const int32_t r = add_rule(std::move(name));
  rules_[r].alts = std::move(alts);
  return r;
}

Status Grammar::check() const {
  const auto n = static_cast<int32_t>(rules_.size());
  if (root_ < 0 || root_ >= n) return invalid_argument("grammar: no root rule");
  auto bad = [&](int32_t r, const std::string& what) {
    return invalid_argument(str_cat("grammar: rule ", r, " (", rules_[r].name, ") ", what));
  };
  for (int32_t r = 0; r < n; ++r) {
    if (rules_[r].alts.empty()) return bad(r, "has no alternative");
    for (const GrammarSeq& seq : rules_[r].alts)
      for (const GrammarElement& e : seq) {
        const bool is_set = e.kind == GrammarElement::Kind::kBytes;
        if (e.index < 0 || e.index >= (is_set ? static_cast<int32_t>(sets_.size()) : n))
          return bad(r, str_cat("refers to ", is_set ? "byte set " : "rule ", e.index,
                                ", which does not exist"));
        if (e.kind == GrammarElement::Kind::kRepeat && (e.min < 0 || (e.max >= 0 && e.max < e.min)))
          return bad(r, str_cat("repeats ", e.min, "..", e.max, " times"));
      }
  }
  // Nullable rules, to a fixpoint.
  std::vector<char> nullable(n, 0);
  auto elem_nullable = [&](const GrammarElement& e) {
    switch (e.kind) {
      case GrammarElement::Kind::kBytes: return false;
      case GrammarElement::Kind::kRule: return nullable[e.index] != 0;
      case GrammarElement::Kind::kRepeat: return e.min == 0 || e.max == 0 || nullable[e.index] != 0;
    }
    return false;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const GrammarSeq& seq : rules_[r].alts) {
        bool all = true;
        for (const GrammarElement& e : seq) all = all && elem_nullable(e);
        if (all) {
          nullable[r] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  // Left edges: rules entered before any byte is read. A cycle is left recursion.
  std::vector<std::vector<int32_t>> left(n);
  for (int32_t r = 0; r < n; ++r)
    for (const GrammarSeq& seq : rules_[r].alts)
      for (const GrammarElement& e : seq) {
        if (e.kind == GrammarElement::Kind::kRepeat && nullable[e.index] && e.max != 0)
          return bad(r, str_cat("repeats rule ", e.index, " (", rules_[e.index].name,
                                "), which can match the empty string"));
        if (e.kind != GrammarElement::Kind::kBytes) left[r].push_back(e.index);
        if (!elem_nullable(e)) break;
      }
  std::vector<char> mark(n, 0);  // 0 new, 1 on the path, 2 done
  std::function<int32_t(int32_t)> visit = [&](int32_t r) -> int32_t {
    mark[r] = 1;
    for (int32_t to : left[r]) {
      if (mark[to] == 1) return to;
      if (mark[to] == 0)
        if (int32_t c = visit(to); c >= 0) return c;
    }
    mark[r] = 2;
    return -1;
  };
  for (int32_t r = 0; r < n; ++r)
    if (mark[r] == 0)
      if (int32_t c = visit(r); c >= 0) return bad(c, "is left-recursive (it can enter itself before reading a byte)");
  return ok_status();
}

}  // namespace kvcache::text
