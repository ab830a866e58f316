/* optim.h — learning-rate schedule, gradient clipping and the AdamW / SGD updates,
 * as flat loops over float arrays (the model owns the parameter layout). */
#ifndef PP_OPTIM_H
#define PP_OPTIM_H

#include <stddef.h>

#include "backend.h"
#include "config.h"

/* Learning rate of optimizer step `step` (0-based; normally step < c->steps), from
 * c->lr, c->warmup_steps (W), c->steps (S), c->decay and c->min_lr_ratio (r):
 *
 *   step < W:  lr * (step + 1) / W                       (linear warm-up; reaches lr
 *                                                          at step W-1)
 *   step >= W: lr_min + (lr - lr_min) * f(p),  lr_min = r * lr,
 *              p = (step - W) / max(1, S - W - 1)   clamped to [0, 1]
 *
 * so the first step after warm-up has p = 0 (the full lr) and, when S - W >= 2, the
 * last step S - 1 has p = 1 (exactly lr_min, except for "constant"); steps past S - 1
 * stay at p = 1. f by c->decay:
 *   constant: f = 1                       (lr throughout; r is ignored)
 *   linear:   f = 1 - p
 *   cosine:   f = 0.5 * (1 + cos(pi * p))
 * Computed in double, returned as float. Reads only Config fields; an unknown decay
 * name is a bug (config validation rejects it) and dies. */
float optim_lr(const Config *c, int step);

/* One AdamW step over n parameters, fused into a single pass (PyTorch / llm.c
 * semantics, decoupled weight decay). For each i, with g = grad_scale * g[i]:
 *   m[i] = beta1 * m[i] + (1 - beta1) * g
 *   v[i] = beta2 * v[i] + (1 - beta2) * g^2
 *   mhat = m[i] / (1 - beta1^t),  vhat = v[i] / (1 - beta2^t)
 *   p[i] -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * p[i])
 * t is the 1-based step count (bias correction); grad_scale is the clipping factor
 * from optim_clip_scale; pass weight_decay = 0 for biases and LayerNorm parameters.
 * p, m, v: [n], updated in place (m, v start at zero); g: [n], read only.
 * Elementwise, so the result does not depend on the thread count. */
void optim_adamw_update(float *p, const float *g, float *m, float *v, size_t n, float lr,
                        float beta1, float beta2, float eps, float weight_decay,
                        float grad_scale, int t);

/* One SGD step with momentum (PyTorch semantics, no dampening / Nesterov):
 *   d = grad_scale * g[i] + weight_decay * p[i]
 *   buf[i] = (t == 1) ? d : momentum * buf[i] + d
 *   p[i] -= lr * buf[i]
 * t is the 1-based step count. buf: [n] momentum state; it may be NULL only when
 * momentum == 0 (then p[i] -= lr * d). p, buf updated in place; g read only. */
void optim_sgd_update(float *p, const float *g, float *buf, size_t n, float lr,
                      float momentum, float weight_decay, float grad_scale, int t);

/* The factor that clips the gradient to global L2 norm grad_clip:
 *   norm = sqrt(grad_sumsq);  scale = min(1, grad_clip / (norm + 1e-6))
 * 1 when grad_clip <= 0 (clipping disabled). The caller checks that the norm is finite
 * first (a NaN norm gives 1, an infinite one 0). */
float optim_clip_scale(double grad_sumsq, float grad_clip);

/* Sum of g[i]^2 over n floats, accumulated in double. Parallel over a fixed blocking
 * of [0, n) whose partial sums are added in block order, so the result is the same
 * for every thread count (and run to run). */
double optim_sumsq(const float *g, size_t n);

/* Number of float state arrays of size n per parameter array the optimizer named by
 * c->optimizer keeps: 2 for adamw (m, v), 1 for sgd with momentum, 0 for plain sgd.
 * Dies on an unknown name (config validation rejects it). */
int optim_state_arrays(const Config *c);

/* The weight decay of a tensor: c->weight_decay where decay is 1, 0 where it is 0 (biases
 * and the norms' parameters). */
float optim_weight_decay(const Config *c, int decay);

/* One update of count tensors on c->optimizer with c's hyper-parameters ([Note: many
 * tensors] in backend.h; the tensors' pointers are device memory of be): adamw through the
 * backend's adamw_many, t[i].m and t[i].v its two moments; sgd through sgd_update tensor by
 * tensor, t[i].m its momentum buffer (v ignored). m and v may be NULL where
 * optim_state_arrays(c) says that state is not kept. lr from optim_lr, grad_scale from
 * optim_clip_scale, step the 1-based step count. */
void optim_update_many(const Config *c, const Backend *be, const PPOptTensor *t, int count,
                       float lr, float grad_scale, int step);

#endif
