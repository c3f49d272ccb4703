#!/usr/bin/env bash
# Real clients against `kvcache serve` on a loopback port: the official `openai` npm package
# (openai_client_test.cjs), the official `@anthropic-ai/sdk` (anthropic_client_test.cjs) or the
# chat page in headless Debian Chromium via playwright-core (chat_page_test.cjs). The client
# tests also get a second server, a random llama with a 4096-token context and ChatML, for tool
# calls (validated with ajv), and a third, the same model with the harmony template, for
# Anthropic thinking (the openai test leaves it alone). Installs the pinned npm packages into
# NPM_DIR (a folder of the build).
# When node, npm, the registry or /usr/bin/chromium is not there it exits 77 (skipped), or 1
# (failed) with CI=true: scripts/test.sh installs them (scripts/setup.sh --tests).
# Usage: serve_node_test.sh openai|anthropic|page KVCACHE_BIN NPM_DIR ARTIFACT_DIR
set -euo pipefail
what=$1 bin=$2 npm_dir=$(realpath -m "$3") artifacts=$(realpath -m "$4")
here=$(cd "$(dirname "$0")" && pwd)
skip() {
  [ "${CI:-}" = true ] && { echo "FAIL (CI=true, where a skip is a failure): $*" >&2; exit 1; }
  echo "SKIP: $*"
  exit 77
}
command -v node >/dev/null || skip "node is not installed (scripts/setup.sh --tests)"
command -v npm >/dev/null || skip "npm is not installed (scripts/setup.sh --tests)"
[ "$what" = page ] && { [ -x /usr/bin/chromium ] || skip "/usr/bin/chromium is not installed (scripts/setup.sh --tests)"; }
. "$here/../embedded_model.sh"
require_embedded_model
packages=(openai@4.95.0 @anthropic-ai/sdk@1.16.0 playwright-core@1.65.1 ajv@8.20.0)
installed() {
  node -e 'const [d, ...want] = process.argv.slice(1); for (const p of want) { const [n, v] = p.split(/@(?=[^@]*$)/);
    if (require(d + "/node_modules/" + n + "/package.json").version !== v) process.exit(1); }' "$npm_dir" "${packages[@]}" 2>/dev/null
}
mkdir -p "$npm_dir"
# Both tests may start at once (ctest -j): one installs while the other waits on the lock.
exec 9> "$npm_dir.lock"
flock -w 600 9 || skip "the npm folder stayed locked"
if ! installed; then
  # playwright-core downloads no browser; the environment variable makes sure of it.
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 timeout 300 npm install --prefix "$npm_dir" --no-audit \
    --no-fund --no-save "${packages[@]}" > "$npm_dir/install.log" 2>&1 \
    || skip "npm install ${packages[*]} failed (no registry?): $(tail -2 "$npm_dir/install.log")"
fi
flock -u 9

. "$here/lib.sh"
start_server node --api-key sekret
mkdir -p "$artifacts"
case $what in
  openai|anthropic)
    # Tool calls need a longer context than the embedded model's: a random llama (ChatML).
    /usr/bin/python3 "$here/../../scripts/make_arch_model.py" --arch llama-rope-freqs \
      --context 4096 --out "$tmp/tools.gguf" > /dev/null
    tiny_url=$url
    start_server tools --api-key sekret --chat-template chatml --max-sessions 2 "$tmp/tools.gguf"
    tools_url=$url
    # Thinking (Anthropic) on the same model with the harmony template (gpt-oss).
    start_server harmony --api-key sekret --chat-template harmony --max-sessions 2 "$tmp/tools.gguf"
    timeout 120 node "$here/${what}_client_test.cjs" "$npm_dir" "$tiny_url" sekret "$tools_url" \
      "$url"
    stop_server  # harmony
    pid=${pids[1]}
    stop_server  # tools
    url=$tiny_url pid=${pids[0]} ;;
  page) timeout 120 node "$here/chat_page_test.cjs" "$npm_dir" "$url" sekret "$artifacts/chat_page.png" ;;
  *) echo "unknown test $what"; exit 2 ;;
esac
stop_server
