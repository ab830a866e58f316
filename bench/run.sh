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

# flops per token (issue #2): 6*(12*L*C^2 + Vp*C) + 12*L*T*C
model_flops() { # L C Vp T
  python3 -c "L,C,Vp,T=$1,$2,$3,$4; print(6*(12*L*C*C+Vp*C)+12*L*T*C)"
}

echo "== single-rank training throughput (fp32)"
printf "%-22s %7s %10s %10s %9s %8s\n" config threads tok/s GFLOP/s sgemm% ms/step
for cfg in configs/bench-124m-t256.yaml configs/bench-124m-t64.yaml configs/bench-small.yaml; do
  for t in 1 "$cores"; do
    log="$out/$(basename "$cfg" .yaml)-$t.log"
    ./pptrain --config "$cfg" --set runtime.threads="$t" --set pipeline.stages=1 --set pipeline.microbatches=1 \
      --set output.dir="$out/run" --set data.val=null >"$log" 2>&1 || { cat "$log"; exit 1; }
    ms=$(sed -n 's/.*per step \([0-9.]*\) ms.*/\1/p' "$log" | head -n1)
    read -r L C Vp T B < <(./pptrain --config "$cfg" --print-config | python3 -c '
import sys
sec=None; v={}
for line in sys.stdin:
    s=line.rstrip()
    if not s or s.lstrip().startswith("#"): continue
    if not s.startswith(" "): sec=s.rstrip(":"); continue
    k,_,val=s.strip().partition(":"); v[sec+"."+k]=val.strip()
print(v["model.n_layers"], v["model.dim"], v["model.padded_vocab_size"], v["train.seq_len"], v["train.batch_size"])')
    fpt=$(model_flops "$L" "$C" "$Vp" "$T")
    python3 - "$cfg" "$t" "$ms" "$fpt" "$B" "$T" "${sgemm[$t]}" <<'PY'
import sys, os
cfg, t, ms, fpt, B, T, sg = sys.argv[1:]
tok = int(B) * int(T) / (float(ms) / 1e3)
gf = tok * float(fpt) / 1e9
print("%-22s %7s %10.0f %10.1f %8.1f%% %8.1f" % (os.path.basename(cfg), t, tok, gf, 100 * gf / float(sg), float(ms)))
PY
  done
done
