#!/usr/bin/env bash
# test/gpu/run.sh — make test-gpu: the GPU suite. Without a usable GPU (or without the
# CUDA build) it prints "skipped: no GPU (why)" and exits 0. With one:
#   1. every CUDA op against the CPU op (gpu_ops, every precision);
#   2. 20 steps of gpt-tiny on the GPU at fp32 against the CPU from the same init:
#      losses within 1e-4 relative;
#   3. bf16: the loss falls on data/tiny and stays within 5e-2 relative of fp32;
#   4. two GPU runs of one config: losses and final weights bitwise equal; at bf16 with
#      recompute selective and full: the bits of none; a run reading the file of GEMM
#      algorithms a tuned run wrote (PPTRAIN_GEMM_ALGOS): the tuned run's bits;
#   5. a GPU checkpoint resumes on the CPU and a CPU one on the GPU (losses after the
#      resume within 1e-4 of the run that never stopped);
#   6. 2 ranks on one GPU (host staging over the socket transport): gpipe and 1f1b
#      bitwise equal, and within 1e-5 relative of 1 rank on that GPU; zb-h1 (every
#      backward split into I and W, [Note: split backward]) bitwise equal to 1f1b.
#   7. the NCCL transport on one GPU (test/gpu/nccl_self.c): a 1-rank communicator's
#      messages, groups, collectives, split, mismatches and abort;
#   8. runtime.transport on 2 ranks sharing the GPU: auto chooses socket and says why,
#      nccl is exit 2 naming the ranks and the bus id; at bf16 with PPTRAIN_RESIDUAL=fp32 on
#      rank 1 only, exit 2 naming the residual stream's two types;
#   9. test/pipeline-nccl.sh: the NCCL pipeline between GPUs (skips below 2 GPUs).
#  10. pptrain sample on the GPU (the decoding ops' CUDA twins): greedy at fp32 gives
#      transformers' ids of test/sample/greedy.txt (test/sample.sh's goldens); bf16 decodes.
#  11. cuDNN's attention (PPTRAIN_ATTENTION=cudnn) against the CPU op, where it loads.
# PPTRAIN, GPU_OPS and NCCL_SELF name the binaries (the Makefile sets them). Results: stdout, and
# gpu_ops' whole output in $GPU_OPS_LOG when that is set.
# Time: the whole suite has GPU_TEST_BUDGET_S seconds (default 280; on an H100 it takes
# about 90); every run's own timeout is cut to what is left of it, and a check with
# under 5 s left is not run but counted as failed, naming itself: a hang costs one
# check, never the device call that runs the suite.
set -u
deadline=$((SECONDS + ${GPU_TEST_BUDGET_S:-280}))
cap() { # the timeout for a step that wants $1 s: what is left of the budget at most
  local left=$((deadline - SECONDS))
  left=$((left < 1 ? 1 : left)) # never 0: timeout 0 would mean no limit
  echo $(($1 < left ? $1 : left))
}
PPTRAIN=${PPTRAIN:-./pptrain}
GPU_OPS=${GPU_OPS:-build/cpu/test/gpu_ops}
NCCL_SELF=${NCCL_SELF:-build/cpu/test/nccl_self}
out=$("$GPU_OPS" --probe 2>&1)
rc=$?
if [ $rc -eq 77 ]; then
  echo "make test-gpu: $out"
  exit 0
elif [ $rc -ne 0 ]; then
  echo "make test-gpu: FAILED: gpu_ops --probe exited $rc: $out"
  exit 1
fi
echo "$out"
tmp=$(mktemp -d /tmp/pptrain-gpu.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }
# budget NAME: true while at least 5 s of the suite's budget are left; else a failure
budget() { [ $((deadline - SECONDS)) -ge 5 ] || { bad "$1: not run, the suite's ${GPU_TEST_BUDGET_S:-280} s are spent"; return 1; }; }

