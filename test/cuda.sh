#!/usr/bin/env bash
# cuda.sh — the CUDA build on a machine that cannot run it (no NVIDIA driver, or no GPU
# visible): --version lists the backends, CPU configs run with the CUDA backend built,
# runtime.device: cuda is refused with exit 2 naming the cause, auto falls back to the
# CPU and says why, the precision rules, pptrain itself links no CUDA library, and the
# runtime's host staging (how ranks on one GPU talk) gives the direct path's bits, and
# gpu_ops' own checking runs with the CPU in the GPU's place (--cpu; --emu at bf16).
# ([Note: CUDA backend loading] in src/backend/backend_load.c.) On a GPU machine the checks
# that need "no GPU" run with CUDA_VISIBLE_DEVICES empty, and the no-driver ones skip.
set -u
PPTRAIN=${PPTRAIN:-./pptrain}
tmp=$(mktemp -d /tmp/pptrain-cuda.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib/check.sh" # ok, bad, check, skip, skip_all, finish
run() { # name, expected rc, grep pattern, args... (output in $tmp/out)
  local name=$1 want=$2 pat=$3; shift 3
  "$@" >"$tmp/out" 2>&1
  local rc=$?
  if [ $rc -eq "$want" ] && grep -q -- "$pat" "$tmp/out"; then ok "$name"; else bad "$name (rc=$rc, want $want: $(head -c 400 "$tmp/out"))"; fi
}
tiny=(--config configs/gpt-tiny.yaml --set pipeline.stages=1 --set train.steps=2 --set data.val=null)
so=$(dirname "$PPTRAIN")/build/cuda/libpptrain_cuda.so
[ -e "$so" ] || so=$(dirname "$PPTRAIN")/../cuda/libpptrain_cuda.so # the DEBUG=1 binary's
built=0
[ -e "$so" ] && built=1
have_driver=0
python3 -c 'import ctypes; ctypes.CDLL("libcuda.so.1")' 2>/dev/null && have_driver=1
# the cause a refusal names: in a build without nvcc, always the build itself
nobuild="this pptrain was built without the CUDA backend"
if [ $built -eq 1 ]; then novis="no GPU visible: CUDA_VISIBLE_DEVICES is empty" nodrv="no NVIDIA driver: libcuda.so.1"
else novis=$nobuild nodrv=$nobuild; fi

# 1. --version: the version and the backends built in.
run "--version names pptrain and the CPU backend" 0 "^backend cpu:" "$PPTRAIN" --version
grep -q "^pptrain [0-9]" "$tmp/out" && ok "--version prints the version" || bad "--version prints the version"
if [ $built -eq 1 ]; then
  grep -Eq "^backend cuda: built with CUDA [0-9]+\.[0-9]+, cuBLASLt [0-9.]+, NCCL [0-9.]+; sm_80 sm_90" "$tmp/out" &&
    ok "--version lists the CUDA backend with CUDA, cuBLASLt and NCCL versions" ||
    bad "--version lists the CUDA backend ($(cat "$tmp/out"))"
else
  grep -q "^backend cuda: not built" "$tmp/out" && ok "--version says the CUDA backend is not built" ||
    bad "--version without CUDA ($(cat "$tmp/out"))"
  skip "the CUDA backend is not built (no nvcc): its loading checks"
fi

# 2. pptrain never links CUDA: it starts on a machine without the CUDA libraries.
if ldd "$PPTRAIN" | grep -Eq 'libcuda|libcudart|libcublas|libnccl'; then
  bad "pptrain links a CUDA library: $(ldd "$PPTRAIN" | grep -E 'cuda|cublas|nccl')"
else
  ok "pptrain links no CUDA library (ldd)"
fi

# 3. CPU configs run with the CUDA build present; auto falls back to the CPU and says why.
run "runtime.device cpu trains" 0 "^rank 0: device cpu, fp32$" "$PPTRAIN" "${tiny[@]}" --set runtime.device=cpu \
  --set output.dir="$tmp/cpu"
CUDA_VISIBLE_DEVICES= run "runtime.device auto without a visible GPU trains on the CPU and says why" 0 \
  "^rank 0: device cpu, fp32 (runtime.device auto: $novis" \
  "$PPTRAIN" "${tiny[@]}" --set runtime.device=auto --set output.dir="$tmp/auto"
# (both runs must have logged steps: two missing files would compare equal)
rows() { [ -f "$1" ] && wc -l <"$1" || echo 0; }
[ "$(rows "$tmp/cpu/losses.csv")" -gt 1 ] && [ "$(rows "$tmp/auto/losses.csv")" -gt 1 ] &&
  cmp -s <(cut -d, -f1-4 "$tmp/cpu/losses.csv") <(cut -d, -f1-4 "$tmp/auto/losses.csv") &&
  ok "auto on the CPU gives the cpu run's losses bitwise" || bad "auto and cpu losses differ"
if [ $have_driver -eq 0 ]; then
  env -u CUDA_VISIBLE_DEVICES "$PPTRAIN" "${tiny[@]}" --set output.dir="$tmp/auto2" >"$tmp/out" 2>&1
  rc=$?
  [ $rc -eq 0 ] && grep -q "^rank 0: device cpu, fp32 (runtime.device auto: $nodrv" "$tmp/out" &&
    ok "auto (the default) with no driver trains on the CPU, naming the cause ($nodrv)" ||
    bad "auto with no driver (rc=$rc: $(head -c 400 "$tmp/out"))"
fi

# 4. runtime.device: cuda without a GPU: exit 2, the cause named, nothing trained.
CUDA_VISIBLE_DEVICES= run "device cuda with no GPU visible: exit 2 naming the cause ($novis)" 2 \
  "runtime.device=cuda: $novis.*; or use runtime.device: cpu" \
  "$PPTRAIN" "${tiny[@]}" --set runtime.device=cuda --set output.dir="$tmp/c1"
[ ! -e "$tmp/c1/losses.csv" ] && ok "the refused run wrote no losses" || bad "the refused run wrote losses"
if [ $have_driver -eq 0 ]; then
  env -u CUDA_VISIBLE_DEVICES "$PPTRAIN" "${tiny[@]}" --set runtime.device=cuda --set output.dir="$tmp/c2" >"$tmp/out" 2>&1
  rc=$?
  [ $rc -eq 2 ] && grep -q "runtime.device=cuda: $nodrv" "$tmp/out" &&
    ok "device cuda with no driver: exit 2 naming the cause ($nodrv)" || bad "device cuda, no driver (rc=$rc: $(cat "$tmp/out"))"
else
  skip "a driver is installed: the no-driver refusal"
fi
# a binary with no libpptrain_cuda.so beside it (a copy elsewhere): the cause is the build
mkdir -p "$tmp/bin" && cp "$PPTRAIN" "$tmp/bin/pptrain"
env -u PPTRAIN_CUDA_LIB "$tmp/bin/pptrain" "${tiny[@]}" --set runtime.device=cuda --set output.dir="$tmp/c3" >"$tmp/out" 2>&1
rc=$?
if [ $built -eq 1 ]; then want="the CUDA backend libpptrain_cuda.so is not next to the binary"; else want=$nobuild; fi
[ $rc -eq 2 ] && grep -q "runtime.device=cuda: $want" "$tmp/out" && ok "device cuda with no CUDA backend beside the binary: exit 2, '$want'" ||
  bad "no backend beside the binary (rc=$rc: $(cat "$tmp/out"))"
env -u PPTRAIN_CUDA_LIB "$tmp/bin/pptrain" "${tiny[@]}" --set output.dir="$tmp/c4" >"$tmp/out" 2>&1 &&
  grep -q "^rank 0: device cpu, fp32 (runtime.device auto: " "$tmp/out" && ok "... and auto trains on the CPU" ||
  bad "auto with no backend beside the binary ($(head -c 300 "$tmp/out"))"

# 5. The shared object loads (cuBLASLt and CUDA's runtime resolve) and answers without a
#    driver instead of crashing: its device count is 0 with the reason.
if [ $built -eq 1 ]; then
  python3 - "$so" >"$tmp/out" 2>&1 <<'PY'
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
buf = ctypes.create_string_buffer(1024)
n = lib.pp_cuda_device_count(buf, ctypes.c_size_t(1024))
lib.pp_cuda_built_with.restype = ctypes.c_char_p
print(n, buf.value.decode(), "|", lib.pp_cuda_built_with().decode())
PY
  rc=$?
  if [ $rc -eq 0 ] && [ $have_driver -eq 0 ]; then
    grep -q "^0 no NVIDIA driver: libcuda.so.1 cannot be loaded .*| CUDA [0-9]*, cuBLASLt" "$tmp/out" &&
      ok "libpptrain_cuda.so loads here and reports 0 GPUs, naming the missing driver" || bad "the .so's answer: $(cat "$tmp/out")"
  elif [ $rc -eq 0 ]; then
    ok "libpptrain_cuda.so loads ($(cat "$tmp/out"))"
  else
    bad "libpptrain_cuda.so does not load: $(cat "$tmp/out")"
  fi
  ldd "$so" | grep -q 'libcudart' && bad "the .so links CUDA's runtime dynamically (expected static)" ||
    ok "the .so links CUDA's runtime statically (only cuBLASLt is needed at load)"
fi

# 6. runtime.precision: auto by default; tf32 / bf16 need a GPU.
"$PPTRAIN" --config configs/gpt-tiny.yaml --print-config | grep -A6 '^runtime:' >"$tmp/out"
grep -q "^  precision: auto$" "$tmp/out" && grep -q "^  device: auto$" "$tmp/out" &&
  ok "defaults: runtime.device auto, runtime.precision auto" || bad "defaults: $(cat "$tmp/out")"
for p in bf16 tf32; do
  run "precision $p on device cpu: exit 2 at config time" 2 "runtime.precision: $p needs a GPU, but runtime.device is cpu" \
    "$PPTRAIN" "${tiny[@]}" --set runtime.device=cpu --set runtime.precision=$p --set output.dir="$tmp/p$p"
done
CUDA_VISIBLE_DEVICES= run "precision bf16 with auto falling back to the CPU: exit 2 naming why" 2 \
  "runtime.precision=bf16 needs a GPU, but this rank runs on the CPU (runtime.device auto: $novis" \
  "$PPTRAIN" "${tiny[@]}" --set runtime.precision=bf16 --set output.dir="$tmp/pb"
run "precision fp32 on the CPU trains" 0 "^rank 0: device cpu, fp32" "$PPTRAIN" "${tiny[@]}" --set runtime.device=cpu \
  --set runtime.precision=fp32 --set output.dir="$tmp/pf"
run "an unknown precision is a config error" 2 "runtime.precision" "$PPTRAIN" "${tiny[@]}" --set runtime.precision=fp16

# 7. host staging ([Note: host staging] in src/runtime/runtime.c), the path by which ranks on one
#    GPU exchange activations, run here on the CPU posing as a device
#    (PPTRAIN_HOST_STAGING=1): 2 ranks, 1f1b and interleaved, the tied all-reduce across
#    ranks: losses and final weights bitwise those of the direct path.
two() { # name, extra args...
  local name=$1
  shift
  scripts/pprun --nproc-per-node 2 "$PPTRAIN" --config configs/gpt-tiny.yaml --set train.steps=6 --set data.val=null \
    --set runtime.device=cpu \
    --set output.log_every=1 --set output.dir="$tmp/$name" "$@" >"$tmp/$name.out" 2>&1 &&
    "$PPTRAIN" export --checkpoint "$tmp/$name/checkpoints" --out "$tmp/$name.bin" >/dev/null 2>&1 &&
    cut -d, -f1-4 "$tmp/$name/losses.csv" >"$tmp/$name.loss"
}
for sched in 1f1b interleaved-1f1b; do
  args=(--set pipeline.schedule=$sched)
  [ $sched = interleaved-1f1b ] && args+=(--set pipeline.virtual_stages=2)
  if two "direct-$sched" "${args[@]}" && PPTRAIN_HOST_STAGING=1 two "staged-$sched" "${args[@]}"; then
    [ "$(grep -c "device cpu, fp32, host staging (PPTRAIN_HOST_STAGING=1)" "$tmp/staged-$sched.out")" = 2 ] &&
      [ "$(grep -Ec "host staging buffers (0\.[1-9]|[1-9])" "$tmp/staged-$sched.out")" = 2 ] &&
      ! grep -q "host staging buffers" "$tmp/direct-$sched.out" &&
      cmp -s "$tmp/direct-$sched.loss" "$tmp/staged-$sched.loss" && cmp -s "$tmp/direct-$sched.bin" "$tmp/staged-$sched.bin" &&
      ok "host staging, 2 ranks $sched: losses and weights bitwise those of the direct path" ||
      bad "host staging, 2 ranks $sched differs: $(paste -d' ' "$tmp/direct-$sched.loss" "$tmp/staged-$sched.loss" | sed -n 2,3p | tr '\n' ';')"
  else
    bad "2-rank $sched runs failed: $(tail -n 3 "$tmp/direct-$sched.out" "$tmp/staged-$sched.out" 2>/dev/null)"
  fi
done

# 8. the op test's own checking (test/gpu/gpu_ops.c: poisoned outputs, tolerances, the
#    split-backward bits) with the CPU backend in the GPU's place (--cpu), and its bf16
#    checks on the CPU posing as a bf16 GPU (--emu), so a broken harness is found here, not
#    in a GPU session's few minutes.
if [ -x "${GPU_OPS:-}" ]; then
  if out=$(timeout -k 5 120 "$GPU_OPS" --cpu --prec fp32 2>&1); then
    ok "gpu_ops --cpu --prec fp32: $(echo "$out" | tail -n 1)"
  else
    bad "gpu_ops --cpu --prec fp32 failed: $(echo "$out" | tail -n 5 | tr '\n' ';')"
  fi
  # and its bf16 checks on the CPU posing as the bf16 CUDA backend (--emu: test/emu_bf16.h):
  # the uploads at the operand and residual types, the bf16 tolerances and poisoning
  if out=$(timeout -k 5 180 "$GPU_OPS" --emu --prec bf16 --small 2>&1); then
    ok "gpu_ops --emu --prec bf16 --small: $(echo "$out" | tail -n 1)"
  else
    bad "gpu_ops --emu --prec bf16 --small failed: $(echo "$out" | grep -m5 '^FAIL' | tr '\n' ';') $(echo "$out" | tail -n 1)"
  fi
else
  echo "cuda.sh: gpu_ops --cpu not run: GPU_OPS (make builds build/cpu/test/gpu_ops) is not set"
  [ -z "${PP_TEST_SKIPS:-}" ] || echo "gpu_ops --cpu: GPU_OPS not set (make test sets it)" >>"$PP_TEST_SKIPS"
fi

# 9. cuDNN's attention graphs ([Note: cuDNN attention] in cuda/cudnn_attn.cc) without a
#    GPU: the forward and backward graphs a run describes, built for an H100's properties,
#    must validate and be taken by engines of cuDNN's heuristics (which stop short only of
#    compiling them: no driver here); an unsupported head size must be refused, so the
#    check can fail. Skipped where libcudnn.so.9 cannot be loaded or the backend was
#    built without the cuDNN frontend's headers.
if [ $built -eq 1 ] && [ $have_driver -eq 0 ]; then
  out=$(timeout -k 5 60 python3 - "$so" <<'PY' 2>&1
import ctypes, sys
check = ctypes.CDLL(sys.argv[1]).pp_cudnn_graph_check
check.argtypes = [ctypes.c_int] * 6 + [ctypes.c_char_p, ctypes.c_size_t]
# bwd, B, T, NH, NKV, HS: GPT-2 124M's step, grouped-query, the largest head, gpt-tiny's;
# then a head size of 20 (not a multiple of 8), which cuDNN refuses
# and gpu_ops' cuDNN shapes (head sizes 48 and 80, 32 heads in groups of 4, multi-query)
cases = [(0, 16, 1024, 12, 12, 64), (1, 16, 1024, 12, 12, 64), (0, 2, 129, 12, 4, 64),
         (1, 2, 129, 12, 4, 64), (1, 1, 1024, 1, 1, 128), (0, 2, 64, 4, 4, 16),
         (1, 2, 64, 4, 4, 16)]
cases += [(d,) + s for s in [(1, 1024, 12, 12, 80), (1, 129, 16, 16, 48), (1, 1024, 32, 8, 128),
                             (2, 1024, 12, 1, 64)] for d in (0, 1)]
cases += [(0, 3, 70, 1, 1, 20), (1, 3, 70, 1, 1, 20)]
for c in cases:
    msg = ctypes.create_string_buffer(2048)
    r = check(*c, msg, 2048)
    print(r, ",".join(map(str, c)), msg.value.decode(errors="replace").replace("\n", " ")[:200])
PY
)
  if echo "$out" | grep -q "^-1 "; then
    skip "cuDNN attention graphs: not checkable here ($(echo "$out" | grep -m1 '^-1 ' | cut -c1-160))"
  else
    n_ok=$(echo "$out" | grep -c "^1 .*engine configurations")
    [ "$n_ok" = 15 ] && ok "cuDNN attention graphs (15, forward and backward; GPT-2, grouped-query, head sizes 16 to 128) taken by cuDNN's engines for an H100" ||
      bad "cuDNN attention graphs: $n_ok of 15 taken: $(echo "$out" | grep -v '^1 ' | head -n 3 | tr '\n' ';')"
    [ "$(echo "$out" | grep -c '^0 .*,20 .*multiple of 8')" = 2 ] && ok "cuDNN attention graphs: head size 20 refused (multiple of 8)" ||
      bad "cuDNN attention graphs: head size 20 not refused: $(echo "$out" | tail -n 2 | tr '\n' ';')"
  fi
fi

finish
