/* emu_bf16.c — the CPU backend posing as a bf16 GPU (emu_bf16.h). */
#include "emu_bf16.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* ---- bf16 operand activations on the CPU ([Note: operand activations] in backend.h) ----
 * A GPU at precision bf16 stores the operand activations in bf16, so the model engine
 * must size, offset and copy them by pp_dtype_bytes(be->operand). This backend is the
 * CPU's with operand PP_BF16: each op widens its operand inputs from bf16 and rounds its
 * operand outputs to bf16 (nearest even), and keeps the head's logits in bf16 too, the
 * dlogits over them ([Note: logits type]), so the engine runs a bf16 GPU run's byte
 * layout here, where its bits can be compared. */
static uint16_t bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* NaN stays NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float *emu_bf16_widen(const void *x, size_t n) {
    float *w = pp_malloc(n * sizeof(float) + 1);
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)((const uint16_t *)x)[i] << 16;
        memcpy(&w[i], &u, 4);
    }
    return w;
}
void emu_bf16_narrow(void *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = bf16_bits(src[i]);
}
#define CPU backend_cpu()
/* [Note: residual stream type]: the residual's fp32 view (freed by the caller: a widened
 * copy at a bf16 residual, else a copy) */
static float *res_in(const Backend *be, const void *x, size_t n) {
    if (be->residual == PP_BF16) return emu_bf16_widen(x, n);
    float *t = pp_malloc(n * sizeof(float) + 1);
    memcpy(t, x, n * sizeof(float));
    return t;
}
/* out (residual) = t, rounded at a bf16 residual */
static void res_out(const Backend *be, void *out, const float *t, size_t n) {
    if (be->residual == PP_BF16)
        emu_bf16_narrow(out, t, n);
    else
        memcpy(out, t, n * sizeof(float));
}
static void emu_enc_fwd(const Backend *be, void *out, const int *inp, const float *wte,
                        const float *wpe, int B, int T, int C) {
    size_t n = (size_t)B * T * C;
    float *t = pp_malloc(n * sizeof(float));
    CPU->encoder_forward(CPU, t, inp, wte, wpe, B, T, C);
    res_out(be, out, t, n);
    free(t);
}
static void emu_ln_fwd(const Backend *be, void *out, float *mean, float *rstd, const void *inp,
                       const float *w, const float *b, int N, int C) {
    float *t = pp_malloc((size_t)N * C * sizeof(float)), *x = res_in(be, inp, (size_t)N * C);
    CPU->layernorm_forward(CPU, t, mean, rstd, x, w, b, N, C);
    emu_bf16_narrow(out, t, (size_t)N * C);
    free(t);
    free(x);
}
/* the norms' backward on their operand dout ([Note: operand activations]) */
/* (and dinp's operand copy rounded from its new value) */
static void emu_ln_bwd(const Backend *be, float *dinp, void *dinp_op, float *dw, float *db,
                       const void *dout, const void *inp, const float *mean, const float *rstd,
                       const float *w, int N, int C, float *scratch) {
    float *d = emu_bf16_widen(dout, (size_t)N * C), *x = res_in(be, inp, (size_t)N * C);
    CPU->layernorm_backward(CPU, dinp, NULL, dw, db, d, x, mean, rstd, w, N, C, scratch);
    if (dinp && dinp_op) emu_bf16_narrow(dinp_op, dinp, (size_t)N * C);
    free(d);
    free(x);
}
static void emu_rms_bwd(const Backend *be, float *dinp, void *dinp_op, float *dw, const void *dout,
                        const void *inp, const float *rstd, const float *w, int N, int C,
                        float *scratch) {
    float *d = emu_bf16_widen(dout, (size_t)N * C), *x = res_in(be, inp, (size_t)N * C);
    CPU->rmsnorm_backward(CPU, dinp, NULL, dw, d, x, rstd, w, N, C, scratch);
    if (dinp && dinp_op) emu_bf16_narrow(dinp_op, dinp, (size_t)N * C);
    free(d);
    free(x);
}
static void emu_mm_fwd(const Backend *be, float *out, const void *inp, const float *w,
                       const float *b, int N, int C, int OC) {
    float *x = emu_bf16_widen(inp, (size_t)N * C);
    CPU->matmul_forward(CPU, out, x, w, b, N, C, OC);
    free(x);
}
/* the sum in fp32, rounded once to the residual type */
static void emu_mm_res_fwd(const Backend *be, void *out, const void *res, const void *inp,
                           const float *w, const float *b, int N, int C, int OC) {
    size_t n = (size_t)N * OC;
    float *x = emu_bf16_widen(inp, (size_t)N * C), *r = res_in(be, res, n),
          *t = pp_malloc(n * sizeof(float));
    CPU->matmul_residual_forward(CPU, t, r, x, w, b, N, C, OC);
    res_out(be, out, t, n);
    free(x);
    free(r);
    free(t);
}
static void emu_mm_bwd(const Backend *be, float *dinp, float *dw, float *db, const void *dout,
                       const void *inp, const float *w, int N, int C, int OC) {
    float *d = emu_bf16_widen(dout, (size_t)N * OC), *x = emu_bf16_widen(inp, (size_t)N * C);
    CPU->matmul_backward(CPU, dinp, dw, db, d, x, w, N, C, OC);
    free(d);
    free(x);
}
/* matmul_operand_forward / _backward: the matmul's fp32 result rounded (qkv, d atty) */
static void emu_mm_op_fwd(const Backend *be, void *out, const void *inp, const float *w,
                          const float *b, int N, int C, int OC) {
    float *t = pp_malloc((size_t)N * OC * sizeof(float));
    emu_mm_fwd(be, t, inp, w, b, N, C, OC);
    emu_bf16_narrow(out, t, (size_t)N * OC);
    free(t);
}
static void emu_mm_op_bwd(const Backend *be, void *dinp, float *dw, float *db, const void *dout,
                          const void *inp, const float *w, int N, int C, int OC) {
    float *t = dinp ? pp_malloc((size_t)N * C * sizeof(float)) : NULL;
    emu_mm_bwd(be, t, dw, db, dout, inp, w, N, C, OC);
    if (t) emu_bf16_narrow(dinp, t, (size_t)N * C);
    free(t);
}
static void emu_att_fwd(const Backend *be, void *out, float *att, const void *qkv, int B, int T,
                        int NH, int NKV, int HS) {
    float *t = pp_malloc((size_t)B * T * NH * HS * sizeof(float));
    float *q = emu_bf16_widen(qkv, (size_t)B * T * (NH + 2 * NKV) * HS);
    CPU->attention_forward(CPU, t, att, q, B, T, NH, NKV, HS);
    emu_bf16_narrow(out, t, (size_t)B * T * NH * HS);
    free(t);
    free(q);
}
static void emu_att_bwd(const Backend *be, void *dqkv, const void *dout, const void *qkv,
                        const void *out, const float *att, int B, int T, int NH, int NKV, int HS,
                        float *scratch) {
    size_t nq = (size_t)B * T * (NH + 2 * NKV) * HS, nc = (size_t)B * T * NH * HS;
    float *o = emu_bf16_widen(out, nc), *t = pp_malloc(nq * sizeof(float));
    float *q = emu_bf16_widen(qkv, nq), *d = emu_bf16_widen(dout, nc);
    CPU->attention_backward(CPU, t, d, q, o, att, B, T, NH, NKV, HS, scratch);
    emu_bf16_narrow(dqkv, t, nq);
    free(o);
    free(t);
    free(q);
    free(d);
}
static void emu_gelu_fwd(const Backend *be, void *out, const void *inp, size_t n) {
    float *t = pp_malloc(n * sizeof(float) + 1), *x = emu_bf16_widen(inp, n);
    CPU->gelu_forward(CPU, t, x, n);
    emu_bf16_narrow(out, t, n);
    free(t);
    free(x);
}
static void emu_gelu_bwd(const Backend *be, void *dinp, const void *inp, const float *dout,
                         size_t n) {
    float *t = pp_malloc(n * sizeof(float) + 1), *x = emu_bf16_widen(inp, n);
    CPU->gelu_backward(CPU, t, x, dout, n);
    emu_bf16_narrow(dinp, t, n);
    free(t);
    free(x);
}
/* [Note: fused GELU], as a GPU without GELU in the fc GEMM: GELU's kernel on the pre-activation as
 * stored */
