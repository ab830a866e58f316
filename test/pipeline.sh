#!/usr/bin/env bash
# pipeline.sh — K real processes over real sockets (scripts/pprun) train exactly what one
# process trains: losses bitwise equal across schedules with the same split and M, and
# within 1e-5 relative of the 1-process run, for GPT-2 and for Llama's block;
# failures end every rank, never a hang.
set -u
PPTRAIN=${PPTRAIN:-./pptrain}
tmp=$(mktemp -d /tmp/pptrain-pipe.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
source "$(dirname "$0")/lib/check.sh" # ok, bad, check, skip, skip_all, finish

# run NAME CONFIG P [--set ...]: train into $tmp/NAME; the losses column is $tmp/NAME.loss
run() {
  local name=$1 cfg=$2 P=$3; shift 3
  timeout 120 scripts/pprun --nproc-per-node "$P" "$PPTRAIN" --config "$cfg" \
    --set pipeline.stages="$P" --set output.dir="$tmp/$name" --set output.log_every=1 "$@" \
    >"$tmp/$name.out" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then bad "$name exited $rc: $(tail -n 5 "$tmp/$name.out")"; return 1; fi
  tail -n +2 "$tmp/$name/losses.csv" | cut -d, -f2 >"$tmp/$name.loss"
  # the final weights, assembled from every rank's shard of the last checkpoint; the llama
  # family has no llm.c format: its runs keep each step's gradient norm instead, a sum
  # over every weight of every stage (test_interp.c compares its weights bitwise)
  if grep -q '^  arch: llama' "$cfg"; then
    tail -n +2 "$tmp/$name/losses.csv" | cut -d, -f4 >"$tmp/$name.norm"
  else
    "$PPTRAIN" export --checkpoint "$tmp/$name/checkpoints" --out "$tmp/$name.bin" >/dev/null
  fi
}
weights_same() { # llm.c exports, or the gradient norms of a llama run
  if [ -e "$tmp/$1.norm" ]; then cmp -s "$tmp/$1.norm" "$tmp/$2.norm"; else cmp -s "$tmp/$1.bin" "$tmp/$2.bin"; fi
}
same() { # bitwise equal loss columns and final weights
  local what="losses and weights"; [ -e "$tmp/$1.norm" ] && what="losses and gradient norms"
  if cmp -s "$tmp/$1.loss" "$tmp/$2.loss" && weights_same "$1" "$2"; then ok "$1 == $2 ($what bitwise)"
  else bad "$1 != $2: $(paste -d' ' "$tmp/$1.loss" "$tmp/$2.loss" | head -n 3 | tr '\n' ';') $(cmp "$tmp/$1.bin" "$tmp/$2.bin" 2>&1)"; fi
}
close() { # within 1e-5 relative, 10 rows
  if python3 - "$tmp/$1.loss" "$tmp/$2.loss" "$tmp/$1.bin" "$tmp/$2.bin" <<'PY'
import os, sys
a = [float(x) for x in open(sys.argv[1])]; b = [float(x) for x in open(sys.argv[2])]
assert len(a) == len(b) == 10, (len(a), len(b))
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
if not os.path.exists(sys.argv[3]): # a llama run: its gradient norms, within 1e-5 too
    na, nb = [[float(x) for x in open(p[:-4] + ".norm")] for p in sys.argv[3:5]]
    nworst = max(abs(x - y) / abs(y) for x, y in zip(na, nb))
    print("   worst relative difference: losses %.2e, gradient norms %.2e" % (worst, nworst))
    sys.exit(worst > 1e-5 or nworst > 1e-5)
# weights (llm.c file after the 1024-byte header): each element within 1e-5 of the
# reference, relative to the largest magnitude of its tensor row block (elements that
# are 0 at init and tiny after 10 steps make a per-element ratio meaningless)
from array import array
def load(p):
    w = array("f"); raw = open(p, "rb").read()[1024:]; w.frombytes(raw); return w
wa, wb = load(sys.argv[3]), load(sys.argv[4])
assert len(wa) == len(wb)
scale = max(abs(v) for v in wb)
wworst = max(abs(x - y) for x, y in zip(wa, wb)) / scale
print("   worst relative difference: losses %.2e, weights %.2e (of the largest weight)" % (worst, wworst))
sys.exit(worst > 1e-5 or wworst > 1e-5)
PY
  then ok "$1 ~ $2 (1e-5)"; else bad "$1 vs $2 differ by more than 1e-5"; fi
}

cfg=test/configs/pipe8.yaml
run ref8 "$cfg" 1
# one rank holding every stage: the schedules still agree bit for bit
run gpipe-P1-M4 "$cfg" 1 --set pipeline.microbatches=4 --set pipeline.schedule=gpipe &&
  run 1f1b-P1-M4 "$cfg" 1 --set pipeline.microbatches=4 --set pipeline.schedule=1f1b &&
  same gpipe-P1-M4 1f1b-P1-M4
# validation is collective: 4 stages (two middle ranks) validate every 5 steps
run val-P4 "$cfg" 4 --set pipeline.microbatches=4 --set data.val=data/tiny/val.bin --set data.val_every=5 --set data.val_batches=2 &&
  run val-P1 "$cfg" 1 --set pipeline.microbatches=4 --set data.val=data/tiny/val.bin --set data.val_every=5 --set data.val_batches=2 &&
  if python3 - "$tmp/val-P4.out" "$tmp/val-P1.out" <<'PY'
import re, sys
v = [[float(x) for x in re.findall(r"val loss ([0-9.]+)", open(p).read())] for p in sys.argv[1:]]
print("   validation losses", v)
sys.exit(not (len(v[0]) == len(v[1]) == 2 and all(abs(a - b) <= 1e-4 * b for a, b in zip(*v))))
PY
  then ok "validation with 4 stages equals 1 rank's"; else bad "validation with 4 stages"; fi
# P=2 and P=4: gpipe and 1f1b share a split, so their losses are bitwise equal;
# interleaved (2 chunks per rank) splits differently and is compared with 1 process.
for P in 2 4; do
  for M in 1 2 4 8; do
    m="--set pipeline.microbatches=$M"
    run "gpipe-P$P-M$M" "$cfg" "$P" $m --set pipeline.schedule=gpipe &&
    run "1f1b-P$P-M$M" "$cfg" "$P" $m --set pipeline.schedule=1f1b &&
      same "gpipe-P$P-M$M" "1f1b-P$P-M$M" && close "1f1b-P$P-M$M" ref8
    run "inter-P$P-M$M" "$cfg" "$P" $m --set pipeline.schedule=interleaved-1f1b \
      --set pipeline.virtual_stages=2 && close "inter-P$P-M$M" ref8
    [ "$M" -ge 4 ] || continue
    # zero-bubble (docs/schedules.md): zb-h1 splits every backward into I and W but adds
    # the weight gradients in 1F1B's order, so it equals 1f1b bitwise; zbv (2 chunks per
    # rank in a V) and looped-bfs split the model differently: compared with 1 process
    run "zbh1-P$P-M$M" "$cfg" "$P" $m --set pipeline.schedule=zb-h1 &&
      same "1f1b-P$P-M$M" "zbh1-P$P-M$M" && close "zbh1-P$P-M$M" ref8
    run "zbv-P$P-M$M" "$cfg" "$P" $m --set pipeline.schedule=zbv --set pipeline.virtual_stages=2 &&
      close "zbv-P$P-M$M" ref8
    run "bfs-P$P-M$M" "$cfg" "$P" $m --set pipeline.schedule=looped-bfs --set pipeline.virtual_stages=2 &&
      close "bfs-P$P-M$M" ref8
  done
done
grep -q 'split backward: W state' "$tmp/zbv-P4-M8.out" && ok "zbv's build report names its W state" ||
  bad "no W state line in the zbv build report: $(grep -m2 stages "$tmp/zbv-P4-M8.out")"
# Without clipping (whose global norm each rank sums over its own tensors first) a
# different split is the same math too: zbv on 2 ranks x 2 chunks equals 1 process bitwise.
run ref8-noclip "$cfg" 1 --set pipeline.microbatches=4 --set train.grad_clip=0 &&
  run zbv-noclip "$cfg" 2 --set pipeline.microbatches=4 --set train.grad_clip=0 --set pipeline.schedule=zbv \
    --set pipeline.virtual_stages=2 && same ref8-noclip zbv-noclip
# A schedule file may use I and W (compute only, lowered by pptrain): a zb-h1-like plan
# by hand trains what 1f1b trains, bitwise.
printf '# split backward by hand\nrank 0: 0F0 0F1 0I0 0W0 0I1 0W1\nrank 1: 1F0 1I0 1F1 1I1 1W0 1W1\n' >"$tmp/iw.txt"
run iw-file "$cfg" 2 --set pipeline.microbatches=2 --set pipeline.schedule_file="$tmp/iw.txt" &&
  same "1f1b-P2-M2" iw-file
# The same 4-stage split on 2 ranks x 2 chunks (interleaved) and on 4 ranks (1f1b):
# the same math, bitwise (without clipping, whose norm is summed in another grouping).
run inter-split "$cfg" 2 --set pipeline.schedule=interleaved-1f1b --set pipeline.virtual_stages=2 \
  --set pipeline.microbatches=4 --set 'pipeline.split=[2, 2, 2, 2]' --set train.grad_clip=0
run 1f1b-split "$cfg" 4 --set pipeline.microbatches=4 --set 'pipeline.split=[2, 2, 2, 2]' --set train.grad_clip=0
same inter-split 1f1b-split

# An uneven split: 5 layers on 2 ranks (3 + 2), SGD with momentum.
set5=(--set model.n_layers=5 --set train.optimizer.name=sgd --set train.optimizer.lr=0.05)
run ref5 "$cfg" 1 "${set5[@]}"
for M in 2 8; do
  run "gpipe5-M$M" "$cfg" 2 "${set5[@]}" --set pipeline.schedule=gpipe --set pipeline.microbatches=$M &&
  run "1f1b5-M$M" "$cfg" 2 "${set5[@]}" --set pipeline.schedule=1f1b --set pipeline.microbatches=$M &&
    same "gpipe5-M$M" "1f1b5-M$M" && close "1f1b5-M$M" ref5
done
grep -q 'stages 0 (layers 0-2' "$tmp/1f1b5-M2.out" && grep -q 'stages 1 (layers 3-4' "$tmp/1f1b5-M2.out" &&
  ok "5 layers split 3 + 2" || bad "5 layers not split 3 + 2: $(grep 'stages' "$tmp/1f1b5-M2.out")"

# Llama's block (model/llama.c, test/configs/llama8.yaml: grouped-query attention, untied
# by default): every schedule against its 1-process run, gpipe, 1f1b and zb-h1 bitwise
# alike on one split, and tied.
lcfg=test/configs/llama8.yaml
m4=(--set pipeline.microbatches=4)
run lref "$lcfg" 1 "${m4[@]}"
run lgpipe-P2 "$lcfg" 2 "${m4[@]}" --set pipeline.schedule=gpipe &&
  run l1f1b-P2 "$lcfg" 2 "${m4[@]}" --set pipeline.schedule=1f1b &&
  same lgpipe-P2 l1f1b-P2 && close l1f1b-P2 lref
run lzbh1-P2 "$lcfg" 2 "${m4[@]}" --set pipeline.schedule=zb-h1 && same l1f1b-P2 lzbh1-P2
run linter-P2 "$lcfg" 2 "${m4[@]}" --set pipeline.schedule=interleaved-1f1b --set pipeline.virtual_stages=2 &&
  close linter-P2 lref
run lzbv-P2 "$lcfg" 2 "${m4[@]}" --set pipeline.schedule=zbv --set pipeline.virtual_stages=2 && close lzbv-P2 lref
run l1f1b-P4 "$lcfg" 4 --set pipeline.microbatches=8 && close l1f1b-P4 lref
run lzbv-P4 "$lcfg" 4 --set pipeline.microbatches=8 --set pipeline.schedule=zbv --set pipeline.virtual_stages=2 &&
  close lzbv-P4 lref
tie=(--set model.tie_embeddings=true)
run lref-tied "$lcfg" 1 "${m4[@]}" "${tie[@]}"
run l1f1b-P2-tied "$lcfg" 2 "${m4[@]}" "${tie[@]}" && close l1f1b-P2-tied lref-tied &&
  run lzbh1-P2-tied "$lcfg" 2 "${m4[@]}" "${tie[@]}" --set pipeline.schedule=zb-h1 && same l1f1b-P2-tied lzbh1-P2-tied
grep -q 'tied embeddings: the copies on ranks 0 and 1 are bitwise identical' "$tmp/l1f1b-P2-tied.out" &&
  ok "llama: the tied embedding's copies are identical" || bad "llama: no tied embedding check"
cmp -s "$tmp/lref.loss" "$tmp/lref-tied.loss" && bad "llama: tied and untied trained the same" ||
  ok "llama: tied and untied are different models"

grep -q 'tied embeddings: the copies on ranks 0 and 3 are bitwise identical' "$tmp/1f1b-P4-M8.out" &&
  grep -q 'tied embeddings: the copies on ranks 0 and 1 are bitwise identical' "$tmp/inter-P2-M8.out" &&
  ok "tied embeddings identical on the first and last rank" || bad "tied embedding check missing"

# A rank never allocates another rank's parameters: the two halves add up to the whole.
# (the build report's "| params N (" line; the "allocated: params N B" line is another)
total=$(sed -n 's/.*| params \([0-9]*\) (.*/\1/p' "$tmp/ref8.out")
halves=$(sed -n 's/.*| params \([0-9]*\) (.*/\1/p' "$tmp/1f1b-P2-M4.out" | python3 -c 'import sys; print(sum(int(x) for x in sys.stdin))')
wte=$((256 * 32))  # the tied embedding is held by both the first and the last rank
if [ "$halves" -eq $((total + wte)) ]; then ok "ranks hold only their own parameters ($halves = $total + wte)"; else bad "params per rank $halves vs total $total + $wte"; fi

# start ranks by hand (no launcher), so the test knows every PID: start_rank, free_port
source "$(dirname "$0")/lib/ranks.sh"

# lose_rank1 SIGNAL TIMEOUT: two ranks train; 2 s in, rank 1 gets SIGNAL; sets rc
# (rank 0's exit code) and dt (seconds rank 0 took to notice).
lose_rank1() {
  local port; port=$(free_port)
  pids=()
  for r in 0 1; do
    start_rank $r 2 "$port" --config "$cfg" --set pipeline.stages=2 --set train.steps=100000 \
      --set runtime.timeout_s="$2" --set output.dir="$tmp/lose$1"
  done
  sleep 2
  kill -"$1" "${pids[1]}" 2>/dev/null
  local t0; t0=$(date +%s)
  wait "${pids[0]}"
  rc=$?
  dt=$(($(date +%s) - t0))
  kill -9 "${pids[1]}" 2>/dev/null
  wait "${pids[1]}" 2>/dev/null
  pids=()
}

# A rank killed with SIGKILL mid-run: the other exits non-zero within the timeout,
# naming the lost rank and what it was waiting for.
lose_rank1 KILL 5
if [ $rc -ne 0 ] && [ $dt -le 7 ] && grep -q 'lost connection to rank 1' "$tmp/r0.out" && grep -Eq 'stage [0-9]+ microbatch [0-9]+|tied embedding|all-reduce' "$tmp/r0.out"; then
  ok "SIGKILL of rank 1: rank 0 exits $rc after ${dt}s: $(grep -m1 error "$tmp/r0.out" | head -c 200)"
else
  bad "SIGKILL of rank 1: rank 0 rc=$rc after ${dt}s: $(tail -n 3 "$tmp/r0.out")"
fi

# A rank that stops answering (SIGSTOP): the other fails within runtime.timeout_s.
lose_rank1 STOP 3
if [ $rc -eq 1 ] && [ $dt -ge 2 ] && [ $dt -le 6 ] && grep -Eq 'timed out waiting for rank 1|rank 1 sent nothing' "$tmp/r0.out"; then
  ok "silent rank 1: rank 0 exits 1 after ${dt}s: $(grep -m1 error "$tmp/r0.out" | head -c 200)"
else
  bad "silent rank 1: rank 0 rc=$rc after ${dt}s: $(tail -n 3 "$tmp/r0.out")"
fi

# An idle connection to the rendezvous port (a port probe) delays the rendezvous by a
# few seconds at most; it does not make it fail.
port=$(free_port)
pids=()
start_rank 0 2 "$port" --config "$cfg" --set pipeline.stages=2 --set train.steps=3 --set output.dir="$tmp/idle"
for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
exec 3<>"/dev/tcp/127.0.0.1/$port"
start_rank 1 2 "$port" --config "$cfg" --set pipeline.stages=2 --set train.steps=3 --set output.dir="$tmp/idle"
wait "${pids[0]}"; rc0=$?
wait "${pids[1]}"; rc1=$?
exec 3>&-
pids=()
if [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ]; then ok "an idle connection to the rendezvous port does not break it"
else bad "idle rendezvous connection: rc $rc0/$rc1: $(grep -h error "$tmp/r0.out" "$tmp/r1.out" | head -2)"; fi

# A rank started with a different config fails at start, naming the rank and the key.
# With the job's token it is a real rank of the job, so both stop (without one rank 0
# refuses that connection alone and waits on: test_auth.c).
port=$(free_port)
pids=()
export PPTRAIN_JOB_TOKEN=pipeline-sh-0123456789
start_rank 0 2 "$port" --config "$cfg" --set pipeline.stages=2 --set output.dir="$tmp/mm"
start_rank 1 2 "$port" --config "$cfg" --set pipeline.stages=2 --set output.dir="$tmp/mm" --set train.steps=11
unset PPTRAIN_JOB_TOKEN
wait "${pids[0]}"; rc0=$?
wait "${pids[1]}"; rc1=$?
if [ $rc0 -eq 2 ] && [ $rc1 -eq 2 ] && grep -q "rank 1's config differs from rank 0's at train.steps" "$tmp/r0.out"; then
  ok "config mismatch stops both ranks at start (exit 2)"
else
  bad "config mismatch: rc $rc0/$rc1: $(cat "$tmp/r0.out" | head -c 300)"
fi
pids=()

finish