# 1. the ops (cuDNN's attention in a process of its own: 11, at the end)
timeout -k 3 "$(cap 90)" "$GPU_OPS" --cudnn skip >"$tmp/ops.out" 2>&1
rc=$?
[ -n "${GPU_OPS_LOG:-}" ] && cp "$tmp/ops.out" "$GPU_OPS_LOG" # every check's error (scripts/gpu/device-check)
grep -E "^FAIL|^gpu_ops" "$tmp/ops.out"
if [ $rc -eq 0 ]; then
  ok "every CUDA op matches the CPU op ($(tail -n1 "$tmp/ops.out"))"
else # a CUDA error ends gpu_ops with one line naming the call: show where it stopped
  bad "gpu_ops exited $rc; its last lines:"
  tail -n 8 "$tmp/ops.out" | sed 's/^/   /'
fi

run_s=30 # a gpt-tiny run takes a few seconds: one that hangs (exit 124) must not eat the device call

# 7. the NCCL transport on a 1-rank communicator (run early: it takes seconds, and the
#    GPU session's minutes are few): every line it prints is shown (each names its
#    check; a FAIL says what it got)
timeout -k 5 "$(cap 45)" "$NCCL_SELF" >"$tmp/nccl_self.out" 2>&1
rc=$?
sed 's/^/   /' "$tmp/nccl_self.out"
if [ $rc -eq 0 ]; then ok "nccl_self: $(tail -n1 "$tmp/nccl_self.out")"
elif [ $rc -eq 77 ]; then bad "nccl_self skipped on a GPU machine: $(tail -n1 "$tmp/nccl_self.out")"
else bad "nccl_self exited $rc ($(grep -c '^FAIL' "$tmp/nccl_self.out") checks failed; 124: it hung)"; fi

# 8. runtime.transport with 2 ranks on this one GPU (CUDA_VISIBLE_DEVICES set to one
#    device: both ranks open it)
one=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | head -n1)
sel() { # name, transport, expected rc
  budget "runtime.transport $2" || return 1
  CUDA_VISIBLE_DEVICES=${one:-0} timeout -k 3 "$(cap $run_s)" scripts/pprun --nproc-per-node 2 "$PPTRAIN" --config configs/gpt-tiny.yaml \
    --set pipeline.stages=2 --set train.steps=3 --set data.val=null --set runtime.device=cuda --set runtime.precision=fp32 \
    --set runtime.transport="$2" --set output.dir="$tmp/$1" >"$tmp/$1.out" 2>&1
  local rc=$?
  [ $rc -eq "$3" ] || { bad "runtime.transport $2 on 2 ranks sharing a GPU exited $rc, want $3: $(grep -m3 'error\|transport' "$tmp/$1.out")"; return 1; }
}
sel sel-auto auto 0 && {
  grep -q "transport: socket (runtime.transport auto: ranks 0 and 1 share GPU [0-9a-f]*:[0-9a-f]*:[0-9a-f]*\.[0-9]" "$tmp/sel-auto.out" &&
    ok "auto on 2 ranks sharing a GPU: socket ($(grep -m1 -o 'transport: .*' "$tmp/sel-auto.out"))" ||
    bad "auto on 2 ranks sharing a GPU: $(grep -m1 'transport' "$tmp/sel-auto.out")"; }
sel sel-nccl nccl 2 && {
  [ "$(grep -c 'runtime.transport=nccl: ranks 0 and 1 share GPU .*, and NCCL refuses two ranks on one GPU: give each rank a GPU of its own' "$tmp/sel-nccl.out")" = 2 ] &&
    ok "nccl forced on 2 ranks sharing a GPU: exit 2 on both ($(grep -m1 -o 'ranks 0 and 1 share GPU [^,]*' "$tmp/sel-nccl.out"))" ||
    bad "nccl forced on a shared GPU: $(grep -m2 error "$tmp/sel-nccl.out")"; }
