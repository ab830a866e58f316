#!/usr/bin/env bash
# bench/plan.sh [--gpu] — `make bench`: the predicted pipeline efficiency of 1f1b and
# interleaved 1F1B (v = 2) for GPT-2 124M / 350M / 1.5B at P = 2..8 and M = 8, 16, 32,
# over NVLink and InfiniBand (`pptrain schedule --plan`, docs/schedules.md "Planning past
# one GPU"). The microbatch is 4 sequences of 1024 tokens for all three.
#   --gpu  (bench/gpu.sh, on a GPU machine): the stage costs measured on the GPU
#          (`--measure` with runtime.device cuda) at that microbatch.
#   default (bench/run.sh, no GPU): one layer, the embedding and the head measured on this
#          CPU at 1 x 64 tokens, scaled to an H100 at the microbatch (PLAN_GPU_TFLOPS,
#          default 274: below). Per piece, GPU ms = its model FLOPs at the microbatch (as
#          bench/gpu.sh and llm.c count them: a layer's forward 24C^2 + 4TC per token and
#          its backward twice that; the head's 6·Vp·C, all in its forward, which computes
#          the head's gradient too) / the rate, split between F and B as this CPU measured
#          it; the embedding (no matmul) = its CPU time x the token ratio x (this CPU's
#          layer rate / the rate). 274 TFLOP/s is llm.c's whole training step on the H100
#          of ../shared/GPU.md with its own attention (which materialises the [B,NH,T,T]
#          scores; pptrain's CUDA backend runs cuDNN's or its own flash attention): so a
#          1-GPU step of this model predicts llm.c's, not a measured pptrain figure. Both
#          paths plan for runtime.device cuda at bf16 (the memory column and the wire
#          format are a bf16 GPU's: bf16 activations forward, fp32 gradients back).
set -euo pipefail
pptrain=${PPTRAIN:-./pptrain}
gpu=0
[ "${1:-}" = --gpu ] && gpu=1
rate=${PLAN_GPU_TFLOPS:-274}
links=(--link nvlink --link ib --link ib-hdr)
mb=(--set train.batch_size=32 --set pipeline.microbatches=8 --set train.seq_len=1024)
out=$(mktemp -d /tmp/pptrain-plan.XXXXXX)
trap 'rm -rf "$out"' EXIT

# show PLANFILE: the header and the efficiency matrices of a plan
show() {
  awk '/^plan:|^costs per microbatch|^transfers:/ { print "  " $0 }
       /^link / { print "  " $0 }
       /^pipeline efficiency over/ { on = 1 }
       on && /^$/ { on = 0 }
       on { print "  " $0 }' "$1"
}

if [ "$gpu" = 1 ]; then
  echo "== predicted pipeline efficiency from GPU-measured stage costs (microbatch 4 x 1024, runtime.device cuda)"
else
  echo "== predicted pipeline efficiency on H100s from CPU-measured costs scaled at $rate TFLOP/s"
  echo "   (a layer, the embedding and the head timed here at 1 x 64 tokens; bench/plan.sh says how they scale)"
fi
for model in 124m 350m 1.5b; do
  cfg=configs/gpt2-$model.yaml
  if [ "$gpu" = 1 ]; then
    # bf16 (the GPU's default precision): bf16 activations forward, fp32 gradients back
    timeout -k 3 45 "$pptrain" schedule --config "$cfg" "${mb[@]}" --set runtime.device=cuda --measure --plan "${links[@]}" --act-bytes 2 \
      >"$out/$model.txt" 2>&1 || { echo "gpt2-$model: the plan failed:"; tail -n 5 "$out/$model.txt"; continue; }
    grep "^measured on this machine" "$out/$model.txt" | sed 's/^/  /'
  else
    "$pptrain" schedule --config "$cfg" --set runtime.device=cpu --set pipeline.stages=1 --set train.batch_size=1 \
      --set pipeline.microbatches=1 --set train.seq_len=64 --measure >"$out/$model-cpu.txt" 2>&1 ||
      { echo "gpt2-$model: measuring failed:"; tail -n 5 "$out/$model-cpu.txt"; continue; }
    cpu=$(sed -n 's/.*(as --layer-costs \(.*\))$/\1/p' "$out/$model-cpu.txt")
    read -r L C Vp < <("$pptrain" --config "$cfg" --print-config | awk '/^  n_layers:/{l=$2} /^  dim:/{c=$2}
      /^  padded_vocab_size:/{v=$2} END{print l, c, v}')
    scaled=$(python3 - "$cpu" "$L" "$C" "$Vp" "$rate" <<'PY'
import sys
lf, lb, ef, eb, hf, hb = map(float, sys.argv[1].split(","))
L, C, Vp, rate = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]) * 1e12
N0, T0, N, T = 64, 64, 4 * 1024, 1024
layer = lambda t: 24 * C * C + 4 * t * C            # forward FLOPs per token
cpu_rate = 3 * layer(T0) * N0 / ((lf + lb) / 1e3)   # this CPU on a layer, FLOP/s
gl = 3 * layer(T) * N / rate * 1e3                  # a layer's F + B on the GPU, ms
gh = 6 * Vp * C * N / rate * 1e3                    # the head's
ge = (ef + eb) * (N / N0) * cpu_rate / rate         # the embedding's
split = lambda f, b: (f / (f + b), b / (f + b)) if f + b > 0 else (1 / 3, 2 / 3)
(sf, sb), (hf_, hb_), (ef_, eb_) = split(lf, lb), split(hf, hb), split(ef, eb)
print(",".join("%.6g" % x for x in (gl * sf, gl * sb, ge * ef_, ge * eb_, gh * hf_, gh * hb_)),
      "%.1f" % (cpu_rate / 1e9))
PY
)
    read -r costs cpu_gflops <<<"$scaled"
    echo "  gpt2-$model: CPU (1 x 64 tokens, ms) layer F,B / embedding F,B / head F,B = $cpu; layer rate $cpu_gflops GFLOP/s"
    "$pptrain" schedule --config "$cfg" "${mb[@]}" --set runtime.device=cuda --act-bytes 2 --layer-costs "$costs" --plan "${links[@]}" \
      >"$out/$model.txt" 2>&1 ||
      { echo "gpt2-$model: the plan failed:"; tail -n 5 "$out/$model.txt"; continue; }
  fi
  # planned as a bf16 GPU stores it, or say that it was not (pptrain built without nvcc)
  grep -q 'on the CUDA backend' "$out/$model.txt" ||
    echo "  (memory planned for the CPU's layout: this pptrain cannot load the CUDA backend)"
  show "$out/$model.txt"
done
