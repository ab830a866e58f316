/* backend.h — a device: its memory, the compute ops of a decoder (GPT-2's, and the ones a
 * Llama block adds: RMSNorm, RoPE, SwiGLU, grouped-query attention) and the step's
 * arithmetic (norm, optimizer), as a struct of function pointers that the CPU backend
 * (the reference) and the CUDA backend fill in identically. */
#ifndef PP_BACKEND_H
#define PP_BACKEND_H

#include <stddef.h>

/* Element type of a tensor. */
typedef enum { PP_F32 = 0, PP_BF16 = 1 } PPDType;

/* Bytes of one element of type t. */
static inline size_t pp_dtype_bytes(PPDType t) { return t == PP_BF16 ? 2 : 4; }

typedef struct Backend Backend;

/* One tensor of an optimizer step over many ([Note: many tensors]): n parameters p, their
 * gradients g, the state m and v (AdamW's moments; SGD's momentum buffer m, v unused; NULL
 * where the optimizer keeps no such state), and the tensor's weight decay. */
typedef struct {
    float *p;
    const float *g;
    float *m, *v;
    size_t n;
    float weight_decay;
} PPOptTensor;

/* [Note: split backward] Zero-bubble schedules split a chunk's backward into I (the
 * gradient of the chunk input) and W (the weight gradients, later). No op is added
 * for it: matmul_backward, layernorm_backward and rmsnorm_backward take NULL for the
 * outputs a half does not compute (see each op), and each half must give exactly the
 * bits the fused call gives, so that a zero-bubble schedule trains bitwise like 1F1B. A
 * backend implements this table the same way (the CUDA backend too).
 *
 * Sizes: B sequences, T positions, C channels, NH (query) heads, NKV key/value heads (NH
 * a multiple of NKV), HS channels a head, N = B*T rows, V real and Vp padded vocabulary.
 * Every tensor is row-major; shapes are in the comments.
 *
 * Argument order (STYLE.md habit 3): forward (outputs, saved-for-backward, inputs,
 * weights, sizes); backward (input grads, weight grads, dout, saved, weights, sizes).
 * Backward ops ADD (+=) into weight grads. Whether an input grad is overwritten or
 * accumulated is stated per op.
 *
 * [Note: operand activations] The activations that only GEMMs read are stored in the
 * backend's operand type (Backend.operand): fp32 on the CPU and on a GPU at fp32 or
 * tf32, bf16 on a GPU at precision bf16, so that a bf16 GEMM takes them as they are,
 * with no cast and half the bytes. They are the outputs of LayerNorm, RMSNorm, attention,
 * GELU and SwiGLU, GELU's input (the pre-activation fch, which matmul_gelu_forward writes
 * and only GELU and its backward read: [Note: fused GELU]), attention's input qkv (which
 * matmul_operand_forward writes and only RoPE, attention and decoding read), and in the
 * backward the gradients that feed a matmul: GELU's and SwiGLU's input gradients (d fch;
 * d gate, d up), attention's (d qkv, which rope_backward rotates in place), the head's
 * dlogits, and the residual gradient once to_operand has converted it; and, written by
 * matmul_operand_backward, attention's output gradient (d atty, which only attention's
 * backward reads) and the norms' output gradients (d ln1, d ln2, the final norm's, which
 * only the norms' backward reads). Their arguments are `void *` below, marked (operand); everything
 * else (the residual stream's gradient, the pre-activations gate and up, the logits, the
 * norms' statistics, parameters, gradients) is fp32, but for the residual stream itself.
 *
 * [Note: residual stream type] The residual stream (the embedding's output, each layer's
 * sums res2 and res3, so each layer's and each pipeline stage's input) is stored in the
 * backend's residual type (Backend.residual): fp32, or the operand type where a device
 * stores it so (the CUDA backend at bf16, as llm.c and Megatron-LM's default: the residual
 * GEMMs read and write half the bytes, so do the norms that read it, the saved res2 and
 * res3 take half the memory and a pipeline stage sends half the bytes;
 * PPTRAIN_RESIDUAL=fp32 keeps it fp32). Arguments marked (residual) below are of that type;
 * each op computes in fp32 and rounds its (residual) output once, to nearest even. Its
 * gradient stays fp32, as do the norms' statistics. */