# the residual stream's type differs between the ranks ([Note: residual stream type]): the
# activations' sizes would: the ranks refuse before the first message
budget "mixed residual types" && {
  CUDA_VISIBLE_DEVICES=${one:-0} timeout -k 3 "$(cap $run_s)" scripts/pprun --nproc-per-node 2 bash -c \
    'unset PPTRAIN_BF16_OPERANDS PPTRAIN_RESIDUAL; [ "$RANK" = 1 ] && export PPTRAIN_RESIDUAL=fp32; exec "$@"' \
    rank-env "$PPTRAIN" --config configs/gpt-tiny.yaml \
    --set pipeline.stages=2 --set train.steps=3 --set data.val=null --set runtime.device=cuda --set runtime.precision=bf16 \
    --set output.dir="$tmp/res-mix" >"$tmp/res-mix.out" 2>&1
  rc=$?
  # (pprun stops the other rank once one exits: at least one says why)
  [ $rc -eq 2 ] && grep -q 'store the residual stream in different types (1 in fp32, 1 in bf16' "$tmp/res-mix.out" &&
    ok "PPTRAIN_RESIDUAL=fp32 on one of 2 bf16 ranks: exit 2, naming the two types" ||
    bad "mixed residual types exited $rc: $(grep -m2 'error\|residual' "$tmp/res-mix.out")"; }

tiny=(--config configs/gpt-tiny.yaml --set pipeline.stages=1 --set data.val=null --set output.log_every=1)
train() { # name, args...: run, keep the loss column and the exported final weights
  local name=$1
  shift
  budget "$name" || return 1
  timeout -k 3 "$(cap $run_s)" "$PPTRAIN" "${tiny[@]}" --set output.dir="$tmp/$name" "$@" >"$tmp/$name.out" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then bad "$name exited $rc: $(tail -n 5 "$tmp/$name.out")"; return 1; fi
  tail -n +2 "$tmp/$name/losses.csv" | cut -d, -f1,2 >"$tmp/$name.loss"
  "$PPTRAIN" export --checkpoint "$tmp/$name/checkpoints" --out "$tmp/$name.bin" >/dev/null 2>&1
  return 0
}
close() { # name a, name b, relative tolerance, first row (1-based) to compare
  python3 - "$tmp/$1.loss" "$tmp/$2.loss" "$3" "${4:-1}" <<'PY'
import sys
a = dict(l.strip().split(",") for l in open(sys.argv[1])); b = dict(l.strip().split(",") for l in open(sys.argv[2]))
tol, first = float(sys.argv[3]), int(sys.argv[4])
keys = [k for k in a if int(k) >= first]
assert keys and all(k in b for k in keys), (sorted(a), sorted(b))
worst = max(abs(float(a[k]) - float(b[k])) / abs(float(b[k])) for k in keys)
print("   %d steps, worst relative loss difference %.2e (tolerance %g)" % (len(keys), worst, tol))
sys.exit(not worst <= tol)
PY
}

# 2. fp32 on the GPU against the CPU, 20 steps from the same init
train cpu20 --set train.steps=20 --set runtime.device=cpu &&
  train gpu20 --set train.steps=20 --set runtime.device=cuda --set runtime.precision=fp32 &&
  { grep "^rank 0: device\|GPU memory" "$tmp/gpu20.out"
    close gpu20 cpu20 1e-4 && ok "20 steps: GPU fp32 losses within 1e-4 of the CPU" || bad "GPU fp32 vs CPU"; }

# 3. bf16: the loss falls, and stays near fp32
train bf16 --set train.steps=60 --set runtime.device=cuda --set runtime.precision=bf16 &&
  train fp32 --set train.steps=60 --set runtime.device=cuda --set runtime.precision=fp32 &&
  { python3 - "$tmp/bf16.loss" <<'PY' && ok "bf16: the loss falls on data/tiny" || bad "bf16: the loss does not fall"
import sys
l = [float(x.split(",")[1]) for x in open(sys.argv[1])]
print("   bf16 loss %.4f -> %.4f" % (l[0], l[-1]))
sys.exit(not (l[0] > 4.0 and l[-1] < l[0] - 1.0))
PY
    close bf16 fp32 5e-2 && ok "bf16 within 5e-2 of fp32 over 60 steps" || bad "bf16 drifts from fp32 by more than 5e-2"; }
