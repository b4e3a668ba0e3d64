# Helpers for the command-line tests, sourced by each tests/cli/*.sh (not a test itself).
PLANNER="$1"; ROOT="$2"
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
fails=0; passes=0
# expect_exit CODE CMD...: runs the command, checks the exit code, keeps stdout/stderr in $TMP/out, $TMP/err.
expect_exit() {
  local code=$1; shift
  "$@" >"$TMP/out" 2>"$TMP/err"; local rc=$?
  if [ "$rc" != "$code" ]; then
    echo "FAIL: expected exit $code, got $rc: $*"; sed 's/^/  err: /' "$TMP/err" | head -5; fails=$((fails+1)); return 1
  fi
  passes=$((passes+1)); return 0
}
# expect_bad_input CMD...: exit 2, exactly one line on stderr, nothing on stdout.
expect_bad_input() {
  expect_exit 2 "$@" || return 1
  local lines; lines=$(wc -l <"$TMP/err")
  if [ "$lines" != 1 ] || [ -s "$TMP/out" ]; then
    echo "FAIL: bad input should give one stderr line and no stdout: $*"; cat "$TMP/err" "$TMP/out" | head -5; fails=$((fails+1)); return 1
  fi
}
expect_grep() {  # expect_grep PATTERN FILE
  if ! grep -qE -- "$1" "$2"; then echo "FAIL: '$1' not in $2:"; head -20 "$2"; fails=$((fails+1)); fi
}
finish() { echo "$passes passed, $fails failed"; [ "$fails" = 0 ]; }
