#!/usr/bin/env bash
# nonfinite.sh — a run whose weights diverge (issue 17, item 7): a non-finite training or
# validation loss is an error (exit 1, a message saying what to do), and no checkpoint of
# weights whose loss is not finite is ever committed: the earlier `latest` survives and
# resumes. A learning rate of 1e9 makes the loss of the weights after the first such step
# huge but finite, and after the second not finite.
set -u
PPTRAIN=${PPTRAIN:-./pptrain}
tmp=$(mktemp -d /tmp/pptrain-nonfinite.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib/check.sh" # ok, bad, check, skip, skip_all, finish

base=(--config configs/gpt-tiny.yaml --set pipeline.stages=1 --set output.log_every=1)
run() { # name, args...: one run into $tmp/<name>.out; returns its exit code
  local name=$1; shift
  "$PPTRAIN" "${base[@]}" "$@" >"$tmp/$name.out" 2>&1
}
latest() { readlink "$1/checkpoints/latest" 2>/dev/null || echo none; }
# name, run dir, exit code, pattern the error must match, the `latest` expected after
expect_fail() {
  local name=$1 dir=$2 rc=$3 pat=$4 want=$5
  if [ "$rc" -eq 1 ] && grep -Eq "$pat" "$tmp/$name.out" && grep -q 'lower train.optimizer.lr' "$tmp/$name.out" &&
    [ "$(latest "$dir")" = "$want" ]; then
    ok "$name: exit 1, says what to do, latest=$want"
  else
    bad "$name: rc=$rc latest=$(latest "$dir") (want $want): $(grep -E 'error|val loss' "$tmp/$name.out" | tail -n 3)"
  fi
}

# 1. The issue's reproducer: validation every step, the second validation loss is NaN.
run repro --set train.steps=2 --set train.optimizer.lr=1e9 --set data.val_every=1 --set output.dir="$tmp/repro"
expect_fail repro "$tmp/repro" $? 'step 2: validation loss .* not finite' none

# 2. A good run leaves latest = step 2; a resumed run diverges. With validation, the
#    validation after step 4 fails; without, the check before the final checkpoint.
run good --set train.steps=2 --set output.dir="$tmp/r" || bad "good run: $(tail -n 2 "$tmp/good.out")"
run val --resume --set train.steps=4 --set train.optimizer.lr=1e9 --set data.val_every=1 --set output.dir="$tmp/r"
expect_fail val "$tmp/r" $? 'step 4: validation loss .* not finite' step_0000002
run final --resume --set train.steps=4 --set train.optimizer.lr=1e9 --set data.val=null --set output.dir="$tmp/r"
expect_fail final "$tmp/r" $? 'step 4: the loss .* not finite' step_0000002
#    ... and with a checkpoint every step: the one after step 3 is committed (step 4's
#    loss, of those weights, is finite), the one after step 4 is not.
run every --resume --set train.steps=4 --set train.optimizer.lr=1e9 --set data.val=null --set output.checkpoint_every=1 \
  --set output.dir="$tmp/r"
expect_fail every "$tmp/r" $? 'step 4: the loss .* not finite' step_0000003
#    ... and one step further the training loss itself is not finite (step 5).
run train --resume --set train.steps=6 --set train.optimizer.lr=1e9 --set output.checkpoint_every=1 \
  --set output.dir="$tmp/r"
expect_fail train "$tmp/r" $? 'step 5: loss .* not finite' step_0000003
[ -e "$tmp/r/checkpoints/step_0000004" ] && bad "a checkpoint of the diverged step 4 exists" ||
  ok "no checkpoint of the diverged weights of step 4"

# 3. What is left resumes.
run resume --resume --set train.steps=3 --set output.dir="$tmp/r"
rc=$?
[ $rc -eq 0 ] && grep -q 'nothing to do' "$tmp/resume.out" && ok "latest (step 3) resumes" ||
  bad "resume: rc=$rc $(tail -n 2 "$tmp/resume.out")"

finish