train tf32 --set train.steps=20 --set runtime.device=cuda --set runtime.precision=tf32 &&
  { close tf32 cpu20 2e-3 && ok "tf32 within 2e-3 of the CPU over 20 steps" || bad "tf32 vs CPU"; }

# 4. two GPU runs: the same bits
train again --set train.steps=60 --set runtime.device=cuda --set runtime.precision=fp32 &&
  { cmp -s "$tmp/fp32.loss" "$tmp/again.loss" && cmp -s "$tmp/fp32.bin" "$tmp/again.bin" &&
      ok "two GPU fp32 runs: losses and weights bitwise equal" || bad "two GPU fp32 runs differ"; }
train bf16b --set train.steps=60 --set runtime.device=cuda --set runtime.precision=bf16 &&
  { cmp -s "$tmp/bf16.loss" "$tmp/bf16b.loss" && cmp -s "$tmp/bf16.bin" "$tmp/bf16b.bin" &&
      ok "two GPU bf16 runs: losses and weights bitwise equal" || bad "two GPU bf16 runs differ"; }
# 4c. the GEMM tuning's file ([Note: GEMM algorithm file] in cuda/gemm_file.h): a tuned run
#     (PPTRAIN_GEMM_TUNE=1) appends each GEMM's choice; a run that reads the file runs those
#     algorithms, tunes nothing, and gives the tuned run's bits
gt=(--set train.steps=20 --set runtime.device=cuda --set runtime.precision=bf16)
#     (the second run with the tuning on too, which the file's lines take precedence over,
#     and the GEMM log, which says where each algorithm came from)
PPTRAIN_GEMM_TUNE=1 PPTRAIN_GEMM_ALGOS="$tmp/algos.txt" train tuned "${gt[@]}" &&
  PPTRAIN_GEMM_TUNE=1 PPTRAIN_GEMM_LOG=1 PPTRAIN_GEMM_ALGOS="$tmp/algos.txt" train pinned "${gt[@]}" &&
  { n=$(grep -c '^gemm ' "$tmp/algos.txt"); t=$(grep -c 'cuda: gemm tune' "$tmp/tuned.out")
    p=$(grep -c '(from PPTRAIN_GEMM_ALGOS)' "$tmp/pinned.out")
    # how many the tuning moved off the heuristic's first (0: the bits prove less)
    m=$(sed -n 's/.*first (answer #\([0-9]*\)).*chose answer #\([0-9]*\) .*/\1 \2/p' "$tmp/tuned.out" |
      awk '$1 != $2' | wc -l)
    echo "   $n GEMMs in the file, $t tuned ($m off the heuristic's first), $p taken from the file"
    [ "$n" -gt 0 ] && [ "$n" = "$t" ] && [ "$n" = "$p" ] &&
      grep -q "PPTRAIN_GEMM_ALGOS=$tmp/algos.txt ($n GEMMs for sm" "$tmp/pinned.out" &&
      ! grep -q 'cuda: gemm tune\|does not run here' "$tmp/pinned.out" &&
      cmp -s "$tmp/tuned.loss" "$tmp/pinned.loss" && cmp -s "$tmp/tuned.bin" "$tmp/pinned.bin" &&
      close tuned bf16 5e-2 &&
      ok "PPTRAIN_GEMM_TUNE=1 writes PPTRAIN_GEMM_ALGOS; a run reading it: the tuned run's bits" ||
      bad "tuned and pinned runs: $(grep -m2 'GEMM_ALGOS\|gemm tune' "$tmp/pinned.out" "$tmp/tuned.out" | cut -c1-200)"; }
# a file that is not there (without the tuning) under runtime.device auto: exit 2, not the
# CPU ([Note: a refused setting] in src/backend/backend_load.c)
budget "missing GEMM file" && {
  rc=0
  PPTRAIN_GEMM_ALGOS="$tmp/none.txt" timeout -k 3 "$(cap $run_s)" "$PPTRAIN" "${tiny[@]}" --set train.steps=1 \
    --set runtime.device=auto --set output.dir="$tmp/none" >"$tmp/none.out" 2>&1 || rc=$?
  [ $rc -eq 2 ] && grep -q "no such file (PPTRAIN_GEMM_TUNE=1 writes it)" "$tmp/none.out" &&
    ok "PPTRAIN_GEMM_ALGOS missing under runtime.device auto: exit 2, naming it" ||
    bad "a missing PPTRAIN_GEMM_ALGOS under auto exited $rc: $(tail -n 2 "$tmp/none.out")"; }
