// Token masks over real vocabularies (GPT-2 byte-level BPE, Llama SentencePiece, raw bytes):
// the trie walk agrees with advancing every token's bytes one by one, tokens spanning several
// JSON lexemes are allowed, end-of-generation only where the document is complete, and a
// cursor forks by copy and rewinds by token.
#include <gtest/gtest.h>

#include <bit>
#include <filesystem>
#include <string>
#include <vector>

#include "program/gguf.h"
#include "text/json_schema.h"
#include "text/token_mask.h"
#include "text/tokenizer.h"

namespace kvcache::text {
namespace {

std::optional<Tokenizer> fixture(const char* name) {
  const std::string path = std::string(KVCACHE_FIXTURES_DIR) + "/vocab/" + name;
  if (!std::filesystem::exists(path)) return std::nullopt;
  Result<gguf::GgufFile> file = gguf::GgufFile::open(path);
  if (!file.ok()) return std::nullopt;
  Result<Tokenizer> t = Tokenizer::from_gguf(*file);
  if (!t.ok()) return std::nullopt;
  return *t;
}

std::shared_ptr<TokenMasker> masker_for(const Tokenizer& t, std::string_view schema) {
  Result<std::shared_ptr<const Grammar>> g = compile_json_schema(schema);
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return std::make_shared<TokenMasker>(std::make_shared<GrammarMatcher>(*g),
                                       TokenTrie::from_tokenizer(t));
}

int64_t popcount(const std::vector<uint64_t>& m) {
  int64_t n = 0;
  for (uint64_t w : m) n += std::popcount(w);
  return n;
}

int32_t token_with_bytes(const Tokenizer& t, std::string_view bytes) {
  for (int32_t id = 0; id < t.n_tokens(); ++id)
    if (t.decode_one(id) == bytes && !t.is_eog(id)) return id;
  return -1;
}

// The mask of state s equals, token by token, "its bytes advance s to a live state" (plus
// end-of-generation tokens exactly when s is complete).
void expect_mask_matches_brute_force(TokenMasker& mk, const Tokenizer& t, GrammarState s) {
  const TokenMasker::Mask mask = mk.mask(s);
  GrammarMatcher& m = mk.matcher();
  int64_t allowed = 0;
  for (int32_t id = 0; id < t.n_tokens(); ++id) {
    const std::string bytes = t.decode_one(id);
    bool want;
    if (t.is_eog(id)) want = m.complete(s);
    else want = !bytes.empty() && m.advance(s, bytes) != kDeadState;
    allowed += want;
    ASSERT_EQ(mask_allows(*mask, id), want) << "token " << id << " '" << bytes << "'";
  }
  EXPECT_EQ(popcount(*mask), allowed);
}

constexpr const char* kPerson =
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":20},
        "age":{"type":"integer","minimum":0,"maximum":150},
        "tags":{"type":"array","items":{"enum":["a","b"]}}},
        "required":["name","age"],"additionalProperties":false})";

TEST(TokenMask, Gpt2MasksEqualBruteForceAlongADocument) {
  std::optional<Tokenizer> t = fixture("ggml-vocab-gpt-2.gguf");
  if (!t) GTEST_SKIP() << "no GPT-2 fixture vocabulary under " << KVCACHE_FIXTURES_DIR;
  auto mk = masker_for(*t, kPerson);
  GrammarMatcher& m = mk->matcher();
  const std::string doc = R"({"name":"Ann Lee","age":42,"tags":["a","b"]})";
  // Every byte boundary of the document: inside keys, strings, numbers, arrays, at the end.
  for (size_t k = 0; k <= doc.size(); k += 3) {
    SCOPED_TRACE("after '" + doc.substr(0, k) + "'");
    expect_mask_matches_brute_force(*mk, *t, m.advance(m.start(), std::string_view(doc).substr(0, k)));
  }
}

