// The regex subset of JSON Schema "pattern" as grammar rules over a JSON string's contents
// (docs/server.md, "Structured output"): literals, ., [classes] of ASCII (ranges, negation),
// \d \w \s \D \W \S, escapes, groups ( ) and (?: ), |, quantifiers * + ? {n} {n,} {n,m},
// ^ at the start and $ at the end. Unanchored ends match any characters there.
#include <string>

#include "core/str_cat.h"
#include "text/json_grammar_parts.h"

namespace kvcache::text {
namespace {

constexpr int kMaxGroupDepth = 64;

// A set of characters: ASCII bytes, and whether every non-ASCII character is in it.
struct CharClass {
  ByteSet ascii;
  bool non_ascii = false;
  void negate() {
    for (int i = 0; i < 2; ++i) ascii.bits[i] = ~ascii.bits[i];
    non_ascii = !non_ascii;
  }
};

class RegexCompiler {
 public:
  RegexCompiler(Grammar& g, JsonGrammarParts& parts, std::string_view re)
      : g_(g), parts_(parts), re_(re) {}

  Result<int32_t> run() {
    bool head = false, tail = false;
    if (!re_.empty() && re_[0] == '^') {
      head = true;
      ++at_;
    }
    size_t end = re_.size();
    if (end > at_ && re_[end - 1] == '$' && (end < 2 || re_[end - 2] != '\\')) {
      tail = true;
      re_ = re_.substr(0, end - 1);
    }
    KVCACHE_ASSIGN_OR_RETURN(const int32_t body, alternation());
    if (at_ != re_.size()) return fail(str_cat("unexpected '", re_[at_], "'"));
    GrammarSeq seq{g_.byte('"')};
    if (!head) seq.push_back(Grammar::repeat(parts_.string_char(), 0, -1));
    seq.push_back(Grammar::ref(body));
    if (!tail) seq.push_back(Grammar::repeat(parts_.string_char(), 0, -1));
    seq.push_back(g_.byte('"'));
    return g_.rule_of("pattern", {seq});
  }

 private:
  Status fail(const std::string& what) const {
    return invalid_argument(str_cat("pattern: ", what, " at offset ", at_,
                                    " (supported: literals . [] \\d\\w\\s () (?:) | * + ? {n,m} ^ $)"));
  }
  bool more() const { return at_ < re_.size(); }

  Result<int32_t> alternation() {
    std::vector<GrammarSeq> alts;
    for (;;) {
      KVCACHE_ASSIGN_OR_RETURN(GrammarSeq seq, concatenation());
      alts.push_back(std::move(seq));
      if (!more() || re_[at_] != '|') break;
      ++at_;
    }
    return g_.rule_of("re_alt", std::move(alts));
  }

  Result<GrammarSeq> concatenation() {
    GrammarSeq seq;
    while (more() && re_[at_] != '|' && re_[at_] != ')') {
      KVCACHE_ASSIGN_OR_RETURN(const int32_t atom, this->atom());
      int32_t min = 1, max = 1;
      if (more()) {
        const char q = re_[at_];
        if (q == '*' || q == '+' || q == '?') {
          min = q == '+' ? 1 : 0;
          max = q == '?' ? 1 : -1;
          ++at_;
        } else if (q == '{') {
          KVCACHE_RETURN_IF_ERROR(braces(min, max));
        }
        if (more() && (re_[at_] == '?' || re_[at_] == '+')) return fail("lazy or possessive quantifiers");
      }
      seq.push_back(min == 1 && max == 1 ? Grammar::ref(atom) : Grammar::repeat(atom, min, max));
    }
    return seq;
  }

  Status braces(int32_t& min, int32_t& max) {
    const size_t close = re_.find('}', at_);
    if (close == std::string_view::npos) return fail("an unclosed {");
    const std::string inner(re_.substr(at_ + 1, close - at_ - 1));
    const size_t comma = inner.find(',');
    auto num = [](const std::string& s, int32_t& out) {
      if (s.empty() || s.size() > 6 || s.find_first_not_of("0123456789") != std::string::npos)
        return false;
      out = std::stoi(s);
      return true;
    };
    bool ok = comma == std::string::npos ? num(inner, min) && num(inner, max)
                                         : num(inner.substr(0, comma), min);
    if (ok && comma != std::string::npos)
      ok = comma + 1 == inner.size() ? (max = -1, true) : num(inner.substr(comma + 1), max);
    if (!ok || (max >= 0 && max < min)) return fail("a malformed {n,m}");
    at_ = close + 1;
    return ok_status();
  }

  Result<int32_t> atom() {
    const char c = re_[at_];
    if (c == '(') {
      if (++depth_ > kMaxGroupDepth) return fail("groups nested deeper than 64");
      ++at_;
      if (re_.substr(at_, 2) == "?:") at_ += 2;
      else if (more() && re_[at_] == '?') return fail("lookaround and named groups");
      KVCACHE_ASSIGN_OR_RETURN(const int32_t inner, alternation());
      if (!more() || re_[at_] != ')') return fail("an unclosed (");
      ++at_;
      --depth_;
      return inner;
    }
    if (c == '[') return bracket();
    if (c == '.') {
      ++at_;
      CharClass cc;
      cc.ascii = ByteSet::range(0, 0x7F);
      cc.ascii.bits[0] &= ~(uint64_t{1} << '\n');
      cc.non_ascii = true;
      return class_rule(cc);
    }
    if (c == '^' || c == '$') return fail("anchors inside the pattern");
    if (c == '*' || c == '+' || c == '?' || c == '{') return fail("a quantifier with nothing before it");
    if (c == '\\') {
      CharClass cc;
      KVCACHE_RETURN_IF_ERROR(escape(cc));
      return class_rule(cc);
    }
    // A literal character (a whole UTF-8 sequence).
    size_t len = 1;
    const auto b = static_cast<uint8_t>(c);
    if (b >= 0xF0) len = 4;
    else if (b >= 0xE0) len = 3;
    else if (b >= 0xC0) len = 2;
    if (len > 1) {
      const std::string bytes(re_.substr(at_, len));
      at_ += len;
      return g_.literal_rule(bytes);
    }
    ++at_;
    CharClass cc;
    cc.ascii.add(b);
    return class_rule(cc);
  }