static void emu_mm_gelu_fwd_stored(const Backend *be, void *out, void *pre, const void *inp,
                                   const float *w, const float *b, int N, int C, int OC) {
    float *t = pp_malloc((size_t)N * OC * sizeof(float));
    emu_mm_fwd(be, t, inp, w, b, N, C, OC);
    emu_bf16_narrow(pre, t, (size_t)N * OC);
    emu_gelu_fwd(be, out, pre, (size_t)N * OC);
    free(t);
}
/* GELU on the unrounded pre-activation, as a GPU applies it in the fc GEMM's epilogue
 * (gelu_in_gemm, [Note: fused GELU]): out is not gelu_forward of the stored pre, so a
 * selective recompute that ran gelu_forward would not give the forward's bits */
static void emu_mm_gelu_fwd(const Backend *be, void *out, void *pre, const void *inp,
                            const float *w, const float *b, int N, int C, int OC) {
    size_t n = (size_t)N * OC;
    float *t = pp_malloc(n * sizeof(float)), *g = pp_malloc(n * sizeof(float));
    emu_mm_fwd(be, t, inp, w, b, N, C, OC);
    emu_bf16_narrow(pre, t, n);
    CPU->gelu_forward(CPU, g, t, n);
    emu_bf16_narrow(out, g, n);
    free(t);
    free(g);
}
static void emu_mm_gelu_bwd(const Backend *be, void *dpre, float *dw, float *db, const void *dout,
                            const void *inp, const float *w, const void *pre, int N, int C,
                            int OC) {
    float *t = dpre ? pp_malloc((size_t)N * C * sizeof(float)) : NULL;
    emu_mm_bwd(be, t, dw, db, dout, inp, w, N, C, OC);
    if (t) emu_gelu_bwd(be, dpre, pre, t, (size_t)N * C);
    free(t);
}
/* bf16 logits ([Note: logits type]), as the CUDA backend's at bf16: the GEMM's result
 * rounded; the cross-entropy on them widened, its dlogits rounded (in place allowed) */