/* [Note: device memory] Every buffer the model and the runtime compute on (parameters,
 * gradients, optimizer state, activation slots, receive buffers, scratch, token ids,
 * the loss and norm sums) is device memory from be->alloc; the host touches it only
 * through to_device / to_host. Device work may run asynchronously, in issue order: the
 * host waits only at be->wait, where it needs a value (the loss, the norm, a checkpoint
 * copy). On the CPU backend device memory is host memory and every entry completes
 * before it returns; the contracts below are written for the asynchronous case.
 *
 * Every entry takes the backend first; its state (the CUDA stream, the cuBLASLt handle
 * and workspace) lives in be->ctx, never in globals. */
struct Backend {
    const char *name;
    void *ctx;          /* the backend's own state (NULL on the CPU) */

    /* ---- memory ---- */
    /* `bytes` of device memory, aligned for any element type, contents undefined. Dies
     * naming the size on out of memory (allocation happens at build time only). */
    void *(*alloc)(const Backend *be, size_t bytes);
    /* Release memory from alloc (NULL is fine). Waits for work that uses it. */
    void (*dealloc)(const Backend *be, void *p);
    /* Copy host src to device dst. src must stay unchanged until the next wait. */
    void (*to_device)(const Backend *be, void *dst, const void *src, size_t bytes);
    /* Copy device src to host dst; the host may read dst after the next wait. */
    void (*to_host)(const Backend *be, void *dst, const void *src, size_t bytes);
    /* dst[0..bytes) = 0 (device). */
    void (*zero)(const Backend *be, void *dst, size_t bytes);
    /* Device to device copy of `bytes` (the buffers do not overlap). */
    void (*copy)(const Backend *be, void *dst, const void *src, size_t bytes);
    /* Block the host until every entry issued so far has completed. */
    void (*wait)(const Backend *be);

    /* ---- reductions and the optimizer (flat buffers) ---- */
    /* *out (one device double) = sum of x[0..n) accumulated in double, in a fixed
     * order: the same bits run to run and for any thread count. */
    void (*sum)(const Backend *be, double *out, const float *x, size_t n);
    /* *out (device) = sum of x[i]^2 over [0, n), in double, fixed order (optim_sumsq). */
    void (*sumsq)(const Backend *be, double *out, const float *x, size_t n);
    /* AdamW step over n parameters (optim.h optim_adamw_update: the semantics). */
    void (*adamw_update)(const Backend *be, float *p, const float *g, float *m, float *v,
                         size_t n, float lr, float beta1, float beta2, float eps,
                         float weight_decay, float grad_scale, int t);
    /* SGD step with momentum over n parameters (optim.h optim_sgd_update). */
    void (*sgd_update)(const Backend *be, float *p, const float *g, float *buf, size_t n,
                       float lr, float momentum, float weight_decay, float grad_scale, int t);
    /* [Note: many tensors] The step's reductions and updates over a rank's tensors (GPT-2
     * 124M: 148) in one call each, so that a device launches a few kernels for them all
     * instead of two or three a tensor (most tensors are a bias or a norm's C floats: the
     * launches, not the bytes, were their cost). Each gives the bits of the one-tensor entry
     * on every tensor: out[i] = sumsq(x[i], n[i]); adamw_update over each tensor t[i] with
     * its own weight decay (t[i].m, t[i].v its moments). count may be 0; the tensors do not
     * overlap; the arrays are host memory, read before the call returns. */
    void (*sumsq_many)(const Backend *be, double *out, const float *const *x, const size_t *n,
                       int count);
    void (*adamw_many)(const Backend *be, const PPOptTensor *t, int count, float lr, float beta1,
                       float beta2, float eps, float grad_scale, int step);

    /* ---- layer ops ---- */

    /* out[N,C] (residual) = wte[inp[n],:] + wpe[n mod T,:]; inp[N] token ids, each below the
     * vocabulary (unchecked here: data_batch checks every id it reads, [Note: checked
     * batch reads] in data.c). wpe NULL: no position table (Llama, whose positions are
     * RoPE's): out = wte[inp[n],:]. */
    void (*encoder_forward)(const Backend *be, void *out, const int *inp, const float *wte,
                            const float *wpe, int B, int T, int C);
    /* dwte[inp[n],:] += dout[n,:]; dwpe[t,:] += sum over b of dout[b,t,:] (dwpe NULL:
     * skipped, no position table). All weight gradient: a split backward runs it in W.
     * (GELU, SwiGLU, RoPE and attention have no weights: I.) */
    void (*encoder_backward)(const Backend *be, float *dwte, float *dwpe, const float *dout,
                             const int *inp, int B, int T, int C);

