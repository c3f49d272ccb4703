// kvcache_tokenizer_bench: encode throughput of the SentencePiece and GPT-2 BPE tokenizers on
// the shared fixture vocabularies, for generated texts of 10 KB, 100 KB and 1 MB: prose,
// CJK + emoji, and worst cases for the merging (one 'a'-run word; one space run). A quadratic
// step would show as bytes_per_second falling ~10x per size step; the priority-queue merging
// keeps it roughly flat. probe_ratio = bytes/s over a byte-classifying scan of the same text
// run in this process (a machine-speed yardstick). Output: Google Benchmark JSON.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "text/tokenizer.h"
#include "program/gguf.h"

namespace kvcache::text {
namespace {

const Tokenizer& tokenizer(const std::string& name) {
  static std::map<std::string, Tokenizer> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  const std::string path =
      std::string(KVCACHE_FIXTURES_DIR) + "/vocab/ggml-vocab-" + name + ".gguf";
  Result<gguf::GgufFile> f = gguf::GgufFile::open(path);
  if (!f.ok()) {
    std::fprintf(stderr, "tokenizer bench: %s\n", f.status().message().c_str());
    std::exit(1);
  }
  Result<Tokenizer> t = Tokenizer::from_gguf(*f);
  if (!t.ok()) {
    std::fprintf(stderr, "tokenizer bench: %s\n", t.status().message().c_str());
    std::exit(1);
  }
  return cache.emplace(name, std::move(*t)).first->second;
}

enum TextKind { kProse, kCjk, kOneWord, kSpaces };

std::string make_text(TextKind kind, size_t bytes) {
  static const char* kWords[] = {"the", "cache", "holds", "keys", "and", "values", "for", "every",
                                 "token", "it's", "42", "layers", "sliding", "window,", "of",
                                 "attention.", "Hello", "world!", "x = y + 1;", "\n"};
  static const char* kCjkWords[] = {"\u4e2d\u6587", "\u6771\u4eac", "\U0001F600", "\uAC00\uB098",
                                    "\u3002", " ", "\u00e9t\u00e9", "123"};
  std::mt19937 rng(7);
  std::string s;
  while (s.size() < bytes) {
    switch (kind) {
      case kProse: s += kWords[rng() % 20]; s += ' '; break;
      case kCjk: s += kCjkWords[rng() % 8]; break;
      case kOneWord: s += 'a'; break;
      case kSpaces: s += ' '; break;
    }
  }
  s.resize(bytes);
  while (!s.empty() && (static_cast<unsigned char>(s.back()) & 0xC0) == 0x80) s.pop_back();
  return s;
}

// Bytes/s of a scan that classifies every byte (letters, digits, spaces, other).
double probe_bytes_per_second(const std::string& text) {
  size_t counts[4] = {0, 0, 0, 0};
  const auto t0 = std::chrono::steady_clock::now();
  int reps = 0;
  do {
    for (unsigned char c : text)
      ++counts[(c >= 'a' && c <= 'z') ? 0 : (c >= '0' && c <= '9') ? 1 : c == ' ' ? 2 : 3];
    ++reps;
  } while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(20));
  benchmark::DoNotOptimize(counts);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(text.size()) * reps / s;
}

void BM_Encode(benchmark::State& state, const std::string& vocab, TextKind kind) {
  const Tokenizer& t = tokenizer(vocab);
  const std::string text = make_text(kind, static_cast<size_t>(state.range(0)));
  const double probe = probe_bytes_per_second(text);
  EncodeOptions o;
  o.add_special = false;
  size_t n_tokens = 0;
  for (auto _ : state) {
    Result<std::vector<int32_t>> ids = t.encode(text, o);
    if (!ids.ok()) {
      state.SkipWithError(ids.status().message().c_str());
      return;
    }
    n_tokens = ids->size();
    benchmark::DoNotOptimize(ids->data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(text.size()));
  state.counters["tokens"] = static_cast<double>(n_tokens);
  state.counters["probe_ratio"] = benchmark::Counter(
      static_cast<double>(text.size()) / probe, benchmark::Counter::kIsIterationInvariantRate);
}

void register_all() {
  struct Case { const char* name; const char* vocab; TextKind kind; };
  const Case cases[] = {
      {"spm/prose", "llama-spm", kProse}, {"spm/cjk_emoji", "llama-spm", kCjk},
      {"spm/one_space_run", "llama-spm", kSpaces}, {"gpt2/prose", "gpt-2", kProse},
      {"gpt2/cjk_emoji", "gpt-2", kCjk}, {"gpt2/one_word", "gpt-2", kOneWord},
  };
  for (const Case& c : cases) {
    std::string vocab = c.vocab;
    TextKind kind = c.kind;
    benchmark::RegisterBenchmark((std::string("Encode/") + c.name).c_str(),
                                 [vocab, kind](benchmark::State& s) { BM_Encode(s, vocab, kind); })
        ->Arg(10 << 10)->Arg(100 << 10)->Arg(1 << 20)->Unit(benchmark::kMillisecond);
  }
}

}  // namespace
}  // namespace kvcache::text

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  kvcache::text::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
