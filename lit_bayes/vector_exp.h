/* GCC's vector extensions (GCC and clang) and e^x, for the C kernels lit_bayes/models/particle_kernel.c and
 * lit_bayes/steppers/relu_draw.c (lit_bayes.native.compiled keys its cache on the files a source includes, this one
 * too). Define DOUBLE (1: float64, 0: float32) before including it. It defines real (that type), ireal (an integer
 * of its width), vr and vm (vectors of them: 64 bytes where the compiler targets AVX-512, else 32), LANES (elements
 * to a vector), splat, vselect and vexp. */
#ifndef LIT_BAYES_VECTOR_EXP_H
#define LIT_BAYES_VECTOR_EXP_H

#ifndef DOUBLE
#error "define DOUBLE (1: float64, 0: float32) before including vector_exp.h"
#endif

#if defined(__AVX512F__)
#define VBYTES 64
#else
#define VBYTES 32
#endif

#if DOUBLE
typedef double real;
typedef long long ireal;
#define MANTISSA 52
#else
typedef float real;
typedef int ireal;
#define MANTISSA 23
#endif
#define LANES ((long)(VBYTES / sizeof(real)))

typedef real vr __attribute__((vector_size(VBYTES)));
typedef ireal vm __attribute__((vector_size(VBYTES)));

static inline vr splat(real a) { return (vr){0} + a; }

static const real inverse_factorial[14] = {1.0, 1.0, 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720, 1.0 / 5040,
                                           1.0 / 40320, 1.0 / 362880, 1.0 / 3628800, 1.0 / 39916800,
                                           1.0 / 479001600, 1.0 / 6227020800.0};

/* mask ? a : b lane by lane (mask lanes all ones or all zeros) */
static inline vr vselect(vm mask, vr a, vr b) { return (vr)(((vm)a & mask) | ((vm)b & ~mask)); }

/* e^x: n = round(x log2 e) by one add of 1.5 * 2^MANTISSA + bias (which leaves n + bias in the low mantissa bits,
 * so that the bits shifted left by MANTISSA are those of 2^n), r = x - n ln 2 in [-ln2/2, ln2/2] (ln 2 in two parts,
 * Cody and Waite), e^r by its Taylor polynomial, of degree 13 in float64 (error below 5e-18 relative) and 7 in
 * float32 (5e-9). x is clamped to [lo, hi] first, so that 2^n is a normal number, and the result is 0 below lo and
 * +inf above hi (not a subnormal number, whose arithmetic would take the processor's slow path in the saturated
 * units of a logistic or tanh); NaN stays NaN. */
static inline vr vexp(vr x) {
#if DOUBLE
    const real lo = -708.0, hi = 709.0, shift = 6755399441055744.0 + 1023.0;
    const real ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
    const real log2e = 1.44269504088896338700e+00;
    const int degree = 13;
#else
    const real lo = -87.0f, hi = 88.0f, shift = 12582912.0f + 127.0f;
    const real ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;
    const real log2e = 1.44269504088896341f;
    const int degree = 7;
#endif
    const vm under = x < splat(lo), over = x > splat(hi);
    x = vselect(under, splat(lo), vselect(over, splat(hi), x));
    vr k = x * log2e + shift;
    vr n = k - shift;
    vr r = x - n * ln2_hi;
    r = r - n * ln2_lo;
    vr p = splat(inverse_factorial[degree]);
    for (int i = degree - 1; i >= 0; i--) p = p * r + inverse_factorial[i];
    return vselect(under, splat(0), vselect(over, splat(__builtin_inf()), p * (vr)((vm)k << MANTISSA)));
}

#endif
