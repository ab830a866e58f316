#!/usr/bin/env bash
# plan.sh — `pptrain schedule --plan` end to end ([Note: planning model] in src/plan/plan.c):
# the sweep's numbers against hand-computed ones, the link model's exact transfer terms (also
# with activations and gradients of other sizes),
# efficiency against P and M, costs read from the trace of a real 2-process run, and the
# errors. Run by `make test` with PPTRAIN=./pptrain from the repository root.
set -euo pipefail
PPTRAIN=${PPTRAIN:-./pptrain}
CONFIG=configs/gpt-tiny.yaml
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "plan.sh: FAIL: $*" >&2; exit 1; }
has() { grep -qF -- "$2" "$1" || fail "$1 lacks '$2': $(head -c 600 "$1")"; }
command -v python3 >/dev/null || {
  echo "plan.sh: skipped: python3 not found (it reads the plan's JSON)"
  [ -z "${PP_TEST_SKIPS:-}" ] || echo "python3 not found" >>"$PP_TEST_SKIPS"
  exit 77
}
# expect_exit CODE TEXT CMD...: CMD exits CODE and says TEXT
expect_exit() {
  local want=$1 text=$2 rc=0
  shift 2
  "$@" >"$tmp/err.txt" 2>&1 || rc=$?
  [ "$rc" = "$want" ] || fail "'$*' exited $rc, want $want: $(head -c 400 "$tmp/err.txt")"
  has "$tmp/err.txt" "$text"
}

# 1. Hand-computed: 4 layers of F 1 ms and B 2 ms, no embedding or head cost, untied.
# 1f1b on P equal stages of F = 4/P, B = 8/P: makespan (M + P - 1)(F + B); efficiency
# (M x 12 / P) / step; bubble (P-1)/(M+P-1). With a link of X = 0.5 ms latency +
# 32768 B (a 2 x 64 x 64 fp32 activation) / 0.032768 GB/s = 1.5 ms (<= F + B): the
# simulator's closed form adds 2(P - 1 + floor((M-1)(P-1)/P)) X (test_plan.c). The tied
# embedding's exchange (256 x 64 x 4 B: 0.5 + 2 = 2.5 ms) starts when rank 0, which
# ends last in 1F1B, is done.
tiny=(--config "$CONFIG" --set runtime.device=cpu --set model.n_layers=4 --layer-costs 1,2 --plan --plan-ranks 2,4 --plan-microbatches 8,16
      --plan-schedules 1f1b --json)