/* (be->logits PP_F32, PPTRAIN_LOGITS=fp32: fp32 logits, the bf16 dlogits in a buffer of
 * their own) */
static void emu_head_logits(const Backend *be, void *logits, const void *inp, const float *w, int N,
                            int C, int OC) {
    if (be->logits == PP_F32) {
        emu_mm_fwd(be, logits, inp, w, NULL, N, C, OC);
        return;
    }
    float *t = pp_malloc((size_t)N * OC * sizeof(float));
    emu_mm_fwd(be, t, inp, w, NULL, N, C, OC);
    emu_bf16_narrow(logits, t, (size_t)N * OC);
    free(t);
}
static float *logits_in(const Backend *be, const void *logits, size_t n) { /* freed by the caller */
    if (be->logits != PP_F32) return emu_bf16_widen(logits, n);
    float *t = pp_malloc(n * sizeof(float));
    memcpy(t, logits, n * sizeof(float));
    return t;
}
static void emu_ce(const Backend *be, void *dlogits, float *losses, void *logits,
                   const int *targets, float dloss, int N, int V, int Vp) {
    float *t = logits_in(be, logits, (size_t)N * Vp);
    CPU->crossentropy_forward_backward(CPU, t, losses, t, targets, dloss, N, V, Vp);
    emu_bf16_narrow(dlogits, t, (size_t)N * Vp);
    free(t);
}
static void emu_ce_fwd(const Backend *be, void *logits, float *losses, const int *targets, int N,
                       int V, int Vp) {
    float *t = logits_in(be, logits, (size_t)N * Vp);
    CPU->crossentropy_forward(CPU, t, losses, targets, N, V, Vp);
    free(t);
}
long emu_bf16_casts;
static void emu_to_operand(const Backend *be, void *dst, const float *src, size_t n) {
    emu_bf16_casts++;
    emu_bf16_narrow(dst, src, n);
}
/* the Llama block's ops with an operand output or input */
static void emu_rms_fwd(const Backend *be, void *out, float *rstd, const void *inp, const float *w,
                        float eps, int N, int C) {
    float *t = pp_malloc((size_t)N * C * sizeof(float)), *x = res_in(be, inp, (size_t)N * C);
    CPU->rmsnorm_forward(CPU, t, rstd, x, w, eps, N, C);
    emu_bf16_narrow(out, t, (size_t)N * C);
    free(t);
    free(x);
}
/* RoPE in place on a bf16 qkv (dir 1) or dqkv (-1): widened, the CPU's rotation, rounded */
static void emu_rope(void *x, const float *inv_freq, int B, int T, int NH, int NKV, int HS,
                     int dir) {
    size_t n = (size_t)B * T * (NH + 2 * NKV) * HS;
    float *t = emu_bf16_widen(x, n);
    (dir > 0 ? CPU->rope_forward : CPU->rope_backward)(CPU, t, inv_freq, B, T, NH, NKV, HS);
    emu_bf16_narrow(x, t, n);
    free(t);
}
static void emu_rope_fwd(const Backend *be, void *qkv, const float *inv_freq, int B, int T, int NH,
                         int NKV, int HS) {
    emu_rope(qkv, inv_freq, B, T, NH, NKV, HS, 1);
}
/* [Note: KV cache]: qkv rotated in place at the operand type, the cache fp32 */
static void emu_kv_append(const Backend *be, float *kc, float *vc, void *qkv, const float *inv_freq,
                          int pos, int n, int NH, int NKV, int HS, int cap) {
    size_t nq = (size_t)n * (NH + 2 * NKV) * HS;
    float *t = emu_bf16_widen(qkv, nq);
    CPU->kv_append(CPU, kc, vc, t, inv_freq, pos, n, NH, NKV, HS, cap);
    emu_bf16_narrow(qkv, t, nq); /* the rotation rounded, as the qkv it rotates in place */
    free(t);
    t = emu_bf16_widen(qkv, nq); /* and the cache holds the rounded values (no rotation again) */
    CPU->kv_append(CPU, kc, vc, t, NULL, pos, n, NH, NKV, HS, cap);
    free(t);
}
static void emu_att_decode(const Backend *be, void *out, const void *qkv, const float *kc,
                           const float *vc, int pos, int n, int NH, int NKV, int HS, int cap) {
    float *q = emu_bf16_widen(qkv, (size_t)n * (NH + 2 * NKV) * HS);
    float *t = pp_malloc((size_t)n * NH * HS * sizeof(float));
    CPU->attention_decode(CPU, t, q, kc, vc, pos, n, NH, NKV, HS, cap);
    emu_bf16_narrow(out, t, (size_t)n * NH * HS);
    free(q);
    free(t);
}
static void emu_rope_bwd(const Backend *be, void *dqkv, const float *inv_freq, int B, int T, int NH,
                         int NKV, int HS) {
    emu_rope(dqkv, inv_freq, B, T, NH, NKV, HS, -1);
}
static void emu_swiglu_fwd(const Backend *be, void *out, const float *gate, const float *up,
                           size_t n) {
    float *t = pp_malloc(n * sizeof(float) + 1);
    CPU->swiglu_forward(CPU, t, gate, up, n);
    emu_bf16_narrow(out, t, n);
    free(t);
}
static void emu_swiglu_bwd(const Backend *be, void *dgate, void *dup, const float *gate,
                           const float *up, const float *dout, size_t n) {
    float *tg = pp_malloc(n * sizeof(float) + 1), *tu = pp_malloc(n * sizeof(float) + 1);
    CPU->swiglu_backward(CPU, tg, tu, gate, up, dout, n);
    emu_bf16_narrow(dgate, tg, n);
    emu_bf16_narrow(dup, tu, n);
    free(tg);
    free(tu);
}
#undef CPU

