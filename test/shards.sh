#!/usr/bin/env bash
# shards.sh — data.train as shards (issue 27, item 3; [Note: shard streams] in
# src/data_stream.c). data/tiny's tokens are cut into shard files here (a header and a
# slice of the body, with head and tail). (a) Shards that overlap by the one target token
# and hold whole batches are the single file's batches: a glob and a list of them train to
# the single file's losses bit for bit, across the wrap-around; as data.val, they give its
# validation losses. (b) Shards cut as prepare-data cuts them (no overlap): each shard's
# tail that fills no batch is not read, as in llm.c, so the losses leave the single file's
# at the first boundary; a 2-rank pipelined run checkpointed past a shard boundary and
# resumed gives the losses of the run that never stopped, bit for bit, across the next
# boundary and the wrap; the checkpoint records where it was; 2 data-parallel replicas
# train to the 1-process losses. (c) A resume with another shard list warns, naming both
# places; a checkpoint from before these records resumes, saying that its place is not
# checked. (d) A glob matching nothing, a missing list entry: exit 2 naming it; an id out
# of range in a later shard: found when the run reaches it, exit 1 naming it, the steps
# before it done and saved.
set -u
PPTRAIN=${PPTRAIN:-./pptrain}
tmp=$(mktemp -d /tmp/pptrain-shards.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib/check.sh" # ok, bad, check, skip, skip_all, finish

src=data/tiny/train.bin
[ -s "$src" ] || skip_all "data/tiny not prepared (make data)"
cfg=test/configs/pipe8.yaml # batch 8 x 16 = 128 tokens

# le32 V: V as 4 little-endian bytes
le32() {
  local v=$1
  printf "\\$(printf %03o $((v & 255)))\\$(printf %03o $(((v >> 8) & 255)))"
  printf "\\$(printf %03o $(((v >> 16) & 255)))\\$(printf %03o $(((v >> 24) & 255)))"
}
# shard OUT START NTOK: tokens [START, START + NTOK) of $src as a uint16 token file
shard() {
  { le32 20240520; le32 1; le32 "$3"; head -c 1012 /dev/zero
    tail -c +$((1024 + 2 * $2 + 1)) "$src" | head -c $((2 * $3)); } >"$1"
}
# run NAME P [ARGS...]: pptrain on P ranks (pprun), output.dir $tmp/NAME (reused by --resume)
run() {
  local name=$1 P=$2; shift 2
  timeout 120 scripts/pprun --nproc-per-node "$P" "$PPTRAIN" --config "$cfg" \
    --set pipeline.stages="$P" --set output.dir="$tmp/$name" --set output.checkpoint_keep=10 \
    "$@" >"$tmp/$name.out" 2>&1
}
rows() { tail -n +2 "$tmp/$1/losses.csv" | cut -d, -f1,2 | sed -n "$2"; } # NAME sed-range
two() { rows "$1" "$2" | head -n 2 | tr '\n' ' '; }
same_rows() { # name-a name-b range label
  if [ -n "$(rows "$1" "$3")" ] && [ "$(rows "$1" "$3")" = "$(rows "$2" "$3")" ]; then ok "$4"
  else bad "$4: $(two "$1" "$3") vs $(two "$2" "$3")"; fi
}
has() { grep -q -- "$2" "$tmp/$1.out"; } # NAME TEXT
first() { grep -m1 -- "$2" "$tmp/$1.out"; } # NAME TEXT

# (a) 3 shards of 10 batches each (1280 tokens + the next shard's first as the last
#     target) are the single file of 3841 tokens: 30 batches a pass, then the wrap.
a=$tmp/a
mkdir "$a" && shard "$tmp/one.bin" 0 3841
for i in 0 1 2; do shard "$a/part_0$i.bin" $((1280 * i)) 1281; done
vz=(--set data.val_every=17 --set data.val_batches=15) # a pass over shards 1 and 2
run one 1 --set train.steps=34 --set data.train="$tmp/one.bin" --set data.val="$tmp/one.bin" \
  "${vz[@]}"
run glob 1 --set train.steps=34 --set data.train="$a/part_*.bin" --set data.val="$a/part_*.bin" \
  "${vz[@]}"
run list 1 --set train.steps=34 \
  --set data.train="[$a/part_00.bin, $a/part_01.bin, $a/part_02.bin]"
has glob "data.train: 3 shards ('$a/part_00.bin' .. '$a/part_02.bin', in this order), 3843 \
uint16 tokens, 30 batches of 8 x 16 a pass" &&
  ok "the build report names the stream" || bad "build report: $(first glob data.train)"
same_rows one glob '1,34p' \
  "a glob of batch-aligned shards trains to the single file's losses, bitwise (wrap at 30)"
same_rows one list '1,34p' "a list of the same shards too"
vals() { grep -o 'step [0-9]* | val loss .*' "$tmp/$1.out"; }
[ "$(vals one | wc -l)" = 2 ] && [ "$(vals one)" = "$(vals glob)" ] &&
  ok "data.val as a glob: the single file's validation losses (2 passes over 2 shards)" ||
  bad "val: $(vals one | tr '\n' ' ') vs $(vals glob | tr '\n' ' ')"
has glob "data.train: batch 10 opens shard 2 of 3, '$a/part_01.bin'" &&
  ok "rank 0 says when a batch opens a shard" || bad "shard 2: $(first glob 'opens shard')"

# (b) shards of 1000, 1500 and 1300 tokens, no overlap: 7 + 11 + 10 = 28 batches a pass;
#     tokens 897..999 of the first shard fill no batch and are not read.
b=$tmp/b
mkdir "$b" && shard "$b/fw_000.bin" 0 1000 && shard "$b/fw_001.bin" 1000 1500 &&
  shard "$b/fw_002.bin" 2500 1300 && shard "$tmp/b.bin" 0 3800
run b-one 1 --set train.steps=8 --set data.train="$tmp/b.bin"
run b-glob 1 --set train.steps=8 --set data.train="$b/fw_*.bin"
same_rows b-one b-glob '1,7p' \
  "unaligned shards: the single file's losses up to the first boundary (7 batches)"
[ -n "$(rows b-glob 8p)" ] && [ "$(rows b-one 8p)" != "$(rows b-glob 8p)" ] &&
  ok "... and not after it: batch 8 starts the second shard, as in llm.c" ||
  bad "step 8: $(rows b-one 8p) vs $(rows b-glob 8p)"
pz=(--set pipeline.microbatches=4 --set data.train="$b/fw_*.bin" --set train.steps=32)
run full 2 "${pz[@]}" --set output.checkpoint_every=10 || bad "full: $(tail -n 3 "$tmp/full.out")"
cp -r "$tmp/full" "$tmp/res" && head -n 11 "$tmp/full/losses.csv" >"$tmp/res/losses.csv"
run res 2 "${pz[@]}" --resume "$tmp/res/checkpoints/step_0000010" ||
  bad "res: $(tail -n 3 "$tmp/res.out")"
same_rows full res '11,32p' "2 ranks, resumed at step 10 (in shard 2, past a boundary): steps \
11-32 bitwise equal (a boundary at 18, the wrap at 28)"
manifest=$tmp/full/checkpoints/step_0000010/manifest
grep -q "extra.data_train = shards=3 tokens=3800 width=2 hash=[0-9a-f]\{16\} batch=10 shard=1 \
token=384 file=fw_001.bin" "$manifest" && ok "the manifest records the stream and its place" ||
  bad "manifest: $(grep -a data_train "$manifest")"
has res "data.train: batch 10 is read from shard 2 of 3 'fw_001.bin' at token 384, as the run \
that wrote the checkpoint would have" &&
  ok "the resume says it is where the checkpoint was" || bad "resume: $(first res data.train:)"

# ... 2 data-parallel replicas (1 stage x 2) read the same global batches, each its half:
#     the 1-process run's losses to float rounding (1e-5), across the first boundary
run dp 2 --set pipeline.stages=1 --set train.steps=12 --set data.train="$b/fw_*.bin"
run b-one12 1 --set train.steps=12 --set data.train="$b/fw_*.bin"
paste -d, <(rows dp '1,12p') <(rows b-one12 '1,12p') | awk -F, 'NF == 4 && $1 == $3 { n++
  d = $2 - $4; if (d < 0) d = -d; if (d > 1e-5 * $4) bad++ } END { exit !(n == 12 && !bad) }' &&
  ok "2 data-parallel replicas on the shards: the 1-process losses within 1e-5 (12 steps)" ||
  bad "dp: $(two dp '7,8p') vs $(two b-one12 '7,8p')"