"$PPTRAIN" schedule "${tiny[@]}" --set model.tie_embeddings=false --link none --link 500,0.032768 >"$tmp/untied.json"
"$PPTRAIN" schedule "${tiny[@]}" --set model.tie_embeddings=true --link 500,0.032768 >"$tmp/tied.json"
python3 - "$tmp/untied.json" "$tmp/tied.json" <<'PY' || fail "the plan's numbers differ from the hand-computed ones"
import json, sys
untied, tied = (json.load(open(p)) for p in sys.argv[1:])
assert untied["transfer_bytes"] == 2 * 64 * 64 * 4 and untied["model_ms_per_microbatch"] == 12, untied
free, link = untied["links"]
assert free["link"] == "none" and free["transfer_ms"] == 0, free
assert abs(link["transfer_ms"] - 1.5) < 1e-12, link
checked = 0
for a, b, t in zip(free["rows"], link["rows"], tied["links"][0]["rows"]):
    P, M = a["ranks"], a["microbatches"]
    F, B = 4 / P, 8 / P
    assert a["layers"] == [4 // P] * P, a
    step = (M + P - 1) * (F + B)
    assert abs(a["step_ms"] - step) < 1e-9 and abs(a["makespan_ms"] - step) < 1e-9, (a, step)
    assert abs(a["efficiency"] - (M * 12 / P) / step) < 1e-12, a
    assert abs(a["bubble"] - (P - 1) / (M + P - 1)) < 1e-12, a
    assert abs(a["tokens_per_s"] - M * 2 * 64 / (step / 1e3)) < 1e-6, a
    X = 1.5
    with_link = step + 2 * (P - 1 + (M - 1) * (P - 1) // P) * X
    assert abs(b["step_ms"] - with_link) < 1e-9, (b, with_link)
    # tied: the same pipeline, then the exchange
    assert abs(t["makespan_ms"] - with_link) < 1e-9 and abs(t["step_ms"] - (with_link + 2.5)) < 1e-9, t
    assert t["memory_bytes"][0] > 0 and len(t["memory_bytes"]) == P, t
    checked += 1
assert checked == 4, checked
PY

# An activation and its gradient of other sizes (pptrain at bf16 sends bf16 activations and
# fp32 gradients: --act-bytes 2): X_F = 0.5 + 16384 B / 0.032768 GB/s = 1 ms forward, X_B =
# 1.5 ms back, and the closed form's 2 X becomes X_F + X_B.
"$PPTRAIN" schedule "${tiny[@]}" --set model.tie_embeddings=false --link 500,0.032768 --act-bytes 2 \
  >"$tmp/mixed.json"
python3 - "$tmp/mixed.json" <<'PY' || fail "the plan with --act-bytes 2 (fp32 gradients) differs from the hand-computed one"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["act_bytes"] == 2 and d["grad_bytes"] == 4, d
assert d["transfer_bytes"] == 2 * 64 * 64 * 2 and d["grad_transfer_bytes"] == 2 * 64 * 64 * 4, d
link = d["links"][0]
assert abs(link["transfer_ms"] - 1.0) < 1e-12 and abs(link["grad_transfer_ms"] - 1.5) < 1e-12, link
for r in link["rows"]:
    P, M = r["ranks"], r["microbatches"]
    step = (M + P - 1) * (12 / P) + (P - 1 + (M - 1) * (P - 1) // P) * (1.0 + 1.5)
    assert abs(r["step_ms"] - step) < 1e-9, (r, step)
assert len(link["rows"]) == 4, link
PY
"$PPTRAIN" schedule "${tiny[@]/--json/--text}" --set model.tie_embeddings=false --link 500,0.032768 --act-bytes 2 \
  >"$tmp/mixed.txt"
has "$tmp/mixed.txt" "transfers: an activation = 2 x 64 x 64 x 2 B = 0.02 MB, its gradient 4 B an element = 0.03 MB"
has "$tmp/mixed.txt" "an activation takes 1.0000 ms, a gradient 1.5000 ms"

# The text form says the same: the table row and the efficiency matrix.
"$PPTRAIN" schedule "${tiny[@]/--json/--text}" --set model.tie_embeddings=false --link none >"$tmp/untied.txt"
has "$tmp/untied.txt" "1f1b                2  1    8     54.000   11.1%      88.9%"
has "$tmp/untied.txt" "pipeline efficiency over none (%):"
has "$tmp/untied.txt" "   4  |  72.7   84.2"

# 2. Efficiency falls as P grows at fixed M and rises with M at fixed P, for 1f1b and
# interleaved, over NVLink and InfiniBand: 48 layers on the P that split them evenly
# (2, 3, 4, 6, 8 ranks of 1 or 2 chunks; at P = 5 the stages of 10 and 9 layers make it
# slower per rank than P = 6: the planner's tables show such imbalance too), uniform
# costs, GPT-2 124M's width so that the transfers are real.
"$PPTRAIN" schedule --config configs/gpt2-124m.yaml --set model.n_layers=48 --layer-costs 0.3,0.6 --plan \
  --plan-ranks 2-4,6,8 --link nvlink --link ib --json >"$tmp/sweep.json"
python3 - "$tmp/sweep.json" <<'PY' || fail "efficiency is not monotone in P and M"
import json, sys
d = json.load(open(sys.argv[1]))
checked = 0
for link in d["links"]:
    eff = {(r["schedule"], r["ranks"], r["microbatches"]): r["efficiency"] for r in link["rows"]}
    for (s, P, M), e in eff.items():
        assert 0 < e <= 1, (s, P, M, e)
        for P2 in (3, 4, 6, 8):
            if P2 > P and (s, P2, M) in eff:
                assert eff[(s, P2, M)] < e, (link["link"], s, P, P2, M)
                checked += 1
        for M2 in (16, 32):
            if M2 > M and (s, P, M2) in eff:
                assert eff[(s, P, M2)] > e, (link["link"], s, P, M, M2)
                checked += 1
    # InfiniBand is slower than NVLink: never more efficient
nv, ib = ({(r["schedule"], r["ranks"], r["microbatches"]): r["step_ms"] for r in l["rows"]} for l in d["links"])
assert all(ib[k] > nv[k] for k in nv), "ib faster than nvlink somewhere"
assert len(nv) == 2 * 5 * 3 and checked >= 2 * 2 * (10 * 3 + 5 * 3), (len(nv), checked)
PY

# 3. Costs from the trace of a real run: 2 processes, interleaved 1F1B over 4 stages, 3
# steps. Non-plan: the per-stage medians (the first step left out) are the trace's, as
# recomputed here; --plan fits per-layer costs to them and sweeps.
ilv=(--set runtime.device=cpu --set pipeline.schedule=interleaved-1f1b --set pipeline.virtual_stages=2)
timeout 120 scripts/pprun --nproc-per-node 2 "$PPTRAIN" --config "$CONFIG" "${ilv[@]}" --set train.steps=3 \
  --set data.val=null --set output.dir="$tmp/run" --set output.trace=true --set output.checkpoint_final=false \
  >"$tmp/run.log" 2>&1 || fail "the traced run failed: $(tail -n 5 "$tmp/run.log")"
trace=$tmp/run/trace.json
"$PPTRAIN" schedule --config "$CONFIG" "${ilv[@]}" --costs-from "$trace" --link nvlink >"$tmp/trace.txt"
python3 - "$trace" "$tmp/trace.txt" <<'PY' || fail "the stage costs differ from the trace's medians"
import json, re, statistics, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
compute = [e for e in events if e.get("cat") == "compute" and e["args"]["stage"] >= 0]
first = min(e["args"]["step"] for e in compute)
out = open(sys.argv[2]).read()
line = re.search(r"costs from .*\(medians of (\d+) compute slices over 2 steps\).*", out)
assert line, out[:500]
used = [e for e in compute if e["args"]["step"] != first]
assert int(line.group(1)) == len(used), (line.group(1), len(used))
for s in range(4):
    for kind in "FB":
        med = statistics.median(e["dur"] / 1e3 for e in used if e["args"]["stage"] == s and e["name"].startswith(kind + " "))
        got = float(re.search(r"stage %d F ([0-9.]+) B ([0-9.]+)" % s, line.group(0)).group(1 if kind == "F" else 2))
        assert abs(got - med) < 6e-5, (s, kind, got, med)
assert "link nvlink: an activation or gradient of 0.03 MB" in out, out[:800]
PY
"$PPTRAIN" schedule --config "$CONFIG" "${ilv[@]}" --costs-from "$trace" --plan --plan-ranks 2 >"$tmp/plan.txt"
has "$tmp/plan.txt" "fitted to the 4 stages of $trace"
has "$tmp/plan.txt" "interleaved-1f1b    2  2    8"

# 4. Errors name the flag or the file, exit 2.
expect_exit 2 "--costs-from" "$PPTRAIN" schedule --config "$CONFIG" --costs-from "$tmp/none.json"
expect_exit 2 "is not a trace (no traceEvents)" "$PPTRAIN" schedule --config "$CONFIG" --costs-from "$tmp/run.log"
expect_exit 2 "but this config plans 2 stages" "$PPTRAIN" schedule --config "$CONFIG" --costs-from "$trace"
grep -v '"name":"B ' "$trace" >"$tmp/nob.json"
expect_exit 2 "no B slices of stage 0" "$PPTRAIN" schedule --config "$CONFIG" "${ilv[@]}" --costs-from "$tmp/nob.json"
for bad in fast 5 5,0 -1,3 5,inf 5,450,1; do
  expect_exit 2 "--link wants" "$PPTRAIN" schedule --config "$CONFIG" --layer-costs 1,2 --plan --link "$bad"
done
expect_exit 2 "--link gives transfer times" "$PPTRAIN" schedule --config "$CONFIG" --costs 1,2 --link nvlink
expect_exit 2 "--plan needs per-layer costs" "$PPTRAIN" schedule --config "$CONFIG" --plan
expect_exit 2 "--layer-costs wants" "$PPTRAIN" schedule --config "$CONFIG" --layer-costs 1 --plan
expect_exit 2 "pick one source of costs" "$PPTRAIN" schedule --config "$CONFIG" --layer-costs 1,2 --measure --plan
expect_exit 2 "--act-bytes wants" "$PPTRAIN" schedule --config "$CONFIG" --layer-costs 1,2 --plan --act-bytes 3
expect_exit 2 "--grad-bytes wants" "$PPTRAIN" schedule --config "$CONFIG" --layer-costs 1,2 --plan --grad-bytes 8
expect_exit 2 "--plan-ranks wants" "$PPTRAIN" schedule --config "$CONFIG" --layer-costs 1,2 --plan --plan-ranks 0-3
# --measure times on the device runtime.device names: cuda goes through backend_select,
# which measures on the GPU where there is one and refuses (exit 2, naming the key) where
# there is none
rc=0
"$PPTRAIN" schedule --config "$CONFIG" --set runtime.device=cuda --measure >"$tmp/cuda.txt" 2>&1 || rc=$?
case $rc in
  0) has "$tmp/cuda.txt" "measured on this machine, device cuda" ;;
  2) has "$tmp/cuda.txt" "runtime.device" ;;
  *) fail "--measure on runtime.device cuda exited $rc: $(head -c 400 "$tmp/cuda.txt")" ;;