# 4b. recompute at bf16 ([Note: recompute]): GPipe over 2 microbatches on one stage (the
#     first microbatch's backward is not next after its forward, so its layers recompute),
#     selective and full against none: the same bits (selective reruns the fc GEMM where
#     GELU runs in its epilogue, [Note: fused GELU] in src/backend/backend.h)
gp=(--set train.steps=30 --set runtime.device=cuda --set runtime.precision=bf16 --set pipeline.schedule=gpipe
  --set pipeline.microbatches=2)
if train rc-none "${gp[@]}"; then
  for mode in selective full; do
    train "rc-$mode" "${gp[@]}" --set pipeline.recompute=$mode || continue
    n=$(sed -n 's/.*recompute: per step \([0-9]*\) layer recomputes.*/\1/p' "$tmp/rc-$mode.out" | head -n1)
    cmp -s "$tmp/rc-none.loss" "$tmp/rc-$mode.loss" && cmp -s "$tmp/rc-none.bin" "$tmp/rc-$mode.bin" &&
      [ "${n:-0}" -gt 0 ] && ok "bf16, gpipe M=2, recompute $mode ($n layer recomputes a step): losses and weights bitwise those of none" ||
      bad "bf16, gpipe M=2, recompute $mode (${n:-no} layer recomputes a step) differs from none"
  done
fi

# 5. checkpoints cross devices: a 20-step run saves at step 10 (the same lr schedule as
#    the 20-step references); steps 11-20 resumed from it on the other device
resume() { # name, checkpoint run, reference, device args...
  local name=$1 from=$2 ref=$3
  shift 3
  budget "$name" || return 1
  timeout -k 3 "$(cap $run_s)" "$PPTRAIN" "${tiny[@]}" --set output.dir="$tmp/$name" --set train.steps=20 "$@" \
    --resume "$tmp/$from/checkpoints/step_0000010" >"$tmp/$name.out" 2>&1 ||
    { bad "$name: the resume exited $?: $(tail -n 3 "$tmp/$name.out")"; return 1; }
  tail -n +2 "$tmp/$name/losses.csv" | cut -d, -f1,2 >"$tmp/$name.loss"
  close "$name" "$ref" 1e-4 11
}
train g20ck --set train.steps=20 --set output.checkpoint_every=10 --set runtime.device=cuda --set runtime.precision=fp32 &&
  { resume g2c g20ck cpu20 --set runtime.device=cpu &&
      ok "a GPU checkpoint resumes on the CPU (steps 11-20 within 1e-4 of the CPU run)" || bad "GPU -> CPU resume"; }
train c20ck --set train.steps=20 --set output.checkpoint_every=10 --set runtime.device=cpu &&
  { resume c2g c20ck gpu20 --set runtime.device=cuda --set runtime.precision=fp32 &&
      ok "a CPU checkpoint resumes on the GPU (steps 11-20 within 1e-4 of the GPU run)" || bad "CPU -> GPU resume"; }