# (c) resumed with the middle shard left out: a warning naming both places, then on
cp -r "$tmp/full" "$tmp/moved"
run moved 1 --set data.train="[$b/fw_000.bin, $b/fw_002.bin]" --set train.steps=12 \
  --resume "$tmp/moved/checkpoints/step_0000010"
rc=$?
[ $rc -eq 0 ] && has moved "warning: data.train is not where the checkpoint left it: batch 10 \
was shard 2 of 3 'fw_001.bin' at token 384 and is now shard 2 of 2 'fw_002.bin' at token 384" &&
  ok "a resume with another shard list warns (exit 0)" ||
  bad "moved: rc=$rc $(first moved 'data.train is')"

# ... and a checkpoint from before these records (its manifest without data_train, its CRC
# line recomputed: gzip's trailer holds the CRC-32) resumes, saying its place is unchecked
cp -r "$tmp/full" "$tmp/old"
m=$tmp/old/checkpoints/step_0000010/manifest
body=$(grep -v -e '^extra.data_train = ' -e '^crc32 = ' "$m")
crc=$(printf '%s\n' "$body" | gzip -c | tail -c 8 | head -c 4 | od -An -tx4 | tr -d ' ')
printf '%s\ncrc32 = %s\n' "$body" "$crc" >"$m"
run old 1 "${pz[@]}" --set train.steps=11 --resume "$tmp/old/checkpoints/step_0000010"
rc=$?
[ $rc -eq 0 ] && ! grep -q data_train "$m" && has old "data.train: the checkpoint has no record \
of its data stream (it is older): batch 10 is read from shard 2 of 3 'fw_001.bin' at token 384" &&
  ok "a checkpoint without the record resumes (exit 0), saying so" ||
  bad "old: rc=$rc $(first old error) $(first old 'data.train: the')"

