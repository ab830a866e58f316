# scripts/gpu/switches.sh — sourced by scripts/gpu/first-call and bench/gpu.sh: the CUDA
# backend's environment switches that restore an older code path without a rebuild, one
# VAR=VALUE each ([Note: speed switches] in cuda/NOTES.md says what each one changes). A
# prepared change lands with its switch here, so the next GPU call measures it against
# the old path side by side (bench/gpu.sh's switch rows) and falls back on it if its
# checks fail (first-call's "-old" rows run everything under all of them at once).
PP_OLD_PATHS="PPTRAIN_FUSE_GELU=0 PPTRAIN_FUSE_RESIDUAL=0 PPTRAIN_FUSE_BGRAD=0 PPTRAIN_LN_BWD=two-pass PPTRAIN_FLASH_BWD=v1 PPTRAIN_CE=two-pass PPTRAIN_LOGITS=fp32 PPTRAIN_GELU_EPILOGUE=0 PPTRAIN_FUSE_CAST=0 PPTRAIN_ADAMW_COPY=0 PPTRAIN_RESIDUAL=fp32"
# The switches bench/gpu.sh times one at a time beside the default (GPU_BENCH_AB overrides):
# the last changes' old paths (fp32 logits, GELU's kernel after the fc GEMM, the qkv and
# d atty GEMMs in fp32 and a cast, the weights' bf16 copy converted at every hold instead of
# kept by AdamW, the fp32 residual stream). PPTRAIN_ATTENTION=flash (pptrain's own flash
# kernels instead of cuDNN's: 44.3 against 39.7 ms in the third GPU session) left the list
# when the residual's switch came, to keep bench/gpu.sh within second-call's 250 s.
# PPTRAIN_GEMM_TUNE=1 is the other way round: a new path, off by default (each GEMM's
# algorithm by timing the heuristic's candidates, [Note: GEMM tuning] in
# cuda/backend_cuda.cu); its row is its gain, and it is in no old-path list.
PP_AB="PPTRAIN_LOGITS=fp32 PPTRAIN_GELU_EPILOGUE=0 PPTRAIN_FUSE_CAST=0 PPTRAIN_ADAMW_COPY=0 PPTRAIN_RESIDUAL=fp32 PPTRAIN_GEMM_TUNE=1"
