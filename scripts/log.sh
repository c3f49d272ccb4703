# Sourced by setup.sh and build.sh: a step prints one line on the terminal (stderr) and sends
# its command's output to a log file; on failure it prints the log's path and its last lines.
#   log_to FILE           later steps append to FILE (emptied first)
#   step MESSAGE CMD...   prints MESSAGE, runs CMD into the log, exits with CMD's code if it fails
log_to() {
  log=$1
  mkdir -p "$(dirname "$log")"
  : > "$log"
}

step() {
  local message=$1 rc=0
  shift
  echo "$message" >&2
  printf '==== %s\n$ %s\n' "$message" "$*" >> "$log"
  "$@" >> "$log" 2>&1 < /dev/null || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "failed (exit $rc): $*" >&2
    echo "---- last lines of $log:" >&2
    tail -n 30 "$log" >&2
    echo "---- the whole log: $log" >&2
    exit "$rc"
  fi
}
