// kvcache_grammar_bench: the cost of constrained decoding on the shared fixture vocabularies
// (GPT-2 BPE, 50,257 tokens; Llama SentencePiece, 32,000): mask time per generated token
// (median, p99, mean) while a document's tokens (longest match) are fed one by one, for a nested object schema,
// an enum-heavy schema and free json_object — "cold" on a fresh matcher (every state new, as for
// a request's first pass) and "warm" on a second pass over the same matcher (masks cached) —
// and schema compile time for a ~14 KB schema (uncached). Each token fed must be allowed by
// the mask (else exit 1). Output: one JSON object on stdout.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "program/gguf.h"
#include "text/json_schema.h"
#include "text/token_mask.h"
#include "text/tokenizer.h"

namespace kvcache::text {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

json stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  auto at = [&](double q) {
    return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
  };
  return json{{"tokens", v.size()}, {"median_ms", at(0.5)}, {"p99_ms", at(0.99)},
              {"mean_ms", sum / static_cast<double>(v.size())}, {"max_ms", v.back()}};
}

struct Case {
  const char* name;
  std::shared_ptr<const Grammar> grammar;
  std::string document;
};

std::vector<Case> cases() {
  const char* nested = R"({"type":"object","properties":{
      "user":{"type":"object","properties":{"name":{"type":"string","maxLength":40},
        "age":{"type":"integer","minimum":0,"maximum":150},
        "address":{"type":"object","properties":{"city":{"type":"string"},"zip":{"type":"string",
          "pattern":"^[0-9]{5}$"}},"required":["city","zip"],"additionalProperties":false}},
        "required":["name","age","address"],"additionalProperties":false},
      "items":{"type":"array","items":{"type":"object","properties":{"sku":{"type":"string"},
        "qty":{"type":"integer","minimum":1}},"required":["sku","qty"],"additionalProperties":false}},
      "note":{"type":["string","null"]}},"required":["user","items","note"],"additionalProperties":false})";
  std::string enums = R"({"type":"object","properties":{)", enum_doc = "{";
  for (int f = 0; f < 8; ++f) {
    const std::string field = "field" + std::to_string(f);
    if (f > 0) {
      enums += ',';
      enum_doc += ',';
    }
    enums.append("\"").append(field).append("\":{\"enum\":[");
    for (int v = 0; v < 40; ++v) {
      if (v > 0) enums += ',';
      enums.append("\"value_").append(std::to_string(f)).append("_").append(std::to_string(v)).append("\"");
    }
    enums += "]}";
    enum_doc.append("\"").append(field).append("\":\"value_").append(std::to_string(f))
        .append("_").append(std::to_string(f * 5)).append("\"");
  }
  enums += R"(},"additionalProperties":false})";
  enum_doc += "}";
  const std::string nested_doc =
      R"({"user":{"name":"Ada Lovelace","age":36,"address":{"city":"London","zip":"12345"}},)"
      R"("items":[{"sku":"A-100","qty":2},{"sku":"B-7","qty":10}],"note":"deliver after noon"})";
  const std::string free_doc =
      R"({"id":12345,"tags":["alpha","beta"],"meta":{"ok":true,"score":0.75,"none":null},)"
      R"("text":"The quick brown fox jumps over the lazy dog."})";
  return {{"nested_object", *compile_json_schema(nested), nested_doc},
          {"enum_heavy", *compile_json_schema(enums), enum_doc},
          {"json_object", json_object_grammar(), free_doc}};
}

// The document as the longest tokens whose bytes spell it, left to right (the tokenizer's own
// encoding may start with a word-start marker, a space no generated JSON has).
std::vector<int32_t> longest_match(const TokenTrie& trie, const std::string& doc) {
  std::vector<int32_t> ids;
  for (size_t at = 0; at < doc.size();) {
    int32_t best = -1;
    size_t len = 0;
    for (int32_t id = 0; id < trie.n_tokens(); ++id) {
      const std::string& b = trie.bytes(id);
      if (b.size() > len && doc.compare(at, b.size(), b) == 0) best = id, len = b.size();
    }
    if (best < 0) return {};
    ids.push_back(best);
    at += len;
  }
  return ids;
}

// Feeds the document's tokens, timing the mask before each; false if a token is not allowed.
bool run_pass(TokenMasker& mk, const std::vector<int32_t>& ids, std::vector<double>& ms) {
  GrammarState s = mk.matcher().start();
  for (int32_t id : ids) {
    const auto t0 = Clock::now();
    const TokenMasker::Mask m = mk.mask(s);
    ms.push_back(ms_since(t0));
    if (!mask_allows(*m, id)) return false;
    s = mk.advance(s, id);
  }
  return true;
}

int main_impl() {
  json out;
  for (const char* vocab : {"gpt-2", "llama-spm"}) {
    const std::string path = std::string(KVCACHE_FIXTURES_DIR) + "/vocab/ggml-vocab-" + vocab + ".gguf";
    Result<gguf::GgufFile> f = gguf::GgufFile::open(path);
    if (!f.ok()) {
      std::fprintf(stderr, "grammar bench: %s\n", f.status().message().c_str());
      return 1;
    }
    const Tokenizer tok = *Tokenizer::from_gguf(*f);
    auto t0 = Clock::now();
    const TokenTrie trie = TokenTrie::from_tokenizer(tok);
    json v{{"tokens", tok.n_tokens()}, {"trie_nodes", trie.n_nodes()}, {"trie_build_ms", ms_since(t0)}};
    for (const Case& c : cases()) {
      const std::vector<int32_t> ids = longest_match(trie, c.document);
      TokenMasker mk(std::make_shared<GrammarMatcher>(c.grammar), trie);
      std::vector<double> cold, warm;
      if (!run_pass(mk, ids, cold) || !run_pass(mk, ids, warm)) {
        std::fprintf(stderr, "grammar bench: %s/%s: a document token was masked out\n", vocab, c.name);
        return 1;
      }
      v[c.name] = {{"cold", stats(cold)}, {"warm", stats(warm)}, {"states", mk.matcher().n_states()}};
    }
    out[vocab] = v;
  }
  // Compile time of a ~14 KB schema: 40 object properties, each a small object.
  std::string big = R"({"type":"object","properties":{)";
  for (int i = 0; i < 40; ++i) {
    if (i > 0) big += ',';
    big.append("\"property_number_").append(std::to_string(i)).append("\":");
    big += R"({"type":"object","description":"a property with a few typed members","properties":{"name":{"type":"string","maxLength":64},"count":{"type":"integer","minimum":0,"maximum":100000},"kind":{"enum":["alpha","beta","gamma","delta"]},"when":{"type":"string","format":"date-time"}},"required":["name","kind"],"additionalProperties":false})";
  }
  big += R"(},"additionalProperties":false})";
  std::vector<double> compile;
  for (int i = 0; i < 20; ++i) {
    // A distinct title each time: compile_json_schema returns repeated texts from its cache.
    const std::string text = big.substr(0, big.size() - 1) + ",\"title\":\"run " + std::to_string(i) + "\"}";
    const auto t0 = Clock::now();
    if (!compile_json_schema(text).ok()) return 1;
    compile.push_back(ms_since(t0));
  }
  out["compile_10kb"] = stats(compile);
  out["compile_10kb"]["schema_bytes"] = big.size();
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace
}  // namespace kvcache::text

int main() { return kvcache::text::main_impl(); }