    /* out[N,C] (operand) = (inp - mean) * rstd * w + b over the last dimension, eps
     * 1e-5, inp[N,C] (residual); saves mean[N] and rstd[N]. */
    void (*layernorm_forward)(const Backend *be, void *out, float *mean, float *rstd,
                              const void *inp, const float *w, const float *b, int N, int C);
    /* dinp[N,C] += (accumulates), dw[C] +=, db[C] +=, from dout[N,C] (operand: the
     * output gradient a matmul_operand_backward wrote) and the forward's inp[N,C]
     * (residual), mean and rstd. dinp_op: NULL, or [N,C] (operand,
     * not overlapping dinp) receiving dinp's new value at the operand type, the bits of
     * to_operand(dinp_op, dinp) after the call (the residual gradient the next matmul
     * reads, in the same pass); only with dinp. scratch: scratch_floats(...).
     * [Note: split backward] dinp == NULL: only dw and db (the W half); dw == NULL and
     * db == NULL: only dinp (the I half). Either half gives the same bits as the fused
     * call with all three. */
    void (*layernorm_backward)(const Backend *be, float *dinp, void *dinp_op, float *dw, float *db,
                               const void *dout, const void *inp, const float *mean,
                               const float *rstd, const float *w, int N, int C, float *scratch);

    /* [Note: RMSNorm] out[N,C] (operand) = inp[N,C] (residual) * rstd * w over the last
     * dimension, no bias,
     * and rstd[N] = 1 / sqrt(mean(inp^2) + eps) saved: Hugging Face's LlamaRMSNorm in fp32
     * (transformers, models/llama/modeling_llama.py) in its order of operations: the mean
     * of the squares (a sum in fp32, then / C), rsqrt(variance + eps) as 1 / sqrtf, x * rstd,
     * then * w. (The sum's order is the backend's own, so the last bit may differ from
     * torch's; eps is the model's, unlike LayerNorm's fixed 1e-5.) */
    void (*rmsnorm_forward)(const Backend *be, void *out, float *rstd, const void *inp,
                            const float *w, float eps, int N, int C);
    /* dinp[N,C] += (accumulates), dw[C] +=, from dout[N,C] (operand) and the forward's inp
     * (residual) and rstd; dinp_op as layernorm_backward's. scratch: scratch_floats(...). [Note:
     * split backward] dinp == NULL: only dw (the W half); dw == NULL: only dinp (the I half);
     * either gives the fused call's bits. */
    void (*rmsnorm_backward)(const Backend *be, float *dinp, void *dinp_op, float *dw,
                             const void *dout, const void *inp, const float *rstd, const float *w,
                             int N, int C, float *scratch);

    /* out[N,OC] = inp[N,C] (operand) @ w[OC,C]^T + b[OC] (b may be NULL). */
    void (*matmul_forward)(const Backend *be, float *out, const void *inp, const float *w,
                           const float *b, int N, int C, int OC);
    /* out[N,OC] (residual) = res[N,OC] (residual) + (inp[N,C] (operand) @ w[OC,C]^T +
     * b[OC]) (b may be NULL), rounded once to the residual type: a projection added into
     * the residual stream, so that a device can add res in the GEMM (as its C matrix, beta
     * 1) instead of a pass of its own. out and res are distinct buffers; res is read only.
     * Where the CUDA backend adds b in the GEMM's epilogue with a bf16 residual, b is rounded
     * to bf16 first (the epilogue takes it so). The CPU runs matmul_forward into out, then
     * add_inplace(out, res): the bits of the two ops. */
    void (*matmul_residual_forward)(const Backend *be, void *out, const void *res, const void *inp,
                                    const float *w, const float *b, int N, int C, int OC);
    /* out[N,OC] (operand) = inp[N,C] (operand) @ w[OC,C]^T + b[OC] (b may be NULL),
     * rounded to the operand type: matmul_forward for an output that only ops reading
     * operands read (qkv), so that a device writes it at the operand type in the GEMM, with
     * no fp32 copy and no cast. Where the CUDA backend runs it at bf16, b is rounded to bf16
     * first (the GEMM's epilogue takes it so). The CPU runs matmul_forward. */
    void (*matmul_operand_forward)(const Backend *be, void *out, const void *inp, const float *w,
                                   const float *b, int N, int C, int OC);
    /* dinp[N,C] = dout @ w (OVERWRITES; skipped when dinp is NULL);
     * dw[OC,C] += dout^T @ inp; db[OC] += column sums of dout (skipped when NULL).
     * dout[N,OC] and inp[N,C] are operands.
     * [Note: split backward] dw == NULL (then db must be NULL too): only dinp (the I
     * half); dinp == NULL: only dw/db (the W half); the halves give the fused bits. */
    void (*matmul_backward)(const Backend *be, float *dinp, float *dw, float *db, const void *dout,
                            const void *inp, const float *w, int N, int C, int OC);
    /* matmul_backward with dinp[N,C] (operand): dout @ w rounded to the operand type, for an
     * input gradient only an op reading operands reads (attention's d atty); dw and db and
     * the split halves as matmul_backward's (its W half gives these bits). The CPU runs
     * matmul_backward. */
    void (*matmul_operand_backward)(const Backend *be, void *dinp, float *dw, float *db,
                                    const void *dout, const void *inp, const float *w, int N, int C,
                                    int OC);

