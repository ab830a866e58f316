#!/usr/bin/env bash
# test/testlib.sh — the test scripts' own bookkeeping (test/lib/check.sh) holds: a script
# whose checks pass exits 0, one with a failed check 1, one that checked nothing 1 (it
# cannot pass vacuously), one whose every check was skipped 77 (skipped, not passed), a
# mix of passes and skips 0 with the skips noted; and a Check program whose suite ran no
# test fails (check_run).
set -u
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/pptrain-testlib.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
source "$here/lib/check.sh"
PP_TEST_NAME=testlib.sh
# script NAME BODY: a script sourcing the library with BODY, run; its exit status
script() {
  printf 'source "%s/lib/check.sh"\n%s\nfinish\n' "$here" "$2" >"$tmp/$1.sh"
  PP_TEST_SKIPS="$tmp/$1.skips" bash "$tmp/$1.sh" >"$tmp/$1.out" 2>&1
}
want() { # NAME BODY RC
  script "$1" "$2"
  local rc=$?
  [ $rc -eq "$3" ] && ok "$1: exit $rc ($(tail -n1 "$tmp/$1.out"))" || bad "$1: exit $rc, want $3: $(tr '\n' ' ' <"$tmp/$1.out")"
}
want passes 'ok one; check two "[ 1 = 1 ]"' 0
want a-failure 'ok one; check two "[ 1 = 2 ]"' 1
want nothing ':' 1
want all-skipped 'skip "no GPU"; skip "no torch"' 77
want mixed 'ok one; skip "no GPU"' 0
grep -q "mixed.sh: no GPU" "$tmp/mixed.skips" && ok "a partial skip is noted for make test's summary" ||
  bad "the partial skip was not noted: $(cat "$tmp/mixed.skips" 2>/dev/null)"
want skip-all 'skip_all "nothing to run here"; ok never' 77
bin=$(dirname "$here")/build/cpu/test/test_partition
if [ -x "$bin" ]; then
  CK_RUN_CASE=no-such-case "$bin" >"$tmp/ck.out" 2>&1
  rc=$?
  [ $rc -eq 1 ] && grep -q "ran no test" "$tmp/ck.out" && ok "a Check suite that ran no test fails (exit $rc)" ||
    bad "a Check suite that ran no test: exit $rc: $(tail -n2 "$tmp/ck.out")"
else
  skip "build/cpu/test/test_partition not built: the Check guard not tried"
fi
finish
