// JSON Schema -> grammar -> byte matcher: each supported keyword accepts the documents it
// should and rejects specific invalid ones byte by byte; each refusal names its keyword and
// JSON pointer exactly; the matcher forks and rewinds as plain state values.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "text/grammar_matcher.h"
#include "text/json_schema.h"

namespace kvcache::text {
namespace {

struct Doc {
  std::shared_ptr<GrammarMatcher> m;
  // The whole text is a complete document.
  bool accepts(std::string_view text) const {
    const GrammarState s = m->advance(m->start(), text);
    return s != kDeadState && m->complete(s);
  }
  // The text can still become a document.
  bool prefix(std::string_view text) const { return m->advance(m->start(), text) != kDeadState; }
};

Doc compile(std::string_view schema) {
  Result<std::shared_ptr<const Grammar>> g = compile_json_schema(schema);
  EXPECT_TRUE(g.ok()) << schema << ": " << g.status().to_string();
  if (!g.ok()) return {std::make_shared<GrammarMatcher>(json_value_grammar())};
  return {std::make_shared<GrammarMatcher>(*g)};
}

std::string refusal(std::string_view schema) {
  Result<std::shared_ptr<const Grammar>> g = compile_json_schema(schema);
  EXPECT_FALSE(g.ok()) << schema << " compiled";
  return g.ok() ? "" : g.status().message();
}

struct Case {
  const char* schema;
  std::vector<const char*> valid;
  std::vector<const char*> invalid;
};

void check(const Case& c) {
  Doc d = compile(c.schema);
  for (const char* v : c.valid) EXPECT_TRUE(d.accepts(v)) << c.schema << " should accept " << v;
  for (const char* v : c.invalid) EXPECT_FALSE(d.accepts(v)) << c.schema << " should reject " << v;
}

TEST(JsonSchema, TypesAndListsOfTypes) {
  check({R"({"type":"string"})", {R"("")", R"("a\"b\\c")", "\"h\xC3\xA9llo\"", R"("\u001f")"},
         {"1", R"("a)", "\"\x01\"", R"( "a")", "\"\xC3\"", "\"\xED\xA0\x80\""}});
  check({R"({"type":"integer"})", {"0", "-7", "123456"}, {"01", "-0", "1.5", "1e3", "+1", ""}});
  check({R"({"type":"number"})", {"0", "-0.5", "3.25e-3", "1E+10", "12"}, {".5", "1.", "--1", "1e"}});
  check({R"({"type":"boolean"})", {"true", "false"}, {"True", "1", "null"}});
  check({R"({"type":"null"})", {"null"}, {"nul", "None"}});
  check({R"({"type":["string","null"]})", {"null", R"("x")"}, {"1", "true"}});
  check({R"({"type":"object"})", {"{}", R"({"a":1,"b":[true,{"c":null}]})"}, {"{", "[]", R"({"a" :1})"}});
  check({R"({"type":"array"})", {"[]", R"([1,"a",{}])"}, {"[1,]", "[,1]", "{}"}});
  check({"{}", {"1", R"("s")", "[]", "{}", "null"}, {"", "nul"}});
  check({"true", {"1", "{}"}, {"x"}});
}

TEST(JsonSchema, PropertiesFollowSchemaOrderAndRequired) {
  const char* s = R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
                      "tag":{"type":"boolean"}},"required":["name"],"additionalProperties":false})";
  check({s,
         {R"({"name":"a"})", R"({"name":"a","age":3})", R"({"name":"a","tag":true})",
          R"({"name":"a","age":3,"tag":false})"},
         {"{}", R"({"age":3})", R"({"age":3,"name":"a"})", R"({"name":"a","x":1})",
          R"({"name":"a",})", R"({"name":1})"}});
  // Only optional properties: the empty object and any in-order subset.
  check({R"({"properties":{"a":{"const":1},"b":{"const":2}}})",
         {"{}", R"({"a":1})", R"({"b":2})", R"({"a":1,"b":2})"},
         {R"({,"b":2})", R"({"b":2,"a":1})", R"({"c":3})"}});
  // Required but undeclared: additionalProperties governs its value.
  check({R"({"type":"object","required":["z"]})", {R"({"z":[1]})"}, {"{}"}});
  check({R"({"type":"object","required":["z"],"additionalProperties":{"type":"integer"}})",
         {R"({"z":1})"}, {R"({"z":"1"})"}});
  EXPECT_EQ(refusal(R"({"type":"object","required":["z"],"additionalProperties":false})"),
            "JSON Schema at the root: required property 'z' is not declared and "
            "additionalProperties is false");
}

