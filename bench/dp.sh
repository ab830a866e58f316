#!/usr/bin/env bash
# bench/dp.sh BUILD — data parallelism measured (`make bench` runs it from bench/run.sh):
# the ring all-reduce's bus bandwidth on loopback (bench_allreduce: nccl-tests' busbw =
# algbw x 2 (W-1)/W), then training tokens/s on configs/bench-small.yaml with 1 thread
# per process at stages x replicas = 1x1, 2x1, 1x2 and 2x2 (oversubscribed below 4 cores), the
# same global batch (8 sequences) in microbatches of 1 sequence, the scaling efficiency
# (tokens/s over N x the 1-process rate), and how much of the gradient all-reduce the
# run hid behind computation (its report, [Note: hidden all-reduce] in runtime_dp.c).
# The machine may be shared: the fastest of three runs is kept.
set -euo pipefail
build=${1:-build/cpu}
cfg=configs/bench-small.yaml
out=$(mktemp -d /tmp/pptrain-dp.XXXXXX)
trap 'rm -rf "$out"' EXIT

echo "== data parallel: ring all-reduce, socket transport on loopback (best of 10 calls; 3 from 64 MB)"
"$build/bench_allreduce" 2 256
[ "$(nproc)" -ge 4 ] && "$build/bench_allreduce" 4 64

echo "== data parallel: training, 1 thread per process, $cfg, global batch 8 = microbatches of 1 sequence"
common=(--set runtime.threads=1 --set data.val=null --set train.steps=8 --set output.checkpoint_final=false)
read -r B T < <(./pptrain --config "$cfg" --print-config | awk '/^  batch_size:/{b=$2} /^  seq_len:/{t=$2} END{print b, t}')
# 1x2 can hide none of its all-reduce: its one stage's gradients are final only after the
# list's last action; in 2x2 the last stage's ring runs while stage 0 still computes
layouts=("1x1 1 1 8" "2x1 2 1 8" "1x2 1 2 4" "2x2 2 2 4")
printf "%-6s %5s %10s %10s %11s  %s\n" layout procs "ms/step" "tok/s" "efficiency" "gradient all-reduce"
base=
for l in "${layouts[@]}"; do
  set -- $l
  name=$1 P=$2 D=$3 M=$4 n=$(($2 * $3)) best=
  for rep in 1 2 3; do
    scripts/pprun --nproc-per-node "$n" ./pptrain --config "$cfg" "${common[@]}" --set pipeline.stages="$P" \
      --set pipeline.data_parallel="$D" --set pipeline.microbatches="$M" --set output.dir="$out/run" >"$out/try.log" 2>&1 ||
      { cat "$out/try.log"; exit 1; }
    rm -rf "$out/run"
    ms=$(sed -n 's/^\(\[rank 0\] \)\{0,1\}rank 0: per step [0-9.]* ms (fastest \([0-9.]*\),.*/\2/p' "$out/try.log")
    if [ -z "$best" ] || python3 -c "import sys; sys.exit(not $ms < $best)"; then best=$ms; cp "$out/try.log" "$out/best.log"; fi
  done
  [ -n "$base" ] || base=$best
  dp=$(sed -n 's/.*data parallel: \(.*\)/\1/p' "$out/best.log" | head -n1)
  python3 - "$name" "$n" "$best" "$base" "$B" "$T" "${dp:--}" <<'PY'
import sys
name, n, ms, base, B, T, dp = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), sys.argv[7]
tok, tok1 = B * T / (ms / 1e3), B * T / (base / 1e3)
import os
eff = "%10.0f%%" % (100 * tok / (n * tok1)) if n <= os.cpu_count() else "%11s" % "(n > cores)"
print("%-6s %5d %10.1f %10.0f %s  %s" % (name, n, ms, tok, eff, dp))
PY
done
