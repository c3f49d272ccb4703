// Internal to the cpu kernels: the per-(token, kv head, key range) worker every instruction
// set implements. It visits keys [j0, j1) of token t's KeySet for the q heads of kv head g
// together and leaves the unnormalized online-softmax state: m[G] running max of the logits,
// l[G] sum of exp(logit - m), acc[G * value_dim] sum of exp(logit - m) * v.
// The SIMD workers include this before their target pragmas, so every template here is
// compiled for the baseline instruction set wherever it is instantiated (the copies the
// linker merges are identical) and calls into the workers' own tile code.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "cpu/attention.h"

namespace kvcache::cpu::detail {

// Keys whose logits are computed before one rescale. 64 over 32 halves the per-block softmax
// work (maxima, sums, rescales) per key: 12 q / 4 kv heads of 64, 1K keys, 1 thread, 3-5 %
// faster; 32 / 8 heads of 128, 4K keys, 2.5 %; 64K keys and chunked prefill unchanged.
inline constexpr int64_t kKeyBlock = 64;
// The SIMD workers ask for each key's K and V rows this many keys before they reach them.
inline constexpr int64_t kPrefetchKeys = 32;

// The rows one logits tile of kKeys keys reads, and the rows the SIMD tiles ask for a line at
// a time while they move through dim: far ahead (the tile's keys kPrefetchKeys further on, K
// and V) into L2, and near (the next tile's key rows, this tile's value rows, which the block's
// value pass reads once its logits are done) into L1. The hardware prefetcher alone kept too
// few lines in flight for kernels this busy, and asking for a tile's rows all at once stalled
// on the line-fill buffers. Measured (2 threads, 64K keys, f16, 32/8 heads, AVX-512; earlier
// machine): no requests 0.48-0.51 of the read probe, per tile 0.65-0.71, a line per step into
// L1 0.80-0.86. On this project's 2-core Zen-4-class machines the far requests into L1 held
// the fill buffers and DRAM reads stalled; into L2 plus the near requests into L1 read 64K
// keys at 1.5-2x the rate (kvcache_attention_bench; the closing notes of #12 carry figures).
template <int kKeys>
struct TileRows {
  const std::byte* k[kKeys];  // keys j .. j + valid; the rest repeat the last valid row
  int32_t valid = 0;
  bool has_next = false;  // next_k / next_v hold rows that lie before the range's end
  bool has_near = false;  // near_k holds the next tile's key rows
  const char* next_k[kKeys];
  const char* next_v[kKeys];
  const char* near_k[kKeys];
  const char* this_v[kKeys];  // this tile's value rows
  int64_t k_bytes = 0, v_bytes = 0;

