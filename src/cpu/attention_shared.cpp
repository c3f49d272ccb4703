// Attention over shared prefixes: tokens whose key sets start with the same rows (forks and
// prefix hits of the cell layout, or the tokens of one prefill chunk in either layout: cell
// lists or the sequence layout's runs) read those K/V rows once for all of their queries —
// the group's q heads are stacked into one virtual token, as GQA stacks the heads of one kv
// head — and each token then reads only its own suffix; the two online-softmax states merge
// per head. Layer: cpu; internal to attention.cpp.
#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "cpu/attention_chunk.h"

namespace kvcache::cpu::detail {
namespace {

constexpr int64_t kPieceKeys = 512;  // a shared-range task is at most this long
static_assert(kPieceKeys % kKeyBlock == 0, "pieces end at whole key blocks");
constexpr size_t kMaxGroupTokens = 16;

// Partial softmax states of `heads` q heads: m[h], l[h], acc[h * dv].
struct States {
  int32_t heads = 0, dv = 0;
  std::vector<float> data;
  void fit(int32_t h, int32_t v) {
    heads = h;
    dv = v;
    data.assign(static_cast<size_t>(h) * (2 + v), 0.0f);
  }
  float* m() { return data.data(); }
  float* l() { return data.data() + heads; }
  float* acc() { return data.data() + 2 * heads; }
};

std::vector<float>& thread_logits(int64_t n) {
  thread_local std::vector<float> s;
  if (static_cast<int64_t>(s.size()) < n) s.resize(static_cast<size_t>(n));
  return s;
}

// Keys j, j + 1, ... of k that lie in consecutive rows, counted from j (< k.size()): the rest
// of the run j is in, or 1 for a cell list.
int64_t contiguous_from(const KeySet& k, int64_t j) {
  if (k.n_runs == 0) return 1;
  return j < k.run_size[0] ? k.run_size[0] - j : k.size() - j;
}

// How many leading keys a and b have in common (same rows in the same order). Runs compare a
// stretch at a time: two stretches of consecutive rows that start at the same row agree for
// as long as both last.
int64_t common_prefix(const KeySet& a, const KeySet& b) {
  const int64_t n = std::min(a.size(), b.size());
  if (a.n_runs == 0 && b.n_runs == 0) {
    int64_t i = 0;
    while (i < n && a.cells[static_cast<size_t>(i)] == b.cells[static_cast<size_t>(i)]) ++i;
    return i;
  }
  int64_t j = 0;
  while (j < n && a.row(j) == b.row(j))
    j = std::min(n, j + std::min(contiguous_from(a, j), contiguous_from(b, j)));
  return j;
}

// The first n keys of k (n <= k.size()).
KeySet key_prefix(const KeySet& k, int64_t n) {
  KeySet out;
  if (k.n_runs == 0) {
    out.cells = k.cells.first(static_cast<size_t>(n));
    return out;
  }
  out.run_begin[0] = k.run_begin[0];
  out.run_begin[1] = k.run_begin[1];
  out.run_size[0] = std::min(n, k.run_size[0]);
  out.run_size[1] = n - out.run_size[0];
  out.n_runs = out.run_size[1] > 0 ? 2 : 1;
  return out;
}

}  // namespace

std::vector<SharedGroup> find_shared_groups(const AttentionProblem& p, int64_t min_shared) {
  std::vector<SharedGroup> groups;
  if (p.n_tokens < 2) return groups;
  std::map<int64_t, std::vector<int32_t>> by_first;  // first row -> tokens
  for (int32_t t = 0; t < p.n_tokens; ++t) {
    const KeySet& k = p.keys[t];
    if (k.size() == 0) return {};
    by_first[k.row(0)].push_back(t);
  }
  // Runs of at most kMaxGroupTokens tokens keep a group's states in cache (its virtual heads
  // are n * q_heads / kv_heads wide) and within the wide worker's heads; each run shares what
  // all of its members share.
  const int32_t per_kv = p.kv.kv_heads > 0 ? std::max(1, p.q_heads / p.kv.kv_heads) : 1;
  const size_t most = std::clamp<size_t>(static_cast<size_t>(kWideMaxHeads / per_kv), 2,
                                         kMaxGroupTokens);
  for (const auto& [cell, tokens] : by_first) {
    for (size_t b = 0; b + 1 < tokens.size(); b += most) {
      const size_t e = std::min(tokens.size(), b + most);
      if (e - b < 2) break;
      const KeySet& lead = p.keys[tokens[b]];
      int64_t shared = lead.size();
      for (size_t i = b + 1; i < e; ++i)
        shared = std::min(shared, common_prefix(lead, p.keys[tokens[i]]));
      if (shared >= min_shared)
        groups.push_back({std::vector<int32_t>(tokens.begin() + b, tokens.begin() + e), shared});
    }
  }
  return groups;
}

void attend_shared(const AttentionProblem& p, std::span<const SharedGroup> groups,
                   ThreadPool& pool, ChunkFn fn, ChunkFn wide) {
  const int32_t hkv = p.kv.kv_heads, qpk = p.q_heads / hkv;
  const int32_t dk = p.kv.head_dim, dv = p.kv.value_dim;
  std::vector<int32_t> group_of(p.n_tokens, -1);
  std::vector<int64_t> shared(p.n_tokens, 0);  // keys of token t read through its group
  std::vector<int32_t> member(p.n_tokens, -1);  // index of t in its group
  // Each group as one virtual token with n * qpk heads per kv head, over the shared cells.
  struct Virtual {
    std::vector<float> q;  // [hkv, n * qpk, dk]
    KeySet keys;  // the lead token's first `shared` keys
    AttentionProblem problem;
    int64_t pieces = 0;
  };
  std::vector<Virtual> virt(groups.size());
  struct Task {
    int32_t group, g;
    int64_t j0, j1;
  };
  std::vector<Task> tasks;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    SharedGroup sg = groups[gi];
    // Whole key blocks only: the shared pieces and each token's own suffix then start their
    // blocks of kKeyBlock keys at the key indices a token attended alone starts them, so a
    // block value type's weight codes (taken per key block) are the same, and a verification
    // row equals a decode step (tests/engine/speculative_cli_test.sh).
    sg.shared -= sg.shared % kKeyBlock;
    const auto n = static_cast<int32_t>(sg.tokens.size());
    Virtual& v = virt[gi];
    v.q.resize(static_cast<size_t>(hkv) * n * qpk * dk);
    for (int32_t i = 0; i < n; ++i) {
      const int32_t t = sg.tokens[i];
      shared[t] = sg.shared;
      member[t] = i;
      group_of[t] = static_cast<int32_t>(gi);
      for (int32_t g = 0; g < hkv; ++g)
        std::copy_n(p.q + (int64_t{t} * p.q_heads + int64_t{g} * qpk) * dk, qpk * dk,
                    v.q.data() + ((int64_t{g} * n + i) * qpk) * dk);
    }
    v.keys = key_prefix(p.keys[sg.tokens[0]], sg.shared);
    v.problem = p;
    v.problem.n_tokens = 1;
    v.problem.q_heads = hkv * n * qpk;
    v.problem.q = v.q.data();
    v.problem.keys = std::span<const KeySet>(&v.keys, 1);
    v.pieces = (sg.shared + kPieceKeys - 1) / kPieceKeys;
    for (int32_t g = 0; g < hkv; ++g)
      for (int64_t c = 0; c < v.pieces; ++c)
        tasks.push_back({static_cast<int32_t>(gi), g, c * kPieceKeys,
                         std::min(sg.shared, (c + 1) * kPieceKeys)});
  }
  const auto n_shared_tasks = static_cast<int64_t>(tasks.size());
  // Shared pieces first, then every (token, kv head)'s own suffix.
  std::vector<States> state(tasks.size() + static_cast<size_t>(p.n_tokens) * hkv);
  pool.run_tasks(n_shared_tasks + int64_t{p.n_tokens} * hkv, [&](int64_t i) {
    States& st = state[static_cast<size_t>(i)];
    if (i < n_shared_tasks) {
      const Task& task = tasks[static_cast<size_t>(i)];
      const AttentionProblem& vp = virt[task.group].problem;
      const int32_t heads = vp.q_heads / hkv;
      st.fit(heads, dv);
      wide(vp, 0, task.g, task.j0, task.j1, st.m(), st.l(), st.acc(),
           thread_logits(int64_t{heads} * kKeyBlock).data());
      return;
    }
    const int64_t k = i - n_shared_tasks;
    const auto t = static_cast<int32_t>(k / hkv), g = static_cast<int32_t>(k % hkv);
    const int64_t j0 = shared[t], j1 = p.keys[t].size();
    st.fit(qpk, dv);
    if (j0 == j1) {
      std::fill(st.m(), st.m() + qpk, -INFINITY);  // no own keys: an empty state
      return;
    }
    fn(p, t, g, j0, j1, st.m(), st.l(), st.acc(), thread_logits(int64_t{qpk} * kKeyBlock).data());
  });
  // Merge per (token, kv head, q head): the group's pieces (its rows of the virtual heads)
  // and the token's own suffix, weighted by exp(m_piece - m).
  std::vector<int64_t> first_task(groups.size() + 1, 0);
  for (size_t gi = 0; gi < groups.size(); ++gi)
    first_task[gi + 1] = first_task[gi] + hkv * virt[gi].pieces;
  pool.run_tasks(int64_t{p.n_tokens} * hkv, [&](int64_t k) {
    const auto t = static_cast<int32_t>(k / hkv), g = static_cast<int32_t>(k % hkv);
    States& own = state[static_cast<size_t>(n_shared_tasks + k)];
    float* out = p.out + (int64_t{t} * p.q_heads + int64_t{g} * qpk) * dv;
    const int32_t gi = group_of[t];
    for (int32_t h = 0; h < qpk; ++h) {
      // (state, head index within it) of every part this head is made of.
      float m = own.m()[h];
      const int64_t t0 = gi < 0 ? 0 : first_task[gi] + int64_t{g} * virt[gi].pieces;
      const int64_t t1 = gi < 0 ? 0 : t0 + virt[gi].pieces;
      const int32_t vh = member[t] * qpk + h;
      for (int64_t c = t0; c < t1; ++c) m = std::max(m, state[static_cast<size_t>(c)].m()[vh]);
      double denom = 0.0;
      std::fill(out + h * dv, out + (h + 1) * dv, 0.0f);
      auto add = [&](States& st, int32_t head) {
        if (st.m()[head] == -INFINITY) return;
        const float w = std::exp(st.m()[head] - m);
        denom += double(st.l()[head]) * w;
        const float* acc = st.acc() + int64_t{head} * dv;
        for (int32_t d = 0; d < dv; ++d) out[h * dv + d] += acc[d] * w;
      };
      for (int64_t c = t0; c < t1; ++c) add(state[static_cast<size_t>(c)], vh);
      add(own, h);
      const float* sink = p.sinks != nullptr ? p.sinks + int64_t{g} * qpk + h : nullptr;
      finish_head(m, denom, out + int64_t{h} * dv, dv, sink, out + int64_t{h} * dv);
    }
  });
}

}  // namespace kvcache::cpu::detail
