#!/usr/bin/env bash
# dp.sh — data parallelism through the real binary and real sockets (scripts/pprun):
# stages x replicas = 1x2, 2x2, 2x3 and 4x1 train what one process trains on the same
# global batch (losses and final weights within 1e-5), repeated runs are bitwise equal,
# every schedule runs with 2 replicas, a checkpoint of 2x2 resumes as 2x1 and 1x2, a
# replica killed with SIGKILL takes every rank down naming it, and bad layouts exit 2.
# Llama's block (test/configs/llama8.yaml) with replicas, zbv and recompute too.
set -u
PPTRAIN=${PPTRAIN:-./pptrain}
tmp=$(mktemp -d /tmp/pptrain-dp.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; [ -n "${KEEP:-}" ] || rm -rf "$tmp"; }
trap cleanup EXIT
source "$(dirname "$0")/lib/check.sh" # ok, bad, check, skip, skip_all, finish
cfg=test/configs/pipe8.yaml

# run NAME NPROC STAGES [--set ...]: train into $tmp/NAME; losses in $tmp/NAME.loss,
# final weights (exported from the last checkpoint) in $tmp/NAME.bin
run() {
  local name=$1 n=$2 P=$3; shift 3
  timeout 120 scripts/pprun --nproc-per-node "$n" "$PPTRAIN" --config "$cfg" --set pipeline.stages="$P" \
    --set output.dir="$tmp/$name" --set output.log_every=1 --set output.checkpoint_keep=10 "$@" >"$tmp/$name.out" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then bad "$name exited $rc: $(tail -n 5 "$tmp/$name.out")"; return 1; fi
  tail -n +2 "$tmp/$name/losses.csv" | cut -d, -f2 >"$tmp/$name.loss"
  # the llama family has no llm.c format: its runs keep each step's gradient norm, which
  # every weight enters (test_interp.c compares its weights bitwise)
  if grep -q '^  arch: llama' "$cfg"; then
    tail -n +2 "$tmp/$name/losses.csv" | cut -d, -f4 >"$tmp/$name.norm"
  else
    "$PPTRAIN" export --checkpoint "$tmp/$name/checkpoints" --out "$tmp/$name.bin" >/dev/null
  fi
}
same() {
  if cmp -s "$tmp/$1.loss" "$tmp/$2.loss" && cmp -s "$tmp/$1.bin" "$tmp/$2.bin"; then ok "$1 == $2 (losses and weights bitwise)"
  else bad "$1 != $2: $(paste -d' ' "$tmp/$1.loss" "$tmp/$2.loss" | head -n 3 | tr '\n' ';') $(cmp "$tmp/$1.bin" "$tmp/$2.bin")"; fi
}
# close A B [ROWS]: losses (ROWS of them, 10 by default) and weights within 1e-5
close() {
  if python3 - "$tmp/$1.loss" "$tmp/$2.loss" "$tmp/$1.bin" "$tmp/$2.bin" "${3:-10}" <<'PY'
import os, sys
from array import array
a = [float(x) for x in open(sys.argv[1])]; b = [float(x) for x in open(sys.argv[2])]
n = int(sys.argv[5]); a, b = a[-n:], b[-n:]
assert len(a) == len(b) == n, (len(a), len(b))
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
if not os.path.exists(sys.argv[3]): # a llama run: its gradient norms, within 1e-5 too
    na, nb = [[float(x) for x in open(p[:-4] + ".norm")][-n:] for p in sys.argv[3:5]]
    nworst = max(abs(x - y) / abs(y) for x, y in zip(na, nb))
    print("   worst relative difference: losses %.2e, gradient norms %.2e" % (worst, nworst))
    sys.exit(worst > 1e-5 or nworst > 1e-5)
def load(p):
    w = array("f"); w.frombytes(open(p, "rb").read()[1024:]); return w
wa, wb = load(sys.argv[3]), load(sys.argv[4])
assert len(wa) == len(wb) > 0
wworst = max(abs(x - y) for x, y in zip(wa, wb)) / max(abs(v) for v in wb)
print("   worst relative difference: losses %.2e, weights %.2e (of the largest weight)" % (worst, wworst))
sys.exit(worst > 1e-5 or wworst > 1e-5)
PY
  then ok "$1 ~ $2 (1e-5)"; else bad "$1 vs $2 differ by more than 1e-5"; fi
}

