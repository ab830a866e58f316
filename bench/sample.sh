#!/usr/bin/env bash
# bench/sample.sh — `pptrain sample` on the CPU (make bench): tokens/s of the prompt (one
# pass over its positions, filling the KV cache) and of the decoding steps (one position
# and one greedy pick each) for the tiny shapes (configs/gpt-tiny.yaml, llama-tiny.yaml)
# and SmolLM-135M's (configs/smollm-135m.yaml), random init (--config: the model as its
# run starts), 1 thread and all cores; SmolLM's at a prompt of 32 and of 1024 tokens, whose
# steps attend over more cached positions but recompute no prefix. "no cache" is what the
# steps would reach if each ran the forward over its whole text at the prompt's rate. The
# best of a few runs of each (the machine is shared). The prompt's time includes the first
# call's start-up (OpenMP's threads, first touches): the tiny models' prompt rates at
# several threads say little, and their "no cache" with them.
set -euo pipefail
PPTRAIN=${PPTRAIN:-./pptrain}
cores=$(nproc)
out=$(mktemp -d /tmp/pptrain-bench-sample.XXXXXX)
trap 'rm -rf "$out"' EXIT

ids() { seq 1 "$1" | tr '\n' , | sed 's/,$//'; }

echo "== pptrain sample on the CPU (fp32, greedy, random init; best of 2 or 3 runs)"
printf "%-20s %7s %7s %5s %12s %12s %9s %12s\n" config threads prompt new "prompt tok/s" \
  "step tok/s" "ms/step" "no cache"
row() { # CONFIG PROMPT NEW RUNS THREADS
  local cfg=$1 np=$2 new=$3 runs=$4 t=$5 best= line=
  for ((r = 0; r < runs; r++)); do
    "$PPTRAIN" sample --config "$cfg" --prompt-ids "$(ids "$np")" --max-new-tokens "$new" \
      --temperature 0 --ids --eos none --threads "$t" >/dev/null 2>"$out/err" ||
      { cat "$out/err"; exit 1; }
    l=$(grep 'new tokens' "$out/err")
    s=$(sed -n 's/.*steps in [0-9.]* ms (\([0-9.]*\) tokens\/s).*/\1/p' <<<"$l")
    if [ -z "$best" ] || python3 -c "import sys; sys.exit(not $s > $best)"; then
      best=$s line=$l
    fi
  done
  python3 - "$cfg" "$t" "$np" "$new" "$line" <<'PY'
import os, re, sys
cfg, t, np_, new, line = sys.argv[1:]
m = re.search(r"prompt (\d+) tokens in ([0-9.]+) ms \(([0-9.]+) tokens/s\), then (\d+) steps in "
              r"([0-9.]+) ms \(([0-9.]+) tokens/s\)", line)
n, pms, prate, steps, sms, srate = m.groups()
n, steps, prate, sms = int(n), int(steps), float(prate), float(sms)
# without a cache: step k runs the forward over n + k positions at the prompt's rate
nocache = steps / sum((n + k) / prate for k in range(1, steps + 1))
print("%-20s %7s %7d %5d %12.0f %12.1f %9.2f %12.2f" % (
    os.path.basename(cfg), t, n, steps + 1, prate, float(srate), sms / max(steps, 1), nocache))
PY
}
for t in 1 "$cores"; do
  row configs/gpt-tiny.yaml 16 48 3 "$t"
  row configs/llama-tiny.yaml 16 48 3 "$t"
  row configs/smollm-135m.yaml 32 64 2 "$t"
  row configs/smollm-135m.yaml 1024 64 2 "$t"
done
