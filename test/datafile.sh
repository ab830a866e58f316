#!/usr/bin/env bash
# datafile.sh — a token file changed under a running job (issue 25, item 2). A file
# truncated, grown, or rewritten in place (with ids >= model.vocab_size or with other
# valid ids) while a run reads it ends the run with exit 1 and a message naming the file
# and the position, never a crash (SIGBUS), a sanitizer report or training on garbage;
# the weights of the last good step are saved, and once the file is restored the run
# resumes to the losses of a run that was never disturbed. Replacing the file by rename
# is harmless. Each run is started in the background, stopped (SIGSTOP) once it has
# logged step $AT, the file is changed, and the run continued: the change lands mid-run
# at a known point, whatever the machine's speed. Every run is under `timeout`. Then
# uint32 token files (llm.c's Llama 3 format, issue 26 item 5): the tiny data as uint32
# trains to the uint16 run's losses bit for bit, a change under the run is caught the
# same way, and a Llama 3-sized vocabulary (128256, ids over 65535) trains.
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
# restore NAME FILE ORIG CMD...: put the original tokens ORIG back at FILE (by rename, as
# a writer should), resume NAME's run to $STEPS and compare its losses with the
# undisturbed run's.
restore() {
  local name=$1 file=$2 orig=$3; shift 3
  local from; from=$(latest "$tmp/$name")
  cp "$orig" "$file.new" && mv "$file.new" "$file"
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
restore trunc "$f" "$tmp/orig.bin" "${args[@]}"

# 2. Rewritten in place with ids >= vocab_size (256): every token 0xffff, same size.
f=$tmp/bad.bin && cp "$tmp/orig.bin" "$f"
args=("$PPTRAIN" "${one[@]}" --set data.train="$f" --set output.dir="$tmp/bad")
disturb bad "head -c $((size - 1024)) /dev/zero | tr '\\0' '\\377' | dd of='$f' bs=1024 seek=1 conv=notrunc status=none" "${args[@]}"
expect_error bad $? "error: .*data file '$f' changed under the run: token [0-9]+ \(byte offset [0-9]+\) is 65535, not below model.vocab_size = 256"
restore bad "$f" "$tmp/orig.bin" "${args[@]}"

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

# ---- uint32 token files ----
command -v python3 >/dev/null || { skip "uint32 token files: no python3 to convert the tiny data"; finish; }
# to_u32 IN OUT [ADD]: the uint16 token file IN as a uint32 one (magic 20240801, version 7),
# every id plus ADD (default 0).
to_u32() {
  python3 - "$@" <<'PY'
import struct, sys
src, dst, add = sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 0
b = open(src, "rb").read()
magic, version, n = struct.unpack_from("<3i", b)
assert (magic, version) == (20240520, 1) and len(b) == 1024 + 2 * n, "not a uint16 token file"
ids = [t + add for t in struct.unpack_from("<%dH" % n, b, 1024)]
with open(dst, "wb") as f:
    f.write(struct.pack("<3i", 20240801, 7, n) + bytes(1024 - 12) + struct.pack("<%dI" % n, *ids))
PY
}
if ! to_u32 "$tmp/orig.bin" "$tmp/orig32.bin" || ! to_u32 "$tmp/val.bin" "$tmp/val32.bin"; then
  bad "cannot convert the tiny data to uint32"
fi
size32=$(stat -c %s "$tmp/orig32.bin")

# 8. The tiny data as uint32, training and validation files: the batches are the uint16
#    files' ids, so the losses and validation losses are the uint16 run's bit for bit.
vals() { grep -Eo 'step +[0-9]+ \| val loss [0-9.]+' "$1"; }
for w in 16 32; do
  t=$tmp/orig.bin v=$tmp/val.bin
  [ $w = 16 ] || t=$tmp/orig32.bin v=$tmp/val32.bin
  timeout 300 "$PPTRAIN" "${one[@]}" --set data.train="$t" --set data.val="$v" --set data.val_every=20 \
    --set output.dir="$tmp/u$w" >"$tmp/u$w.out" 2>&1 || bad "the uint$w run failed: $(tail -n 3 "$tmp/u$w.out")"
done
nval=$(vals "$tmp/u32.out" | wc -l)
if [ -s "$tmp/u32/losses.csv" ] && [ "$(losses "$tmp/u32")" = "$(losses "$tmp/u16")" ] && [ "$nval" -eq $((STEPS / 20)) ] &&
  [ "$(vals "$tmp/u32.out")" = "$(vals "$tmp/u16.out")" ]; then
  ok "uint32 files ($size32 bytes): the uint16 run's $STEPS losses and $nval validation losses, bit for bit"
else
  bad "uint32 files: losses $( [ "$(losses "$tmp/u32")" = "$(losses "$tmp/u16")" ] && echo equal || echo differ), validation: $(vals "$tmp/u32.out" | tr '\n' ' ') vs $(vals "$tmp/u16.out" | tr '\n' ' ')"
fi

# 9. A uint32 file rewritten in place with ids >= vocab_size (0xffffffff): caught naming
#    the uint32 position (byte offset 1024 + 4 * token), and once restored the run resumes
#    to the undisturbed run's losses.
f=$tmp/bad32.bin && cp "$tmp/orig32.bin" "$f"
args=("$PPTRAIN" "${one[@]}" --set data.train="$f" --set output.dir="$tmp/bad32")
disturb bad32 "head -c $((size32 - 1024)) /dev/zero | tr '\\0' '\\377' | dd of='$f' bs=1024 seek=1 conv=notrunc status=none" "${args[@]}"
expect_error bad32 $? "error: .*data file '$f' changed under the run: token [0-9]+ \(byte offset [0-9]+\) is 4294967295, not below model.vocab_size = 256"
read -ra pos < <(grep -Eo 'token [0-9]+ \(byte offset [0-9]+\)' "$tmp/bad32.out" | head -n 1 | tr -d '()')
if [ ${#pos[@]} -eq 5 ] && [ "${pos[4]}" -eq $((1024 + 4 * pos[1])) ]; then
  ok "bad32: token ${pos[1]} is at byte offset ${pos[4]} = 1024 + 4*${pos[1]}"
else
  bad "bad32: the position '${pos[*]}' is not a uint32 one"
fi
restore bad32 "$f" "$tmp/orig32.bin" "${args[@]}"

# 10. Llama 3's vocabulary, 128256 ids: the tiny data's bytes + 128000 (every id over 65535)
#     trains (the first loss is about ln 128256 = 11.76, and it falls); a vocabulary that
#     does not cover the file's largest id is refused at the start, naming that id.
to_u32 "$tmp/orig.bin" "$tmp/llama.bin" 128000 || bad "cannot convert the tiny data to uint32"
big=(--set model.vocab_size=128256 --set data.train="$tmp/llama.bin" --set train.steps=3)
timeout 300 "$PPTRAIN" "${one[@]}" "${big[@]}" --set output.dir="$tmp/llama" >"$tmp/llama.out" 2>&1
rc=$?
first=$(sed -n 2p "$tmp/llama/losses.csv" 2>/dev/null | cut -d, -f2)
last=$(sed -n 4p "$tmp/llama/losses.csv" 2>/dev/null | cut -d, -f2)
if [ $rc -eq 0 ] && awk -v a="$first" -v b="$last" 'BEGIN { exit !(a > 11.66 && a < 11.86 && b < a) }'; then
  ok "vocab 128256 on uint32 ids from 128000: exit 0, loss $first at step 1, $last at step 3"
else
  bad "vocab 128256: exit $rc, losses '$first' '$last': $(grep -m2 error "$tmp/llama.out")"
fi
hi=$(python3 -c 'import struct, sys; b = open(sys.argv[1], "rb").read()
print(max(struct.unpack_from("<%dI" % ((len(b) - 1024) // 4), b, 1024)))' "$tmp/llama.bin")
timeout 300 "$PPTRAIN" "${one[@]}" "${big[@]}" --set model.vocab_size="$hi" --set output.dir="$tmp/llama-small" \
  >"$tmp/llama-small.out" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -Eq "error: .*data file '$tmp/llama.bin': token [0-9]+ \(byte offset [0-9]+\) is $hi, not below model.vocab_size = $hi" "$tmp/llama-small.out"; then
  ok "vocab $hi, ids up to $hi: refused: $(grep -m1 error "$tmp/llama-small.out" | cut -c1-200)"
else
  bad "vocab $hi, ids up to $hi: exit $rc: $(tail -n 2 "$tmp/llama-small.out")"
fi

finish
