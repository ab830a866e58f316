/* relerr.h — what the numeric kernel tests share (C and C++, header only): a seeded
 * generator of values in [-1, 1) and the relative L2 error. */
#ifndef PP_RELERR_H
#define PP_RELERR_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* splitmix64 of *state, as a float in [-1, 1). */
static inline float splitmix_unit(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (float)(((z ^ (z >> 31)) >> 11) * 0x1.0p-53 * 2 - 1);
}

/* ||got - want|| / ||want|| in double (||got - want|| when want is all zeros); a NaN
 * anywhere (an element not written, an unstaged read) gives INFINITY, so it fails any
 * bound. */
static inline double rel_l2(const float *got, const float *want, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - want[i];
        num += d * d;
        den += (double)want[i] * want[i];
    }
    double r = den > 0 ? sqrt(num / den) : sqrt(num);
    return r == r ? r : INFINITY;
}

#endif
