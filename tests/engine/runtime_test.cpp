// The runtime builder: a model from a path, bytes or the embedded file, with its tokenizer,
// and a cache + engine over it; refusals name the option field.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <unistd.h>
#include <vector>

#include "engine/embedded_model.h"
#include "engine/runtime.h"
#include "engine/session.h"
#include "engine_test_util.h"
#include "test_model.h"

namespace kvcache::engine::testing {
namespace {

TEST(Runtime, OpensModelBytesWithTheirTokenizerAndBuildsTheCache) {
  const std::vector<uint8_t> bytes = tiny_model_bytes(TinySpec{});
  CacheOptions o;
  o.capacity = 64;
  Result<Runtime> r = open_runtime(ModelSource::memory(bytes), o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->name, "memory");
  EXPECT_EQ(r->model->hparams().vocab, 260);
  ASSERT_TRUE(r->tokenizer.has_value());
  EXPECT_EQ(r->tokenizer->kind(), text::Tokenizer::Kind::kBytes);  // the tiny file has no vocabulary
  EXPECT_EQ(r->setup.kind, "sequence");
  EXPECT_EQ(r->setup.config.capacity, 64);
  EXPECT_EQ(r->setup.step_tokens, 8);  // the file's, wider than its Sliding(4) layer
  EXPECT_EQ(r->seq, 0);
  EXPECT_EQ(&r->engine->model(), r->model.get());
  EXPECT_EQ(r->engine->shared_cache(), r->cache);
  // The runtime runs: the first chunk of a prompt lands in the cache.
  const std::vector<int32_t> tokens = some_tokens(3, 260);
  std::vector<float> logits = cached_logits(*r, tokens, r->setup.step_tokens);
  EXPECT_EQ(logits.size(), 3u * 260u);
  EXPECT_EQ(r->cache->pos(r->seq), 3);
}

TEST(Runtime, CellLayoutGetsItsFirstSequence) {
  Model m = tiny_model(TinySpec{});
  CacheOptions o;
  o.kind = "cell";
  Result<CachedEngine> c = build_engine(m, o);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->setup.kind, "cell");
  EXPECT_EQ(c->cache->pos(c->seq), 0);  // a live, empty sequence
  Result<int32_t> next = c->cache->seq_new();
  ASSERT_TRUE(next.ok());
  EXPECT_NE(*next, c->seq);
}

TEST(Runtime, OpensAModelFileByPathAndNamesItByItsStem) {
  const std::vector<uint8_t> bytes = tiny_model_bytes(TinySpec{});
  const std::string path = "/tmp/kvcache_runtime_test_" + std::to_string(getpid()) + ".gguf";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  ASSERT_EQ(std::fclose(f), 0);
  Result<LoadedModel> m = load_model(ModelSource::file(path));
  std::remove(path.c_str());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->name, "kvcache_runtime_test_" + std::to_string(getpid()));
  EXPECT_EQ(m->model->hparams().n_layers, 4);
}

TEST(Runtime, EmptySourceIsTheEmbeddedModel) {
  Result<LoadedModel> m = load_model({});
  if (embedded_model().empty()) {
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
    return;
  }
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->name, "tiny");
  EXPECT_EQ(m->eog_ids, m->tokenizer->eog_ids());
}

TEST(Runtime, RefusalsNameTheSourceOrTheOptionField) {
  Result<LoadedModel> missing = load_model(ModelSource::file("/nonexistent/model.gguf"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/model.gguf"), std::string::npos);

  const std::vector<uint8_t> bytes = tiny_model_bytes(TinySpec{});
  CacheOptions o;
  o.windows = {0, -2};
  Result<Runtime> r = open_runtime(ModelSource::memory(bytes), o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "cache options: windows[1] = -2, expected >= 0 (0 = Full)");
  o = CacheOptions{};
  o.capacity = -1;
  EXPECT_EQ(open_runtime(ModelSource::memory(bytes), o).status().message(),
            "cache options: capacity = -1, expected > 0");
}

TEST(PrefillChunks, FeedsAtMostStepTokensPerForwardAndRefusesAZeroStep) {
  Model m = tiny_model(TinySpec{});
  CacheOptions o;
  o.max_step_tokens = 3;
  Built b = build(m, o);
  const std::vector<int32_t> tokens = some_tokens(7, 260);
  std::vector<size_t> chunk_rows;
  Logits out;
  Status s = prefill_chunks(*b.engine, b.seq, tokens, 3, LogitsMode::kAll, out,
                            [&](const Logits& l) { chunk_rows.push_back(l.data.size() / 260); });
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(chunk_rows, (std::vector<size_t>{3, 3, 1}));  // 7 = 3 + 3 + 1
  EXPECT_EQ(b.cache->pos(b.seq), 7);
  s = prefill_chunks(*b.engine, b.seq, tokens, 0, LogitsMode::kLast, out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "prefill: step_tokens = 0, expected >= 1");
  EXPECT_EQ(b.cache->pos(b.seq), 7);  // refused: nothing fed
}

}  // namespace
}  // namespace kvcache::engine::testing
