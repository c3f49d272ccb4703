// Hand-written matchers for the published pre-tokenizer regexes. See pretokenizer.h.
//
// Each matcher answers "the longest match the regex engine would pick at code point i" with
// PCRE semantics (alternatives in order, greedy quantifiers with backtracking worked out by
// hand per pattern). A segment's end acts as the end of the string for $ and (?!\S).
#include "text/pretokenizer.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "text/unicode.h"

namespace kvcache::text {
namespace {

// Per code point class bits, computed once per split.
enum : uint16_t {
  kL = 1, kN = 2, kP = 4, kS = 8, kWs = 16, kM = 32,
  kUpperish = 64,   // \p{Lu} \p{Lt} \p{Lm} \p{Lo} \p{M}  (tekken's first class)
  kLowerish = 128,  // \p{Ll} \p{Lm} \p{Lo} \p{M}         (tekken's second class)
};

uint16_t flags_of(uint32_t cp) {
  uint16_t f = is_white_space(cp) ? kWs : 0;
  switch (unicode_cat(cp)) {
    case UnicodeCat::kLu: case UnicodeCat::kLt: return f | kL | kUpperish;
    case UnicodeCat::kLl: return f | kL | kLowerish;
    case UnicodeCat::kLm: case UnicodeCat::kLo: return f | kL | kUpperish | kLowerish;
    case UnicodeCat::kMark: return f | kM | kUpperish | kLowerish;
    case UnicodeCat::kNumber: return f | kN;
    case UnicodeCat::kPunct: return f | kP;
    case UnicodeCat::kSymbol: return f | kS;
    default: return f;
  }
}

struct Range { uint32_t first, last; };

// deepseek-llm's letter class, as published (cased letters of many scripts).
constexpr Range kDsLetters[] = {
    {0x41, 0x5A}, {0x61, 0x7A}, {0xB5, 0xB5}, {0xC0, 0xD6}, {0xD8, 0xF6}, {0xF8, 0x1BA},
    {0x1BC, 0x1BF}, {0x1C4, 0x293}, {0x295, 0x2AF}, {0x370, 0x373}, {0x376, 0x377},
    {0x37B, 0x37D}, {0x37F, 0x37F}, {0x386, 0x386}, {0x388, 0x38A}, {0x38C, 0x38C},
    {0x38E, 0x3A1}, {0x3A3, 0x3F5}, {0x3F7, 0x481}, {0x48A, 0x52F}, {0x531, 0x556},
    {0x10A0, 0x10C5}, {0x13A0, 0x13F5}, {0x13F8, 0x13FD}, {0x1C90, 0x1CBA}, {0x1CBD, 0x1CBF},
    {0x1D00, 0x1D2B}, {0x1D6B, 0x1D77}, {0x1D79, 0x1D9A}, {0x1E00, 0x1F15}, {0x1F18, 0x1F1D},
    {0x1F20, 0x1F45}, {0x1F48, 0x1F4D}, {0x1F50, 0x1F57}, {0x1F59, 0x1F59}, {0x1F5B, 0x1F5B},
    {0x1F5D, 0x1F5D}, {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC}, {0x1FBE, 0x1FBE},
    {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC}, {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB}, {0x1FE0, 0x1FEC},
    {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC}, {0x2102, 0x2102}, {0x2107, 0x2107}, {0x210A, 0x2113},
    {0x2115, 0x2115}, {0x2119, 0x211D}, {0x2124, 0x2124}, {0x2126, 0x2126}, {0x2128, 0x2128},
    {0x212A, 0x212D}, {0x212F, 0x2134}, {0x2139, 0x2139}, {0x213C, 0x213F}, {0x2145, 0x2149},
    {0x214E, 0x214E}, {0x2183, 0x2184}, {0x2C00, 0x2C7B}, {0x2C7E, 0x2CE4}, {0x2CEB, 0x2CEE},
    {0x2CF2, 0x2CF3}, {0xA640, 0xA66D}, {0xA680, 0xA69B}, {0xA722, 0xA76F}, {0xA771, 0xA787},
    {0xA78B, 0xA78E}, {0xAB70, 0xABBF}, {0xFB00, 0xFB06}, {0xFB13, 0xFB17}, {0xFF21, 0xFF3A},
    {0xFF41, 0xFF5A}, {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};
// deepseek-llm's punctuation class: ASCII punctuation, full-width forms, quotes, CJK marks.
constexpr Range kDsPunct[] = {{0x21, 0x2F}, {0x3A, 0x7E}, {0xFF01, 0xFF0F}, {0xFF1A, 0xFF5E},
                              {0x2018, 0x201F}, {0x3000, 0x3002}};
// The CJK class shared by the deepseek pre-tokenizers.
constexpr Range kCjkRanges[] = {{0x800, 0x9FA5}, {0xAC00, 0xD7FF}};

template <size_t N>
bool in(const Range (&r)[N], uint32_t cp) {
  for (const Range& x : r)
    if (cp >= x.first && cp <= x.last) return true;
  return false;
}

bool is_crlf(uint32_t c) { return c == '\r' || c == '\n'; }

class Matcher {
 public:
  Matcher(const std::vector<uint32_t>& cps, const std::vector<uint16_t>& fl) : cp_(cps), f_(fl) {}

  // End of the match at i within [i, end); i when there is none. `resume` gets where the
  // scan continues after a miss (i + 1 unless the pattern can skip ahead).
  size_t match(PrePattern p, size_t i, size_t end, size_t& resume) const {
    resume = i + 1;
    switch (p) {
      case PrePattern::kGpt2: return gpt2(i, end);
      case PrePattern::kLlama3: return llama3(i, end, 3);
      case PrePattern::kQwen2: return llama3(i, end, 1);
      case PrePattern::kTekken: return tekken(i, end);
      case PrePattern::kNewline: return is_crlf(cp_[i]) ? i + 1 : i;
      case PrePattern::kDsLlmLetters:
        return opt_run(i, end, [&](size_t k) { return ws(k); },
                       [&](size_t k) { return in(kDsLetters, cp_[k]); });
      case PrePattern::kDsLlmPunct:
        return opt_run(i, end, [&](size_t k) { return ws(k); },
                       [&](size_t k) { return in(kDsPunct, cp_[k]); });
      case PrePattern::kTrailingSpace: {
        const size_t j = run(i, end, [&](size_t k) { return ws(k); });
        if (j == end) return j;
        resume = std::max(j, i + 1);  // no later start inside this run reaches the end either
        return i;
      }
      case PrePattern::kCjk: return run(i, end, [&](size_t k) { return in(kCjkRanges, cp_[k]); });
      case PrePattern::kNumbers: return run(i, end, [&](size_t k) { return has(k, kN); });
      case PrePattern::kDigit: return has(i, kN) ? i + 1 : i;
      case PrePattern::kLetters:
        return opt_run(i, end, [&](size_t k) { return ws(k); },
                       [&](size_t k) { return has(k, kL); });
      case PrePattern::kPunct:
        return opt_run(i, end, [&](size_t k) { return ws(k); },
                       [&](size_t k) { return has(k, kP); });
      case PrePattern::kFalconPunct:
        return run(i, end, [&](size_t k) {
          const uint32_t c = cp_[k];
          return has(k, kP) || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' ||
                 c == '^' || c == '~' || c == '|' || c == '`';
        });
      case PrePattern::kThreeDigits: {
        if (i + 3 > end) return i;
        for (size_t k = i; k < i + 3; ++k)
          if (cp_[k] < '0' || cp_[k] > '9') return i;
        return i + 3;
      }
    }
    return i;
  }

 private:
  bool has(size_t k, uint16_t bits) const { return (f_[k] & bits) != 0; }
  bool ws(size_t k) const { return has(k, kWs); }
  bool not_ws_l_n(size_t k) const { return !has(k, kWs | kL | kN); }

  template <class Pred>
  size_t run(size_t i, size_t end, Pred pred) const {
    while (i < end && pred(i)) ++i;
    return i;
  }
  // opt? body+ : the optional char first, then without it.
  template <class Opt, class Body>
  size_t opt_run(size_t i, size_t end, Opt opt, Body body) const {
    if (i + 1 < end && opt(i) && body(i + 1)) return run(i + 1, end, body);
    return body(i) ? run(i, end, body) : i;
  }
  // 's|'t|'re|'ve|'m|'ll|'d, optionally ASCII case-insensitive.
  size_t contraction(size_t i, size_t end, bool fold) const {
    if (cp_[i] != '\'' || i + 1 >= end) return i;
    auto at = [&](size_t k) -> uint32_t {
      if (k >= end) return 0;
      const uint32_t c = cp_[k];
      return fold && c >= 'A' && c <= 'Z' ? c + 32 : c;
    };
    const uint32_t a = at(i + 1), b = at(i + 2);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    return i;
  }
  // \s+(?!\S) then \s+ : a whitespace run leaves its last char to a following non-space.
  size_t spaces(size_t i, size_t end) const {
    const size_t j = run(i, end, [&](size_t k) { return ws(k); });
    if (j == i || j == end || j - i == 1) return j;
    return j - 1;
  }
  // \s*[\r\n]+ : up to and including the last CR/LF of the whitespace run.
  size_t spaces_to_newline(size_t i, size_t end) const {
    const size_t j = run(i, end, [&](size_t k) { return ws(k); });
    for (size_t k = j; k > i; --k)
      if (is_crlf(cp_[k - 1])) return k;
    return i;
  }

  size_t gpt2(size_t i, size_t end) const {
    size_t j = contraction(i, end, false);
    if (j > i) return j;
    auto space = [&](size_t k) { return cp_[k] == ' '; };
    if ((j = opt_run(i, end, space, [&](size_t k) { return has(k, kL); })) > i) return j;
    if ((j = opt_run(i, end, space, [&](size_t k) { return has(k, kN); })) > i) return j;
    if ((j = opt_run(i, end, space, [&](size_t k) { return not_ws_l_n(k); })) > i) return j;
    return spaces(i, end);
  }

  size_t llama3(size_t i, size_t end, size_t max_digits) const {
    size_t j = contraction(i, end, true);
    if (j > i) return j;
    auto lead = [&](size_t k) { return !is_crlf(cp_[k]) && !has(k, kL | kN); };
    if ((j = opt_run(i, end, lead, [&](size_t k) { return has(k, kL); })) > i) return j;
    if (has(i, kN))
      return run(i, std::min(end, i + max_digits), [&](size_t k) { return has(k, kN); });
    if ((j = punct_run(i, end, false)) > i) return j;
    if ((j = spaces_to_newline(i, end)) > i) return j;
    return spaces(i, end);
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*  (tekken: [\r\n/]*)
  size_t punct_run(size_t i, size_t end, bool slash) const {
    const size_t j = opt_run(i, end, [&](size_t k) { return cp_[k] == ' '; },
                             [&](size_t k) { return not_ws_l_n(k); });
    if (j == i) return i;
    return run(j, end, [&](size_t k) { return is_crlf(cp_[k]) || (slash && cp_[k] == '/'); });
  }

  size_t tekken(size_t i, size_t end) const {
    auto lead = [&](size_t k) { return !is_crlf(cp_[k]) && !has(k, kL | kN); };
    const bool can_lead = lead(i);
    // [^\r\n\p{L}\p{N}]? U* W+  (U = Lu Lt Lm Lo M, W = Ll Lm Lo M)
    for (int with = can_lead ? 1 : 0; with >= 0; --with) {
      const size_t s = i + static_cast<size_t>(with);
      const size_t q = run(s, end, [&](size_t k) { return has(k, kUpperish); });
      if (q < end && has(q, kLowerish))
        return run(q, end, [&](size_t k) { return has(k, kLowerish); });
      for (size_t p = q; p > s; --p)  // give back U chars until one can start W+
        if (has(p - 1, kLowerish)) return p;
    }
    // [^\r\n\p{L}\p{N}]? U+ W*
    for (int with = can_lead ? 1 : 0; with >= 0; --with) {
      const size_t s = i + static_cast<size_t>(with);
      const size_t q = run(s, end, [&](size_t k) { return has(k, kUpperish); });
      if (q > s) return run(q, end, [&](size_t k) { return has(k, kLowerish); });
    }
    if (has(i, kN)) return i + 1;
    size_t j = punct_run(i, end, true);
    if (j > i) return j;
    if ((j = spaces_to_newline(i, end)) > i) return j;
    return spaces(i, end);
  }

  const std::vector<uint32_t>& cp_;
  const std::vector<uint16_t>& f_;
};

struct Named {
  const char* name;
  std::vector<PrePattern> patterns;
};

const std::vector<Named>& table() {
  using P = PrePattern;
  static const auto* t = new std::vector<Named>{
      {"deepseek-coder", {P::kNewline, P::kLetters, P::kPunct, P::kCjk, P::kDigit}},
      {"deepseek-llm",
       {P::kNewline, P::kDsLlmLetters, P::kDsLlmPunct, P::kTrailingSpace, P::kCjk, P::kNumbers}},
      {"falcon", {P::kFalconPunct, P::kGpt2, P::kThreeDigits}},
      {"gpt-2", {P::kGpt2}},
      {"gpt-neox", {P::kGpt2}},
      {"llama-bpe", {P::kLlama3}},
      {"mpt", {P::kGpt2}},
      {"qwen2", {P::kQwen2}},
      {"refact", {P::kDigit, P::kGpt2}},
      {"smollm", {P::kDigit, P::kGpt2}},
      {"starcoder", {P::kDigit, P::kGpt2}},
      {"tekken", {P::kTekken}},
  };
  return *t;
}

}  // namespace

Result<PreTokenizer> PreTokenizer::from_name(std::string_view name) {
  for (const Named& n : table())
    if (name == n.name) {
      PreTokenizer p;
      p.name_ = n.name;
      p.patterns_ = n.patterns;
      return p;
    }
  std::string list;
  for (const std::string& s : names()) list += (list.empty() ? "" : ", ") + s;
  return invalid_argument("tokenizer: tokenizer.ggml.pre = \"" + std::string(name) +
                          "\" is not a supported pre-tokenizer, expected one of " + list);
}

std::vector<std::string> PreTokenizer::names() {
  std::vector<std::string> out;
  for (const Named& n : table()) out.emplace_back(n.name);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  const CodePoints d = utf8_decode(text);
  std::vector<uint16_t> flags(d.cps.size());
  for (size_t k = 0; k < d.cps.size(); ++k) flags[k] = flags_of(d.cps[k]);
  const Matcher m(d.cps, flags);
  std::vector<std::pair<size_t, size_t>> segs, next;  // code point ranges [b, e)
  if (!d.cps.empty()) segs.emplace_back(0, d.cps.size());
  for (PrePattern p : patterns_) {
    next.clear();
    for (auto [b, e] : segs) {
      size_t gap = b, i = b;
      while (i < e) {
        size_t resume = i + 1;
        const size_t j = m.match(p, i, e, resume);
        if (j > i) {
          if (gap < i) next.emplace_back(gap, i);
          next.emplace_back(i, j);
          gap = i = j;
        } else {
          i = resume;
        }
      }
      if (gap < e) next.emplace_back(gap, e);
    }
    segs.swap(next);
  }
  std::vector<std::string_view> out;
  out.reserve(segs.size());
  for (auto [b, e] : segs) out.push_back(text.substr(d.offsets[b], d.offsets[e] - d.offsets[b]));
  return out;
}

}  // namespace kvcache::text
