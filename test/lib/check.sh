# test/lib/check.sh — the bookkeeping of a test script's checks, sourced by the scripts
# of make test (the skip protocol is the Makefile's): ok and bad count a check, check
# NAME EXPR evaluates EXPR, skip WHY skips a part (noted in $PP_TEST_SKIPS for the
# summary), skip_all WHY skips the whole script (exit 77), and finish prints the tally
# and exits: 1 when a check failed or none ran at all (a script that checked nothing
# cannot pass), 77 when every check was skipped, else 0. Messages name the script.
pass=0 fail=0 skipped=0
PP_TEST_NAME=${PP_TEST_NAME:-$(basename "$0")}
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }
skip() {
  skipped=$((skipped + 1))
  echo "skip $1"
  [ -z "${PP_TEST_SKIPS:-}" ] || echo "$PP_TEST_NAME: $1" >>"$PP_TEST_SKIPS"
}
skip_all() {
  echo "skip $PP_TEST_NAME: $1"
  [ -z "${PP_TEST_SKIPS:-}" ] || echo "$PP_TEST_NAME: $1" >>"$PP_TEST_SKIPS"
  exit 77
}
finish() {
  echo "$PP_TEST_NAME: $pass passed, $fail failed$([ $skipped -eq 0 ] || echo ", $skipped skipped")"
  [ $fail -eq 0 ] || exit 1
  if [ $pass -eq 0 ]; then
    [ $skipped -eq 0 ] || exit 77
    echo "FAIL $PP_TEST_NAME ran no check"
    exit 1
  fi
  exit 0
}