# (d) errors
run nomatch 1 --set data.train="$b/nope_*.bin"
rc=$?
[ $rc -eq 2 ] && has nomatch "error: data.train: no file matches '$b/nope_\*.bin'" &&
  ok "a glob that matches nothing: exit 2 naming it" ||
  bad "no match: rc=$rc $(first nomatch error)"
run missing 1 --set data.train="[$b/fw_000.bin, $b/fw_009.bin]"
rc=$?
[ $rc -eq 2 ] && has missing "cannot open data file '$b/fw_009.bin'" &&
  ok "a missing list entry: exit 2 naming it" || bad "missing: rc=$rc $(first missing error)"
# 300 tokens, token 200 = 65535
{ le32 20240520; le32 1; le32 300; head -c 1012 /dev/zero; tail -c +1025 "$src" | head -c 400
  printf '\377\377'; tail -c +1425 "$src" | head -c 198; } >"$b/bad.bin"
run lazy 1 --set data.train="[$b/fw_000.bin, $b/bad.bin]" --set train.steps=20
rc=$?
[ $rc -eq 1 ] && has lazy "data.train shard 2 of 2, needed by batch 7: data file '$b/bad.bin': \
token 200 (byte offset 1424) is 65535" &&
  [ "$(tail -n 1 "$tmp/lazy/losses.csv" | cut -d, -f1)" = 7 ] &&
  ok "an id out of range in a later shard: found when reached, exit 1 naming it, steps 1-7 done" ||
  bad "lazy: rc=$rc $(first lazy error)"
finish
