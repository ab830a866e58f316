#!/usr/bin/env bash
# pipeline-nccl.sh — the pipeline over the NCCL transport, each rank on a GPU of its own
# ([Note: NCCL transport] in cuda/comm_nccl.cu): K ranks train what one rank trains
# (gpipe and 1f1b bitwise equal, interleaved and 1f1b within 1e-5 relative of 1 rank,
# all on the GPU at fp32), NCCL gives the socket transport's bits (the same run over
# runtime.transport socket, host-staged), and a rank killed (SIGKILL) or stopped
# (SIGSTOP) ends the other ranks with exit 1 within runtime.timeout_s, never a hang.
# Needs 2 GPUs (4 for the 4-rank cases): with fewer it prints why and exits 77 (the
# 4-rank cases alone are skipped on 2 or 3 GPUs, and said so).
set -u
PPTRAIN=${PPTRAIN:-./pptrain}
tmp=$(mktemp -d /tmp/pptrain-pnccl.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
source "$(dirname "$0")/lib/check.sh" # ok, bad, check, skip, skip_all, finish

# how many GPUs this process may use: nvidia-smi's list, narrowed by CUDA_VISIBLE_DEVICES
if [ "${CUDA_VISIBLE_DEVICES+set}" = set ] && [ -z "$CUDA_VISIBLE_DEVICES" ]; then
  skip_all "no GPU visible (CUDA_VISIBLE_DEVICES is empty): the NCCL pipeline needs 2 GPUs"
fi
command -v nvidia-smi >/dev/null || skip_all "no GPU (nvidia-smi not found): the NCCL pipeline needs 2 GPUs"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
  vis=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
  [ "$vis" -lt "$ngpu" ] && ngpu=$vis
fi
[ "$ngpu" -ge 2 ] || skip_all "$ngpu GPU(s) visible (nvidia-smi -L): the NCCL pipeline needs 2 (NCCL refuses two ranks on one GPU; one GPU is covered by test/gpu/run.sh)"
echo "pipeline-nccl.sh: $ngpu GPUs: $(nvidia-smi -L | head -n 4 | tr '\n' ';')"

cfg=test/configs/pipe8.yaml
gpu=(--set runtime.device=cuda --set runtime.precision=fp32)
# run NAME P [--set ...]: train into $tmp/NAME on P ranks (one GPU each: LOCAL_RANK)
run() {
  local name=$1 P=$2; shift 2
  timeout 180 scripts/pprun --nproc-per-node "$P" "$PPTRAIN" --config "$cfg" "${gpu[@]}" \
    --set pipeline.stages="$P" --set output.dir="$tmp/$name" --set output.log_every=1 "$@" >"$tmp/$name.out" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then bad "$name exited $rc: $(grep -m3 'error\|transport' "$tmp/$name.out")"; return 1; fi
  tail -n +2 "$tmp/$name/losses.csv" | cut -d, -f2 >"$tmp/$name.loss"
  "$PPTRAIN" export --checkpoint "$tmp/$name/checkpoints" --out "$tmp/$name.bin" >/dev/null
}
same() { # bitwise equal loss columns and final weights
  if cmp -s "$tmp/$1.loss" "$tmp/$2.loss" && cmp -s "$tmp/$1.bin" "$tmp/$2.bin"; then ok "$1 == $2 (losses and weights bitwise)"
  else bad "$1 != $2: $(paste -d' ' "$tmp/$1.loss" "$tmp/$2.loss" | head -n 3 | tr '\n' ';') $(cmp "$tmp/$1.bin" "$tmp/$2.bin")"; fi
}
close() { # within 1e-5 relative: losses, and weights relative to the largest weight
  if python3 - "$tmp/$1.loss" "$tmp/$2.loss" "$tmp/$1.bin" "$tmp/$2.bin" <<'PY'
import sys
from array import array
a = [float(x) for x in open(sys.argv[1])]; b = [float(x) for x in open(sys.argv[2])]
assert len(a) == len(b) == 10, (len(a), len(b))
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
def load(p):
    w = array("f"); w.frombytes(open(p, "rb").read()[1024:]); return w
wa, wb = load(sys.argv[3]), load(sys.argv[4])
assert len(wa) == len(wb)
wworst = max(abs(x - y) for x, y in zip(wa, wb)) / max(abs(v) for v in wb)
print("   worst relative difference: losses %.2e, weights %.2e (of the largest weight)" % (worst, wworst))
sys.exit(worst > 1e-5 or wworst > 1e-5)
PY
  then ok "$1 ~ $2 (1e-5)"; else bad "$1 vs $2 differ by more than 1e-5"; fi
}
nccl=(--set runtime.transport=nccl)

run ref 1
for P in 2 4; do
  if [ "$P" -gt "$ngpu" ]; then skip "the $P-rank cases: $ngpu GPUs"; continue; fi
  M=4
  m="--set pipeline.microbatches=$M"
  run "gpipe-P$P" "$P" $m --set pipeline.schedule=gpipe "${nccl[@]}" &&
    run "1f1b-P$P" "$P" $m --set pipeline.schedule=1f1b "${nccl[@]}" && {
      grep -q "transport: nccl (runtime.transport nccl: every rank has a GPU of its own)" "$tmp/1f1b-P$P.out" &&
        ok "$P ranks: the build report says nccl" || bad "$P ranks: $(grep -m1 'transport:' "$tmp/1f1b-P$P.out")"
      ! grep -q "host staging buffers" "$tmp/1f1b-P$P.out" && ok "$P ranks over NCCL: no host staging buffers" ||
        bad "$P ranks over NCCL still stage through the host: $(grep -m1 'host staging' "$tmp/1f1b-P$P.out")"
      same "gpipe-P$P" "1f1b-P$P" && close "1f1b-P$P" ref
    }
  run "inter-P$P" "$P" $m --set pipeline.schedule=interleaved-1f1b --set pipeline.virtual_stages=2 "${nccl[@]}" &&
    close "inter-P$P" ref
  # the same run over the socket transport (each rank on its own GPU, host-staged): the
  # transport moves bits, it does not change them
  run "sock-1f1b-P$P" "$P" $m --set pipeline.schedule=1f1b --set runtime.transport=socket &&
    same "sock-1f1b-P$P" "1f1b-P$P"
done
grep -q 'tied embeddings: the copies on ranks 0 and 1 are bitwise identical' "$tmp/1f1b-P2.out" &&
  ok "tied embeddings (the NCCL all-reduce) identical on ranks 0 and 1" || bad "tied embedding check missing on 2 ranks"

# start ranks by hand (no launcher), so the test knows every PID: start_rank, free_port
source "$(dirname "$0")/lib/ranks.sh"
# lose_rank1 SIGNAL TIMEOUT: two ranks train over NCCL; once rank 0 logged a step, rank
# 1 gets SIGNAL; sets rc (rank 0's exit code) and dt (seconds rank 0 took to exit)
lose_rank1() {
  local port; port=$(free_port)
  pids=()
  for r in 0 1; do
    start_rank $r 2 "$port" --config "$cfg" "${gpu[@]}" "${nccl[@]}" --set pipeline.stages=2 --set train.steps=100000 \
      --set output.log_every=1 --set runtime.timeout_s="$2" --set output.dir="$tmp/lose$1"
  done
  for _ in $(seq 600); do # at most 60 s for CUDA, NCCL and a first step
    [ "$(wc -l <"$tmp/lose$1/losses.csv" 2>/dev/null || echo 0)" -ge 3 ] && break
    kill -0 "${pids[0]}" 2>/dev/null || break
    sleep 0.1
  done
  kill -"$1" "${pids[1]}" 2>/dev/null
  local t0; t0=$(date +%s)
  for _ in $(seq $(( ($2 + 30) * 10 ))); do kill -0 "${pids[0]}" 2>/dev/null || break; sleep 0.1; done
  kill -0 "${pids[0]}" 2>/dev/null && { kill -9 "${pids[0]}"; echo "   rank 0 still running $(( $2 + 30 )) s after: killed (a hang)"; }
  wait "${pids[0]}"
  rc=$?
  dt=$(($(date +%s) - t0))
  kill -9 "${pids[1]}" 2>/dev/null
  wait "${pids[1]}" 2>/dev/null
  pids=()
}
lose_rank1 KILL 5
if [ $rc -eq 1 ] && [ $dt -le 7 ] && grep -q 'lost connection to rank 1' "$tmp/r0.out"; then
  ok "SIGKILL of rank 1 over NCCL: rank 0 exits 1 after ${dt}s: $(grep -m1 error "$tmp/r0.out" | head -c 240)"
else
  bad "SIGKILL of rank 1 over NCCL: rank 0 rc=$rc after ${dt}s: $(tail -n 3 "$tmp/r0.out")"
fi
lose_rank1 STOP 4
if [ $rc -eq 1 ] && [ $dt -le 10 ] && grep -Eq 'timed out (waiting for|sending to|in [a-z-]+ #[0-9]+.*) rank 1|rank 1 sent nothing|timed out in' "$tmp/r0.out"; then
  ok "SIGSTOP of rank 1 over NCCL: rank 0 exits 1 after ${dt}s (timeout_s 4): $(grep -m1 error "$tmp/r0.out" | head -c 240)"
else
  bad "SIGSTOP of rank 1 over NCCL: rank 0 rc=$rc after ${dt}s: $(tail -n 3 "$tmp/r0.out")"
fi

finish
