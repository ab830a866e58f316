#!/usr/bin/env bash
# bench/gpu.sh BUILD — `make bench` on a GPU (bench/run.sh calls it only when one is
# visible): the GPU's two ceilings (bf16 cuBLASLt GEMM rate at 8192^3, device-to-device
# copy bandwidth), then GPT-2 124M (L 12, C 768, NH 12) training on one GPU at T = 1024:
# B = 16 and 32 in bf16 and one fp32 row, each with step ms (the fastest of the measured
# steps), tokens/s, model TFLOP/s (6*(12*L*C^2 + Vp*C) + 12*L*T*C per token), % of the
# measured GEMM rate, and the rank's GPU memory (the build report's total). The peers'
# figures on the same card are in ../shared/GPU.md. Last, the planner on the GPU's own
# stage costs (bench/plan.sh --gpu): GPT-2 124M / 350M / 1.5B measured on this GPU, the
# predicted pipeline efficiency of 1f1b and interleaved at P = 2..8, M = 8..32 over NVLink
# and InfiniBand. Every program runs under a timeout (60 s; the plan's 45 s a model), so
# a hang costs its row, not the device call.
# Then the switches (GPU_BENCH_AB, a space-separated list of VAR=VALUE; unset: PP_AB in
# scripts/gpu/switches.sh, the last changes' old paths): the bf16 B = 16 step with each
# switch set, between two runs of the default, so one call measures each change side by
# side on the same card ([Note: speed switches] in cuda/NOTES.md says what each changes).
set -euo pipefail
build=${1:-build/cpu}
bench=${BENCH_GPU:-build/cuda/bench_gpu}
pptrain=${PPTRAIN:-./pptrain}
steps=${GPU_BENCH_STEPS:-8}
out=$(mktemp -d /tmp/pptrain-gpubench.XXXXXX)
trap 'rm -rf "$out"' EXIT

echo "== GPU ceilings"
timeout -k 3 60 "$bench" | tee "$out/ceil.txt"
gemm=$(sed -n 's/^gemm_bf16_tflops=\([0-9.]*\).*/\1/p' "$out/ceil.txt")
copy=$(sed -n 's/^d2d_gbps=\([0-9.]*\).*/\1/p' "$out/ceil.txt")

# the per-op table (bench/bench_ops.c): one GPT-2 124M layer, the head and AdamW at B=16,
# T=1024, each op against the ceiling that bounds it
echo "== per op, GPT-2 124M, B=16, T=1024, bf16 (fp32 storage): time, rate, % of the GEMM or copy ceiling"
timeout -k 3 60 "${BENCH_OPS:-$build/bench_ops}" --device cuda --precision bf16 --gemm-tflops "$gemm" \
  --copy-gbps "$copy" || echo "bench_ops failed"
# the attention rows again on pptrain's own flash kernels (PPTRAIN_ATTENTION=flash; the
# default is cuDNN's where it loads: [Note: attention path] in cuda/backend_cuda.cu)
echo "== per op, the attention rows with PPTRAIN_ATTENTION=flash"
PPTRAIN_ATTENTION=flash timeout -k 3 60 "${BENCH_OPS:-$build/bench_ops}" --device cuda --precision bf16 \
  --gemm-tflops "$gemm" --copy-gbps "$copy" --only attention || echo "bench_ops (flash) failed"

# run124 PREC B LOG DIR: one GPT-2 124M training run; prints the fastest step's ms and the
# build report's GPU MB, or fails
run124() {
  timeout -k 3 60 "$pptrain" --config configs/gpt2-124m.yaml --set pipeline.stages=1 --set pipeline.microbatches=1 \
    --set train.batch_size="$2" --set train.steps="$steps" --set data.train=data/tiny/train.bin --set data.val=null \
    --set output.checkpoint_final=false --set output.log_every="$steps" --set runtime.device=cuda \
    --set runtime.precision="$1" --set output.dir="$4" >"$3" 2>&1 || return 1
  local ms mb
  ms=$(sed -n 's/.*(fastest \([0-9.]*\),.*/\1/p' "$3" | head -n1)
  mb=$(sed -n 's/.*GPU memory: .* = \([0-9.]*\) MB$/\1/p' "$3" | head -n1)
  [ -n "$ms" ] || { echo "no step time in the log" >>"$3"; return 1; }
  echo "$ms ${mb:-?}"
}
echo "== GPT-2 124M, 1 GPU, T=1024, $steps steps each (the first is not measured)"
printf "%-5s %4s %9s %10s %10s %8s %10s\n" prec B ms/step tok/s TFLOP/s gemm% GPU_MB
for row in "bf16 16" "bf16 32" "fp32 16"; do
  read -r prec B <<<"$row"
  log="$out/$prec-$B.log"
  r=$(run124 "$prec" "$B" "$log" "$out/run-$prec-$B") || {
    echo "$prec B=$B failed:"
    tail -n 5 "$log"
    continue
  }
  read -r ms mb <<<"$r"
  python3 - "$prec" "$B" "$ms" "$gemm" "$mb" <<'PY'
import sys
prec, B, ms, gemm, mb = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
L, C, Vp, T = 12, 768, 50304, 1024
fpt = 6 * (12 * L * C * C + Vp * C) + 12 * L * T * C
tok = B * T / (ms / 1e3)
tf = tok * fpt / 1e12
print("%-5s %4d %9.1f %10.0f %10.1f %7.1f%% %10s" % (prec, B, ms, tok, tf, 100 * tf / gemm, mb))
PY
done
echo "   (peers on an H100, GPU.md: llm.c with its own attention 320K tok/s at B=16; with cuDNN flash 501K)"

source "$(dirname "$0")/../scripts/gpu/switches.sh" # PP_OLD_PATHS
ab=${GPU_BENCH_AB-$PP_AB}
if [ -n "$ab" ]; then
  echo "== switches: bf16 B=16 step ms with one switch set, between two runs of the default"
  printf "%-36s %9s %9s %10s\n" switch ms/step vs_default GPU_MB
  base=()
  for v in default $ab default; do
    log="$out/ab-${v//[^A-Za-z0-9_]/_}.log"
    # the switch is exported in the command substitution's subshell only
    r=$([ "$v" = default ] || export "$v"; run124 bf16 16 "$log" "$out/run-ab") || r="failed"
    if [ "$r" = failed ]; then printf "%-36s failed: %s\n" "$v" "$(tail -n 1 "$log" | cut -c1-80)"; continue; fi
    read -r ms mb <<<"$r"
    [ "$v" = default ] && base+=("$ms")
    printf "%-36s %9s %9s %10s\n" "$v" "$ms" "$(python3 -c "import sys; b=[float(x) for x in sys.argv[2:]]; print('%+.1f%%' % (100 * (float(sys.argv[1]) / (sum(b) / len(b)) - 1)) if b else '-')" "$ms" ${base[@]+"${base[@]}"})" "$mb"
  done
fi
PPTRAIN="$pptrain" bash bench/plan.sh --gpu
