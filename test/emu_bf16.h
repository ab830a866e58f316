/* emu_bf16.h — the CPU backend posing as the CUDA backend at precision bf16, for the tests
 * that run without a GPU: operand activations, logits and (by default) the residual stream
 * stored in bf16, each op widening its bf16 inputs, computing in fp32 as the CPU does and
 * rounding its bf16 outputs to nearest even ([Note: operand activations], [Note: logits
 * type], [Note: residual stream type] in src/backend/backend.h). test_model runs the model
 * engine on it (the byte layout of a bf16 GPU run, where its bits can be compared); gpu_ops
 * --emu runs its bf16 checks on it (so that a check that would fail on any correct bf16
 * backend fails here, not in a GPU session's few minutes). Host memory throughout: the
 * bits are the CPU's, not a GPU's. */
#ifndef PP_EMU_BF16_H
#define PP_EMU_BF16_H

#include <stddef.h>

#include "backend/backend.h"

/* The emulated backend (one static instance, rewritten by each call): gelu_in_gemm 1 applies
 * GELU to the unrounded pre-activation, as the CUDA backend's fc epilogue does, 0 to the
 * stored one (PPTRAIN_GELU_EPILOGUE=0); residual PP_BF16 (the CUDA default) or PP_F32
 * (PPTRAIN_RESIDUAL=fp32). Its logits are bf16; a copy of the table with .logits = PP_F32
 * keeps them fp32 (PPTRAIN_LOGITS=fp32). */
const Backend *emu_bf16_backend(int gelu_in_gemm, PPDType residual);

/* x[0..n) bf16 widened to fp32 (malloc'd: freed by the caller); dst[0..n) bf16 = src rounded
 * to nearest even (a NaN stays a NaN). */
float *emu_bf16_widen(const void *x, size_t n);
void emu_bf16_narrow(void *dst, const float *src, size_t n);

/* Calls of the emulated to_operand so far ([Note: residual gradient's operand]). */
extern long emu_bf16_casts;

#endif
