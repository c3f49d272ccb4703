#!/usr/bin/env bash
# `kvcache run` and `inspect` on files the engine must refuse, each naming the value: an
# unsupported general.architecture (phi3; qwen2moe, a mixture of experts outside the supported
# ones), rope.scaling.type "yarn" without its original context length, yarn on gemma3, a
# qwen3moe expert_used_count of 0 and gpt-oss files missing a sink, an expert bias or the
# output bias (scripts/make_arch_model.py).
# inspect only reads the geometry, so it still describes them.
# Usage: arch_refusals.sh KVCACHE_BIN REPO_DIR
set -euo pipefail
bin=$1; repo=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
make() { /usr/bin/python3 "$repo/scripts/make_arch_model.py" --out "$tmp/$1.gguf" "${@:2}" >/dev/null; }
make phi3 --arch llama-rope-freqs --set-arch phi3
make yarn --arch llama-rope-freqs --rope-scaling yarn
make gemma3yarn --arch gemma3 --rope-scaling yarn
make qwen2moe --arch qwen3moe --set-arch qwen2moe
make used0 --arch qwen3moe --expert-used 0
make nosink --arch gpt-oss --drop blk.1.attn_sinks.weight
make noexpbias --arch gpt-oss --drop blk.2.ffn_down_exps.bias
make nobo --arch gpt-oss --drop blk.0.attn_output.bias

expect_refusal() {  # expect_refusal FILE PATTERN: exit code 1 (a refusal, not a crash) and PATTERN
  local rc=0
  "$bin" run "$tmp/$1.gguf" --prompt-ids 1,2,3 --max-new-tokens 1 >/dev/null 2>"$tmp/err" || rc=$?
  [ "$rc" = 1 ] || { cat "$tmp/err" >&2; fail "run $1 exited $rc, expected 1 (refused)"; }
  grep -qF -- "$2" "$tmp/err" || { cat "$tmp/err" >&2; fail "run $1: no '$2'"; }
}
expect_refusal phi3 'general.architecture = "phi3" is not supported'
expect_refusal yarn "key 'llama.rope.scaling.original_context_length' not found"
expect_refusal gemma3yarn 'gemma3.rope.scaling.type = "yarn" is not supported for gemma3'
expect_refusal qwen2moe 'general.architecture = "qwen2moe" is not supported'
expect_refusal used0 'qwen3moe.expert_used_count = 0, expected in [1, expert_count = 8]'
expect_refusal nosink 'tensor blk.1.attn_sinks.weight is missing'
expect_refusal noexpbias 'tensor blk.2.ffn_down_exps.bias is missing'
expect_refusal nobo 'tensor blk.0.attn_output.bias is missing'
"$bin" inspect "$tmp/phi3.gguf" >"$tmp/out" 2>&1 || { cat "$tmp/out"; fail "inspect phi3"; }
grep -q "architecture phi3" "$tmp/out" || { cat "$tmp/out"; fail "inspect names phi3"; }
echo "arch refusals: all checks passed"