esac
"$PPTRAIN" schedule --config "$CONFIG" --set runtime.device=cpu --measure --plan --plan-ranks 2 \
  --plan-microbatches 8 >"$tmp/measure.txt"
has "$tmp/measure.txt" "measured on this machine, device cpu"
has "$tmp/measure.txt" "costs per microbatch, ms (measured here)"

# 5. The memory plan and the wire format are the config's device's ([Note: backend layout] in
# src/backend/backend_load.h), planned without opening it: the CUDA backend answers here from
# its shared object even with no driver. At fp32 (materialised attention, fp32 everything,
# all the head's rows at once) its plan is the CPU's to the byte; at bf16 the residual stream
# halves each receive buffer and the activations on the wire, and attention's saved state
# shrinks from [B,NH,T,T] to [B,NH,T] by exactly L B NH T (T-1) floats.
plan_lines() { grep -E '^rank [0-9]+: plan: ' "$1" | sed 's/^rank [0-9]*: plan: //'; }
field() { plan_lines "$1" | sed -n "$(($2 + 1))p" | grep -o "$3 [0-9]*" | grep -o '[0-9]*$'; }
"$PPTRAIN" schedule --config "$CONFIG" --set runtime.device=cpu >"$tmp/m-cpu.txt"
has "$tmp/m-cpu.txt" "memory plan per rank (bytes on the CPU backend;"
if "$PPTRAIN" --version 2>&1 | grep -q '^backend cuda: built.*libpptrain_cuda.so: [^ ]*$'; then
  PPTRAIN_LOGITS_CHUNK_ROWS=0 "$PPTRAIN" schedule --config "$CONFIG" --set runtime.device=cuda \
    --set runtime.precision=fp32 >"$tmp/m-fp32.txt"
  has "$tmp/m-fp32.txt" "bytes on the CUDA backend at fp32"
  [ "$(plan_lines "$tmp/m-cpu.txt")" = "$(plan_lines "$tmp/m-fp32.txt")" ] && [ -n "$(plan_lines "$tmp/m-cpu.txt")" ] ||
    fail "the CUDA backend's fp32 plan differs from the CPU's: $(diff <(plan_lines "$tmp/m-cpu.txt") <(plan_lines "$tmp/m-fp32.txt") | head -c 400)"
  "$PPTRAIN" schedule --config "$CONFIG" --set runtime.device=cuda >"$tmp/m-bf16.txt"
  has "$tmp/m-bf16.txt" "bytes on the CUDA backend at bf16"
  for r in 0 1; do
    for f in params grads optimizer; do
      [ "$(field "$tmp/m-bf16.txt" $r $f)" = "$(field "$tmp/m-cpu.txt" $r $f)" ] || fail "rank $r's $f differ at bf16"
    done
    [ "$(field "$tmp/m-bf16.txt" $r activations)" -lt "$(field "$tmp/m-cpu.txt" $r activations)" ] ||
      fail "rank $r keeps no fewer activation bytes at bf16"
  done
  [ $(($(field "$tmp/m-bf16.txt" 1 receive) * 2)) = "$(field "$tmp/m-cpu.txt" 1 receive)" ] ||
    fail "rank 1's receive buffers at bf16 are not half the CPU's"
  # one stage, one microbatch of 8 x 64 tokens, 4 layers of 4 heads: fp32 operands and stream
  # (PPTRAIN_BF16_OPERANDS=fp32) isolate attention's saved state
  one=(--config "$CONFIG" --set pipeline.stages=1 --set pipeline.microbatches=1)
  "$PPTRAIN" schedule "${one[@]}" --set runtime.device=cpu >"$tmp/one-cpu.txt"
  PPTRAIN_BF16_OPERANDS=fp32 PPTRAIN_LOGITS_CHUNK_ROWS=0 "$PPTRAIN" schedule "${one[@]}" \
    --set runtime.device=cuda >"$tmp/one-lse.txt"
  d=$(($(field "$tmp/one-cpu.txt" 0 slots) - $(field "$tmp/one-lse.txt" 0 slots)))
  [ "$d" = $((4 * 8 * 4 * 64 * 63 * 4)) ] || fail "flash attention saves $d bytes less than the CPU's, want 4 x 8 x 4 x 64 x 63 x 4"
  # --act-bytes defaults to the residual stream's: 2 on a bf16 GPU
  "$PPTRAIN" schedule --config "$CONFIG" --set runtime.device=cuda --layer-costs 1,2 --plan --plan-ranks 2 \
    --plan-microbatches 8 >"$tmp/m-plan.txt"
  has "$tmp/m-plan.txt" "transfers: an activation = 2 x 64 x 64 x 2 B"
  has "$tmp/m-plan.txt" "activations of the fullest rank on the CUDA backend at bf16"
  expect_exit 2 "PPTRAIN_RESIDUAL" env PPTRAIN_RESIDUAL=fp16 "$PPTRAIN" schedule --config "$CONFIG" --set runtime.device=cuda
  # the file of GEMM algorithms ([Note: GEMM algorithm file] in cuda/gemm_file.h): the plan
  # checks it as the open does. Missing: only the tuning may create it; a bad line: its line
  cu=("$PPTRAIN" schedule --config "$CONFIG" --set runtime.device=cuda)
  expect_exit 2 "PPTRAIN_GEMM_ALGOS='$tmp/algos.txt': no such file (PPTRAIN_GEMM_TUNE=1 writes it)" \
    env PPTRAIN_GEMM_ALGOS="$tmp/algos.txt" "${cu[@]}"
  env PPTRAIN_GEMM_ALGOS="$tmp/algos.txt" PPTRAIN_GEMM_TUNE=1 "${cu[@]}" >/dev/null ||
    fail "a file the tuning is to write refused"
  expect_exit 2 "PPTRAIN_GEMM_TUNE='fast'" env PPTRAIN_GEMM_TUNE=fast "${cu[@]}"
  good="gemm sm90_x_cublasLt1 1 0 0 1 1 1 1 1 1 1 0 0 0 0 1 68 0 16 16 16 1 1 16 0 1 2 3 4 5 6 7 8"
  printf '# GEMM algorithms\n%s\n' "$good" >"$tmp/algos.txt"
  env PPTRAIN_GEMM_ALGOS="$tmp/algos.txt" "${cu[@]}" >/dev/null || fail "a well-formed file refused"
  printf '%s\n%s 9\n' "$good" "$good" >"$tmp/algos.txt"
  expect_exit 2 "PPTRAIN_GEMM_ALGOS: $tmp/algos.txt:2: not a line of GEMM algorithms" \
    env PPTRAIN_GEMM_ALGOS="$tmp/algos.txt" "${cu[@]}"
  echo "plan.sh: the CUDA backend's memory plan checked (no device needed)"
else
  echo "plan.sh: the CUDA backend's memory plan not checked: pptrain was built without it"
fi
echo "plan.sh: all passed"
