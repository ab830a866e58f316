#!/usr/bin/env bash
# settings.sh — two settings at their edges through the real binary (issue 25, item 3):
# output.checkpoint_keep 0 keeps every checkpoint (as docs/checkpoint-format.md says),
# a negative one is refused; runtime.threads above the CPUs of the affinity mask is
# capped there and a warning says so (taskset narrows the mask to one CPU, so the check
# holds on any machine), while a count that fits is taken silently.
set -u
PPTRAIN=${PPTRAIN:-./pptrain}
tmp=$(mktemp -d /tmp/pptrain-settings.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib/check.sh" # ok, bad, check, skip, skip_all, finish

one=(--config configs/gpt-tiny.yaml --set pipeline.stages=1 --set runtime.threads=1 --set data.val_every=0)
run() { # NAME ARGS...: a run into $tmp/NAME, output in $tmp/NAME.out; its exit code
  local name=$1; shift
  timeout -k 5 120 "$@" --set output.dir="$tmp/$name" >"$tmp/$name.out" 2>&1
}
steps() { (cd "$1/checkpoints" 2>/dev/null && ls -d step_* | tr '\n' ' '); }

# ---- output.checkpoint_keep ----------------------------------------------------------
run all "$PPTRAIN" "${one[@]}" --set train.steps=5 --set output.checkpoint_every=1 --set output.checkpoint_keep=0
rc=$?
want="step_0000001 step_0000002 step_0000003 step_0000004 step_0000005 "
[ $rc -eq 0 ] && [ "$(steps "$tmp/all")" = "$want" ] && ok "checkpoint_keep 0 keeps all 5 checkpoints" ||
  bad "checkpoint_keep 0: exit $rc, checkpoints: $(steps "$tmp/all"): $(grep -m1 error "$tmp/all.out")"
run two "$PPTRAIN" "${one[@]}" --set train.steps=5 --set output.checkpoint_every=1 --set output.checkpoint_keep=2
rc=$?
[ $rc -eq 0 ] && [ "$(steps "$tmp/two")" = "step_0000004 step_0000005 " ] && ok "checkpoint_keep 2 keeps the newest 2" ||
  bad "checkpoint_keep 2: exit $rc, checkpoints: $(steps "$tmp/two")"
run neg "$PPTRAIN" "${one[@]}" --set train.steps=1 --set output.checkpoint_keep=-1
rc=$?
[ $rc -eq 2 ] && grep -q 'output.checkpoint_keep: expected an integer >= 0, got .-1.' "$tmp/neg.out" &&
  ok "checkpoint_keep -1: exit 2, $(grep -m1 error "$tmp/neg.out" | cut -c1-120)" ||
  bad "checkpoint_keep -1: exit $rc: $(grep -m1 error "$tmp/neg.out")"

# ---- runtime.threads -------------------------------------------------------------------
cpu=$(taskset -p $$ >/dev/null 2>&1 && python3 -c 'import os; print(min(os.sched_getaffinity(0)))')
[ -n "$cpu" ] || skip_all "taskset or python3's os.sched_getaffinity not available"
warned() { grep -q "warning: runtime.threads is $2, more than the 1 CPU(s) this process may run on (its affinity mask): using 1 compute threads" "$tmp/$1.out"; }
for n in 2147483647 2; do
  run "thr-$n" taskset -c "$cpu" "$PPTRAIN" "${one[@]}" --set train.steps=2 --set runtime.threads=$n
  rc=$?
  [ $rc -eq 0 ] && warned "thr-$n" $n && ok "runtime.threads $n on 1 CPU: capped at 1, warned" ||
    bad "runtime.threads $n on 1 CPU: exit $rc, $(grep -m1 -e warning -e error "$tmp/thr-$n.out")"
done
run thr-1 taskset -c "$cpu" "$PPTRAIN" "${one[@]}" --set train.steps=2 --set runtime.threads=1
rc=$?
[ $rc -eq 0 ] && ! grep -q warning "$tmp/thr-1.out" && ok "runtime.threads 1 on 1 CPU: no warning" ||
  bad "runtime.threads 1 on 1 CPU: exit $rc, $(grep -m1 -e warning -e error "$tmp/thr-1.out")"
run thr-0 taskset -c "$cpu" "$PPTRAIN" "${one[@]}" --set train.steps=2 --set runtime.threads=0
rc=$?
[ $rc -eq 0 ] && ! grep -q warning "$tmp/thr-0.out" && grep -q 'runtime.threads 0: 1 compute thread(s)' "$tmp/thr-0.out" &&
  ok "runtime.threads 0 on 1 CPU: 1 thread, no warning" ||
  bad "runtime.threads 0 on 1 CPU: exit $rc, $(grep -m1 -e 'threads' -e error "$tmp/thr-0.out")"

finish