  // Asks for byte offset o of every row above that reaches that far. Always inlined: as an
  // out-of-line call GCC judged it free of effects and dropped it.
  [[gnu::always_inline]] void prefetch_line(int64_t o) const {
    const bool k_line = o < k_bytes, v_line = o < v_bytes;
    if (has_next && k_line)
      for (int i = 0; i < kKeys; ++i) __builtin_prefetch(next_k[i] + o, 0, 1);
    if (has_next && v_line)
      for (int i = 0; i < kKeys; ++i) __builtin_prefetch(next_v[i] + o, 0, 1);
    if (has_near && k_line)
      for (int i = 0; i < kKeys; ++i) __builtin_prefetch(near_k[i] + o, 0, 3);
    if (v_line)
      for (int i = 0; i < kKeys; ++i) __builtin_prefetch(this_v[i] + o, 0, 3);
  }
};

// The tile of kv head g's rows for keys [j, j + min(kKeys, left)) of `keys`, with, when
// `ahead`, the rows to prefetch: keys j + kPrefetchKeys .. + kKeys and j + kKeys .. + kKeys
// when they lie before `end` (a tile nobody prefetches for does not look them up).
template <int kKeys>
TileRows<kKeys> tile_rows(const AttentionProblem& p, const KeySet& keys, int32_t g, int64_t j,
                          int64_t left, int64_t end, bool ahead = true) {
  TileRows<kKeys> r;
  r.valid = static_cast<int32_t>(std::min<int64_t>(kKeys, left));
  for (int i = 0; i < kKeys; ++i) {
    const int64_t row = keys.row(j + std::min(i, r.valid - 1));
    r.k[i] = p.kv.k_row(g, row);
    r.this_v[i] = reinterpret_cast<const char*>(p.kv.v_row(g, row));
  }
  r.k_bytes = p.kv.k_bytes;
  r.v_bytes = p.kv.v_bytes;
  const int64_t next = j + kPrefetchKeys;
  r.has_next = ahead && next + kKeys <= end;
  for (int i = 0; r.has_next && i < kKeys; ++i) {
    const int64_t row = keys.row(next + i);
    r.next_k[i] = reinterpret_cast<const char*>(p.kv.k_row(g, row));
    r.next_v[i] = reinterpret_cast<const char*>(p.kv.v_row(g, row));
  }
  r.has_near = ahead && j + 2 * kKeys <= end;
  for (int i = 0; r.has_near && i < kKeys; ++i)
    r.near_k[i] = reinterpret_cast<const char*>(p.kv.k_row(g, keys.row(j + kKeys + i)));
  return r;
}

// Logit soft-cap over a block's logits s[h * kKeyBlock + b] (softcap > 0).
inline void apply_softcap(float* s, int32_t group, int64_t nb, float softcap) {
  for (int32_t h = 0; h < group; ++h)
    for (int64_t b = 0; b < nb; ++b) {
      float& x = s[h * kKeyBlock + b];
      x = softcap * std::tanh(x / softcap);
    }
}

// Logits of q heads [h0, h1) of kv head g's group (rows q + h * head_dim) over keys
// [jb, jb + nb) into s[h * kKeyBlock + b], in tiles of kKeys keys x kNh heads (kNh divides
// h1 - h0; kKeys * kNh <= kAcc); Tiles::template run<kKeys, kNh>(q, rows, prefetch, dim,
// scale, s) computes one tile and, when `prefetch`, asks for the rows the tile names ahead:
// only the first head tile of each key step does, and only when `prefetch` is set here.
template <int kAcc, class Tiles, int kKeys, int kNh = kAcc / kKeys>
void logits_tiles(const AttentionProblem& p, const KeySet& keys, int32_t g, const float* q,
                  int32_t h0, int32_t h1, int64_t jb, int64_t nb, int64_t end, bool prefetch,
                  float* s) {
  static_assert(kKeys * kNh <= kAcc);
  const int32_t dim = p.kv.head_dim;
  for (int64_t b = 0; b < nb; b += kKeys) {
    const auto rows = tile_rows<kKeys>(p, keys, g, jb + b, nb - b, end, prefetch);
    for (int32_t h = h0; h < h1; h += kNh)
      Tiles::template run<kKeys, kNh>(q + int64_t{h} * dim, rows, prefetch && h == h0, dim,
                                      p.scale, s + int64_t{h} * kKeyBlock + b);
  }
}

// The group's logits: tiles of kAcc / 4 keys x 4 heads when 4 divides the group, of kAcc / 2
// x 2 when 2 does; an odd group takes its multiples of 4 in 4-head tiles and the rest in one
// tile: 3 heads x kAcc / 4 keys (the tile's last accumulators idle), or the last head alone.
// So a group of 5 or 7 widens each key row twice, not 5 or 7 times (16K keys, f16, 1 thread,
// a group of 5: 1.14-1.27x faster). Splitting even groups the same way (6 = 4 + 2) measured
// 4-8 % slower than 3 passes of 2-head tiles.
template <int kAcc, class Tiles>
void logits_block(const AttentionProblem& p, const KeySet& keys, int32_t g, const float* q,
                  int32_t group, int64_t jb, int64_t nb, int64_t end, float* s) {
  if (group % 4 == 0) {
    logits_tiles<kAcc, Tiles, kAcc / 4>(p, keys, g, q, 0, group, jb, nb, end, true, s);
  } else if (group % 2 == 0) {
    logits_tiles<kAcc, Tiles, kAcc / 2>(p, keys, g, q, 0, group, jb, nb, end, true, s);
  } else {
    const int32_t fours = group / 4 * 4;
    if (fours > 0)
      logits_tiles<kAcc, Tiles, kAcc / 4>(p, keys, g, q, 0, fours, jb, nb, end, true, s);
    if (group % 4 == 3)
      logits_tiles<kAcc, Tiles, kAcc / 4, 3>(p, keys, g, q, fours, group, jb, nb, end,
                                             fours == 0, s);
    else
      logits_tiles<kAcc, Tiles, kAcc>(p, keys, g, q, fours, group, jb, nb, end, fours == 0, s);
  }
  if (p.softcap > 0.0f) apply_softcap(s, group, nb, p.softcap);
}

// The blocked online softmax every SIMD worker runs over keys [j0, j1) of token t for kv head
// g, kKeyBlock keys at a time: logits (W::kAcc accumulators a tile, W::run<kKeys, kNh> one tile),
// then W::softmax per head (a block's logits into weights, rescaling that head's m, l, acc),
// then W::values (acc += weights x value rows, whole group). s is the logits scratch.
template <class W>
void blocked_chunk(const AttentionProblem& p, int32_t t, int32_t g, int64_t j0, int64_t j1,
                   float* m, float* l, float* acc, float* s) {
  const int32_t group = p.q_heads / p.kv.kv_heads, dv = p.kv.value_dim, dim = p.kv.head_dim;
  const KeySet& keys = p.keys[t];
  const float* q = p.q + (int64_t{t} * p.q_heads + int64_t{g} * group) * dim;
  for (int32_t h = 0; h < group; ++h) m[h] = -INFINITY, l[h] = 0.0f;
  std::memset(acc, 0, sizeof(float) * static_cast<size_t>(group) * dv);
  for (int64_t jb = j0; jb < j1; jb += kKeyBlock) {
    const int64_t nb = std::min(kKeyBlock, j1 - jb);
    logits_block<W::kAcc, W>(p, keys, g, q, group, jb, nb, j1, s);
    for (int32_t h = 0; h < group; ++h)
      W::softmax(s + h * kKeyBlock, nb, dv, m[h], l[h], acc + int64_t{h} * dv);
    W::values(p, keys, g, group, jb, nb, s, acc);
  }
}

// blocked_chunk with Worker<the layer's dtype>. The float workers run only where K and V share
// one float type (float_workers_fit()); attend() sends every other layer to the quantized ones.
template <template <DType> class Worker>
void blocked_chunk_for_dtype(const AttentionProblem& p, int32_t t, int32_t g, int64_t j0,
                             int64_t j1, float* m, float* l, float* acc, float* s) {
  switch (p.kv.k_dtype) {
    case DType::kF32: return blocked_chunk<Worker<DType::kF32>>(p, t, g, j0, j1, m, l, acc, s);
    case DType::kF16: return blocked_chunk<Worker<DType::kF16>>(p, t, g, j0, j1, m, l, acc, s);
    case DType::kBF16: return blocked_chunk<Worker<DType::kBF16>>(p, t, g, j0, j1, m, l, acc, s);
    default: return;  // not reached: see float_workers_fit()
  }
}

// Whether the float workers (scalar, AVX2, AVX-512, wide) can read this layer: K and V in the
// same one of f32 / f16 / bf16.
inline bool float_workers_fit(const KvView& kv) {
  return kv.k_dtype == kv.v_dtype && !is_block_type(kv.k_dtype);
}

// scratch holds at least G * kKeyBlock floats.
using ChunkFn = void (*)(const AttentionProblem& p, int32_t t, int32_t g, int64_t j0,
                         int64_t j1, float* m, float* l, float* acc, float* scratch);

void chunk_scalar(const AttentionProblem& p, int32_t t, int32_t g, int64_t j0, int64_t j1,
                  float* m, float* l, float* acc, float* scratch);
void chunk_avx2(const AttentionProblem& p, int32_t t, int32_t g, int64_t j0, int64_t j1,
                float* m, float* l, float* acc, float* scratch);
void chunk_avx512(const AttentionProblem& p, int32_t t, int32_t g, int64_t j0, int64_t j1,
                  float* m, float* l, float* acc, float* scratch);
// The AVX-512 worker for many heads per kv head (a shared group's virtual token): heads across
// the lanes, keys widened once per block (attention_wide_avx512.cpp). Above kWideMaxHeads
// heads or with a soft-cap it runs chunk_avx512.
inline constexpr int32_t kWideMaxHeads = 64;
void chunk_avx512_wide(const AttentionProblem& p, int32_t t, int32_t g, int64_t j0, int64_t j1,
                       float* m, float* l, float* acc, float* scratch);

// The tail every SIMD worker file ends with, in namespace detail: the file's anonymous
// namespace defines logits_tile<kDtype, kKeys, kNh>, softmax_block and values_block; this binds
// them into the Worker blocked_chunk drives (`lanes` floats per accumulator register) and
// defines the entry `name` (chunk_avx2, chunk_avx512).
#define KVCACHE_ATTENTION_SIMD_ENTRY(name, lanes)                                                \
  namespace {                                                                                   \
  template <DType kDtype>                                                                       \
  struct Worker {                                                                               \
    static constexpr int kAcc = lanes;                                                          \
    template <int kKeys, int kNh>                                                               \
    static void run(const float* q, const TileRows<kKeys>& rows, bool prefetch, int32_t dim,   \
                    float scale, float* s) {                                                    \
      logits_tile<kDtype, kKeys, kNh>(q, rows, prefetch, dim, scale, s);                        \
    }                                                                                           \
    static void softmax(float* s, int64_t nb, int32_t dv, float& m, float& l, float* acc) {    \
      softmax_block(s, nb, dv, m, l, acc);                                                      \
    }                                                                                           \
    static void values(const AttentionProblem& p, const KeySet& keys, int32_t g, int32_t group, \
                       int64_t jb, int64_t nb, const float* w, float* acc) {                    \
      values_block<kDtype>(p, keys, g, group, jb, nb, w, acc);                                  \
    }                                                                                           \
  };                                                                                            \
  }                                                                                             \
  void name(const AttentionProblem& p, int32_t t, int32_t g, int64_t j0, int64_t j1, float* m,  \
            float* l, float* acc, float* scratch) {                                             \
    blocked_chunk_for_dtype<Worker>(p, t, g, j0, j1, m, l, acc, scratch);                       \
  }

// The same entry where the instruction set cannot exist (not x86): the portable worker.
#define KVCACHE_ATTENTION_SCALAR_ENTRY(name)                                                   \
  void name(const AttentionProblem& p, int32_t t, int32_t g, int64_t j0, int64_t j1, float* m, \
            float* l, float* acc, float* scratch) {                                            \
    chunk_scalar(p, t, g, j0, j1, m, l, acc, scratch);                                         \
  }

// The workers for every other layer (a block type for K or V, or K and V of different types):
// block keys are dotted in integers against the query quantized per block of 32 (int8 with a
// float scale), value rows are widened a block at a time and added in f32. attention_quant*.
// Each reads the stored rows in place: nothing wider than one row is ever copied.
void chunk_quant_scalar(const AttentionProblem& p, int32_t t, int32_t g, int64_t j0,
                        int64_t j1, float* m, float* l, float* acc, float* scratch);
void chunk_quant_avx2(const AttentionProblem& p, int32_t t, int32_t g, int64_t j0, int64_t j1,
                      float* m, float* l, float* acc, float* scratch);
void chunk_quant_avx512(const AttentionProblem& p, int32_t t, int32_t g, int64_t j0,
                        int64_t j1, float* m, float* l, float* acc, float* scratch);

// Tokens whose key sets (cell lists or runs) start with the same `shared` rows, in runs of at
// most 16 tokens — fewer where 16 would stack more than kWideMaxHeads q heads on a kv head
// (at least 2) —; groups sharing fewer than min_shared rows are left out. attention_shared.cpp.
struct SharedGroup {
  std::vector<int32_t> tokens;
  int64_t shared = 0;
};
std::vector<SharedGroup> find_shared_groups(const AttentionProblem& p, int64_t min_shared);
// Attention for every token of p, reading each group's shared cells once for all its members:
// `wide` computes the groups' virtual tokens (many heads per kv head), fn each token's own keys.
void attend_shared(const AttentionProblem& p, std::span<const SharedGroup> groups,
                   ThreadPool& pool, ChunkFn fn, ChunkFn wide);

}  // namespace kvcache::cpu::detail