    /* [Note: RoPE] Rotary position embeddings in Hugging Face's rotate-half convention, so
     * that Hub weights load with no permutation of q and k. Each q head and each k head of
     * qkv[B,T,(NH + 2 NKV) HS] (attention's layout, below), a vector x of HS (even)
     * channels at position t of its sequence, is rotated pairwise: for i < HS/2, with
     * a = t * inv_freq[i] (one fp32 product) and c, s = cos a, sin a in fp32,
     *   x'[i] = x[i] c - x[i + HS/2] s,   x'[i + HS/2] = x[i + HS/2] c + x[i] s.
     * This is transformers' LlamaRotaryEmbedding.forward (freqs = inv_freq @ position in
     * fp32, emb = cat(freqs, freqs), cos and sin in fp32, attention_scaling 1.0 as for the
     * "default" and "llama3" rope types) with apply_rotary_pos_emb and rotate_half
     * (models/llama/modeling_llama.py): q * cos + rotate_half(q) * sin. inv_freq[HS/2]
     * (device memory) is the architecture's, from rope_theta and any scaling
     * (modeling_rope_utils' _compute_default_rope_parameters, _compute_llama3_parameters);
     * the ops hold no state. Positions start at 0 in every sequence. cos and sin are
     * libm's cosf, sinf on the CPU and sincosf on the GPU, and a compiler may fuse one
     * product of the rotation into its sum, so a value can differ from torch's by an ulp.
     * The v heads are left as they are. In place on qkv (operand): each value is read,
     * rotated in fp32 and rounded back to the operand type. */
    void (*rope_forward)(const Backend *be, void *qkv, const float *inv_freq, int B, int T, int NH,
                         int NKV, int HS);
    /* The backward: dqkv[B,T,(NH + 2 NKV) HS] (operand) in place, the inverse (transposed)
     * rotation on the dq and dk heads (x[i] = x'[i] c + x'[i + HS/2] s, x[i + HS/2] =
     * x'[i + HS/2] c - x'[i] s); dv as it is. */
    void (*rope_backward)(const Backend *be, void *dqkv, const float *inv_freq, int B, int T,
                          int NH, int NKV, int HS);