TEST(TokenMask, Gpt2TokensSpanningSeveralLexemesAreAllowed) {
  std::optional<Tokenizer> t = fixture("ggml-vocab-gpt-2.gguf");
  if (!t) GTEST_SKIP() << "no GPT-2 fixture vocabulary";
  auto mk = masker_for(*t, kPerson);
  GrammarMatcher& m = mk->matcher();
  const int32_t quote_colon = token_with_bytes(*t, "\":");   // ends a key, then the colon
  const int32_t brace_quote = token_with_bytes(*t, "{\"");   // opens the object and a key
  ASSERT_GE(quote_colon, 0);
  ASSERT_GE(brace_quote, 0);
  EXPECT_TRUE(mask_allows(*mk->mask(m.start()), brace_quote));
  EXPECT_TRUE(mask_allows(*mk->mask(m.advance(m.start(), std::string_view(R"({"name)"))), quote_colon));
  EXPECT_FALSE(mask_allows(*mk->mask(m.advance(m.start(), std::string_view(R"({"na)"))), quote_colon));
  // The cursor takes them as single tokens.
  const std::vector<int32_t> name = *t->encode("name", {false, false});
  GrammarCursor c(mk);
  EXPECT_TRUE(c.accept(brace_quote));
  for (int32_t id : name) EXPECT_TRUE(c.accept(id));
  EXPECT_TRUE(c.accept(quote_colon));
  EXPECT_EQ(c.accepted(), 2u + name.size());
}

TEST(TokenMask, EndOfGenerationOnlyWhenComplete) {
  std::optional<Tokenizer> t = fixture("ggml-vocab-gpt-2.gguf");
  if (!t) GTEST_SKIP() << "no GPT-2 fixture vocabulary";
  ASSERT_FALSE(t->eog_ids().empty());
  const int32_t eos = t->eog_ids()[0];
  auto mk = masker_for(*t, R"({"type":"integer","minimum":0,"maximum":99})");
  GrammarMatcher& m = mk->matcher();
  EXPECT_FALSE(mask_allows(*mk->mask(m.start()), eos));
  const GrammarState one = m.advance(m.start(), std::string_view("7"));
  EXPECT_TRUE(mask_allows(*mk->mask(one), eos));  // "7" is whole, "7x" may follow
  const GrammarState two = m.advance(one, std::string_view("5"));
  const TokenMasker::Mask done = mk->mask(two);
  EXPECT_TRUE(mask_allows(*done, eos));
  // "75" is the end: only end-of-generation tokens remain.
  EXPECT_EQ(popcount(*done), static_cast<int64_t>(t->eog_ids().size()));
  GrammarCursor c(mk);
  EXPECT_FALSE(c.accept(eos));
  EXPECT_EQ(c.accepted(), 0u);
}

TEST(TokenMask, SentencePieceMasksEqualBruteForce) {
  std::optional<Tokenizer> t = fixture("ggml-vocab-llama-spm.gguf");
  if (!t) GTEST_SKIP() << "no Llama SentencePiece fixture vocabulary";
  auto mk = masker_for(*t, kPerson);
  GrammarMatcher& m = mk->matcher();
  for (std::string_view prefix : {"", "{\"", R"({"name":"A)", R"({"name":"A","age":1)"}) {
    SCOPED_TRACE(std::string(prefix));
    expect_mask_matches_brute_force(*mk, *t, m.advance(m.start(), prefix));
  }
  // Byte-fallback tokens carry single bytes: "<0x7B>" is '{'.
  const int32_t brace_byte = token_with_bytes(*t, "{");
  ASSERT_GE(brace_byte, 0);
  EXPECT_TRUE(mask_allows(*mk->mask(m.start()), brace_byte));
}

TEST(TokenMask, RawByteVocabularyAllowsExactlyTheNextBytes) {
  const Tokenizer t = Tokenizer::bytes();
  auto mk = std::make_shared<TokenMasker>(std::make_shared<GrammarMatcher>(json_object_grammar()),
                                          TokenTrie::from_tokenizer(t));
  const TokenMasker::Mask start = mk->mask(mk->matcher().start());
  EXPECT_EQ(popcount(*start), 1);
  EXPECT_TRUE(mask_allows(*start, '{'));
  GrammarCursor c(mk);
  for (char ch : std::string_view(R"({"k":[1,{}]})")) ASSERT_TRUE(c.accept(static_cast<uint8_t>(ch)));
  EXPECT_TRUE(c.complete());
  EXPECT_TRUE(c.finished());
}

TEST(TokenMask, CursorForksByCopyAndRewindsByToken) {
  const Tokenizer t = Tokenizer::bytes();
  auto g = compile_json_schema(R"({"enum":["yes","no"]})");
  ASSERT_TRUE(g.ok());
  auto mk = std::make_shared<TokenMasker>(std::make_shared<GrammarMatcher>(*g),
                                          TokenTrie::from_tokenizer(t));
  GrammarCursor a(mk);
  ASSERT_TRUE(a.accept('"'));
  GrammarCursor b = a;  // fork
  ASSERT_TRUE(a.accept('y'));
  ASSERT_TRUE(b.accept('n'));
  EXPECT_FALSE(a.accept('o'));  // refused: nothing changes
  EXPECT_EQ(a.accepted(), 2u);
  EXPECT_TRUE(mask_allows(*a.allowed(), 'e'));
  EXPECT_FALSE(mask_allows(*a.allowed(), 'o'));
  EXPECT_TRUE(mask_allows(*b.allowed(), 'o'));
  a.rewind(1);  // back to after '"'
  EXPECT_EQ(a.state(), mk->matcher().advance(mk->matcher().start(), uint8_t{'"'}));
  ASSERT_TRUE(a.accept('n'));
  EXPECT_EQ(a.state(), b.state());
  a.rewind(10);  // clamped to the start
  EXPECT_EQ(a.accepted(), 0u);
  EXPECT_EQ(a.state(), mk->matcher().start());
}

TEST(TokenTrie, PiecesSharingPrefixesWalkInPreorder) {
  TokenTrie trie = TokenTrie::from_pieces({"ab", "a", "", "abc", "b", "ab"}, {2});
  // Nodes: root, a, ab, abc, b.
  EXPECT_EQ(trie.n_nodes(), 5);
  auto g = compile_json_schema(R"({"type":"string"})");
  ASSERT_TRUE(g.ok());
  TokenMasker mk(std::make_shared<GrammarMatcher>(*g), trie);
  const TokenMasker::Mask m = mk.mask(mk.matcher().advance(mk.matcher().start(), uint8_t{'"'}));
  for (int32_t id : {0, 1, 3, 4, 5}) EXPECT_TRUE(mask_allows(*m, id)) << id;
  EXPECT_FALSE(mask_allows(*m, 2));  // the end-of-generation id: a string is not complete
}

}  // namespace
}  // namespace kvcache::text