# 6. 2 ranks on one GPU: activations through pinned host staging and the socket transport
two() { # name, schedule, more args...
  local name=$1
  budget "$name" || return 1
  timeout -k 3 "$(cap $run_s)" scripts/pprun --nproc-per-node 2 "$PPTRAIN" --config configs/gpt-tiny.yaml --set pipeline.stages=2 \
    --set pipeline.schedule="$2" --set train.steps=20 --set data.val=null --set output.log_every=1 \
    --set runtime.device=cuda --set runtime.precision=fp32 --set output.dir="$tmp/$name" "${@:3}" >"$tmp/$name.out" 2>&1 ||
    { bad "$name exited $?: $(tail -n 5 "$tmp/$name.out")"; return 1; }
  tail -n +2 "$tmp/$name/losses.csv" | cut -d, -f1,2 >"$tmp/$name.loss"
  "$PPTRAIN" export --checkpoint "$tmp/$name/checkpoints" --out "$tmp/$name.bin" >/dev/null 2>&1
}
# the allocation each rank reports on the GPU = `pptrain schedule`'s memory plan for the same
# run, which it makes with the CUDA backend's layout ([Note: backend layout] in backend_load.h)
planned() { # name, schedule, more args (two()'s)
  local name=$1 want got
  budget "$name: the plan" || return 1
  timeout -k 3 "$(cap 30)" "$PPTRAIN" schedule --config configs/gpt-tiny.yaml --set pipeline.stages=2 \
    --set pipeline.schedule="$2" --set train.steps=20 --set data.val=null --set runtime.device=cuda \
    --set runtime.precision=fp32 "${@:3}" >"$tmp/$name.plan" 2>&1 ||
    { bad "$name: pptrain schedule exited $?: $(tail -n 2 "$tmp/$name.plan")"; return 1; }
  want=$(grep -o 'rank [0-9]*: plan: .*' "$tmp/$name.plan" | sed 's/: plan: /: /' | sort)
  got=$(grep -o 'rank [0-9]*: allocated: .*' "$tmp/$name.out" | sed 's/: allocated: /: /' | sort)
  [ -n "$want" ] && [ "$want" = "$got" ] &&
    ok "$name: each rank's GPU allocation = pptrain schedule's plan ($(sed -n 's/.*(bytes on \(.*\); microbatch.*/\1/p' "$tmp/$name.plan" | head -n 1))" ||
    bad "$name: plan and GPU allocation differ: $(diff <(echo "$want") <(echo "$got") | head -n 4 | tr '\n' ';')"
}
two p2-gpipe gpipe && two p2-1f1b 1f1b && {
  planned p2-1f1b 1f1b
  grep "device\|GPU memory" "$tmp/p2-1f1b.out" | head -4
  cmp -s "$tmp/p2-gpipe.loss" "$tmp/p2-1f1b.loss" && cmp -s "$tmp/p2-gpipe.bin" "$tmp/p2-1f1b.bin" &&
    ok "2 ranks on one GPU: gpipe == 1f1b (losses and weights bitwise)" || bad "2 ranks: gpipe != 1f1b"
  close p2-1f1b gpu20 1e-5 && ok "2 ranks on one GPU within 1e-5 of 1 rank" || bad "2 ranks vs 1 rank"
  two p2-zb zb-h1 &&
    { cmp -s "$tmp/p2-1f1b.loss" "$tmp/p2-zb.loss" && cmp -s "$tmp/p2-1f1b.bin" "$tmp/p2-zb.bin" &&
        ok "2 ranks on one GPU: zb-h1 (split I/W backward) == 1f1b (losses and weights bitwise)" ||
        bad "2 ranks: zb-h1 != 1f1b (the split backward halves do not give the fused bits)"; }
  # bf16 (flash attention by default) with the head's logits in chunks of 7 rows
  # ([Note: chunked head] in model.c): the split backward still gives the fused bits
  PPTRAIN_LOGITS_CHUNK_ROWS=7 two p2-1f1b-c 1f1b --set runtime.precision=bf16 &&
    PPTRAIN_LOGITS_CHUNK_ROWS=7 two p2-zb-c zb-h1 --set runtime.precision=bf16 &&
    { grep -m1 "device" "$tmp/p2-zb-c.out"
      PPTRAIN_LOGITS_CHUNK_ROWS=7 planned p2-zb-c zb-h1 --set runtime.precision=bf16
      cmp -s "$tmp/p2-1f1b-c.loss" "$tmp/p2-zb-c.loss" && cmp -s "$tmp/p2-1f1b-c.bin" "$tmp/p2-zb-c.bin" &&
        ok "2 ranks on one GPU, bf16, head in chunks of 7 rows: zb-h1 == 1f1b (bitwise)" ||
        bad "2 ranks, bf16, chunked head: zb-h1 != 1f1b"; }
}

