// The JSON lexemes as grammar rules, for the schema compiler: any value, strings (with length
// bounds, formats or a regex pattern), integers and numbers in a range, object keys other than a
// given set. Layer: text; internal to json_schema.cpp. Everything is compact JSON (no
// whitespace); strings emit only \" \\ \n \r \t and \uXXXX escapes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "text/grammar.h"

namespace kvcache::text {

class JsonGrammarParts {
 public:
  explicit JsonGrammarParts(Grammar& g) : g_(g) {}

  int32_t value();           // any JSON value
  int32_t object_any();      // any JSON object
  int32_t array_any();
  int32_t string_any() { return string_sized(0, -1); }
  // A string of [min, max] characters (code points); max -1 = unbounded.
  int32_t string_sized(int32_t min, int32_t max);
  int32_t string_char();     // one character of a string's contents (escapes included)
  int32_t number_any();      // at most 16 integer and 15 fraction digits, exponents of 1-2
                             // digits (finite as a double)
  int32_t boolean();
  int32_t null();
  // Integers in [lo, hi] (nullopt = unbounded). InvalidArgument when lo > hi or a bound is
  // beyond +-1e18.
  Result<int32_t> integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi);
  // Numbers in [lo, hi] (each bound inclusive or exclusive): the integers in range, and
  // non-negative k.fraction with k >= lo (k > lo when exclusive, or k = lo with a fraction
  // that is not zero) and k + 1 <= hi.
  Result<int32_t> number_range(std::optional<double> lo, bool lo_excl,
                               std::optional<double> hi, bool hi_excl);
  // date, time, date-time, uuid, email; nullopt for another name.
  std::optional<int32_t> format(std::string_view name);
  // A string whose contents match the regex subset (docs/server.md); InvalidArgument naming
  // the construct it does not support.
  Result<int32_t> pattern(std::string_view regex);
  // A quoted key that is none of `names` (each a raw, unescaped key).
  int32_t key_excluding(const std::vector<std::string>& names);

 private:
  int32_t digits(int32_t min, int32_t max);  // [0-9]{min,max}
  int32_t digit_range_rule(const std::string& lo, const std::string& hi);  // same length
  int32_t nonneg_range(int64_t lo, std::optional<int64_t> hi);
  int32_t utf8_multibyte();  // one well-formed UTF-8 character of 2-4 bytes

  Grammar& g_;
  int32_t value_ = -1, object_ = -1, array_ = -1, char_ = -1, number_ = -1, bool_ = -1,
          null_ = -1, multibyte_ = -1;
};

}  // namespace kvcache::text
