/* fastmath.h — a vectorizable expf for the CPU backend's elementwise loops.
 *
 * glibc's expf does not vectorize without -ffast-math, which the reference path must
 * not use. This one is accurate to about 1 ulp on [-87, 88.3] (range reduction by
 * ln 2 in two parts, then a degree-6 polynomial for e^r on |r| <= ln2/2 — the
 * classic Cody–Waite scheme) and is plain arithmetic, so `omp simd` loops vectorize.
 *
 * Defined for every input, without undefined behaviour: 2^n is built from the bits of
 * the rounding sum in unsigned arithmetic (no float-to-int conversion, which is
 * undefined for a NaN, and no shift of a negative value). NaN in gives NaN out (a NaN
 * passes the clamps and makes r, hence p, NaN); the clamp to [-88, 89] keeps n in
 * [-127, 128], whose biased exponents 0 and 255 make 2^n exactly 0 and +inf: so x below
 * about -87.7 gives 0 (as -inf does; results below FLT_MIN are subnormal or 0) and x from
 * 127.5 ln2 = 88.38 up gives +inf (as +inf does; the true overflow is at 88.72). In the
 * range the results are the same bits as a float-to-int version's. */
#ifndef PP_FASTMATH_H
#define PP_FASTMATH_H

#include <stdint.h>
#include <string.h>

static inline float pp_expf(float x) {
    x = x < -88.0f ? -88.0f : x; /* a NaN stays NaN */
    x = x > 89.0f ? 89.0f : x;
    /* n = round(x / ln2) via the 1.5*2^23 trick: t's low mantissa bits hold n + 2^22 */
    float t = x * 1.44269504088896341f + 12582912.0f;
    float n = t - 12582912.0f;
    float r = x - n * 0.693359375f;          /* ln2 high part (exact in float) */
    r = r - n * -2.12194440e-4f;             /* ln2 low part */
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    uint32_t tbits, bits;
    memcpy(&tbits, &t, sizeof tbits);
    bits = (tbits - 0x4B400000u + 127u) << 23; /* 2^n: n + 127 in [0, 255] */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* tanh(u) = 1 - 2 / (1 + e^{2u}); saturates correctly at both ends. */
static inline float pp_tanhf(float u) { return 1.0f - 2.0f / (1.0f + pp_expf(2.0f * u)); }

#endif