# 9. the NCCL pipeline between GPUs (needs 2; it says so and skips with 77 below that)
if budget "pipeline-nccl.sh"; then
  timeout -k 5 "$(cap 120)" bash test/pipeline-nccl.sh >"$tmp/pnccl.out" 2>&1
  rc=$?
  sed 's/^/   /' "$tmp/pnccl.out" | tail -n 40
  if [ $rc -eq 0 ]; then ok "pipeline-nccl.sh: $(tail -n1 "$tmp/pnccl.out")"
  elif [ $rc -eq 77 ]; then grep -m1 '^skip' "$tmp/pnccl.out"
  else bad "pipeline-nccl.sh exited $rc"; fi
fi

# 10. pptrain sample on the GPU ([Note: KV cache] in src/backend/backend.h): transformers'
#     greedy ids at fp32, as on the CPU (test/sample.sh); at bf16 a near tie may go
#     another way, so only the count of ids is held
if budget "sample on the GPU"; then
  n=0 same=0
  while read -r name max prompt want gap eos; do
    case $name in '#'* | text) continue ;; esac
    got=$(timeout -k 3 "$(cap 30)" "$PPTRAIN" sample --device cuda --precision fp32 \
      --init-from "test/hf/$name" --prompt-ids "$prompt" --max-new-tokens "$max" --temperature 0 \
      --ids ${eos:+--eos "$eos"} 2>"$tmp/sample.err")
    n=$((n + 1))
    [ "$got" = "$want" ] && same=$((same + 1)) || echo "   $name $prompt: $got, transformers $want"
  done <test/sample/greedy.txt
  [ $n -gt 0 ] && [ $same -eq $n ] &&
    ok "sample --device cuda, fp32: transformers' greedy ids ($same of $n goldens)" ||
    bad "sample --device cuda, fp32: $same of $n goldens ($(tail -n1 "$tmp/sample.err"))"
  got=$(timeout -k 3 "$(cap 30)" "$PPTRAIN" sample --device cuda --precision bf16 \
    --init-from test/hf/llama3 --prompt-ids 1,2,3 --max-new-tokens 24 --temperature 0 --ids \
    2>"$tmp/sample.err")
  [ "$(tr ',' '\n' <<<"$got" | grep -c .)" -eq 24 ] && ok "sample --device cuda, bf16: 24 ids" ||
    bad "sample --device cuda, bf16: '$got' ($(tail -n1 "$tmp/sample.err"))"
fi

# 11. cuDNN's attention (PPTRAIN_ATTENTION=cudnn, [Note: cuDNN attention] in
#     cuda/cudnn_attn.cc) against the CPU, last: NVRTC compiles its graphs, seconds that
#     must not cost the checks above; "skip" where libcudnn.so.9 cannot be loaded
if budget "gpu_ops --cudnn only"; then
  timeout -k 3 "$(cap 150)" "$GPU_OPS" --prec bf16 --cudnn only >"$tmp/cudnn.out" 2>&1
  rc=$?
  [ -n "${GPU_OPS_LOG:-}" ] && cat "$tmp/cudnn.out" >>"$GPU_OPS_LOG"
  grep -E "^FAIL|^gpu_ops|^skip" "$tmp/cudnn.out"
  if [ $rc -ne 0 ]; then
    bad "gpu_ops --cudnn only exited $rc; its last lines:"
    tail -n 8 "$tmp/cudnn.out" | sed 's/^/   /'
  elif grep -q "^skip cuDNN" "$tmp/cudnn.out"; then
    echo "skip cuDNN attention: $(grep -m1 '^skip cuDNN' "$tmp/cudnn.out" | cut -c22-200)"
  else
    ok "cuDNN's attention matches the CPU op ($(tail -n1 "$tmp/cudnn.out"))"
  fi
fi

echo "make test-gpu: $pass passed, $fail failed"
[ $fail -eq 0 ]
