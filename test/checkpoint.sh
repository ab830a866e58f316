#!/usr/bin/env bash
# checkpoint.sh — checkpoints through the real binary: exact resume for every schedule,
# resharding into other splits, export -> init_from, corrupt checkpoints refused without
# touching anything, a rank killed mid-save, and SIGTERM -> checkpoint -> exact resume.
set -u
PPTRAIN=${PPTRAIN:-./pptrain}
tmp=$(mktemp -d /tmp/pptrain-ckpt.XXXXXX)
bgpid=
cleanup() { [ -n "$bgpid" ] && kill -9 $bgpid 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
source "$(dirname "$0")/lib/check.sh" # ok, bad, check, skip, skip_all, finish
cfg=test/configs/pipe8.yaml

# run NAME P [--set ...]: output.dir $tmp/NAME (reused, so --resume finds it)
run() {
  local name=$1 P=$2; shift 2
  timeout 120 scripts/pprun --nproc-per-node "$P" "$PPTRAIN" --config "$cfg" --set pipeline.stages="$P" \
    --set output.dir="$tmp/$name" --set output.log_every=1 --set output.checkpoint_keep=10 "$@" >"$tmp/$name.out" 2>&1
}
rows() { tail -n +2 "$tmp/$1/losses.csv" | cut -d, -f1,2 | sed -n "$2"; }  # NAME sed-range
same_rows() { # name-a name-b range label
  if [ -n "$(rows "$1" "$3")" ] && [ "$(rows "$1" "$3")" = "$(rows "$2" "$3")" ]; then ok "$4"; else bad "$4: $(rows "$1" "$3" | head -n 2 | tr '\n' ' ') vs $(rows "$2" "$3" | head -n 2 | tr '\n' ' ')"; fi
}
close_rows() { # name-a name-b range label
  if python3 - <(rows "$1" "$3") <(rows "$2" "$3") <<'PY'
import sys
a = [float(l.split(",")[1]) for l in open(sys.argv[1])]; b = [float(l.split(",")[1]) for l in open(sys.argv[2])]
assert len(a) == len(b) == 5, (len(a), len(b))
w = max(abs(x - y) / abs(y) for x, y in zip(a, b)); print("   worst relative difference %.2e" % w); sys.exit(w > 1e-5)
PY
  then ok "$4"; else bad "$4"; fi
}

# 1. Exact resume on 2 ranks, for every schedule: a run stopped after 5 of 10 steps and
#    resumed gives the losses of the run that never stopped, bit for bit.
declare -A extra=([gpipe]="--set pipeline.schedule=gpipe" [1f1b]="--set pipeline.schedule=1f1b"
  [inter]="--set pipeline.schedule=interleaved-1f1b --set pipeline.virtual_stages=2")
for s in gpipe 1f1b inter; do
  run "full-$s" 2 ${extra[$s]} --set pipeline.microbatches=4 --set output.checkpoint_every=5 || bad "full-$s run failed: $(tail -n 3 "$tmp/full-$s.out")"
  cp -r "$tmp/full-$s" "$tmp/res-$s"
  run "res-$s" 2 ${extra[$s]} --set pipeline.microbatches=4 --resume "$tmp/res-$s/checkpoints/step_0000005" ||
    bad "res-$s failed: $(tail -n 3 "$tmp/res-$s.out")"
  same_rows "full-$s" "res-$s" '6,10p' "resume $s at step 5: steps 6-10 bitwise equal"
done

# 2. Reshard: the 2-rank 1f1b checkpoint of step 5 continues under other splits with the
#    losses the old split would have produced (1e-5). 1 -> 4 ranks and 4 -> 1 as well.
for target in "P4 4" "inter2 2 --set pipeline.schedule=interleaved-1f1b --set pipeline.virtual_stages=2" "P1 1"; do
  set -- $target
  name=reshard-$1 P=$2; shift 2
  mkdir -p "$tmp/$name" && cp "$tmp/full-1f1b/losses.csv" "$tmp/$name/"
  run "$name" "$P" --set pipeline.microbatches=4 "$@" --resume "$tmp/full-1f1b/checkpoints/step_0000005" ||
    bad "$name failed: $(tail -n 3 "$tmp/$name.out")"
  close_rows "$name" full-1f1b '6,10p' "reshard 2 ranks (1f1b) -> $name: steps 6-10 within 1e-5"
done
run one 1 --set output.checkpoint_every=5 || bad "one: $(tail -n 3 "$tmp/one.out")"
mkdir -p "$tmp/one-to-4" "$tmp/four" && cp "$tmp/one/losses.csv" "$tmp/one-to-4/"
run one-to-4 4 --set pipeline.microbatches=4 --resume "$tmp/one/checkpoints/step_0000005" && close_rows one-to-4 one '6,10p' "reshard 1 -> 4 ranks"
run four 4 --set pipeline.microbatches=4 --set output.checkpoint_every=5
mkdir -p "$tmp/four-to-1" && cp "$tmp/four/losses.csv" "$tmp/four-to-1/"
run four-to-1 1 --resume "$tmp/four/checkpoints/step_0000005" && close_rows four-to-1 four '6,10p' "reshard 4 -> 1 rank"

# A fresh run (no --resume) refuses an output.dir that holds another run's checkpoints.
before=$(ls -l "$tmp/full-1f1b/checkpoints")
run full-1f1b 2 --set pipeline.microbatches=4
rc=$?
if [ $rc -eq 2 ] && grep -q 'already holds the checkpoints of a run' "$tmp/full-1f1b.out" && [ "$before" = "$(ls -l "$tmp/full-1f1b/checkpoints")" ] &&
  ! grep -q 'without --resume-if-present' "$tmp/full-1f1b.out"; then
  ok "a fresh run does not take over an output.dir with checkpoints (exit 2)"; else bad "fresh run into a used output.dir: rc=$rc"; fi
# ...and a requeued SLURM job is told what to add (pprun's and torchrun's restarts:
# test/pprun.sh, test/torchrun.sh 2b)
SLURM_RESTART_COUNT=2 run full-1f1b 2 --set pipeline.microbatches=4
rc=$?
check "...a requeued job (SLURM_RESTART_COUNT=2) without --resume-if-present: exit 2 (rc $rc), saying what to add" \
  "[ $rc -eq 2 ] && grep -qF 'SLURM requeued this job (SLURM_RESTART_COUNT=2) without --resume-if-present: put it on the command line' $tmp/full-1f1b.out"

# 3. export -> init_from: exporting, loading the export (train.steps=0 saves it again) and
#    exporting that gives the same bytes.
"$PPTRAIN" export --checkpoint "$tmp/full-1f1b/checkpoints/latest" --out "$tmp/m1.bin" >/dev/null &&
  run init 2 --set train.steps=0 --set model.init_from="$tmp/m1.bin" &&
  "$PPTRAIN" export --checkpoint "$tmp/init/checkpoints" --out "$tmp/m2.bin" >/dev/null &&
  cmp -s "$tmp/m1.bin" "$tmp/m2.bin" && ok "export -> init_from -> export is byte-identical" || bad "export/init_from round trip"
head -c 8 "$tmp/m1.bin" | od -An -tu4 | grep -q '20240326 *3' && ok "export writes llm.c's header (magic 20240326, version 3)" || bad "export header"

# 4. Corrupt checkpoints: resume exits 1 naming the file (and tensor), nothing changes
#    (but output.dir/lock, whose line names the run that holds it last).
corrupt() { # label, grep pattern, a command that damages $tmp/bad/checkpoints/step_0000010
  local label=$1 pat=$2 damage=$3
  rm -rf "$tmp/bad" && cp -r "$tmp/full-1f1b" "$tmp/bad"
  eval "$damage"
  local before; before=$(cd "$tmp/bad" && find . -type f -o -type l | sort | xargs md5sum 2>/dev/null)
  run bad 2 --set pipeline.microbatches=4 --set train.steps=12 --resume
  local rc=$?
  local after; after=$(cd "$tmp/bad" && find . -type f -o -type l | sort | grep -v -e losses.csv -e '^\./lock$' | xargs md5sum 2>/dev/null)
  if [ $rc -eq 1 ] && grep -q -- "$pat" "$tmp/bad.out" && [ "$(grep -v -e losses.csv -e ' \./lock$' <<<"$before")" = "$after" ]; then
    ok "$label: exit 1, $(grep -m1 'error' "$tmp/bad.out" | cut -c1-150)"
  else bad "$label: rc=$rc $(grep -m1 error "$tmp/bad.out")"; fi
}
shard=checkpoints/step_0000010/shard_00001.ckpt
corrupt "truncated shard" "shard_00001" "truncate -s 3000 $tmp/bad/$shard"
corrupt "flipped byte" "shard_00001" "printf '\\xff' | dd of=$tmp/bad/$shard bs=1 seek=2000 conv=notrunc 2>/dev/null"
corrupt "missing shard" "shard_00001" "rm $tmp/bad/$shard"
rm -rf "$tmp/bad" && cp -r "$tmp/full-1f1b" "$tmp/bad"
run bad 2 --set pipeline.microbatches=4 --set model.dim=64 --resume
[ $? -eq 1 ] && grep -q 'another model' "$tmp/bad.out" && ok "a checkpoint of another model is refused" || bad "other model: $(grep error "$tmp/bad.out")"
run bad 2 --set pipeline.microbatches=4 --set train.optimizer.name=sgd --resume
[ $? -eq 1 ] && grep -q 'written with train.optimizer.name adamw' "$tmp/bad.out" && ok "another optimizer's state is refused" || bad "other optimizer: $(grep error "$tmp/bad.out")"

# 4b. Llama's block (test/configs/llama8.yaml): exact resume on 2 ranks (zb-h1) and a
#    reshard to 1 rank; a resume as another arch or with other dimensions is refused naming
#    both models ([Note: manifest model]); export refuses it: llm.c's format is GPT-2's.
cfg=test/configs/llama8.yaml
lz=(--set pipeline.schedule=zb-h1 --set pipeline.microbatches=4)
run llama-full 2 "${lz[@]}" --set output.checkpoint_every=5 || bad "llama-full: $(tail -n 3 "$tmp/llama-full.out")"
cp -r "$tmp/llama-full" "$tmp/llama-res"
run llama-res 2 "${lz[@]}" --resume "$tmp/llama-res/checkpoints/step_0000005" &&
  same_rows llama-full llama-res '6,10p' "llama: resume zb-h1 at step 5: steps 6-10 bitwise equal"
mkdir -p "$tmp/llama-one" && cp "$tmp/llama-full/losses.csv" "$tmp/llama-one/"
run llama-one 1 --set pipeline.microbatches=4 --resume "$tmp/llama-full/checkpoints/step_0000005" &&
  close_rows llama-one llama-full '6,10p' "llama: reshard 2 ranks -> 1: steps 6-10 within 1e-5"
grep -q 'arch=llama NKV=2 F=88 eps=9.99999975e-06 theta=10000 rope=none' "$tmp/llama-full/checkpoints/latest/manifest" &&
  ok "llama: the manifest names the arch and its dimensions" || bad "llama manifest: $(grep -a 'V=' "$tmp/llama-full/checkpoints/latest/manifest" | head -c 200)"
for other in "model.arch=qwen2:arch=qwen2" "model.n_kv_heads=1:NKV=1" "model.rope_theta=500000:theta=500000"; do
  rm -rf "$tmp/bad" && cp -r "$tmp/llama-full" "$tmp/bad"
  run bad 2 "${lz[@]}" --set "${other%%:*}" --resume
  rc=$?
  if [ $rc -eq 1 ] && grep -q "holds another model (V=256 .* arch=llama NKV=2 .*) than this config (.*${other#*:}" "$tmp/bad.out"; then
    ok "llama: a resume with ${other%%:*} is refused naming both models"
  else bad "llama: resume with ${other%%:*}: rc=$rc $(grep -m1 error "$tmp/bad.out")"; fi
done
if "$PPTRAIN" export --checkpoint "$tmp/llama-full/checkpoints" --out "$tmp/llama.bin" >"$tmp/lexp.out" 2>&1; then
  bad "llama: export to llm.c's format accepted"
elif grep -q "a model.arch llama checkpoint: llm.c's format holds GPT-2 only" "$tmp/lexp.out" && [ ! -e "$tmp/llama.bin" ]; then
  ok "llama: export refused, naming the arch"
else bad "llama export: $(cat "$tmp/lexp.out")"; fi
cfg=test/configs/pipe8.yaml

# 5. A rank killed with SIGKILL while checkpoints are being written (every step):
#    `latest` always names a complete checkpoint that resumes.
for delay in 0.7 1.1 1.6; do
  rm -rf "$tmp/kill"
  RANK=0 WORLD_SIZE=1 "$PPTRAIN" --config "$cfg" --set output.dir="$tmp/kill" --set train.steps=100000 \
    --set output.checkpoint_every=1 --set model.dim=64 >"$tmp/kill.out" 2>&1 &
  bgpid=$!
  sleep "$delay"
  kill -9 "$bgpid"; wait "$bgpid" 2>/dev/null; bgpid=
  latest=$(readlink "$tmp/kill/checkpoints/latest")
  step=$((10#${latest#step_}))
  "$PPTRAIN" --config "$cfg" --set output.dir="$tmp/kill" --set train.steps=$((step + 1)) --set model.dim=64 --resume >"$tmp/kill2.out" 2>&1 &&
    ok "killed during saves after ${delay}s: latest=$latest resumes" || bad "killed after ${delay}s: latest=$latest: $(grep error "$tmp/kill2.out")"
done

# ... and with 2 ranks: rank 1 killed while both write shards every step; the survivor
# exits 1, and `latest` names a complete 2-shard checkpoint that 2 ranks resume.
rm -rf "$tmp/kill2"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
k=()
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$PPTRAIN" --config "$cfg" \
    --set pipeline.stages=2 --set output.dir="$tmp/kill2" --set train.steps=100000 --set output.checkpoint_every=1 \
    --set model.dim=64 --set runtime.timeout_s=10 >"$tmp/kill2-$r.out" 2>&1 &
  k+=($!)
done
bgpid="${k[0]} ${k[1]}"
sleep 1.5
kill -9 "${k[1]}"
wait "${k[0]}"; rc0=$?
wait "${k[1]}" 2>/dev/null; bgpid=
latest=$(readlink "$tmp/kill2/checkpoints/latest")
step=$((10#${latest#step_}))
run kill2 2 --set train.steps=$((step + 1)) --set model.dim=64 --resume &&
  [ $rc0 -eq 1 ] && ok "rank 1 killed during 2-rank saves: rank 0 exits 1, latest=$latest resumes on 2 ranks" ||
  bad "2-rank kill during saves: rc0=$rc0 latest=$latest: $(grep error "$tmp/kill2.out")"

# pprun itself killed (SIGKILL): its ranks get SIGTERM (pdeathsig), save a checkpoint
# and exit; none is left running.
scripts/pprun --nproc-per-node 2 "$PPTRAIN" --config "$cfg" --set pipeline.stages=2 --set output.dir="$tmp/orphan" \
  --set train.steps=100000 >"$tmp/orphan.out" 2>&1 &
pp=$!
for _ in $(seq 100); do [ -n "$(pgrep -P "$pp")" ] && [ -e "$tmp/orphan/losses.csv" ] && break; sleep 0.1; done
kids=$(pgrep -P "$pp")
kill -9 "$pp"; wait "$pp" 2>/dev/null
alive=0
for _ in $(seq 100); do alive=0; for k in $kids; do kill -0 "$k" 2>/dev/null && alive=1; done; [ $alive -eq 0 ] && break; sleep 0.1; done
for k in $kids; do kill -9 "$k" 2>/dev/null; done
if [ $alive -eq 0 ] && [ -n "$kids" ] && [ -L "$tmp/orphan/checkpoints/latest" ]; then ok "pprun killed: its ranks checkpoint ($(readlink "$tmp/orphan/checkpoints/latest")) and exit, no orphans"
else bad "pprun killed: alive=$alive kids='$kids' $(ls "$tmp/orphan/checkpoints" 2>&1)"; fi

# 6. SIGTERM mid-run: all ranks finish the step, checkpoint, exit 0; the resumed run
#    produces exactly the losses of a run that never stopped.
run term-full 2 --set train.steps=400 --set model.dim=64
# (no `timeout` around pprun here: it would signal pprun twice, and pprun, like torchrun,
# turns a second SIGTERM into SIGKILL; the loops below bound the wait instead)
scripts/pprun --nproc-per-node 2 "$PPTRAIN" --config "$cfg" --set pipeline.stages=2 --set output.dir="$tmp/term" \
  --set output.log_every=1 --set train.steps=400 --set model.dim=64 >"$tmp/term.out" 2>&1 &
bgpid=$!
for _ in $(seq 200); do # until 20 steps are done (at most 20 s)
  [ "$(tail -n +2 "$tmp/term/losses.csv" 2>/dev/null | wc -l)" -ge 20 ] && break
  sleep 0.1
done
kill -TERM "$bgpid"
for _ in $(seq 600); do kill -0 "$bgpid" 2>/dev/null || break; sleep 0.1; done # at most 60 s
kill -9 "$bgpid" 2>/dev/null
wait "$bgpid"; rc=$?; bgpid=
stopped=$(tail -n +2 "$tmp/term/losses.csv" | wc -l)
if [ $rc -eq 0 ] && [ "$stopped" -lt 400 ] && grep -q 'stopping on a signal' "$tmp/term.out"; then ok "SIGTERM after step $stopped: checkpoint and exit 0"; else bad "SIGTERM: rc=$rc rows=$stopped"; fi
run term 2 --set train.steps=400 --set model.dim=64 --resume || bad "resume after SIGTERM: $(tail -n 3 "$tmp/term.out")"
same_rows term-full term '1,400p' "SIGTERM, resume: all 400 losses bitwise equal to the uninterrupted run"

finish
