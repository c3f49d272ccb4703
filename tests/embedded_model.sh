# Sourced by the shell tests that use the embedded model, after setting bin (the kvcache binary).
#   has_embedded_model      returns 0 when `kvcache run` works on it; 1 when this binary was
#                           built without it (exactly the message of src/engine/runtime.cpp);
#                           any other failure of the run exits 1 with its stderr.
#   require_embedded_model  returns when it is there, else exits 77 (ctest's skip: the test sets
#                           SKIP_RETURN_CODE 77).
# With CI=true a missing model fails (exit 1): models/tiny.gguf is part of the repository.
kvcache_no_model_message="kvcache run: no model given and this build embeds no default model \
(models/tiny.gguf was absent when cmake ran)"

has_embedded_model() {
  local err rc=0
  err=$("$bin" run --max-new-tokens 1 2>&1 > /dev/null) || rc=$?
  [ "$rc" -eq 0 ] && return 0
  if [ "$rc" -ne 1 ] || [ "$err" != "$kvcache_no_model_message" ]; then
    echo "FAIL: kvcache run --max-new-tokens 1 exited $rc:" >&2
    printf '%s\n' "$err" >&2
    exit 1
  fi
  if [ "${CI:-}" = true ]; then
    echo "FAIL: CI=true and this kvcache embeds no model (was models/tiny.gguf there at cmake?)" >&2
    exit 1
  fi
  return 1
}

require_embedded_model() {
  has_embedded_model && return 0
  echo "SKIP: this kvcache embeds no model (models/tiny.gguf was absent when cmake ran)"
  exit 77
}
