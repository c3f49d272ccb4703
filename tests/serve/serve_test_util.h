// Helpers shared by the executor tests: the embedded tiny model (5 layers: 3 full + 2
// sliding(32), one KV-shared, byte tokenizer, max_context 256), the tokens a prompt yields
// when run alone the way `kvcache run` runs it, and a drain loop. Layer: tests.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/runtime.h"
#include "engine/session.h"
#include "serve/executor.h"

namespace kvcache::serve::testing {

inline const engine::Model& tiny() {
  static const engine::LoadedModel* loaded = [] {
    auto m = engine::load_model({});  // the embedded model
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    return new engine::LoadedModel(std::move(*m));
  }();
  return *loaded->model;
}

inline const text::Tokenizer& bytes_tokenizer() {
  static const text::Tokenizer t = text::Tokenizer::bytes();
  return t;
}

inline std::vector<int32_t> ids(const std::string& text) {
  std::vector<int32_t> out;
  for (unsigned char c : text) out.push_back(c);
  return out;
}

// What `kvcache run` generates for the prompt: the sequence layout, f32 K/V, its chunking.
inline std::vector<int32_t> alone(const std::vector<int32_t>& prompt, int32_t max_new,
                                  const engine::SamplerConfig& sc = {}) {
  auto run = engine::build_engine(tiny(), engine::CacheOptions{});
  EXPECT_TRUE(run.ok()) << run.status().to_string();
  engine::Session session(*run->engine, run->setup.step_tokens);
  engine::Sampler sampler(sc);
  auto st = session.turn(prompt, max_new, sampler);
  EXPECT_TRUE(st.ok()) << st.status().to_string();
  return st.ok() ? st->generated : std::vector<int32_t>{};
}

inline std::unique_ptr<Executor> make(const ExecutorOptions& o) {
  auto ex = Executor::create(tiny(), &bytes_tokenizer(), o);
  EXPECT_TRUE(ex.ok()) << ex.status().to_string();
  return ex.ok() ? std::move(*ex) : nullptr;
}

// Steps until idle; the finished results by request id.
inline std::map<int64_t, RequestResult> drain(Executor& ex) {
  std::map<int64_t, RequestResult> out;
  for (int guard = 0; !ex.idle() && guard < 100000; ++guard) {
    Status s = ex.step();
    EXPECT_TRUE(s.ok()) << s.to_string();
    for (RequestResult& r : ex.take_finished()) out[r.id] = std::move(r);
  }
  EXPECT_TRUE(ex.idle());
  for (RequestResult& r : ex.take_finished()) out[r.id] = std::move(r);
  return out;
}

}  // namespace kvcache::serve::testing