TEST(JsonSchema, AdditionalPropertiesTrueFalseOrSchema) {
  check({R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":true})",
         {R"({"a":1})", R"({"a":1,"b":"x","c":[]})", R"({"b":null})", R"({"ab":1})"},
         {R"({"a":"x"})", R"({"b":1,"a":1})", R"({"a":1,"a":2})"}});
  check({R"({"type":"object","additionalProperties":{"type":"integer"}})",
         {"{}", R"({"x":1,"y":2})"}, {R"({"x":"1"})"}});
  // A long declared name: extra keys may be its prefixes or extensions, never the name.
  const std::string long_name(5000, 'k');
  check({(R"({"type":"object","properties":{")" + long_name +
          R"(":{"const":1}},"additionalProperties":{"const":2}})").c_str(),
         {("{\"" + long_name + "\":1,\"" + long_name.substr(1) + "\":2}").c_str(),
          ("{\"" + long_name + "k\":2}").c_str()},
         {("{\"" + long_name + "\":2}").c_str(), ("{\"" + long_name + "\":1,\"" + long_name + "\":2}").c_str()}});
  check({R"({"type":"object","properties":{"a":{}},"additionalProperties":false})",
         {"{}", R"({"a":"v"})"}, {R"({"b":1})"}});
}

TEST(JsonSchema, EnumConstAndNullable) {
  check({R"({"enum":["red","green",3,null,{"k":[1]}]})",
         {R"("red")", R"("green")", "3", "null", R"({"k":[1]})"}, {R"("blue")", "4", R"("Red")"}});
  check({R"({"const":"x"})", {R"("x")"}, {R"("y")"}});
  // The schema's type filters the values; other assertions beside them are refused.
  check({R"({"type":"string","enum":["a",1,null]})", {R"("a")"}, {"1", "null"}});
  check({R"({"type":"number","enum":[1,2.5,"x"]})", {"1", "2.5"}, {R"("x")"}});
  EXPECT_EQ(refusal(R"({"type":"string","enum":[1]})"),
            "JSON Schema at the root: no 'enum' value has the schema's type");
  EXPECT_EQ(refusal(R"({"type":"string","enum":["abc"],"maxLength":2})"),
            "JSON Schema at the root: 'maxLength' beside 'enum' is not supported");
  check({R"({"type":"integer","nullable":true})", {"5", "null"}, {R"("5")"}});
  check({"{\"enum\":[\"\xC3\xA9t\xC3\xA9\"]}", {"\"\xC3\xA9t\xC3\xA9\""}, {R"("ete")"}});
}

TEST(JsonSchema, ArraysItemsPrefixItemsAndCounts) {
  check({R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})",
         {"[1]", "[1,2,3]"}, {"[]", "[1,2,3,4]", R"(["a"])"}});
  check({R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})",
         {"[]", R"(["a"])", R"(["a",1])"}, {R"([1])", R"(["a",1,2])"}});
  check({R"({"type":"array","prefixItems":[{"const":0}],"items":{"type":"boolean"},"minItems":2})",
         {"[0,true]", "[0,false,true]"}, {"[0]", "[true]", "[0,1]"}});
  check({R"({"type":"array","items":[{"const":1}],"additionalItems":{"const":2}})",
         {"[]", "[1]", "[1,2,2]"}, {"[2]", "[1,1]"}});
}

TEST(JsonSchema, StringLengthsCountCharactersNotBytes) {
  check({R"({"type":"string","minLength":2,"maxLength":3})",
         {R"("ab")", R"("abc")", "\"\xC3\xA9\xC3\xA9\"", R"("\n\t")"},
         {R"("a")", R"("abcd")", "\"\xC3\xA9\""}});
}