m2=(--set pipeline.microbatches=2)
run ref 1 1 "${m2[@]}"
run 1x2 2 1 "${m2[@]}" && close 1x2 ref
run 2x2 4 2 "${m2[@]}" --set output.checkpoint_every=5 && close 2x2 ref
run 2x2-again 4 2 "${m2[@]}" --set output.checkpoint_every=5 && same 2x2 2x2-again
grep -q 'layout: 2 pipeline ranks x 2 replicas = 4 processes; pipelines: {0 2} {1 3}; replicas of a pipeline rank (gradient all-reduce): {0 1} {2 3}' "$tmp/2x2.out" &&
  ok "the layout is printed at start" || bad "no layout line: $(grep -m1 layout "$tmp/2x2.out")"
# 3 replicas: batch 12 = 3 replicas x 2 microbatches x 2 sequences
run ref12 1 1 "${m2[@]}" --set train.batch_size=12
run 2x3 6 2 "${m2[@]}" --set train.batch_size=12 --set pipeline.data_parallel=3 && close 2x3 ref12
run 4x1 4 4 "${m2[@]}" --set pipeline.data_parallel=1 && close 4x1 ref
# Each tensor is stored once: the replicas' shards hold nothing (a header only).
s0=$(stat -c %s "$tmp/2x2/checkpoints/step_0000010/shard_00000.ckpt" 2>/dev/null || echo 0)
s1=$(stat -c %s "$tmp/2x2/checkpoints/step_0000010/shard_00001.ckpt" 2>/dev/null || echo 0)
if [ "$s0" -gt 10000 ] && [ "$s1" -gt 0 ] && [ $((s1 * 20)) -lt "$s0" ]; then ok "replica 1's shard is empty ($s1 vs $s0 bytes)"
else bad "checkpoint shards of 2x2: rank 0 $s0 bytes, rank 1 (a replica) $s1 bytes"; fi

# Every schedule with 2 replicas (M = 4: 1 sequence per microbatch).
m4=(--set pipeline.microbatches=4)
for s in gpipe 1f1b zb-h1 "interleaved-1f1b 2" "looped-bfs 2" "zbv 2"; do
  set -- $s
  run "sched-$1" 4 2 "${m4[@]}" --set pipeline.schedule="$1" --set pipeline.virtual_stages="${2:-1}" &&
    close "sched-$1" ref
done

# A checkpoint of 2x2 resumes as 2x1 and as 1x2: steps 6-10 within 1e-5 of the 2x2 run.
for t in "2x1 2 2" "1x2 2 1"; do
  set -- $t
  mkdir -p "$tmp/to-$1" && cp "$tmp/2x2/losses.csv" "$tmp/to-$1/"
  run "to-$1" "$2" "$3" "${m2[@]}" --resume "$tmp/2x2/checkpoints/step_0000005" && close "to-$1" 2x2 5
done

# ZeRO-1 (train.optimizer.shard): with 2 replicas each sum has 2 terms, whose order does
# not matter (IEEE addition commutes), so it equals the unsharded run bitwise; with 3
# the blocks differ from the plain ring's (the sums' order): within 1e-5.
z=(--set train.optimizer.shard=true)
run zero-2x2 4 2 "${m2[@]}" "${z[@]}" --set output.checkpoint_every=5 && same 2x2 zero-2x2
grep -q 'ZeRO-1: optimizer state of .* MB saved' "$tmp/zero-2x2.out" && ok "the build report shows ZeRO-1's saved bytes" ||
  bad "no ZeRO-1 line in the build report"
run 1x3 3 1 "${m2[@]}" --set train.batch_size=12 && run zero-1x3 3 1 "${m2[@]}" "${z[@]}" --set train.batch_size=12 &&
  close zero-1x3 1x3
# Its checkpoint (each replica stores the state of its own tensors) resumes exactly
# (steps 6-10 bitwise), and as an unsharded 2x1; an unsharded checkpoint resumes sharded.
for t in "zero-again 4 2 zero-2x2 --set train.optimizer.shard=true" "zero-to-2x1 2 2 zero-2x2" \
         "plain-to-zero 4 2 2x2 --set train.optimizer.shard=true"; do
  set -- $t
  name=$1 n=$2 P=$3 from=$4; shift 4
  mkdir -p "$tmp/$name" && cp "$tmp/$from/losses.csv" "$tmp/$name/"
  run "$name" "$n" "$P" "${m2[@]}" "$@" --resume "$tmp/$from/checkpoints/step_0000005" || continue
  if [ "$name" = zero-again ]; then same zero-2x2 zero-again; else close "$name" "$from" 5; fi
