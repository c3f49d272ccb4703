#!/bin/sh
# KVCACHE_ISA through the CLI: an unknown value is refused before anything runs (exit 2, the
# message names the variable, the value and the accepted ones); every accepted value runs an
# op-test case through the attention kernels; avx512 is a ceiling, never a demand, so it runs
# on any CPU and writes bitwise what no ceiling writes (auto, unset), while a level below
# the CPU's writes other bits.
# Usage: isa_cli_test.sh KVCACHE_BIN CASE_DIR WORK_DIR
set -u
kvcache=$1 case_dir=$2 work=$3
fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$work" && mkdir -p "$work" || fail "cannot make $work"

out=$(KVCACHE_ISA=avx3 "$kvcache" op-test "$case_dir" --out "$work/refused" 2>&1)
rc=$?
[ "$rc" -eq 2 ] || fail "KVCACHE_ISA=avx3: exit $rc, expected 2 (output: $out)"
want="kvcache: KVCACHE_ISA = 'avx3', expected one of auto, scalar, avx2, avx512 (or unset)"
[ "$out" = "$want" ] || fail "KVCACHE_ISA=avx3: printed '$out', expected '$want'"
[ ! -e "$work/refused" ] || fail "KVCACHE_ISA=avx3 wrote $work/refused"

for isa in unset auto scalar avx2 avx512; do
  if [ "$isa" = unset ]; then
    out=$(env -u KVCACHE_ISA "$kvcache" op-test "$case_dir" --out "$work/$isa" 2>&1)
  else
    out=$(KVCACHE_ISA=$isa "$kvcache" op-test "$case_dir" --out "$work/$isa" 2>&1)
  fi
  rc=$?
  [ "$rc" -eq 0 ] || fail "KVCACHE_ISA=$isa: exit $rc, expected 0 (output: $out)"
done
for isa in auto avx512; do
  diff -r "$work/unset" "$work/$isa" >/dev/null ||
    fail "KVCACHE_ISA=$isa wrote other outputs than no KVCACHE_ISA"
done
# The ceiling reaches the kernels: a lower level sums in another order, so where the CPU has
# the wider one the outputs differ (flags as the kernel reports them).
has() { grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | grep -qw "$1"; }
if has avx2 && has fma && has f16c; then
  diff -r "$work/unset" "$work/scalar" >/dev/null && fail "KVCACHE_ISA=scalar changed nothing"
  if has avx512f && has avx512bw && has avx512vl; then
    diff -r "$work/unset" "$work/avx2" >/dev/null && fail "KVCACHE_ISA=avx2 changed nothing"
  fi
fi
echo "ok: refused avx3; ran unset, auto, scalar, avx2, avx512"
