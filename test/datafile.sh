#!/usr/bin/env bash
# datafile.sh — a token file changed under a running job (issue 25, item 2). A file
# truncated, grown, or rewritten in place (with ids >= model.vocab_size or with other
# valid ids) while a run reads it ends the run with exit 1 and a message naming the file
# and the position, never a crash (SIGBUS), a sanitizer report or training on garbage;
# the weights of the last good step are saved, and once the file is restored the run
# resumes to the losses of a run that was never disturbed. Replacing the file by rename
# is harmless. Each run is started in the background, stopped (SIGSTOP) once it has
# logged step $AT, the file is changed, and the run continued: the change lands mid-run
# at a known point, whatever the machine's speed. Every run is under `timeout`.
set -u
PPTRAIN=${PPTRAIN:-./pptrain}
tmp=$(mktemp -d /tmp/pptrain-datafile.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib/check.sh" # ok, bad, check, skip, skip_all, finish

[ -s data/tiny/train.bin ] && [ -s data/tiny/val.bin ] || skip_all "data/tiny not prepared (make data)"
STEPS=80 AT=3
one=(--config configs/gpt-tiny.yaml --set pipeline.stages=1 --set runtime.threads=1 --set output.log_every=1
  --set train.steps=$STEPS --set data.val_every=0 --set output.checkpoint_every=0)
cp data/tiny/train.bin "$tmp/orig.bin"
cp data/tiny/val.bin "$tmp/val.bin"
size=$(stat -c %s "$tmp/orig.bin")

# The undisturbed run every other is compared with.
timeout 300 "$PPTRAIN" "${one[@]}" --set data.train="$tmp/orig.bin" --set output.dir="$tmp/ref" >"$tmp/ref.out" 2>&1 ||
  bad "the undisturbed run failed: $(tail -n 3 "$tmp/ref.out")"

descendants() { local c; for c in $(pgrep -P "$1"); do echo "$c"; descendants "$c"; done; }
# disturb NAME EDIT CMD...: run CMD (output in $tmp/NAME.out) in the background; once
# it has logged step $AT, stop it, eval EDIT, continue it. Returns CMD's exit code.
disturb() {
  local name=$1 edit=$2; shift 2
  timeout -k 5 300 "$@" >"$tmp/$name.out" 2>&1 &
  local pid=$! waited=0
  until grep -Eq "step +$AT/" "$tmp/$name.out" || ! kill -0 $pid 2>/dev/null; do
    sleep 0.02
    waited=$((waited + 1))
    [ $waited -lt 6000 ] || break
  done
  local procs
  procs=$(descendants $pid) # pptrain, or pprun and its ranks
  for p in $procs; do kill -STOP "$p" 2>/dev/null; done
  eval "$edit"
  for p in $procs; do kill -CONT "$p" 2>/dev/null; done
  wait $pid
}
sanitizer() { grep -Eq 'AddressSanitizer|runtime error:|LeakSanitizer' "$1"; }
latest() { readlink "$1/checkpoints/latest" 2>/dev/null || echo none; }
losses() { cut -d, -f1,2 "$1/losses.csv"; } # step,loss

# expect_error NAME RC PATTERN...: exit 1, no sanitizer report, the output matches every
# (extended) PATTERN, and a checkpoint of a step at or after $AT was saved.
expect_error() {
  local name=$1 rc=$2; shift 2
  local miss=
  for pat in "$@"; do grep -Eq -- "$pat" "$tmp/$name.out" || miss="$miss [$pat]"; done
  local l; l=$(latest "$tmp/$name")
  if [ "$rc" -eq 1 ] && ! sanitizer "$tmp/$name.out" && [ -z "$miss" ] && [ "${l#step_}" != "$l" ] &&
    [ $((10#${l#step_})) -ge $AT ]; then
    ok "$name: exit 1, $l saved: $(grep -m1 'error' "$tmp/$name.out" | cut -c1-220)"
  else
    bad "$name: exit $rc (want 1), latest=$l, missing:$miss; $(grep -E -m3 'error|Sanitizer|runtime error' "$tmp/$name.out" | cut -c1-300)"
  fi
}
# restore NAME FILE: put the original tokens back at FILE (by rename, as a writer should),
# resume NAME's run to $STEPS and compare its losses with the undisturbed run's.
restore() {
  local name=$1 file=$2; shift 2
  local from; from=$(latest "$tmp/$name")
  cp "$tmp/orig.bin" "$file.new" && mv "$file.new" "$file"
  timeout -k 5 300 "$@" --resume >"$tmp/$name-resume.out" 2>&1
  local rc=$?
  if [ $rc -eq 0 ] && [ "$(losses "$tmp/$name")" = "$(losses "$tmp/ref")" ]; then
    ok "$name: restored, it resumes from $from to the undisturbed run's losses"
  else
    bad "$name: resume exit $rc, losses $( [ "$(losses "$tmp/$name")" = "$(losses "$tmp/ref")" ] && echo equal || echo differ): $(tail -n 2 "$tmp/$name-resume.out")"
  fi
}

# 1. Truncated mid-run (the issue's SIGBUS): to the header and 100 tokens.
f=$tmp/trunc.bin && cp "$tmp/orig.bin" "$f"
args=("$PPTRAIN" "${one[@]}" --set data.train="$f" --set output.dir="$tmp/trunc")
disturb trunc "truncate -s $((1024 + 200)) '$f'" "${args[@]}"
expect_error trunc $? "error: .*data file '$f' changed under the run: it was $size bytes when opened and is 1224 bytes now" \
  "batch [0-9]+ \(tokens [0-9]+\.\.[0-9]+, bytes [0-9]+\.\.[0-9]+\)" "restore the file"
restore trunc "$f" "${args[@]}"

# 2. Rewritten in place with ids >= vocab_size (256): every token 0xffff, same size.
f=$tmp/bad.bin && cp "$tmp/orig.bin" "$f"
args=("$PPTRAIN" "${one[@]}" --set data.train="$f" --set output.dir="$tmp/bad")
disturb bad "head -c $((size - 1024)) /dev/zero | tr '\\0' '\\377' | dd of='$f' bs=1024 seek=1 conv=notrunc status=none" "${args[@]}"
expect_error bad $? "error: .*data file '$f' changed under the run: token [0-9]+ \(byte offset [0-9]+\) is 65535, not below model.vocab_size = 256"
restore bad "$f" "${args[@]}"

# 3. Rewritten in place with other ids, all valid (the text shifted by one token).
f=$tmp/shift.bin && cp "$tmp/orig.bin" "$f"
disturb shift "tail -c +1027 '$tmp/orig.bin' | dd of='$f' bs=1024 seek=1 conv=notrunc status=none" \
  "$PPTRAIN" "${one[@]}" --set data.train="$f" --set output.dir="$tmp/shift"
expect_error shift $? "error: .*data file '$f' changed under the run: bytes [0-9]+\.\.[0-9]+ differ from when it was opened"

# 4. Grown (bytes appended).
f=$tmp/grow.bin && cp "$tmp/orig.bin" "$f"
disturb grow "head -c 4096 /dev/zero >>'$f'" "$PPTRAIN" "${one[@]}" --set data.train="$f" --set output.dir="$tmp/grow"
expect_error grow $? "error: .*data file '$f' changed under the run: it was $size bytes when opened and is $((size + 4096)) bytes now"

# 5. The validation file truncated: the validation after step $((AT + 5)) reads it.
f=$tmp/v.bin && cp "$tmp/val.bin" "$f"
disturb val "truncate -s 2048 '$f'" "$PPTRAIN" "${one[@]}" --set data.train="$tmp/orig.bin" --set data.val="$f" \
  --set data.val_every=$((AT + 5)) --set output.dir="$tmp/val"
expect_error val $? "error: .*data file '$f' changed under the run: it was [0-9]+ bytes when opened and is 2048 bytes now"

# 6. Replaced by rename, with a file whose ids are all out of range: harmless, the run
#    reads the file it opened to the end and its losses are the undisturbed run's.
f=$tmp/ren.bin && cp "$tmp/orig.bin" "$f"
disturb ren "head -c $size /dev/zero | tr '\\0' '\\377' >'$f.new' && mv '$f.new' '$f'" \
  "$PPTRAIN" "${one[@]}" --set data.train="$f" --set output.dir="$tmp/ren"
rc=$?
if [ $rc -eq 0 ] && ! sanitizer "$tmp/ren.out" && [ "$(losses "$tmp/ren")" = "$(losses "$tmp/ref")" ]; then
  ok "replaced by rename mid-run: exit 0, the undisturbed run's losses"
else
  bad "replaced by rename: exit $rc, losses $( [ "$(losses "$tmp/ren")" = "$(losses "$tmp/ref")" ] && echo equal || echo differ): $(grep -m2 error "$tmp/ren.out")"
fi

# 7. Two pipeline stages (both ranks read the file: inputs on rank 0, targets on rank 1),
#    truncated: the ranks agree, both exit 1 naming the file after saving, and the run
#    resumes once restored to the losses of an undisturbed 2-stage run.
two() { # FILE DIR: the 2-rank run's command
  echo scripts/pprun --nproc-per-node 2 "$PPTRAIN" "${one[@]}" --set pipeline.stages=2 --set data.train="$1" \
    --set output.dir="$2"
}
f=$tmp/pipe.bin && cp "$tmp/orig.bin" "$f"
disturb pipe "truncate -s 4096 '$f'" $(two "$f" "$tmp/pipe")
# (a rank that read its batch before the change names the rank that could not)
expect_error pipe $? "\[rank 0\] .*error: .*data file '$f'" "\[rank 1\] .*error: .*data file '$f'" \
  "\[rank [01]\] .*error: .*data file '$f' changed under the run"
timeout 300 $(two "$tmp/orig.bin" "$tmp/pipe-ref") >"$tmp/pipe-ref.out" 2>&1 ||
  bad "the undisturbed 2-stage run failed: $(tail -n 3 "$tmp/pipe-ref.out")"
from=$(latest "$tmp/pipe")
cp "$tmp/orig.bin" "$f.new" && mv "$f.new" "$f"
timeout -k 5 300 $(two "$f" "$tmp/pipe") --resume >"$tmp/pipe-resume.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && [ "$(losses "$tmp/pipe")" = "$(losses "$tmp/pipe-ref")" ]; then
  ok "pipe: restored, it resumes from $from to the undisturbed 2-stage run's losses"
else
  bad "pipe: resume exit $rc: $(tail -n 2 "$tmp/pipe-resume.out")"
fi

finish
