#!/usr/bin/env bash
# transport.sh — runtime.transport on a machine that cannot run NCCL ([Note: transport
# selection] in src/comm/comm_select.h; the rules themselves: test_comm_select.c): the build
# report names the transport and why, nccl on the CPU is exit 2 on every rank with the
# reason and what to do, and the CUDA backend object carries the NCCL transport without
# needing NCCL to load (ldd; loaded with libnccl.so.2 named away and hidden: a clear
# reason, not a loader error). The GPU side: test/gpu/run.sh, test/pipeline-nccl.sh.
set -u
PPTRAIN=${PPTRAIN:-./pptrain}
tmp=$(mktemp -d /tmp/pptrain-transport.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib/check.sh" # ok, bad, check, skip, skip_all, finish
export CUDA_VISIBLE_DEVICES= # the CPU, also on a GPU machine
tiny=(--config configs/gpt-tiny.yaml --set train.steps=2 --set data.val=null)
two() { # name, args...: 2 ranks through scripts/pprun (lines "[rank R] ..."); rc in $rc, output in $tmp/NAME.out
  local name=$1
  shift
  timeout 120 scripts/pprun --nproc-per-node 2 "$PPTRAIN" "${tiny[@]}" --set pipeline.stages=2 \
    --set output.dir="$tmp/$name" "$@" >"$tmp/$name.out" 2>&1
  rc=$?
}

# 1. the build report names the transport and why
"$PPTRAIN" "${tiny[@]}" --set pipeline.stages=1 --set output.dir="$tmp/one" >"$tmp/one.out" 2>&1
grep -q "^transport: local (runtime.transport auto: one rank, nothing moves between ranks)$" "$tmp/one.out" &&
  ok "1 rank: transport local, named in the build report" || bad "1 rank: $(grep -m1 transport "$tmp/one.out")"
two auto2
[ $rc -eq 0 ] && grep -q "^\[rank 0\] transport: socket (runtime.transport auto: rank 0 runs on the CPU, and NCCL moves GPU memory only)$" \
  "$tmp/auto2.out" && ok "2 CPU ranks, auto: socket, and why" || bad "2 CPU ranks, auto (rc=$rc): $(grep -m1 "transport\|error" "$tmp/auto2.out")"
two sock2 --set runtime.transport=socket
[ $rc -eq 0 ] && grep -q "^\[rank 0\] transport: socket (runtime.transport socket)$" "$tmp/sock2.out" &&
  ok "2 CPU ranks, socket asked: socket" || bad "2 CPU ranks, socket (rc=$rc): $(grep -m1 "transport\|error" "$tmp/sock2.out")"
[ "$(grep -c '\] transport:' "$tmp/auto2.out")" = 1 ] && ok "the choice is printed once (rank 0: every rank chose alike)" ||
  bad "transport lines: $(grep -c '\] transport:' "$tmp/auto2.out")"

# 2. nccl on the CPU: exit 2, the reason and what to do, on every rank, nothing trained
"$PPTRAIN" "${tiny[@]}" --set pipeline.stages=1 --set runtime.transport=nccl --set output.dir="$tmp/n1" >"$tmp/n1.out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "runtime.transport=nccl: rank 0 runs on the CPU, and NCCL moves GPU memory only: run on a GPU (runtime.device: cuda), or use runtime.transport: socket (or auto)" \
  "$tmp/n1.out" && [ ! -e "$tmp/n1/losses.csv" ] && ok "1 rank, nccl on the CPU: exit 2 with the reason" ||
  bad "1 rank, nccl on the CPU (rc=$rc): $(cat "$tmp/n1.out" | head -c 400)"
two n2 --set runtime.transport=nccl
[ $rc -eq 2 ] && [ "$(grep -c "runtime.transport=nccl: rank 0 runs on the CPU, and NCCL moves GPU memory only: run every rank on a GPU (runtime.device: cuda), or use runtime.transport: socket (or auto)" "$tmp/n2.out")" = 2 ] &&
  [ ! -e "$tmp/n2/losses.csv" ] && ok "2 ranks, nccl on the CPU: both exit 2 naming the rank and what to do" ||
  bad "2 ranks, nccl on the CPU (rc=$rc): $(grep -m2 error "$tmp/n2.out")"
"$PPTRAIN" "${tiny[@]}" --set runtime.transport=infiniband >"$tmp/bad.out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "runtime.transport" "$tmp/bad.out" && ok "an unknown transport is a config error" ||
  bad "unknown transport (rc=$rc): $(head -c 300 "$tmp/bad.out")"

# 3. the CUDA backend object: the NCCL transport is in it, NCCL is not needed to load it
so=$(dirname "$PPTRAIN")/build/cuda/libpptrain_cuda.so
[ -e "$so" ] || so=$(dirname "$PPTRAIN")/../cuda/libpptrain_cuda.so # the DEBUG=1 binary's
if [ ! -e "$so" ]; then
  skip "the CUDA backend is not built (no nvcc): the NCCL transport's object checks"
else
  syms=$(nm -D --defined-only "$so" | awk '{print $3}' | grep -E '^pp_(nccl_available|nccl_create|cuda_bus_id)$' | sort | tr '\n' ' ')
  [ "$syms" = "pp_cuda_bus_id pp_nccl_available pp_nccl_create " ] && ok "libpptrain_cuda.so exports the NCCL transport ($syms)" ||
    bad "libpptrain_cuda.so lacks NCCL entry points: '$syms'"
  ldd "$so" | grep -q libnccl && bad "libpptrain_cuda.so links libnccl (it must load without it): $(ldd "$so" | grep nccl)" ||
    ok "libpptrain_cuda.so does not link libnccl (ldd): NCCL is opened when a run chooses it"
  nm -D --undefined-only "$so" | grep -i ' ncclSend\| ncclCommInitRank' && bad "the .so references NCCL symbols at load" ||
    ok "the .so has no undefined NCCL symbol"
  probe() { # the .so loaded alone (python ctypes): pp_nccl_available's answer
    python3 - "$so" <<'PY'
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
buf = ctypes.create_string_buffer(512)
print(lib.pp_nccl_available(buf, ctypes.c_size_t(512)), buf.value.decode())
PY
  }
  out=$(PPTRAIN_NCCL_LIB=libnccl-absent.so.2 probe 2>&1)
  echo "$out" | grep -q "^0 libnccl-absent.so.2: cannot open shared object file" &&
    ok "NCCL absent (PPTRAIN_NCCL_LIB names a missing library): the .so loads and says why ($out)" ||
    bad "NCCL absent: $out"
  nccl=$(ldconfig -p | awk '/libnccl.so.2 / {print $NF; exit}')
  [ -n "$nccl" ] || nccl=$( { ls /usr/local/cuda/lib64/libnccl.so.2 2>/dev/null; } | head -n1)
  if [ -n "$nccl" ]; then
    out=$(probe 2>&1)
    [ "${out%% *}" = 1 ] && ok "NCCL present ($nccl): the .so loads it on demand" || bad "NCCL present ($nccl): $out"
    # hidden for real: a private mount namespace puts an empty file over it
    if unshare -m true 2>/dev/null; then
      : >"$tmp/empty"
      out=$(unshare -m bash -c "mount --bind '$tmp/empty' '$nccl' && export PPTRAIN=$PPTRAIN; $(declare -f probe); so='$so'; probe; \
        '$PPTRAIN' ${tiny[*]} --set pipeline.stages=1 --set output.dir='$tmp/hidden' >'$tmp/hidden.out' 2>&1; echo rc=\$?" 2>&1)
      echo "$out" | grep -q "^0 .*libnccl" && echo "$out" | grep -q "^rc=0$" &&
        ok "libnccl hidden (mount namespace): the .so loads and names it ($(echo "$out" | head -n1 | head -c 120)); pptrain trains on the CPU" ||
        bad "libnccl hidden: $out"
    else
      skip "no mount namespace here (unshare -m): libnccl was not hidden for real"
    fi
  else
    skip "no libnccl.so.2 on this machine: its on-demand loading"
  fi
fi

# 4. the GPU harness runs here and skips honestly
if [ -x "${NCCL_SELF:-}" ]; then
  out=$("$NCCL_SELF" --probe 2>&1)
  rc=$?
  [ $rc -eq 77 ] && echo "$out" | grep -q "^skipped: no GPU (" && ok "nccl_self --probe without a GPU: skipped, naming why ($out)" ||
    { [ $rc -eq 0 ] && ok "nccl_self --probe: a GPU is here ($out)" || bad "nccl_self --probe (rc=$rc): $out"; }
else
  skip "NCCL_SELF (make builds build/cpu/test/nccl_self) is not set: its probe"
fi

finish