TEST(JsonSchema, IntegerBoundsAreExact) {
  check({R"({"type":"integer","minimum":-12,"maximum":107})",
         {"-12", "-1", "0", "9", "10", "99", "100", "107"},
         {"-13", "-0", "108", "110", "1000", "-100"}});
  check({R"({"type":"integer","exclusiveMinimum":5,"exclusiveMaximum":9})",
         {"6", "8"}, {"5", "9"}});
  check({R"({"type":"integer","minimum":1})", {"1", "2", "10", "123456789"}, {"0", "-1"}});
  check({R"({"type":"integer","maximum":-3})", {"-3", "-40", "-1000"}, {"-2", "0", "3"}});
  check({R"({"type":"integer","minimum":1.5,"maximum":3.5})", {"2", "3"}, {"1", "4"}});
  check({R"({"type":"integer","minimum":5,"exclusiveMinimum":true})", {"6"}, {"5"}});  // draft 4
}

TEST(JsonSchema, NumberBoundsAllowIntegersAndFractions) {
  check({R"({"type":"number","minimum":0,"maximum":1})",
         {"0", "1", "0.5", "0.999"}, {"-1", "2", "1.5", "-0.5", "1e-3"}});
}

TEST(JsonSchema, AnyOfOneOfAllOf) {
  check({R"({"anyOf":[{"type":"integer"},{"type":"string","maxLength":1}]})",
         {"1", R"("a")"}, {R"("ab")", "true"}});
  check({R"({"oneOf":[{"const":"a"},{"const":"b"}]})", {R"("a")", R"("b")"}, {R"("c")"}});
  // oneOf is exclusive: branches must differ in type or in a required discriminator.
  check({R"({"oneOf":[{"type":"string"},{"type":"null"},{"type":"integer"}]})",
         {R"("s")", "null", "3"}, {"true"}});
  check({R"({"oneOf":[{"type":"object","properties":{"kind":{"const":"a"},"x":{"type":"integer"}},
                        "required":["kind","x"],"additionalProperties":false},
                       {"type":"object","properties":{"kind":{"enum":["b","c"]}},
                        "required":["kind"],"additionalProperties":false}]})",
         {R"({"kind":"a","x":1})", R"({"kind":"c"})"}, {R"({"kind":"a"})"}});
  EXPECT_EQ(refusal(R"({"oneOf":[{"type":"number"},{"type":"integer"}]})"),
            "JSON Schema at /oneOf: branches 0 and 1 may both match (oneOf is enforced only "
            "between branches of different types or with a required property of different "
            "const/enum values; anyOf is not exclusive)");
  EXPECT_EQ(refusal(R"({"oneOf":[{"type":"object","properties":{"a":{}}},{"type":"object"}]})")
                .substr(0, 51),
            "JSON Schema at /oneOf: branches 0 and 1 may both ma");
  check({R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},
                       {"properties":{"b":{"type":"string"}},"required":["b"]}]})",
         {R"({"a":1,"b":"x"})"}, {R"({"a":1})", R"({"b":"x"})"}});
  // additionalProperties sees only its own object's properties: here a and b are additional.
  EXPECT_EQ(refusal(R"({"allOf":[{"properties":{"a":{}},"required":["a"]}],
                        "additionalProperties":false})"),
            "JSON Schema at /properties/a: a required property whose schema is false");
  check({R"({"allOf":[{"properties":{"a":{"type":"integer"},"b":{}}}],"properties":{"a":{}},
             "additionalProperties":false})",
         {R"({"a":1})", "{}"}, {R"({"a":"x"})", R"({"a":1,"b":2})"}});
  // Siblings of anyOf apply to every branch.
  check({R"({"type":"object","properties":{"k":{"const":1}},"required":["k"],
             "additionalProperties":false,"anyOf":[{"required":["k"]}]})",
         {R"({"k":1})"}, {"{}"}});
}

