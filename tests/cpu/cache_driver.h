// A test driver for the cpu caches: runs steps with random q/k/v through a Cache and checks
// every output against a brute force over its own simple model of what each sequence holds
// (per sequence, per layer, the K/V of each position, rounded to the storage dtype).
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/cache.h"
#include "cpu/hadamard.h"
#include "test_util.h"

namespace kvcache::cpu::testing {

class CacheDriver {
 public:
  CacheDriver(Cache& cache, std::vector<int32_t> q_heads, uint32_t seed)
      : cache_(cache), q_heads_(std::move(q_heads)), rng_(seed) {}

  // Model updates for verbs the test ran successfully on the cache.
  void on_new(int32_t seq) { seqs_[seq] = Seq(n_layers()); }
  void on_clone(int32_t src, int32_t dst, int64_t upto) {
    Seq s = seqs_.at(src);
    for (auto& l : s.k) l.resize(std::min<size_t>(l.size(), upto));
    for (auto& l : s.v) l.resize(std::min<size_t>(l.size(), upto));
    seqs_[dst] = s;
  }
  void on_rm(int32_t seq) { seqs_.erase(seq); }
  void on_rewind(int32_t seq, int64_t pos) {
    for (auto& l : seqs_.at(seq).k) l.resize(pos);
    for (auto& l : seqs_.at(seq).v) l.resize(pos);
  }
  void on_clear() { seqs_.clear(); }
  // seq now holds what from_seq holds in `from`'s cache (rows copied by write_rows).
  void on_import(int32_t seq, const CacheDriver& from, int32_t from_seq) {
    seqs_[seq] = from.seqs_.at(from_seq);
  }
  int64_t model_pos(int32_t seq) const {
    auto it = seqs_.find(seq);
    return it == seqs_.end() ? 0 : static_cast<int64_t>(it->second.k[0].size());
  }

  // Declares and runs one step over every layer; checks outputs. Returns the outputs.
  std::vector<std::vector<float>> step(const std::vector<int32_t>& ids, float softcap = 0.0f) {
    const auto T = static_cast<int32_t>(ids.size());
    EXPECT_TRUE(cache_.declare_step(ids).ok());
    std::vector<int64_t> positions(T);
    std::map<int32_t, int64_t> next;
    for (int32_t i = 0; i < T; ++i) {
      if (!next.count(ids[i])) next[ids[i]] = model_pos(ids[i]);
      positions[i] = next[ids[i]]++;
    }
    std::vector<std::vector<float>> outs;
    for (int32_t layer = 0; layer < n_layers(); ++layer) {
      const LayerGeometry& l = cache_.geometry().layers[layer];
      const int32_t hq = q_heads_[layer];
      auto q = random_floats(rng_, size_t(T) * hq * l.head_dim, -2, 2);
      auto k = random_floats(rng_, size_t(T) * l.kv_heads * l.head_dim);
      auto v = random_floats(rng_, size_t(T) * l.kv_heads * l.value_dim);
      std::vector<float> out(size_t(T) * hq * l.value_dim);
      const float scale = 1.0f / std::sqrt(float(l.head_dim));
      AttendArgs a{layer, T, hq, positions, q, k, v, scale, softcap, out};
      if (l.sinks) a.sinks = sinks(layer);
      Status st = cache_.update_and_attend(a);
      EXPECT_TRUE(st.ok()) << st.to_string();
      const DType kt = cache_.config().key_type(), vt = cache_.config().value_type();
      const bool rot = cache_.config().rotated();
      for (int32_t i = 0; i < T; ++i) {
        auto& s = seqs_[ids[i]];
        if (s.k.empty()) s = Seq(n_layers());
        const size_t kw = size_t(l.kv_heads) * l.head_dim, vw = size_t(l.kv_heads) * l.value_dim;
        std::vector<float> ki(k.begin() + i * kw, k.begin() + (i + 1) * kw);
        std::vector<float> vi(v.begin() + i * vw, v.begin() + (i + 1) * vw);
        if (rot) {  // the cache stores H k, H v per head (cpu/hadamard.h)
          hadamard_rows_reference(ki.data(), l.kv_heads, l.head_dim);
          hadamard_rows_reference(vi.data(), l.kv_heads, l.value_dim);
        }
        s.k[layer].push_back(rounded(kt, ki));
        s.v[layer].push_back(rounded(vt, vi));
      }
      check(layer, ids, positions, q, out, scale, softcap);
      outs.push_back(out);
    }
    return outs;
  }