    /* [Note: grouped-query attention] Causal self-attention with NH query heads and NKV
     * key/value heads, NKV dividing NH (NKV = NH: multi-head, GPT-2; NKV = 1: multi-query).
     * qkv[B,T,(NH + 2 NKV) HS] holds the NH q heads, then the NKV k heads, then the NKV v
     * heads (head j of a part at channels j*HS..), of the operand type; query head h
     * attends with kv head h / (NH/NKV), as transformers' repeat_kv. out[B,T,NH HS] (operand);
     * att[attention_saved_floats(B,T,NH)] is what the backward needs besides qkv, per
     * query head: on the CPU the softmax probabilities [B,NH,T,T] (row t valid in columns
     * 0..t); a flash attention saves the log-sum-exp [B,NH,T] instead. Scores are scaled
     * by 1/sqrt(HS). */
    void (*attention_forward)(const Backend *be, void *out, float *att, const void *qkv, int B,
                              int T, int NH, int NKV, int HS);
    /* dqkv[B,T,(NH + 2 NKV) HS] (operand) OVERWRITTEN from dout[B,T,NH HS] (operand), qkv, the
     * forward's out[B,T,NH HS] (operand) and att, laid out as qkv: the d(k) and d(v) of a
     * kv head are the sums over its group's query heads, in a fixed order (the group's
     * heads in order: the same bits every run). scratch as above. (A flash attention
     * takes D = rowsum(dout o out) per head from out; the CPU's needs only att.) dqkv must
     * not overlap qkv, dout or out. */
    void (*attention_backward)(const Backend *be, void *dqkv, const void *dout, const void *qkv,
                               const void *out, const float *att, int B, int T, int NH, int NKV,
                               int HS, float *scratch);
    /* Floats attention_forward saves per microbatch of B sequences of length T (per
     * query head: NKV does not change it). */
    size_t (*attention_saved_floats)(const Backend *be, int B, int T, int NH);

    /* [Note: KV cache] Decoding (src/model/decode.c) runs the layers over n new positions
     * pos..pos+n-1 of one sequence at a time (the prompt, then one token a step), keeping
     * each layer's keys and values of the positions before in a cache: kcache and vcache
     * [NKV, cap, HS] fp32, the row of position t of kv head g at (g cap + t) HS, cap the
     * positions the cache holds. qkv[n,(NH + 2 NKV) HS] (operand) is attention's layout,
     * above; the cache holds its values widened to fp32.
     *
     * kv_append: with inv_freq, first the q and k heads of qkv rotated in place as
     * rope_forward rotates them ([Note: RoPE], the same formula and functions), row i at
     * position pos + i; inv_freq NULL (GPT-2): no rotation. Then the (rotated) k heads and
     * the v heads of row i are copied into the cache rows of position pos + i. pos + n <=
     * cap. */
    void (*kv_append)(const Backend *be, float *kcache, float *vcache, void *qkv,
                      const float *inv_freq, int pos, int n, int NH, int NKV, int HS, int cap);
    /* out[n, NH HS] (operand, OVERWRITTEN) = causal attention of the q heads of qkv's n rows
     * on the cache: row i (position pos + i) attends to the cached positions 0..pos+i of
     * its kv head (query head h reads kv head h / (NH/NKV)), scores scaled by 1/sqrt(HS),
     * as attention_forward computes one sequence's rows pos..pos+n-1 (at pos 0 and n = T,
     * the CPU's op gives attention_forward's bits). Nothing is saved (no backward). */
    void (*attention_decode)(const Backend *be, void *out, const void *qkv, const float *kcache,
                             const float *vcache, int pos, int n, int NH, int NKV, int HS, int cap);

    /* out[n] (operand) = gelu_tanh(inp[n]) for n < count; inp (operand) is the
     * pre-activation as stored ([Note: fused GELU]). */
    void (*gelu_forward)(const Backend *be, void *out, const void *inp, size_t count);
    /* dinp[n] (operand) = gelu_tanh'(inp[n]) * dout[n] (OVERWRITES; dinp does not
     * overlap dout or inp); inp (operand) as gelu_forward's. */
    void (*gelu_backward)(const Backend *be, void *dinp, const void *inp, const float *dout,
                          size_t count);