/* gelu_in_gemm: GELU on the unrounded pre-activation (1, the CUDA backend's default at
 * bf16) or on the stored one (0, PPTRAIN_GELU_EPILOGUE=0); residual: the residual stream's
 * type (PP_BF16, the CUDA backend's default at bf16, or PP_F32, PPTRAIN_RESIDUAL=fp32) */
const Backend *emu_bf16_backend(int gelu_in_gemm, PPDType residual) {
    static Backend be;
    be = *backend_cpu();
    be.name = "cpu, bf16 operand activations (test)";
    be.operand = PP_BF16;
    be.residual = residual;
    be.encoder_forward = emu_enc_fwd;
    be.layernorm_forward = emu_ln_fwd;
    be.layernorm_backward = emu_ln_bwd;
    be.matmul_forward = emu_mm_fwd;
    be.matmul_backward = emu_mm_bwd;
    be.matmul_residual_forward = emu_mm_res_fwd;
    be.matmul_operand_forward = emu_mm_op_fwd;
    be.matmul_operand_backward = emu_mm_op_bwd;
    be.attention_forward = emu_att_fwd;
    be.attention_backward = emu_att_bwd;
    be.gelu_forward = emu_gelu_fwd;
    be.gelu_backward = emu_gelu_bwd;
    be.matmul_gelu_forward = gelu_in_gemm ? emu_mm_gelu_fwd : emu_mm_gelu_fwd_stored;
    be.gelu_in_gemm = gelu_in_gemm;
    be.matmul_gelu_backward = emu_mm_gelu_bwd;
    be.rmsnorm_forward = emu_rms_fwd;
    be.rmsnorm_backward = emu_rms_bwd;
    be.rope_forward = emu_rope_fwd;
    be.kv_append = emu_kv_append;
    be.attention_decode = emu_att_decode;
    be.rope_backward = emu_rope_bwd;
    be.swiglu_forward = emu_swiglu_fwd;
    be.swiglu_backward = emu_swiglu_bwd;
    be.logits = PP_BF16;
    be.head_logits = emu_head_logits;
    be.crossentropy_forward_backward = emu_ce;
    be.crossentropy_forward = emu_ce_fwd;
    be.to_operand = emu_to_operand;
    return &be;
}