done

# Llama's block: 2 replicas of 1 and of 2 stages, zbv, and full recompute with replicas,
# against its 1-process run; tied, 2 x 2 against 1 x 1.
cfg=test/configs/llama8.yaml
run lref 1 1 "${m2[@]}"
run l1x2 2 1 "${m2[@]}" && close l1x2 lref
run l2x2 4 2 "${m2[@]}" && close l2x2 lref
run l2x2-zbv 4 2 "${m4[@]}" --set pipeline.schedule=zbv --set pipeline.virtual_stages=2 && close l2x2-zbv lref
run l2x2-full 4 2 "${m2[@]}" --set pipeline.recompute=full && close l2x2-full lref
run lref-tied 1 1 "${m2[@]}" --set model.tie_embeddings=true
run l2x2-tied 4 2 "${m2[@]}" --set model.tie_embeddings=true --set pipeline.recompute=selective &&
  close l2x2-tied lref-tied
cfg=test/configs/pipe8.yaml

# Bad layouts: a clear message and exit 2 on every rank.
expect2() { # name nproc pattern args...
  local name=$1 n=$2 pat=$3; shift 3
  timeout 60 scripts/pprun --nproc-per-node "$n" "$PPTRAIN" --config "$cfg" --set output.dir="$tmp/$name" "$@" \
    >"$tmp/$name.out" 2>&1
  local rc=$?
  if [ $rc -eq 2 ] && grep -q "$pat" "$tmp/$name.out"; then ok "$name: exit 2: $(grep -m1 "$pat" "$tmp/$name.out" | head -c 160)"
  else bad "$name: rc $rc: $(tail -n 3 "$tmp/$name.out")"; fi
}
expect2 not-multiple 3 "pipeline.stages is 2 but 3 processes were launched: the world size must be a multiple of the stages" --set pipeline.stages=2
expect2 d-mismatch 4 "pipeline.stages 2 x pipeline.data_parallel 3 = 6 processes, but 4" --set pipeline.stages=2 \
  --set pipeline.data_parallel=3
expect2 batch-split 3 "train.batch_size 8 is not a multiple of 3 replicas" --set pipeline.microbatches=1

# SIGKILL of a replica rank (rank 1: pipeline rank 0 of replica 1) mid-run: every other
# rank exits 1 within the timeout, naming rank 1.
source "$(dirname "$0")/lib/ranks.sh" # free_port
port=$(free_port)
pids=()
for r in 0 1 2 3; do
  RANK=$r WORLD_SIZE=4 LOCAL_RANK=$r LOCAL_WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    "$PPTRAIN" --config "$cfg" --set pipeline.stages=2 --set train.steps=100000 --set runtime.timeout_s=5 \
    --set output.log_every=1 --set output.dir="$tmp/kill" >"$tmp/k$r.out" 2>&1 &
  pids+=($!)
done
# rank 2 (the last stage of replica 0) logs the steps: wait until it has logged one
for _ in $(seq 100); do grep -Eq "step +[0-9]+/" "$tmp/k2.out" 2>/dev/null && break; sleep 0.1; done
sleep 1
exec 3>&2 2>/dev/null # not bash's "Killed" line for the rank this test killed
kill -9 "${pids[1]}"
t0=$(date +%s)
good=1
for r in 0 2 3; do
  wait "${pids[$r]}"; rc=$?
  if [ $rc -ne 1 ] || ! grep -q 'rank 1' "$tmp/k$r.out"; then good=0; echo "   rank $r: rc $rc: $(grep -m1 -i error "$tmp/k$r.out")"; fi
done
dt=$(($(date +%s) - t0))
wait "${pids[1]}"
exec 2>&3 3>&-
pids=()
grep -Eq "step +[0-9]+/" "$tmp/k2.out" || { good=0; echo "   the job had not trained a step when rank 1 was killed"; }
if [ $good -eq 1 ] && [ $dt -le 12 ]; then ok "SIGKILL of replica rank 1: ranks 0, 2, 3 exit 1 within ${dt}s naming it: $(grep -m1 -i error "$tmp/k2.out" | head -c 200)"
else bad "SIGKILL of replica rank 1 (after ${dt}s)"; fi

finish
