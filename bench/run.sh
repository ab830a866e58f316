#!/usr/bin/env bash
# bench/run.sh BUILD — `make bench`: sgemm rate, then training throughput of the bench
# configs as tokens/s, achieved model GFLOP/s and % of the sgemm rate (same threads).
set -euo pipefail
build=${1:-build/cpu}
cores=$(nproc)
out=$(mktemp -d /tmp/pptrain-bench.XXXXXX)
trap 'rm -rf "$out"' EXIT

declare -A sgemm
echo "== sgemm (OpenBLAS, n=2048, best of 5)"
for t in 1 "$cores"; do
  line=$("$build/bench_gemm" "$t" 2048)
  echo "$line"
  sgemm[$t]=$(sed 's/.*gflops=//' <<<"$line")
done

# model FLOPs per token: the architecture's own count, from pptrain's build report (its
# "model:" line; the MFU's count, ../shared/GPU.md)
model_flops() { # LOG
  sed -n 's/^model: .*, \([0-9]*\) training FLOPs per token.*/\1/p' "$1" | head -n1
}

echo "== single-rank training throughput (fp32)"
echo "   (fastest measured step of each run, like sgemm's best of 5; the first step is not measured)"
printf "%-22s %7s %10s %10s %9s %8s\n" config threads tok/s GFLOP/s sgemm% ms/step
for cfg in configs/bench-124m-t256.yaml configs/bench-124m-t64.yaml configs/bench-small.yaml \
           configs/bench-smollm-t256.yaml; do
  for t in 1 "$cores"; do
    log="$out/$(basename "$cfg" .yaml)-$t.log"
    # level 0: the final checkpoint is written uncompressed, not to slow the benchmark
    ./pptrain --config "$cfg" --set runtime.threads="$t" --set pipeline.stages=1 --set pipeline.microbatches=1 \
      --set output.dir="$out/run-$(basename "$cfg" .yaml)-$t" --set data.val=null --set output.compression_level=0 >"$log" 2>&1 || { cat "$log"; exit 1; }
    ms=$(sed -n 's/.*(fastest \([0-9.]*\),.*/\1/p' "$log" | head -n1)  # the machine is shared: best step
    read -r T B < <(./pptrain --config "$cfg" --print-config | python3 -c '
import sys
sec=None; v={}
for line in sys.stdin:
    s=line.rstrip()
    if not s or s.lstrip().startswith("#"): continue
    if not s.startswith(" "): sec=s.rstrip(":"); continue
    k,_,val=s.strip().partition(":"); v[sec+"."+k]=val.strip()
print(v["train.seq_len"], v["train.batch_size"])')
    fpt=$(model_flops "$log")
    python3 - "$cfg" "$t" "$ms" "$fpt" "$B" "$T" "${sgemm[$t]}" <<'PY'
import sys, os
cfg, t, ms, fpt, B, T, sg = sys.argv[1:]
tok = int(B) * int(T) / (float(ms) / 1e3)
gf = tok * float(fpt) / 1e9
print("%-22s %7s %10.0f %10.1f %8.1f%% %8.1f" % (os.path.basename(cfg), t, tok, gf, 100 * gf / float(sg), float(ms)))
PY
  done
done

echo "== pipeline: 2 ranks x 1 thread vs 1 rank x 1 thread (configs/bench-small.yaml, M=8, best of 3 runs each)"
cfg=configs/bench-small.yaml
common=(--set runtime.threads=1 --set pipeline.microbatches=8 --set data.val=null)
ms1=
for rep in 1 2 3; do # the machine is shared: the fastest of three runs
  ./pptrain --config "$cfg" "${common[@]}" --set pipeline.stages=1 --set output.dir="$out/p1-$rep" >"$out/p1.log" 2>&1 || { cat "$out/p1.log"; exit 1; }
  ms=$(sed -n 's/.*per step \([0-9.]*\) ms.*/\1/p' "$out/p1.log")
  ms1=$(python3 -c "print(min(float('$ms'), float('${ms1:-1e30}')))")
done
read -r B T < <(./pptrain --config "$cfg" --print-config | awk '/^  batch_size:/{b=$2} /^  seq_len:/{t=$2} END{print b, t}')
echo "1 rank:  $(python3 -c "print('%.0f' % ($B*$T/($ms1/1e3)))") tok/s ($ms1 ms/step)"
for sched in 1f1b gpipe; do
  best=
  for rep in 1 2 3; do
    scripts/pprun --nproc-per-node 2 ./pptrain --config "$cfg" "${common[@]}" --set pipeline.stages=2 \
      --set pipeline.schedule=$sched --set output.dir="$out/p2-$sched-$rep" >"$out/try.log" 2>&1 || { cat "$out/try.log"; exit 1; }
    ms=$(sed -n 's/^\[rank 0\] rank 0: per step \([0-9.]*\) ms.*/\1/p' "$out/try.log")
    if [ -z "$best" ] || python3 -c "import sys; sys.exit(not $ms < $best)"; then best=$ms; cp "$out/try.log" "$out/p2-$sched.log"; fi
  done
  log="$out/p2-$sched.log"
  ms=$best
  python3 - "$sched" "$ms1" "$ms" "$B" "$T" <<'PY'
import sys
s, ms1, ms, B, T = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
M = 8; ideal = 2 * M / (M + 1); sp = ms1 / ms
print("%-6s 2 ranks: %.0f tok/s (%.1f ms/step), speedup %.2fx of ideal %.2fx = %.0f%%" % (s, B * T / (ms / 1e3), ms, sp, ideal, 100 * sp / ideal))
PY
  grep -E 'pipeline: simulated' "$log" | sed 's/^\[rank 0\] /       /'
  grep -E 'rank [01]: per step' "$log" | sed 's/^\[rank [01]\] /       /'
done

# the flight recorder's cost (issue 28): the 1f1b rows above ran with it (256 records, the
# default); the same runs without it, interleaved with runs with it, fastest of 3 each
echo "== flight recorder: 2 ranks, 1f1b, with (output.flight_records 256) and without (0), best of 3 each"
declare -A fl
for rep in 1 2 3; do
  for n in 256 0; do
    scripts/pprun --nproc-per-node 2 ./pptrain --config "$cfg" "${common[@]}" --set pipeline.stages=2 \
      --set output.flight_records=$n --set output.dir="$out/fl-$n-$rep" >"$out/fl.log" 2>&1 || { cat "$out/fl.log"; exit 1; }
    ms=$(sed -n 's/^\[rank 0\] rank 0: per step \([0-9.]*\) ms.*/\1/p' "$out/fl.log")
    fl[$n]=$(python3 -c "print(min(float('$ms'), float('${fl[$n]:-1e30}')))")
  done
done
python3 -c "a, b = ${fl[256]}, ${fl[0]}; print('with: %.1f ms/step, without: %.1f ms/step: %+.1f%% (noise on a shared machine is several %%)' % (a, b, 100 * (a / b - 1)))"

bash bench/zb.sh  # zero-bubble schedules: measured bubble per rank next to the simulator's
PPTRAIN=./pptrain bash bench/netem.sh # a slow inter-node link: transfer time hidden behind compute
bash bench/dp.sh "$build"  # data parallel: ring all-reduce bandwidth, 1x1 / 2x1 / 1x2 tokens/s, all-reduce hidden

echo "== checkpoints: the training-step stall per save (GPT-2 124M shape, T=64, 2 threads, level 1)"
echo "   (a save at step 4 runs in the background; the final one at step 8 also waits for it)"
./pptrain --config configs/bench-124m-t64.yaml --set output.dir="$out/ck" --set train.steps=8 --set output.log_every=4 \
  --set output.checkpoint_every=4 --set output.compression_level=1 --set data.val=null >"$out/ck.log" 2>&1 || { cat "$out/ck.log"; exit 1; }
grep -E 'saved checkpoint|per step' "$out/ck.log" | sed 's/^/  /'

echo "== checkpoints: trained weights (gpt-tiny after 200 steps), compressed/raw"
scripts/pprun --nproc-per-node 2 ./pptrain --config configs/gpt-tiny.yaml --set output.dir="$out/tiny" >"$out/tiny.log" 2>&1 &&
  ./pptrain export --checkpoint "$out/tiny/checkpoints" --out "$out/tiny.bin" >/dev/null &&
  "$build/bench_ckpt" --weights "$out/tiny.bin" --dir "$out" | grep -v "^$" | sed "s/^/  /"

echo "== checkpoints: GPT-2 124M-sized shard (save/load MB/s, stall, ratio)"
"$build/bench_ckpt" --dir "$out" | sed 's/^/  /'

bash bench/recompute.sh
PPTRAIN=./pptrain bash bench/sample.sh  # pptrain sample: the prompt's and the decoding steps' tokens/s
PPTRAIN=./pptrain bash bench/plan.sh  # predicted pipeline efficiency on H100s: GPT-2 124M / 350M / 1.5B, P = 2..8
PPTRAIN=./pptrain bash bench/tokenize.sh  # prepare-data's encode MB/s at 1 and 2 threads, beside the tokenizers library's

if [ -x build/cuda/bench_gpu ] && build/cuda/bench_gpu --probe >/dev/null 2>&1; then bash bench/gpu.sh "$build"; fi
