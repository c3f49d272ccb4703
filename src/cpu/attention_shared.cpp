// Attention over shared prefixes: tokens whose key sets start with the same rows (forks and
// prefix hits of the cell layout, or the tokens of one prefill chunk in either layout: cell
// lists or the sequence layout's runs) read those K/V rows once for all of their queries —
// the group's q heads are stacked into one virtual token, as GQA stacks the heads of one kv
// head — and each token then reads only its own suffix; the two online-softmax states merge
// per head. Layer: cpu; internal to attention.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <vector>

#include "cpu/attention_chunk.h"

namespace kvcache::cpu::detail {
namespace {

constexpr int64_t kPieceKeys = 512;  // a shared-range task is at most this long
static_assert(kPieceKeys % kKeyBlock == 0, "pieces end at whole key blocks");
constexpr size_t kMaxGroupTokens = 16;

// One partial softmax state of `heads` q heads with value_dim dv, laid out acc[h * dv], m[h],
// l[h] in a buffer the caller owns; acc first, so a 64-byte aligned state has its vector
// accumulators aligned.
struct State {
  float* base = nullptr;
  int32_t heads = 0, dv = 0;
  float* acc() const { return base; }
  float* m() const { return base + int64_t{heads} * dv; }
  float* l() const { return m() + heads; }
};

// Grows v to hold n elements; never shrinks it, so a buffer that reached its size keeps its
// memory (and pages) for every later call.
template <class T>
void grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

// n floats of v from its first 64-byte boundary (v grown to hold them).
float* aligned_floats(std::vector<float>& v, size_t n) {
  constexpr size_t kLine = 64 / sizeof(float);
  grow(v, n + kLine - 1);
  const auto misplaced = reinterpret_cast<uintptr_t>(v.data()) % 64 / sizeof(float);
  return v.data() + (kLine - misplaced) % kLine;
}

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

namespace {

// Each group as one virtual token with n * qpk heads per kv head, over the shared cells.
struct Virtual {
  KeySet keys;  // the lead token's first `shared` keys
  AttentionProblem problem;  // q: the group's stacked heads [hkv, n * qpk, dk] in Scratch::q
  int64_t pieces = 0;
};

struct Task {
  int32_t group, g;
  int64_t j0, j1;
};

// attend_shared's buffers, kept per calling thread: a prefill calls it once per layer with
// the same shapes, and fresh vectors each call cost malloc, page faults and zeroing (perf:
// several % of a 512-token prefill). The pool's workers reach the caller's copy through the
// lambdas' reference, never their own.
struct Scratch {
  std::vector<int32_t> group_of;  // per token: its group, -1 = none
  std::vector<int64_t> shared;    // per token: keys read through its group
  std::vector<int32_t> member;    // per token: index in its group
  std::vector<Virtual> virt;      // per group
  std::vector<float> q;           // every group's virtual q, group after group (aligned_floats)
  std::vector<Task> tasks;        // the shared pieces
  std::vector<int64_t> state_at;  // per task (pieces, then (token, kv head)): offset in states
  std::vector<float> states;      // the states, each at a 64-byte boundary (aligned_floats)
  std::vector<int64_t> first_task;  // per group: its first piece; one past the last at the end
};

Scratch& thread_scratch() {
  thread_local Scratch s;
  return s;
}

}  // namespace

void attend_shared(const AttentionProblem& p, std::span<const SharedGroup> groups,
                   ThreadPool& pool, ChunkFn fn, ChunkFn wide) {
  const int32_t hkv = p.kv.kv_heads, qpk = p.q_heads / hkv;
  const int32_t dk = p.kv.head_dim, dv = p.kv.value_dim;
  const auto n_tokens = static_cast<size_t>(p.n_tokens);
  Scratch& s = thread_scratch();
  grow(s.group_of, n_tokens);
  grow(s.shared, n_tokens);
  grow(s.member, n_tokens);
  std::fill_n(s.group_of.begin(), n_tokens, -1);
  std::fill_n(s.shared.begin(), n_tokens, 0);
  std::fill_n(s.member.begin(), n_tokens, -1);
  grow(s.virt, groups.size());
  size_t grouped = 0;  // tokens in groups
  for (const SharedGroup& sg : groups) grouped += sg.tokens.size();
  float* q_at = aligned_floats(s.q, grouped * static_cast<size_t>(p.q_heads) *
                                          static_cast<size_t>(dk));
  s.tasks.clear();
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    SharedGroup sg = groups[gi];
    // Whole key blocks only: the shared pieces and each token's own suffix then start their
    // blocks of kKeyBlock keys at the key indices a token attended alone starts them, so a
    // block value type's weight codes (taken per key block) are the same, and a verification
    // row equals a decode step (tests/engine/speculative_cli_test.sh).
    sg.shared -= sg.shared % kKeyBlock;
    const auto n = static_cast<int32_t>(sg.tokens.size());
    Virtual& v = s.virt[gi];
    for (int32_t i = 0; i < n; ++i) {
      const int32_t t = sg.tokens[i];
      s.shared[t] = sg.shared;
      s.member[t] = i;
      s.group_of[t] = static_cast<int32_t>(gi);
      for (int32_t g = 0; g < hkv; ++g)
        std::copy_n(p.q + (int64_t{t} * p.q_heads + int64_t{g} * qpk) * dk, qpk * dk,
                    q_at + ((int64_t{g} * n + i) * qpk) * dk);
    }
    v.keys = key_prefix(p.keys[sg.tokens[0]], sg.shared);
    v.problem = p;
    v.problem.n_tokens = 1;
    v.problem.q_heads = hkv * n * qpk;
    v.problem.q = q_at;
    v.problem.keys = std::span<const KeySet>(&v.keys, 1);
    v.pieces = (sg.shared + kPieceKeys - 1) / kPieceKeys;
    q_at += int64_t{hkv} * n * qpk * dk;
    for (int32_t g = 0; g < hkv; ++g)
      for (int64_t c = 0; c < v.pieces; ++c)
        s.tasks.push_back({static_cast<int32_t>(gi), g, c * kPieceKeys,
                           std::min(sg.shared, (c + 1) * kPieceKeys)});
  }
  const auto n_shared_tasks = static_cast<int64_t>(s.tasks.size());
  const int64_t n_tasks = n_shared_tasks + int64_t{p.n_tokens} * hkv;
  // Shared pieces first, then every (token, kv head)'s own suffix; a piece's state holds its
  // group's virtual heads, a suffix's the token's qpk heads. Each starts on a cache line: the
  // threads write neighbouring states, and acc rows split across lines cost (packed end to
  // end, pp512 at depth 4096 ran 3-14 % slower than with a vector per state; aligned, on par).
  auto heads_of = [&](int64_t i) {
    return i < n_shared_tasks ? s.virt[s.tasks[static_cast<size_t>(i)].group].problem.q_heads / hkv
                              : qpk;
  };
  grow(s.state_at, static_cast<size_t>(n_tasks) + 1);
  s.state_at[0] = 0;
  for (int64_t i = 0; i < n_tasks; ++i)
    s.state_at[static_cast<size_t>(i) + 1] = s.state_at[static_cast<size_t>(i)] +
                                              (int64_t{heads_of(i)} * (2 + dv) + 15) / 16 * 16;
  float* const states =
      aligned_floats(s.states, static_cast<size_t>(s.state_at[static_cast<size_t>(n_tasks)]));
  auto state = [&](int64_t i) {
    return State{states + s.state_at[static_cast<size_t>(i)], heads_of(i), dv};
  };
  pool.run_tasks(n_tasks, [&](int64_t i) {
    const State st = state(i);
    if (i < n_shared_tasks) {
      const Task& task = s.tasks[static_cast<size_t>(i)];
      wide(s.virt[task.group].problem, 0, task.g, task.j0, task.j1, st.m(), st.l(), st.acc(),
           thread_logits(int64_t{st.heads} * kKeyBlock).data());
      return;
    }
    const int64_t k = i - n_shared_tasks;
    const auto t = static_cast<int32_t>(k / hkv), g = static_cast<int32_t>(k % hkv);
    const int64_t j0 = s.shared[t], j1 = p.keys[t].size();
    if (j0 == j1) {
      // No own keys: an empty state (the merge reads only m of it).
      std::fill(st.m(), st.m() + qpk, -INFINITY);
      std::fill(st.l(), st.l() + qpk, 0.0f);
      return;
    }
    fn(p, t, g, j0, j1, st.m(), st.l(), st.acc(), thread_logits(int64_t{qpk} * kKeyBlock).data());
  });
  // Merge per (token, kv head, q head): the group's pieces (its rows of the virtual heads)
  // and the token's own suffix, weighted by exp(m_piece - m).
  grow(s.first_task, groups.size() + 1);
  s.first_task[0] = 0;
  for (size_t gi = 0; gi < groups.size(); ++gi)
    s.first_task[gi + 1] = s.first_task[gi] + hkv * s.virt[gi].pieces;
  pool.run_tasks(int64_t{p.n_tokens} * hkv, [&](int64_t k) {
    const auto t = static_cast<int32_t>(k / hkv), g = static_cast<int32_t>(k % hkv);
    const State own = state(n_shared_tasks + k);
    float* out = p.out + (int64_t{t} * p.q_heads + int64_t{g} * qpk) * dv;
    const int32_t gi = s.group_of[t];
    for (int32_t h = 0; h < qpk; ++h) {
      // (state, head index within it) of every part this head is made of.
      float m = own.m()[h];
      const int64_t t0 = gi < 0 ? 0 : s.first_task[gi] + int64_t{g} * s.virt[gi].pieces;
      const int64_t t1 = gi < 0 ? 0 : t0 + s.virt[gi].pieces;
      const int32_t vh = s.member[t] * qpk + h;
      for (int64_t c = t0; c < t1; ++c) m = std::max(m, state(c).m()[vh]);
      double denom = 0.0;
      std::fill(out + h * dv, out + (h + 1) * dv, 0.0f);
      auto add = [&](const State& st, int32_t head) {
        if (st.m()[head] == -INFINITY) return;
        const float w = std::exp(st.m()[head] - m);
        denom += double(st.l()[head]) * w;
        const float* acc = st.acc() + int64_t{head} * dv;
        for (int32_t d = 0; d < dv; ++d) out[h * dv + d] += acc[d] * w;
      };
      for (int64_t c = t0; c < t1; ++c) add(state(c), vh);
      add(own, h);
      const float* sink = p.sinks != nullptr ? p.sinks + int64_t{g} * qpk + h : nullptr;
      finish_head(m, denom, out + int64_t{h} * dv, dv, sink, out + int64_t{h} * dv);
    }
  });
}

}  // namespace kvcache::cpu::detail