    /* [Note: fused GELU] An MLP's fc matmul and its GELU as one op, so that a device can
     * run the GELU (or its derivative) in the GEMM's epilogue and store the pre-activation
     * at the operand type. pre[N,OC] (operand) = inp[N,C] (operand) @ w[OC,C]^T + b[OC]
     * (b may be NULL; where the CUDA backend at bf16 runs it in the GEMM's epilogue, b
     * rounded to bf16, as the epilogue takes it), rounded to the operand type; out[N,OC]
     * (operand) = gelu_tanh(pre). Where gelu_in_gemm (below) is 0 that is exactly
     * gelu_forward(out, pre AS STORED), so that selective recompute recomputes GELU alone
     * from the saved pre with the bits of the forward (the CPU runs matmul_forward, then
     * gelu_forward); where it is 1 the device applies its own GELU to the unrounded
     * pre-activation in the GEMM's epilogue, and selective recompute calls this op again
     * (the same bits: every op is deterministic). */
    void (*matmul_gelu_forward)(const Backend *be, void *out, void *pre, const void *inp,
                                const float *w, const float *b, int N, int C, int OC);
    /* The backward of the matmul that reads GELU's output, with GELU's backward:
     * dpre[N,C] (operand) = gelu_tanh'(pre[N,C]) * (dout[N,OC] @ w[OC,C]) (OVERWRITES;
     * skipped when dpre is NULL; dpre overlaps no input); dw[OC,C] += dout^T @ inp and
     * db[OC] += column sums of dout, as matmul_backward (inp[N,C] (operand) is GELU's
     * output, dout (operand)). [Note: split backward] as matmul_backward's: dw == NULL
     * (then db NULL too): only dpre (the I half); dpre == NULL: only dw and db (the W
     * half: matmul_backward's bits). The CPU runs matmul_backward with dpre as its dinp
     * (fp32), then gelu_backward's arithmetic on it in place: the bits of the two ops. */
    void (*matmul_gelu_backward)(const Backend *be, void *dpre, float *dw, float *db,
                                 const void *dout, const void *inp, const float *w,
                                 const void *pre, int N, int C, int OC);

    /* [Note: SwiGLU] out[n] (operand) = silu(gate[n]) * up[n] for n < count, silu(g) =
     * g / (1 + exp(-g)): torch's silu formula in fp32 (its CPU and CUDA kernels compute
     * x / (1 + exp(-x))), times up as transformers' LlamaMLP (act_fn(gate_proj(x)) *
     * up_proj(x)). The CPU's exp is pp_expf (fastmath.h, about 1 ulp), the GPU's expf. */
    void (*swiglu_forward)(const Backend *be, void *out, const float *gate, const float *up,
                           size_t count);
    /* dgate[n] (operand) = dout[n] * up[n] * silu'(gate[n]) with silu'(g) = s (1 + g (1 - s)),
     * s = 1 / (1 + exp(-g)) (torch's silu_backward); dup[n] (operand) = dout[n] * silu(g).
     * Both OVERWRITTEN (they overlap no input); no weights: the I half only. */
    void (*swiglu_backward)(const Backend *be, void *dgate, void *dup, const float *gate,
                            const float *up, const float *dout, size_t count);

    /* [Note: logits type] The head's logits[N,Vp] are of type `logits` below: fp32, or
     * the operand type where a device writes them so (the CUDA backend at bf16, as llm.c:
     * the head's GEMM writes half the bytes and the cross-entropy reads half;
     * PPTRAIN_LOGITS=fp32 keeps them fp32). head_logits writes them: logits[N,OC] =
     * inp[N,C] (operand) @ w[OC,C]^T, no bias, rounded to that type; the CPU runs
     * matmul_forward. */
    void (*head_logits)(const Backend *be, void *logits, const void *inp, const float *w, int N,
                        int C, int OC);
    /* Fused softmax cross-entropy over the first V of Vp columns (padded columns get
     * no probability): dlogits[N,Vp] (operand) = (softmax(logits) - onehot(target)) *
     * dloss (padded columns 0); logits[N,Vp] (the logits type) are left clobbered, and
     * when the logits type is the operand type dlogits may be logits itself (in place).
     * losses[N] receives each row's -log p(target). targets[N], each in [0, V)
     * (unchecked, as encoder_forward's ids). Rows are independent: the model calls it on
     * chunks of rows (logits_chunk_rows below). */
    void (*crossentropy_forward_backward)(const Backend *be, void *dlogits, float *losses,
                                          void *logits, const int *targets, float dloss, int N,
                                          int V, int Vp);
    /* As above but without the gradient (validation): logits are left clobbered. */
    void (*crossentropy_forward)(const Backend *be, void *logits, float *losses, const int *targets,
                                 int N, int V, int Vp);

    /* Floats of scratch memory the backward ops need for up to N rows of length T and
     * C channels with the current thread count (allocated once, at build time). */
    size_t (*scratch_floats)(const Backend *be, int N, int T, int C);

