# Step helpers of scripts/test-all.sh (sourced; bash with `set -euo pipefail`).
#
#   step "name" cmd args...   prints "==> name (hh:mm:ss UTC)", runs the command; if it fails, prints
#                             'test-all: step "name" failed (exit N)' after the command's own message and exits N.
#   step "name"; cmd args...  the older form: prints the header only; a failing command under `set -e` still stops
#                             the script, and the ERR trap below names the step it was in.
#   test_step "name" cmd...   a step that runs tests: if it fails without having reported a failed test to
#                             $KEYFLOW_TEST_SUMMARY (Jest's global setup threw, e.g. "none were found"; an nx target
#                             failed before Jest ran), one failed test is recorded for it, so the closing line never
#                             reads "0 failed" for tests that could not run. Then it stops like `step`.
#   stack_up [stack.sh]       runs `<stack.sh> up`, and applies its exports only when it succeeded (a bare
#                             `eval "$(stack.sh up)"` runs whatever was printed and swallows the failure).
#   summary                   prints "tests: N passed, N failed, N skipped" from $KEYFLOW_TEST_SUMMARY.

CURRENT_STEP=""
trap 'rc=$?; [[ -n "$CURRENT_STEP" ]] && printf "test-all: step \"%s\" failed (exit %s)\n" "$CURRENT_STEP" "$rc" >&2' ERR

step() {
  CURRENT_STEP="$1"
  printf '\n==> %s (%s UTC)\n' "$1" "$(date -u +%T)" # the clock time shows each step's share of CI's 45 minutes
  shift
  (($# == 0)) && return 0
  local rc=0
  "$@" || rc=$?
  ((rc == 0)) || step_failed "$rc"
}

# Names the failed step after the command's own message and exits with its status.
step_failed() {
  printf 'test-all: step "%s" failed (exit %s)\n' "$CURRENT_STEP" "$1" >&2
  CURRENT_STEP=""
  exit "$1"
}

# Sum of the "failed" counts recorded in $KEYFLOW_TEST_SUMMARY so far.
recorded_failures() {
  node -e '
    const fs = require("fs"); const f = process.argv[1];
    const lines = fs.existsSync(f) ? fs.readFileSync(f, "utf8").split("\n").filter(Boolean).map(JSON.parse) : [];
    // A string, not console.log(number): under a pseudo-terminal (nx runs tasks in one) Node colours numbers, and
    // the escape codes break the shell arithmetic that reads this.
    process.stdout.write(String(lines.reduce((n, l) => n + (l.failed || 0), 0)));
  ' "$KEYFLOW_TEST_SUMMARY"
}

test_step() {
  local before after rc=0
  before="$(recorded_failures)" || before=-1
  step "$1"
  shift
  "$@" || rc=$?
  ((rc == 0)) && return 0
  after="$(recorded_failures)" || after=-1
  if ((after <= before)); then
    printf '{"passed":0,"failed":1,"skipped":0,"step":"%s","note":"failed before its tests reported"}\n' \
      "${CURRENT_STEP//\"/\'}" >>"$KEYFLOW_TEST_SUMMARY"
  fi
  step_failed "$rc"
}

stack_up() {
  local stack="${1:-infra/local/stack.sh}" out rc=0
  out="$("$stack" up)" || rc=$? # its progress and errors go to stderr, as they happen
  ((rc == 0)) || return "$rc"
  eval "$out"
}

summary() {
  node -e '
    const fs = require("fs"); const f = process.argv[1];
    const lines = fs.existsSync(f) ? fs.readFileSync(f, "utf8").trim().split("\n").filter(Boolean).map(JSON.parse) : [];
    const t = lines.reduce((a, l) => ({ p: a.p + l.passed, f: a.f + l.failed, s: a.s + l.skipped }), { p: 0, f: 0, s: 0 });
    console.log(`\ntests: ${t.p} passed, ${t.f} failed, ${t.s} skipped`);
  ' "$KEYFLOW_TEST_SUMMARY" || true
}