TEST(JsonSchema, RefsToDefsAndDefinitionsIncludingRecursion) {
  const char* tree = R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
      "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"],
      "additionalProperties":false}},"$ref":"#/$defs/node"})";
  check({tree, {R"({"v":1})", R"({"v":1,"kids":[{"v":2,"kids":[{"v":3}]}]})"},
         {R"({"v":1,"kids":[{}]})"}});
  check({R"({"definitions":{"c":{"enum":["x","y"]}},"type":"array","items":{"$ref":"#/definitions/c"}})",
         {R"(["x","y"])"}, {R"(["z"])"}});
  // A $ref with sibling assertions is merged with its target.
  check({R"({"$defs":{"o":{"type":"object","properties":{"a":{"type":"integer"}},
             "additionalProperties":false}},"$ref":"#/$defs/o","required":["a"]})",
         {R"({"a":1})"}, {"{}", R"({"a":"x"})"}});
}

TEST(JsonSchema, Formats) {
  check({R"({"type":"string","format":"date"})", {R"("2024-02-28")", R"("1999-12-01")"},
         {R"("2024-13-01")", R"("2024-1-01")", R"("x")"}});
  check({R"({"type":"string","format":"time"})", {R"("23:59:59Z")", R"("08:00:00.5+02:00")"},
         {R"("24:00:00Z")", R"("08:00")"}});
  check({R"({"type":"string","format":"date-time"})", {R"("2024-01-05T10:20:30Z")"},
         {R"("2024-01-05 10:20:30Z")"}});
  check({R"({"type":"string","format":"uuid"})", {R"("123e4567-e89b-12d3-a456-426614174000")"},
         {R"("123e4567e89b12d3a456426614174000")"}});
  check({R"({"type":"string","format":"email"})", {R"("a.b@example.com")"},
         {R"("ab")", R"("a@b")"}});
  check({R"({"type":"string","format":"hostname"})", {R"("anything")"}, {"1"}});  // annotation
  EXPECT_EQ(refusal(R"({"type":"string","format":"date","maxLength":5})"),
            "JSON Schema at the root: 'maxLength' together with format 'date' is not supported");
}

TEST(JsonSchema, PatternSubset) {
  check({R"({"type":"string","pattern":"^[A-Z]{2}-\\d{3,4}$"})", {R"("AB-123")", R"("XY-9999")"},
         {R"("ab-123")", R"("AB-12")", R"("AB-12345")"}});
  check({R"({"type":"string","pattern":"^(cat|dog)s?$"})", {R"("cat")", R"("dogs")"}, {R"("cow")"}});
  check({R"({"type":"string","pattern":"x"})", {R"("x")", R"("axb")"}, {R"("ab")"}});  // unanchored
  check({R"({"type":"string","pattern":"^[^a]+$"})", {R"("bc")", "\"\xC3\xA9\""}, {R"("bac")"}});
  check({R"({"type":"string","pattern":"^a\"b$"})", {R"("a\"b")"}, {R"("a"b")"}});
}

TEST(JsonSchema, PropertyNamesAreWrittenEscaped) {
  check({R"({"type":"object","properties":{"a\"b":{"const":1},"\u00e9":{"const":2}},
             "required":["a\"b","\u00e9"],"additionalProperties":false})",
         {"{\"a\\\"b\":1,\"\xC3\xA9\":2}"}, {R"({"a"b":1,"é":2})"}});
}

TEST(JsonSchema, AnnotationsAndUnknownKeywordsAreIgnored) {
  check({R"({"$schema":"https://json-schema.org/draft/2020-12/schema","$id":"x","title":"T",
             "description":"d","examples":[1],"default":2,"$comment":"c","deprecated":true,
             "readOnly":true,"example":3,"id":"legacy","x-vendor":{"a":1},"type":"integer"})",
         {"1"}, {R"("1")"}});
}