  int32_t n_layers() const { return static_cast<int32_t>(cache_.geometry().layers.size()); }

  // The sink logits of a layer with sinks: fixed per layer, in [-3, 3] (around the logits).
  const std::vector<float>& sinks(int32_t layer) {
    auto it = sinks_.find(layer);
    if (it == sinks_.end())
      it = sinks_.emplace(layer, random_floats(rng_, size_t(q_heads_[layer]), -3, 3)).first;
    return it->second;
  }

 private:
  struct Seq {
    Seq() = default;
    explicit Seq(int32_t layers) : k(layers), v(layers) {}
    std::vector<std::vector<std::vector<float>>> k, v;  // [layer][pos] -> [kv_heads * dim]
  };

  void check(int32_t layer, const std::vector<int32_t>& ids, const std::vector<int64_t>& pos,
             const std::vector<float>& q, const std::vector<float>& out, float scale,
             float softcap) {
    const LayerGeometry& l = cache_.geometry().layers[layer];
    const int32_t hq = q_heads_[layer], group = hq / l.kv_heads;
    // Block keys are dotted against the query quantized to int8 per block (attention_quant.h):
    // its rounding (<= 1/254 of a block's largest |q|) moves a logit by ~1e-3 here.
    const double tol = is_block_type(cache_.config().key_type()) ? 1e-2 : 3e-5;
    for (size_t i = 0; i < ids.size(); ++i) {
      const Seq& s = seqs_.at(ids[i]);
      const int64_t lo = l.window > 0 ? std::max<int64_t>(0, pos[i] - l.window + 1) : 0;
      for (int32_t h = 0; h < hq; ++h) {
        const int32_t g = h / group;
        std::vector<const float*> ks, vs;
        for (int64_t p = lo; p <= pos[i]; ++p) {
          ks.push_back(s.k[layer][p].data() + g * l.head_dim);
          vs.push_back(s.v[layer][p].data() + g * l.value_dim);
        }
        std::vector<float> qh(q.begin() + (i * hq + h) * l.head_dim,
                              q.begin() + (i * hq + h + 1) * l.head_dim);
        const bool rot = cache_.config().rotated();
        if (rot) hadamard_rows_reference(qh.data(), 1, l.head_dim);  // q . k unchanged
        const float* sink = l.sinks ? sinks_.at(layer).data() + h : nullptr;
        auto want =
            brute_attend(qh.data(), ks, vs, l.head_dim, l.value_dim, scale, softcap, sink);
        if (rot) {  // the output mixes rotated values: rotate it back
          std::vector<float> w(want.begin(), want.end());
          hadamard_rows_reference(w.data(), 1, l.value_dim);
          want.assign(w.begin(), w.end());
        }
        for (int32_t d = 0; d < l.value_dim; ++d) {
          const float got = out[(i * hq + h) * l.value_dim + d];
          ASSERT_NEAR(got, want[d], tol * (1 + std::abs(want[d])))
              << "layer " << layer << " token " << i << " seq " << ids[i] << " pos " << pos[i]
              << " head " << h << " d " << d;
        }
      }
    }
  }

  Cache& cache_;
  std::vector<int32_t> q_heads_;
  std::mt19937 rng_;
  std::map<int32_t, Seq> seqs_;
  std::map<int32_t, std::vector<float>> sinks_;  // per layer with sinks: q_heads logits
};

}  // namespace kvcache::cpu::testing