    /* dst[count] += src[count]. */
    void (*add_inplace)(const Backend *be, float *dst, const float *src, size_t count);
    /* dst[count] (operand) = src[count] (a copy in fp32, rounded to nearest even in
     * bf16; the buffers do not overlap). */
    void (*to_operand)(const Backend *be, void *dst, const float *src, size_t count);
    /* The element type of the operand activations ([Note: operand activations]). */
    PPDType operand;
    /* The element type of the head's logits ([Note: logits type]): fp32 or `operand`. */
    PPDType logits;
    /* The element type of the residual stream ([Note: residual stream type]): fp32 or
     * `operand`. */
    PPDType residual;

    /* Rows of the head's logits the model computes at once ([Note: chunked head] in
     * model.c): its one logits buffer holds [min(this, N), Vp] of the logits type. 0: all
     * N rows of a microbatch (the CPU backend, so that its bits stay those of one GEMM
     * over N). */
    int logits_chunk_rows;

    /* ---- a device backend only (0 / NULL on the CPU: designated initializers leave them
     * so) ---- */
    /* 1: memory from alloc is not host-addressable, so a transport must not read it:
     * the runtime sends and receives it through host staging buffers ([Note: host
     * staging] in runtime.c). */
    int device_memory;
    /* 1: matmul_gelu_forward's out is not gelu_forward of its stored pre ([Note: fused
     * GELU]): recomputing it takes the whole op (the CUDA backend at bf16 with GELU in the
     * fc GEMM's epilogue). */
    int gelu_in_gemm;
    /* Until weight_hold(be, NULL, 0, 0), the matmuls may use one converted copy of w[0..n)
     * (the bf16 operand at precision bf16), for w or any weight inside it, instead of
     * converting the weight on every call: the caller promises that w[0..n) does not
     * change meanwhile, and the results are the bits of the unheld calls. A new hold
     * replaces the last. The runtime holds all of a rank's parameters over an action
     * list ([Note: held weights] in model.h); the head holds its own weight over its
     * row chunks when nothing is held. NULL: nothing to hold (the CPU).
     * kept 1: the caller also promises that w and n are the last hold's and that since
     * then only adamw_many, or an entry that drops the copy (to_device, copy, zero,
     * adamw_update, sgd_update, dealloc), wrote inside w[0..n): the backend may reuse the
     * copy it kept, which adamw_many keeps current (it writes the copy of each tensor inside
     * w as it updates it). kept 0: a new copy. */
    void (*weight_hold)(const Backend *be, const float *w, size_t n, int kept);
    /* Pinned host memory for staging (NULL: the caller uses malloc / free). */
    void *(*host_alloc)(const Backend *be, size_t bytes);
    void (*host_free)(const Backend *be, void *p);
    /* [Note: checkpoint snapshot] Start copying device src to host dst (pinned, from
     * host_alloc) on a side stream, after every entry issued so far: it copies the values
     * as of this call, and every entry issued after it waits on the device for the copy,
     * so the host neither blocks here nor may overwrite src too early. snapshot_wait
     * blocks the calling thread, which may be another than the caller's (the checkpoint
     * writer's), until every snapshot issued so far has landed. NULL: the caller copies
     * with to_host and wait. */
    void (*snapshot)(const Backend *be, void *dst, const void *src, size_t bytes);
    void (*snapshot_wait)(const Backend *be);
    /* Device bytes live from alloc, and the bytes the backend holds itself (library
     * workspace, cast buffers, reduction partials). NULL on the CPU. */
    void (*memory)(const Backend *be, size_t *allocated_bytes, size_t *workspace_bytes);
    /* Dense matrix rate of the device at this precision, FLOP/s, for the MFU (0 = unknown). */
    double peak_flops;
    /* "cuda:0 NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.2 GB), bf16" (NULL on the CPU). */
    const char *description;
    /* Release the backend and its device state; every buffer from alloc must be
     * returned first (NULL: nothing to release, as for the static CPU backend). */
    void (*close)(const Backend *be);
};

/* The CPU reference backend (BLAS sgemm + OpenMP loops); a static instance. */
const Backend *backend_cpu(void);

/* The CPUs this process may run on: its affinity mask, which SLURM, taskset or numactl
 * narrow, not the machine's core count; at least 1. */
int backend_cpu_cpus(void);

/* Set the CPU thread count (OpenMP and OpenBLAS) to n (runtime.threads), at most
 * backend_cpu_cpus(): more is capped there, with a warning on stderr that says so. n <= 0
 * keeps the default. Returns the count in force. */
int backend_cpu_set_threads(int n);

#endif
