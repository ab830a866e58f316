/* backend.h — the compute ops of a GPT-2 decoder, as a struct of function pointers
 * that the CPU backend (the reference) and the CUDA backend fill in identically. */
#ifndef PP_BACKEND_H
#define PP_BACKEND_H

#include <stddef.h>

/* Sizes: B sequences, T positions, C channels, NH heads, N = B*T rows, V real and Vp
 * padded vocabulary. Every tensor is row-major; shapes are in the comments.
 *
 * Argument order (STYLE.md habit 3): forward (outputs, saved-for-backward, inputs,
 * weights, sizes); backward (input grads, weight grads, dout, saved, weights, sizes).
 * Backward ops ADD (+=) into weight grads. Whether an input grad is overwritten or
 * accumulated is stated per op. */
typedef struct Backend {
    const char *name;

    /* out[N,C] = wte[inp[n],:] + wpe[n mod T,:]; inp[N] token ids. */
    void (*encoder_forward)(float *out, const int *inp, const float *wte, const float *wpe,
                            int B, int T, int C);
    /* dwte[inp[n],:] += dout[n,:]; dwpe[t,:] += sum over b of dout[b,t,:]. */
    void (*encoder_backward)(float *dwte, float *dwpe, const float *dout, const int *inp,
                             int B, int T, int C);

    /* out[N,C] = (inp - mean) * rstd * w + b over the last dimension, eps 1e-5;
     * saves mean[N] and rstd[N]. */
    void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int N, int C);
    /* dinp[N,C] += (accumulates), dw[C] +=, db[C] +=. scratch: scratch_floats(...). */
    void (*layernorm_backward)(float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *mean, const float *rstd,
                               const float *w, int N, int C, float *scratch);

    /* out[N,OC] = inp[N,C] @ w[OC,C]^T + b[OC] (b may be NULL). */
    void (*matmul_forward)(float *out, const float *inp, const float *w, const float *b,
                           int N, int C, int OC);
    /* dinp[N,C] = dout @ w (OVERWRITES; skipped when dinp is NULL);
     * dw[OC,C] += dout^T @ inp; db[OC] += column sums of dout (skipped when NULL). */
    void (*matmul_backward)(float *dinp, float *dw, float *db, const float *dout,
                            const float *inp, const float *w, int N, int C, int OC);

    /* Causal self-attention. qkv[B,T,3C] holds q, k, v (head h at channels h*hs..);
     * out[B,T,C]; att[B,NH,T,T] saves the softmax probabilities (row t valid in
     * columns 0..t). */
    void (*attention_forward)(float *out, float *att, const float *qkv, int B, int T,
                              int C, int NH);
    /* dqkv[B,T,3C] OVERWRITTEN from dout[B,T,C], qkv and att. scratch as above. */
    void (*attention_backward)(float *dqkv, const float *dout, const float *qkv,
                               const float *att, int B, int T, int C, int NH, float *scratch);

    /* out[n] = gelu_tanh(inp[n]) for n < count. */
    void (*gelu_forward)(float *out, const float *inp, size_t count);
    /* dinp[n] = gelu_tanh'(inp[n]) * dout[n] (OVERWRITES; dinp may alias dout). */
    void (*gelu_backward)(float *dinp, const float *inp, const float *dout, size_t count);

    /* Fused softmax cross-entropy over the first V of Vp columns (padded columns get
     * no probability). logits[N,Vp] is turned IN PLACE into dlogits =
     * (softmax - onehot(target)) * dloss (padded columns 0). losses[N] receives each
     * row's -log p(target). targets[N]. */
    void (*crossentropy_forward_backward)(float *logits, float *losses, const int *targets,
                                          float dloss, int N, int V, int Vp);
    /* As above but without the gradient (validation): logits are left clobbered. */
    void (*crossentropy_forward)(float *logits, float *losses, const int *targets, int N,
                                 int V, int Vp);

    /* Floats of scratch memory the backward ops need for up to N rows of length T and
     * C channels with the current thread count (allocated once, at build time). */
    size_t (*scratch_floats)(int N, int T, int C);

    /* dst[count] += src[count]. */
    void (*add_inplace)(float *dst, const float *src, size_t count);
} Backend;

/* The CPU reference backend (BLAS sgemm + OpenMP loops). */
const Backend *backend_cpu(void);

/* Set the CPU thread count (OpenMP and OpenBLAS); n <= 0 keeps the default. */
void backend_cpu_set_threads(int n);

#endif