  // After a backslash: a class escape or an escaped character, into cc.
  Status escape(CharClass& cc) {
    ++at_;
    if (!more()) return fail("a trailing backslash");
    const char e = re_[at_++];
    ByteSet set;
    switch (e) {
      case 'd': case 'D': set = ByteSet::range('0', '9'); break;
      case 'w': case 'W':
        set = ByteSet::range('a', 'z');
        set.add_range('A', 'Z');
        set.add_range('0', '9');
        set.add('_');
        break;
      case 's': case 'S':
        for (char s : std::string_view(" \t\n\r\f\v")) set.add(static_cast<uint8_t>(s));
        break;
      case 'n': cc.ascii.add('\n'); return ok_status();
      case 't': cc.ascii.add('\t'); return ok_status();
      case 'r': cc.ascii.add('\r'); return ok_status();
      case 'f': cc.ascii.add('\f'); return ok_status();
      case 'v': cc.ascii.add('\v'); return ok_status();
      default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
          return fail(str_cat("the escape \\", e));
        if (static_cast<uint8_t>(e) >= 0x80) return fail("an escaped non-ASCII character");
        cc.ascii.add(static_cast<uint8_t>(e));
        return ok_status();
    }
    CharClass k;
    k.ascii = set;
    if (e == 'D' || e == 'W' || e == 'S') k.negate();
    cc.ascii.merge(k.ascii);
    cc.non_ascii = cc.non_ascii || k.non_ascii;
    return ok_status();
  }

  Result<int32_t> bracket() {
    ++at_;
    CharClass cc;
    bool negated = false;
    if (more() && re_[at_] == '^') {
      negated = true;
      ++at_;
    }
    bool first = true;
    while (more() && (re_[at_] != ']' || first)) {
      first = false;
      int lo;
      if (re_[at_] == '\\') {
        CharClass one;
        KVCACHE_RETURN_IF_ERROR(escape(one));
        int count = 0;
        for (int b = 0; b < 128; ++b) count += one.ascii.has(static_cast<uint8_t>(b));
        if (count != 1 || one.non_ascii) {  // a class escape: no range from it
          cc.ascii.merge(one.ascii);
          cc.non_ascii = cc.non_ascii || one.non_ascii;
          continue;
        }
        for (lo = 0; !one.ascii.has(static_cast<uint8_t>(lo)); ++lo) {}
      } else {
        lo = static_cast<uint8_t>(re_[at_++]);
      }
      if (lo >= 0x80) return fail("non-ASCII characters in a [class]");
      int hi = lo;
      if (at_ + 1 < re_.size() && re_[at_] == '-' && re_[at_ + 1] != ']') {
        ++at_;
        if (re_[at_] == '\\') {
          CharClass one;
          KVCACHE_RETURN_IF_ERROR(escape(one));
          for (hi = 0; hi < 128 && !one.ascii.has(static_cast<uint8_t>(hi)); ++hi) {}
        } else {
          hi = static_cast<uint8_t>(re_[at_++]);
        }
        if (hi >= 0x80) return fail("non-ASCII characters in a [class]");
        if (hi < lo) return fail("a reversed range in a [class]");
      }
      cc.ascii.add_range(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi));
    }
    if (!more()) return fail("an unclosed [");
    ++at_;
    if (negated) cc.negate();
    return class_rule(cc);
  }

  // The class's characters as they are written inside a JSON string.
  int32_t class_rule(const CharClass& cc) {
    std::vector<GrammarSeq> alts;
    ByteSet plain;
    for (int b = 0x20; b < 0x80; ++b)
      if (cc.ascii.has(static_cast<uint8_t>(b)) && b != '"' && b != '\\') plain.add(static_cast<uint8_t>(b));
    if (!plain.empty()) alts.push_back({g_.bytes(plain)});
    const std::pair<char, const char*> escaped[] = {
        {'"', "\\\""}, {'\\', "\\\\"}, {'\n', "\\n"}, {'\t', "\\t"}, {'\r', "\\r"}, {'\f', "\\f"}};
    for (const auto& [ch, text] : escaped)
      if (cc.ascii.has(static_cast<uint8_t>(ch))) alts.push_back(g_.literal(text));
    if (cc.non_ascii) alts.push_back({Grammar::ref(multibyte())});
    if (alts.empty()) alts.push_back({g_.bytes(ByteSet{})});  // nothing writable: never matches
    return g_.rule_of("re_class", std::move(alts));
  }

  int32_t multibyte() {
    // string_char's second alternative is the multibyte UTF-8 rule.
    return parts_.string_char() >= 0 ? g_.alts(parts_.string_char())[1][0].index : -1;
  }

  Grammar& g_;
  JsonGrammarParts& parts_;
  std::string_view re_;
  size_t at_ = 0;
  int depth_ = 0;  // open groups (bounds the parser's stack)
};

}  // namespace

Result<int32_t> JsonGrammarParts::pattern(std::string_view regex) {
  return RegexCompiler(g_, *this, regex).run();
}

}  // namespace kvcache::text