TEST(JsonSchema, UnsupportedAssertionsAreRefusedByKeywordAndPointer) {
  EXPECT_EQ(refusal(R"({"type":"object","properties":{"tags":{"type":"array","uniqueItems":true}}})"),
            "unsupported JSON Schema keyword 'uniqueItems' at /properties/tags");
  EXPECT_EQ(refusal(R"({"patternProperties":{"^x":{}}})"),
            "unsupported JSON Schema keyword 'patternProperties' at the root");
  EXPECT_EQ(refusal(R"({"type":"array","items":{"type":"number","multipleOf":2}})"),
            "unsupported JSON Schema keyword 'multipleOf' at /items");
  EXPECT_EQ(refusal(R"({"if":{},"then":{}})"), "unsupported JSON Schema keyword 'if' at the root");
  EXPECT_EQ(refusal(R"({"anyOf":[{"type":"string"},{"not":{"const":1}}]})"),
            "unsupported JSON Schema keyword 'not' at /anyOf/1");
  EXPECT_EQ(refusal(R"({"$defs":{"a/b":{"dependentRequired":{}}},"$ref":"#/$defs/a~1b"})"),
            "unsupported JSON Schema keyword 'dependentRequired' at /$defs/a~1b");
  EXPECT_EQ(refusal(R"({"type":"object","minProperties":1})"),
            "unsupported JSON Schema keyword 'minProperties' at the root");
}

TEST(JsonSchema, MalformedSchemasAreRefusedWithTheirPointer) {
  EXPECT_EQ(refusal("{"), "JSON Schema: the schema is not valid JSON");
  EXPECT_EQ(refusal(R"({"type":"array","minItems":3,"maxItems":2})"),
            "JSON Schema at the root: minItems 3 > maxItems 2");
  EXPECT_EQ(refusal(R"({"properties":{"a":{"type":"strin"}}})"),
            "JSON Schema at /properties/a/type: unknown type 'strin'");
  EXPECT_EQ(refusal(R"({"$ref":"#/$defs/missing"})"),
            "JSON Schema at /$ref: $ref '#/$defs/missing' points at nothing");
  EXPECT_EQ(refusal(R"({"$ref":"https://example.com/s.json"})"),
            "JSON Schema at /$ref: $ref 'https://example.com/s.json' is not a local reference (\"#...\")");
  EXPECT_EQ(refusal(R"x({"type":"string","pattern":"(?=a)"})x"),
            "JSON Schema at /pattern: pattern: lookaround and named groups at offset 1 (supported: "
            "literals . [] \\d\\w\\s () (?:) | * + ? {n,m} ^ $)");
  EXPECT_EQ(refusal(R"({"enum":[]})"), "JSON Schema at /enum: expected a non-empty list");
  EXPECT_EQ(refusal("false"), "JSON Schema at the root: the schema false admits no value");
  EXPECT_EQ(refusal(R"({"type":"integer","minimum":10,"maximum":2})"),
            "JSON Schema at the root: no integer lies in [10, 2]");
  const std::string parens = std::string(100, '(') + "a" + std::string(100, ')');
  EXPECT_EQ(refusal(R"({"type":"string","pattern":")" + parens + "\"}"),
            "JSON Schema at /pattern: pattern: groups nested deeper than 64 at offset 64 (supported: "
            "literals . [] \\d\\w\\s () (?:) | * + ? {n,m} ^ $)");
  std::string deep = R"({"type":"integer"})";
  for (int i = 0; i < 300; ++i) deep = R"({"type":"array","items":)" + deep + "}";
  const std::string too_deep = refusal(deep);
  std::string items_256;  // the 257th level is refused
  for (int i = 0; i < 256; ++i) items_256 += "/items";
  EXPECT_EQ(too_deep, "JSON Schema at " + items_256 + ": subschemas nest deeper than 256");
  const std::string left = refusal(R"({"anyOf":[{"$ref":"#"},{"type":"null"}]})");
  EXPECT_NE(left.find("left-recursive"), std::string::npos) << left;
}

TEST(JsonObjectGrammar, AnyObjectOnlyAndCompact) {
  Doc d{std::make_shared<GrammarMatcher>(json_object_grammar())};
  EXPECT_TRUE(d.accepts("{}"));
  EXPECT_TRUE(d.accepts(R"({"a":{"b":[1,2.5,"x",null,true]}})"));
  EXPECT_FALSE(d.accepts("[]"));
  EXPECT_FALSE(d.accepts("{ }"));
  EXPECT_FALSE(d.accepts(R"({"a":1}x)"));
  EXPECT_TRUE(d.prefix(R"({"a":[1,)"));
  EXPECT_FALSE(d.prefix(R"({"a":[1,])"));
}

TEST(GrammarMatcher, StatesForkAndRewindAsValues) {
  Doc d = compile(R"({"type":"object","properties":{"a":{"enum":["x","y"]}},"required":["a"],
                      "additionalProperties":false})");
  GrammarMatcher& m = *d.m;
  const GrammarState mid = m.advance(m.start(), R"({"a":")");
  ASSERT_NE(mid, kDeadState);
  // Two forks from one state diverge without touching each other.
  const GrammarState x = m.advance(mid, std::string_view(R"(x"})"));
  const GrammarState y = m.advance(mid, std::string_view(R"(y"})"));
  EXPECT_TRUE(m.complete(x));
  EXPECT_TRUE(m.complete(y));
  EXPECT_EQ(m.advance(mid, std::string_view("z")), kDeadState);
  // Going back to `mid` (a rewind) and reading the same bytes gives the same state.
  EXPECT_EQ(m.advance(mid, std::string_view(R"(x"})")), x);
  // A finished document admits no further byte.
  EXPECT_TRUE(m.next_bytes(x).empty());
  EXPECT_FALSE(m.next_bytes(mid).empty());
  EXPECT_TRUE(m.next_bytes(mid).has('x'));
  EXPECT_FALSE(m.next_bytes(mid).has('z'));
}

TEST(GrammarMatcher, LongStringsReuseOneState) {
  Doc d = compile(R"({"type":"string"})");
  GrammarMatcher& m = *d.m;
  const GrammarState a = m.advance(m.start(), std::string_view("\"ab"));
  const GrammarState b = m.advance(a, std::string_view("cdefghijklmnop"));
  EXPECT_EQ(a, b);  // an unbounded repeat saturates its count
}

}  // namespace
}  // namespace kvcache::text

namespace kvcache::text {
namespace {

TEST(GrammarCheck, RefusesWhatTheMatcherCannotRun) {
  Grammar none;
  EXPECT_EQ(none.check().message(), "grammar: no root rule");
  Grammar empty;
  empty.set_root(empty.add_rule("r"));
  EXPECT_EQ(empty.check().message(), "grammar: rule 0 (r) has no alternative");
  Grammar left;  // r -> r 'a' | 'a'
  const int32_t r = left.add_rule("r");
  left.add_alt(r, {Grammar::ref(r), left.byte('a')});
  left.add_alt(r, {left.byte('a')});
  left.set_root(r);
  EXPECT_EQ(left.check().message(),
            "grammar: rule 0 (r) is left-recursive (it can enter itself before reading a byte)");
  Grammar star;  // s -> e*, e -> '' | 'a'
  const int32_t e = star.rule_of("e", {{}, {star.byte('a')}});
  star.set_root(star.rule_of("s", {{Grammar::repeat(e, 0, -1)}}));
  EXPECT_EQ(star.check().message(),
            "grammar: rule 1 (s) repeats rule 0 (e), which can match the empty string");
  Grammar range;
  const int32_t a = range.rule_of("a", {{range.byte('a')}});
  range.set_root(range.rule_of("s", {{Grammar::repeat(a, 3, 2)}}));
  EXPECT_EQ(range.check().message(), "grammar: rule 1 (s) repeats 3..2 times");
  Grammar dangling;
  dangling.set_root(dangling.rule_of("s", {{Grammar::ref(7)}}));
  EXPECT_EQ(dangling.check().message(), "grammar: rule 0 (s) refers to rule 7, which does not exist");
}

TEST(GrammarCheck, BoundedRepeatsCountExactly) {
  Grammar g;  // s -> 'a'{2,3} 'b'
  const int32_t a = g.rule_of("a", {{g.byte('a')}});
  g.set_root(g.rule_of("s", {{Grammar::repeat(a, 2, 3), g.byte('b')}}));
  ASSERT_TRUE(g.check().ok());
  GrammarMatcher m(std::make_shared<Grammar>(g));
  auto whole = [&](std::string_view t) {
    const GrammarState s = m.advance(m.start(), t);
    return s != kDeadState && m.complete(s);
  };
  EXPECT_FALSE(whole("ab"));
  EXPECT_TRUE(whole("aab"));
  EXPECT_TRUE(whole("aaab"));
  EXPECT_FALSE(whole("aaaab"));
  EXPECT_EQ(m.advance(m.start(), std::string_view("aaaa")), kDeadState);
}

}  // namespace
}  // namespace kvcache::text
