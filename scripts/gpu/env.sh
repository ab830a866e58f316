# scripts/gpu/env.sh — sourced THERE (the GPU machine) by first-call and second-call,
# from the repository root with .gpu-pack/ carried: points the loader at the
# pack's libraries (libyaml, libjansson; the machine has OpenBLAS, zlib, cuBLASLt, NCCL), names the
# packed binaries (PPTRAIN, GPU_OPS, NCCL_SELF, BENCH_GPU, BENCH_OPS: what test/gpu/run.sh
# and bench/gpu.sh read), puts the tiny token files at data/tiny, and defines gpu_env FILE,
# which writes what the machine has (nvidia-smi, nvcc, the libraries each binary resolves)
# to FILE and prints any library that is missing.
pack=$PWD/.gpu-pack
export LD_LIBRARY_PATH="$pack/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# cuBLASLt (540 MB: it cannot travel) is looked for where this build machine has it; a
# machine that keeps it elsewhere (a pip wheel's nvidia/cublas/lib) gets that folder added
if ldd "$pack/bin/libpptrain_cuda.so" | grep -q "libcublasLt.* => not found"; then
  lt=$(timeout 15 find /usr/local /usr/lib /opt -name "libcublasLt.so.13" 2>/dev/null | head -n1)
  [ -n "$lt" ] && export LD_LIBRARY_PATH="$(dirname "$lt"):$LD_LIBRARY_PATH"
  echo "env.sh: libcublasLt.so.13 is not in /usr/local/cuda/lib64; using ${lt:-none found}"
fi
# cuDNN (PPTRAIN_ATTENTION=cudnn, [Note: cuDNN attention] in cuda/cudnn_attn.cc) is opened
# at run time; on the lent machine it lives only in PyTorch's pip wheel (nvidia/cudnn/lib,
# ../shared/GPU.md): that folder is added when the loader cannot find libcudnn.so.9
if ! ldconfig -p | grep -q "libcudnn.so.9 " && ! [ -e /usr/local/cuda/lib64/libcudnn.so.9 ]; then
  dnn=$(timeout 20 python3 -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null)
  if ! [ -e "$dnn/libcudnn.so.9" ]; then
    found=$(timeout 15 find /usr/local /usr/lib /opt -name libcudnn.so.9 2>/dev/null | head -n1)
    dnn=${found:+$(dirname "$found")}
  fi
  [ -e "$dnn/libcudnn.so.9" ] && export LD_LIBRARY_PATH="$dnn:$LD_LIBRARY_PATH"
  echo "env.sh: libcudnn.so.9 is not on the loader's path; using ${dnn:-none found}"
fi
export PPTRAIN="$pack/bin/pptrain" GPU_OPS="$pack/bin/gpu_ops" NCCL_SELF="$pack/bin/nccl_self" \
  BENCH_GPU="$pack/bin/bench_gpu" BENCH_OPS="$pack/bin/bench_ops"
mkdir -p data/tiny && cp "$pack"/data/*.bin data/tiny/
gpu_env() {
  {
    date -u
    echo "pack built from $(cat "$pack/commit" 2>/dev/null)"
    nvidia-smi 2>&1 | head -15
    nvcc --version 2>&1 | tail -2
    "$PPTRAIN" --version
    echo "== NCCL (opened by libpptrain_cuda.so on demand): $(ldconfig -p | grep -m1 'libnccl.so.2 ' || ls /usr/local/cuda/lib64/libnccl.so.2* 2>&1 | head -n1)"
    echo "== cuDNN (PPTRAIN_ATTENTION=cudnn, opened on demand): LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    python3 -c 'import ctypes; l = ctypes.CDLL("libcudnn.so.9"); l.cudnnGetVersion.restype = ctypes.c_size_t; print("cudnnGetVersion", l.cudnnGetVersion())' 2>&1 | tail -n1
    for b in pptrain libpptrain_cuda.so gpu_ops nccl_self bench_gpu bench_ops; do
      echo "== ldd $b"
      ldd "$pack/bin/$b" | grep -v "^\s*linux-vdso"
    done
  } >"$1" 2>&1
  if grep -q "=> not found" "$1"; then
    echo "env.sh: a library is missing (see $(basename "$1")):"
    grep "=> not found" "$1" | sort -u
  fi
}
