// JSON lexemes as grammar rules. See json_grammar_parts.h.
#include "text/json_grammar_parts.h"

#include <cmath>
#include <map>

#include "core/str_cat.h"

namespace kvcache::text {
namespace {

constexpr int64_t kMaxBound = 1'000'000'000'000'000'000;  // 1e18: 18 digits fit an int64

GrammarSeq cat(std::initializer_list<GrammarSeq> parts) {
  GrammarSeq out;
  for (const GrammarSeq& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::string digits_of(int64_t v) { return std::to_string(v); }

}  // namespace

int32_t JsonGrammarParts::utf8_multibyte() {
  if (multibyte_ >= 0) return multibyte_;
  const ByteSet cont = ByteSet::range(0x80, 0xBF);
  auto c = [&] { return g_.bytes(cont); };
  multibyte_ = g_.rule_of(
      "utf8",
      {{g_.bytes(ByteSet::range(0xC2, 0xDF)), c()},
       {g_.byte(0xE0), g_.bytes(ByteSet::range(0xA0, 0xBF)), c()},
       {g_.bytes(ByteSet::range(0xE1, 0xEC)), c(), c()},
       {g_.byte(0xED), g_.bytes(ByteSet::range(0x80, 0x9F)), c()},
       {g_.bytes(ByteSet::range(0xEE, 0xEF)), c(), c()},
       {g_.byte(0xF0), g_.bytes(ByteSet::range(0x90, 0xBF)), c(), c()},
       {g_.bytes(ByteSet::range(0xF1, 0xF3)), c(), c(), c()},
       {g_.byte(0xF4), g_.bytes(ByteSet::range(0x80, 0x8F)), c(), c()}});
  return multibyte_;
}

int32_t JsonGrammarParts::string_char() {
  if (char_ >= 0) return char_;
  ByteSet plain = ByteSet::range(0x20, 0x7F);
  plain.bits[0] &= ~(uint64_t{1} << '"');
  plain.bits[1] &= ~(uint64_t{1} << ('\\' - 64));
  ByteSet esc;
  for (char e : std::string_view("\"\\/bfnrt")) esc.add(static_cast<uint8_t>(e));
  ByteSet hex = ByteSet::range('0', '9');
  hex.add_range('a', 'f');
  hex.add_range('A', 'F');
  // \u escapes only for U+0000..U+001F: no surrogate halves can be written.
  char_ = g_.rule_of("char", {{g_.bytes(plain)},
                              {Grammar::ref(utf8_multibyte())},
                              {g_.byte('\\'), g_.bytes(esc)},
                              {g_.byte('\\'), g_.byte('u'), g_.byte('0'), g_.byte('0'),
                               g_.bytes(ByteSet::range('0', '1')), g_.bytes(hex)}});
  return char_;
}

int32_t JsonGrammarParts::string_sized(int32_t min, int32_t max) {
  const GrammarSeq body = {Grammar::repeat(string_char(), min, max)};
  return g_.rule_of(str_cat("string{", min, ",", max, "}"),
                    {cat({{g_.byte('"')}, body, {g_.byte('"')}})});
}

int32_t JsonGrammarParts::digits(int32_t min, int32_t max) {
  const int32_t d = g_.rule_of("digit", {{g_.bytes(ByteSet::range('0', '9'))}});
  return g_.rule_of(str_cat("digits{", min, ",", max, "}"), {{Grammar::repeat(d, min, max)}});
}

int32_t JsonGrammarParts::number_any() {
  if (number_ >= 0) return number_;
  const int32_t minus = g_.literal_rule("-");
  const int32_t int_part = g_.rule_of(
      "int", {{g_.byte('0')}, {g_.bytes(ByteSet::range('1', '9')), Grammar::ref(digits(0, 15))}});
  const int32_t frac = g_.rule_of("frac", {{g_.byte('.'), Grammar::ref(digits(1, 15))}});
  ByteSet e = ByteSet::of('e');
  e.add('E');
  ByteSet sign = ByteSet::of('+');
  sign.add('-');
  const int32_t sign_rule = g_.rule_of("sign", {{g_.bytes(sign)}});
  const int32_t exp = g_.rule_of(
      "exp", {{g_.bytes(e), Grammar::repeat(sign_rule, 0, 1), Grammar::ref(digits(1, 2))}});
  number_ = g_.rule_of("number", {{Grammar::repeat(minus, 0, 1), Grammar::ref(int_part),
                                   Grammar::repeat(frac, 0, 1), Grammar::repeat(exp, 0, 1)}});
  return number_;
}

int32_t JsonGrammarParts::boolean() {
  if (bool_ < 0) bool_ = g_.rule_of("boolean", {g_.literal("true"), g_.literal("false")});
  return bool_;
}

int32_t JsonGrammarParts::null() {
  if (null_ < 0) null_ = g_.literal_rule("null");
  return null_;
}

int32_t JsonGrammarParts::value() {
  if (value_ >= 0) return value_;
  value_ = g_.add_rule("value");  // first: objects and arrays refer back to it
  for (int32_t r : {object_any(), array_any(), string_any(), number_any(), boolean(), null()})
    g_.add_alt(value_, {Grammar::ref(r)});
  return value_;
}

int32_t JsonGrammarParts::object_any() {
  if (object_ >= 0) return object_;
  object_ = g_.add_rule("object");
  const int32_t member = g_.add_rule("member");
  const int32_t more = g_.add_rule("more_members");
  const int32_t v = value();
  g_.add_alt(member, {Grammar::ref(string_any()), g_.byte(':'), Grammar::ref(v)});
  g_.add_alt(more, {g_.byte(','), Grammar::ref(member)});
  g_.add_alt(object_, g_.literal("{}"));
  g_.add_alt(object_, {g_.byte('{'), Grammar::ref(member), Grammar::repeat(more, 0, -1),
                       g_.byte('}')});
  return object_;
}

int32_t JsonGrammarParts::array_any() {
  if (array_ >= 0) return array_;
  array_ = g_.add_rule("array");
  const int32_t more = g_.add_rule("more_items");
  const int32_t v = value();
  g_.add_alt(more, {g_.byte(','), Grammar::ref(v)});
  g_.add_alt(array_, g_.literal("[]"));
  g_.add_alt(array_, {g_.byte('['), Grammar::ref(v), Grammar::repeat(more, 0, -1), g_.byte(']')});
  return array_;
}

// Digit strings of one length between lo and hi (inclusive, lo <= hi, same length).
int32_t JsonGrammarParts::digit_range_rule(const std::string& lo, const std::string& hi) {
  const std::string name = str_cat("digits[", lo, "..", hi, "]");
  if (lo.empty()) return g_.rule_of(name, {{}});
  const uint8_t a = static_cast<uint8_t>(lo[0]), b = static_cast<uint8_t>(hi[0]);
  const std::string lo_rest = lo.substr(1), hi_rest = hi.substr(1);
  if (a == b) return g_.rule_of(name, {{g_.byte(a), Grammar::ref(digit_range_rule(lo_rest, hi_rest))}});
  const auto n = static_cast<int32_t>(lo_rest.size());
  const std::string zeros(lo_rest.size(), '0'), nines(hi_rest.size(), '9');
  if (lo_rest == zeros && hi_rest == nines)
    return g_.rule_of(name, {{g_.bytes(ByteSet::range(a, b)), Grammar::ref(digits(n, n))}});
  std::vector<GrammarSeq> alts;
  alts.push_back({g_.byte(a), Grammar::ref(digit_range_rule(lo_rest, nines))});
  if (b - a >= 2)
    alts.push_back({g_.bytes(ByteSet::range(a + 1, b - 1)), Grammar::ref(digits(n, n))});
  alts.push_back({g_.byte(b), Grammar::ref(digit_range_rule(zeros, hi_rest))});
  return g_.rule_of(name, std::move(alts));
}

// Non-negative integers in [lo, hi] without leading zeros; hi nullopt = unbounded.
int32_t JsonGrammarParts::nonneg_range(int64_t lo, std::optional<int64_t> hi) {
  std::vector<GrammarSeq> alts;
  const std::string los = digits_of(lo);
  const size_t last_len = hi ? digits_of(*hi).size() : los.size();
  int64_t p = 1;  // 10^(len - 1)
  for (size_t len = 1; len < los.size(); ++len) p *= 10;
  for (size_t len = los.size(); len <= last_len; ++len, p *= 10) {
    const int64_t a = std::max(lo, len == 1 ? 0 : p);
    const int64_t top = p > kMaxBound / 10 ? INT64_MAX : p * 10 - 1;
    const int64_t b = hi ? std::min(*hi, top) : top;
    if (a > b) continue;
    alts.push_back({Grammar::ref(digit_range_rule(digits_of(a), digits_of(b)))});
  }
  if (!hi && los.size() < 19) {  // more digits than lo, up to 19
    const auto n = static_cast<int32_t>(los.size());
    alts.push_back({g_.bytes(ByteSet::range('1', '9')), Grammar::ref(digits(n, 18))});
  }
  return g_.rule_of(str_cat("uint[", lo, "..", hi ? digits_of(*hi) : "", "]"), std::move(alts));
}

Result<int32_t> JsonGrammarParts::integer_range(std::optional<int64_t> lo,
                                                std::optional<int64_t> hi) {
  for (const auto& b : {lo, hi})
    if (b && (*b > kMaxBound || *b < -kMaxBound))
      return invalid_argument(str_cat("the bound ", *b, " is beyond the supported +-1e18"));
  if (lo && hi && *lo > hi)
    return invalid_argument(str_cat("no integer lies in [", *lo, ", ", *hi, "]"));
  std::vector<GrammarSeq> alts;
  if (!lo || *lo < 0) {  // negatives: "-" then |v| in [max(1, -hi), -lo]
    const int64_t top = hi ? std::min<int64_t>(*hi, -1) : -1;
    if (!lo || *lo <= top) {
      const std::optional<int64_t> mag_hi = lo ? std::optional<int64_t>(-*lo) : std::nullopt;
      alts.push_back({g_.byte('-'), Grammar::ref(nonneg_range(-top, mag_hi))});
    }
  }
  if (!hi || *hi >= 0) alts.push_back({Grammar::ref(nonneg_range(lo ? std::max<int64_t>(*lo, 0) : 0, hi))});
  return g_.rule_of("integer", std::move(alts));
}

Result<int32_t> JsonGrammarParts::number_range(std::optional<double> lo, bool lo_excl,
                                               std::optional<double> hi, bool hi_excl) {
  for (const auto& b : {lo, hi})
    if (b && (!std::isfinite(*b) || std::fabs(*b) > 1e18))
      return invalid_argument(str_cat("the bound ", *b, " is beyond the supported +-1e18"));
  std::optional<int64_t> ilo, ihi;
  if (lo) ilo = static_cast<int64_t>(lo_excl ? std::floor(*lo) + 1 : std::ceil(*lo));
  if (hi) ihi = static_cast<int64_t>(hi_excl ? std::ceil(*hi) - 1 : std::floor(*hi));
  std::vector<GrammarSeq> alts;
  if (!ilo || !ihi || *ilo <= *ihi) {
    KVCACHE_ASSIGN_OR_RETURN(const int32_t ints, integer_range(ilo, ihi));
    alts.push_back({Grammar::ref(ints)});
  }
  // k.fraction lies in [k, k + 1): needs k >= lo (k > lo when exclusive) and k + 1 <= hi.
  const int64_t klo = std::max<int64_t>(0, ilo.value_or(0));
  const std::optional<int64_t> khi =
      hi ? std::optional<int64_t>(static_cast<int64_t>(std::floor(*hi - 1))) : std::nullopt;
  if (!khi || klo <= *khi)
    alts.push_back({Grammar::ref(nonneg_range(klo, khi)), g_.byte('.'),
                    Grammar::ref(digits(1, 15))});
  // An exclusive integral lower bound k itself, with a fraction that is not zero: (0, 1) has 0.5.
  if (lo && lo_excl && *lo >= 0 && *lo == std::floor(*lo)) {
    const auto k = static_cast<int64_t>(*lo);
    if (!khi || k <= *khi)
      alts.push_back({Grammar::ref(nonneg_range(k, k)), g_.byte('.'), Grammar::ref(digits(0, 14)),
                      g_.bytes(ByteSet::range('1', '9'))});
  }
  if (alts.empty())
    return invalid_argument(str_cat("no number in [", lo ? *lo : -1e18, ", ", hi ? *hi : 1e18,
                                    "] that the grammar can write (integers or k.fraction "
                                    "with k >= 0)"));
  return g_.rule_of("number_range", std::move(alts));
}

std::optional<int32_t> JsonGrammarParts::format(std::string_view name) {
  auto d = [&](uint8_t lo, uint8_t hi) { return g_.bytes(ByteSet::range(lo, hi)); };
  auto quoted = [&](std::string n, GrammarSeq body) {
    return g_.rule_of(std::move(n), {cat({{g_.byte('"')}, body, {g_.byte('"')}})});
  };
  // Days 01..28 only: valid in every month of every year.
  const int32_t date = g_.rule_of(
      "date", {{d('0', '9'), d('0', '9'), d('0', '9'), d('0', '9'), g_.byte('-'),
                Grammar::ref(g_.rule_of("month", {{g_.byte('0'), d('1', '9')},
                                                  {g_.byte('1'), d('0', '2')}})),
                g_.byte('-'),
                Grammar::ref(g_.rule_of("day", {{g_.byte('0'), d('1', '9')},
                                                {g_.byte('1'), d('0', '9')},
                                                {g_.byte('2'), d('0', '8')}}))}});
  const int32_t hour = g_.rule_of("hour", {{d('0', '1'), d('0', '9')}, {g_.byte('2'), d('0', '3')}});
  ByteSet pm = ByteSet::of('+');
  pm.add('-');
  const int32_t zone = g_.rule_of(
      "zone", {{g_.byte('Z')}, {g_.bytes(pm), Grammar::ref(hour), g_.byte(':'), d('0', '5'), d('0', '9')}});
  const int32_t frac = g_.rule_of("secfrac", {{g_.byte('.'), Grammar::ref(digits(1, 6))}});
  const int32_t time = g_.rule_of(
      "time", {{Grammar::ref(hour), g_.byte(':'), d('0', '5'), d('0', '9'), g_.byte(':'),
                d('0', '5'), d('0', '9'), Grammar::repeat(frac, 0, 1), Grammar::ref(zone)}});
  if (name == "date") return quoted("date_string", {Grammar::ref(date)});
  if (name == "time") return quoted("time_string", {Grammar::ref(time)});
  if (name == "date-time")
    return quoted("date_time_string", {Grammar::ref(date), g_.byte('T'), Grammar::ref(time)});
  if (name == "uuid") {
    ByteSet hex = ByteSet::range('0', '9');
    hex.add_range('a', 'f');
    const int32_t h = g_.rule_of("hex", {{g_.bytes(hex)}});
    GrammarSeq body;
    for (int32_t n : {8, 4, 4, 4, 12}) {
      if (!body.empty()) body.push_back(g_.byte('-'));
      body.push_back(Grammar::repeat(h, n, n));
    }
    return quoted("uuid_string", body);
  }
  if (name == "email") {
    ByteSet alnum = ByteSet::range('a', 'z');
    alnum.add_range('A', 'Z');
    alnum.add_range('0', '9');
    ByteSet local = alnum;
    for (char c : std::string_view("._+-")) local.add(static_cast<uint8_t>(c));
    const int32_t an = g_.rule_of("alnum", {{g_.bytes(alnum)}});
    const int32_t lc = g_.rule_of("local_char", {{g_.bytes(local)}});
    const int32_t label = g_.rule_of("label", {{Grammar::repeat(an, 1, 63)}});
    const int32_t dot_label = g_.rule_of("dot_label", {{g_.byte('.'), Grammar::ref(label)}});
    return quoted("email_string", {Grammar::ref(an), Grammar::repeat(lc, 0, 63), g_.byte('@'),
                                   Grammar::ref(label), Grammar::repeat(dot_label, 1, 4)});
  }
  return std::nullopt;
}

int32_t JsonGrammarParts::key_excluding(const std::vector<std::string>& names) {
  // Extra keys use printable ASCII other than " and \ (so no escapes can spell a name); the
  // names' trie steers away from each name. One rule per trie node, built without recursion
  // (a name may be long).
  ByteSet alpha = ByteSet::range(0x20, 0x7E);
  alpha.bits[0] &= ~(uint64_t{1} << '"');
  alpha.bits[1] &= ~(uint64_t{1} << ('\\' - 64));
  const int32_t any = g_.rule_of("key_char", {{g_.bytes(alpha)}});
  std::map<std::string, int32_t> node;  // name prefix -> its rule
  std::vector<std::string> todo{""};
  node[""] = g_.add_rule("key_not_declared");
  while (!todo.empty()) {
    const std::string prefix = std::move(todo.back());
    todo.pop_back();
    std::map<uint8_t, bool> children;
    bool terminal = false;
    for (const std::string& n : names) {
      if (n.size() < prefix.size() || n.compare(0, prefix.size(), prefix) != 0) continue;
      if (n.size() == prefix.size()) terminal = true;
      else if (alpha.has(static_cast<uint8_t>(n[prefix.size()])))
        children[static_cast<uint8_t>(n[prefix.size()])] = true;
    }
    const int32_t self = node.at(prefix);
    if (!terminal) g_.add_alt(self, {g_.byte('"')});
    ByteSet other = alpha;
    for (const auto& [c, unused] : children) {
      other.bits[c >> 6] &= ~(uint64_t{1} << (c & 63));
      const std::string next = prefix + static_cast<char>(c);
      node[next] = g_.add_rule("key_not_declared");
      todo.push_back(next);
      g_.add_alt(self, {g_.byte(c), Grammar::ref(node[next])});
    }
    if (!other.empty()) g_.add_alt(self, {g_.bytes(other), Grammar::repeat(any, 0, -1), g_.byte('"')});
  }
  return g_.rule_of("extra_key", {{g_.byte('"'), Grammar::ref(node.at(""))}});
}

}  // namespace kvcache::text
