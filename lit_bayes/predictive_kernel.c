/* The posterior predictive of an MLP classifier over one chunk of samples, above its first layer's products, in
 * one pass (FNBG Eqs. 3.1-3.2 and 3.5; built and loaded by lit_bayes/predictive_kernel.py).
 *
 * For every point n (eight per vector, BLOCKS vectors at a time) and every sample s of the chunk: the first layer's
 * pre-activations g_1 = W_1 x_n (given: the chunk's (S, K_1, B) matrix product) plus b_1, then h_j = phi(g_j),
 * g_{j+1} = W_{j+1} h_j + b_{j+1} up to the logits z = g_L; e_c = exp(z_c - m) (m = max_c z_c), T = sum_c e_c,
 * p_s(c) = e_c / T and the entropy H_s = log T - sum_c e_c (z_c - m) / T.
 * Out: sum_s w_s p_s(c) for every class and sum_s w_s H_s. Nothing of size S x K x B goes back to memory: the
 * layers above the first stay in registers and the stack.
 *
 * The sums are in probability space, so a class probability below float32's normal range (2^-126) counts as 0;
 * lit_bayes/predictive_kernel.py recomputes in log space the points whose predictive comes near that.
 *
 * GCC's vector extensions (GCC and clang): eight float lanes whatever the instruction set, with AVX's min and max
 * where the compiler targets it. exp and log are short polynomials (below).
 */
#include <string.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

#define LANES 8
#define BLOCKS 4 /* vectors of points in flight: independent chains of multiply-adds for the processor to overlap */

typedef float vf __attribute__((vector_size(LANES * sizeof(float))));
typedef int vi __attribute__((vector_size(LANES * sizeof(int))));

enum { ACT_SIGMOID = 0, ACT_TANH = 1, ACT_RELU = 2 };

/* The network's shape is fixed when this file is compiled (once per shape), so that every loop over units has a
 * constant trip count and unrolls: LAYERS = L, WIDTHS = K_1, ..., K_L, MAX_WIDTH = max_j K_j (the size of the
 * per-point buffers), ACTIVATION = one of ACT_*. */
#if !defined(LAYERS) || !defined(WIDTHS) || !defined(MAX_WIDTH) || !defined(ACTIVATION)
#error "compile with -DLAYERS=L -DWIDTHS=K_1,...,K_L -DMAX_WIDTH=K -DACTIVATION=0|1|2 (lit_bayes/predictive_kernel.py)"
#endif
static const long widths[LAYERS] = {WIDTHS};

static inline vf splat(float a) { return (vf){0} + a; }

/* a > b ? a : b lane by lane, b where either is NaN (as AVX's max) */
static inline vf vmax(vf a, vf b) {
#if defined(__AVX__)
    return (vf)_mm256_max_ps((__m256)a, (__m256)b);
#else
    vi mask = a > b;
    return (vf)(((vi)a & mask) | ((vi)b & ~mask));
#endif
}

/* a < b ? a : b lane by lane, b where either is NaN (as AVX's min) */
static inline vf vmin(vf a, vf b) {
#if defined(__AVX__)
    return (vf)_mm256_min_ps((__m256)a, (__m256)b);
#else
    vi mask = a < b;
    return (vf)(((vi)a & mask) | ((vi)b & ~mask));
#endif
}

/* 2^t: n = round(t), f = t - n in [-1/2, 1/2], 2^f by its Taylor polynomial of degree 6 (truncation below 2e-8,
 * relative; lit_bayes.logspace.exp2 is the same in torch), 2^n written into the exponent bits. t is clamped to
 * [-127, 128] first, so results below 2^-126 are 0 (2^-inf = 0) and above 2^127.5 infinite; NaN stays NaN. */
static inline vf vexp2(vf t) {
    t = vmin(splat(128.0f), vmax(splat(-127.0f), t));
    vf n = (t + 12582912.0f) - 12582912.0f; /* round to nearest: 1.5 * 2^23 */
    vf f = t - n;
    vf p = splat(0.000154035303933816f); /* (ln 2)^k / k!, k = 6..0 */
    p = p * f + 0.00133335581464284f;
    p = p * f + 0.00961812910762848f;
    p = p * f + 0.0555041086648216f;
    p = p * f + 0.240226506959101f;
    p = p * f + 0.693147180559945f;
    p = p * f + 1.0f;
    return p * (vf)((__builtin_convertvector(n, vi) + 127) << 23);
}

static inline vf vexp(vf x) { return vexp2(x * 1.44269504088896341f); }

/* log(x) for positive normal x (here sums of at least one term 1): x = 2^e m, m in [sqrt(1/2), sqrt(2)),
 * log m = 2 atanh(u), u = (m - 1) / (m + 1), |u| <= 0.1716, by the series to u^9 (truncation below 1e-9).
 * NaN and +inf stay themselves. */
static inline vf vlog(vf x) {
    vi bits = (vi)x;
    vi e = ((bits >> 23) & 0xff) - 127;
    vf m = (vf)((bits & 0x007fffff) | 0x3f800000); /* in [1, 2) */
    vi big = m > 1.41421356f;
    m = (vf)(((vi)(m * 0.5f) & big) | ((vi)m & ~big));
    e = e + (big & 1);
    vf u = (m - 1.0f) / (m + 1.0f);
    vf u2 = u * u;
    vf s = splat(1.0f / 9.0f);
    s = s * u2 + 1.0f / 7.0f;
    s = s * u2 + 1.0f / 5.0f;
    s = s * u2 + 1.0f / 3.0f;
    s = s * u2 + 1.0f;
    vf out = 2.0f * u * s + __builtin_convertvector(e, vf) * 0.693147180559945309f;
    return out + (x - x); /* NaN for NaN and inf inputs, 0 otherwise */
}

static inline vf activate(vf g) {
    switch (ACTIVATION) {
    case ACT_SIGMOID:
        return 1.0f / (1.0f + vexp(-g));
    case ACT_TANH: /* 1 - 2 / (e^{2g} + 1): the limits +-1 exactly, no overflow */
        return 1.0f - 2.0f / (vexp(2.0f * g) + 1.0f);
    default: /* max(g, 0), NaN kept */
        return vmax(splat(0.0f), g);
    }
}

static inline vf load_lanes(const float *p, long lanes) {
    vf v = {0};
    if (lanes == LANES) /* a constant size: one unaligned load, no call */
        memcpy(&v, p, sizeof v);
    else
        memcpy(&v, p, (size_t)lanes * sizeof(float));
    return v;
}

static inline void store_lanes(float *p, vf v, long lanes) {
    if (lanes == LANES)
        memcpy(p, &v, sizeof v);
    else
        memcpy(p, &v, (size_t)lanes * sizeof(float));
}

/* One chunk of `samples` samples on a tile of `points` points.
 *   first:       (samples, K_1, points) float32, W_1 x of every sample (no bias)
 *   tail:        (samples, tail_size) float32, every sample's b_1, then W_j (row-major) and b_j for j = 2..L
 *   w:           (samples,) normalised weights
 *   out_probs:   (K_L, points) sum_s w_s p_s(c)
 *   out_entropy: (points,) sum_s w_s H_s
 *   threads:     OpenMP threads over the points (compiled with -fopenmp: the runtime torch has loaded, whose
 *                threads are awake after the first layer's product), else one */
void predictive_chunk(const float *first, const float *tail, long samples, long points, long tail_size,
                      const float *w, float *out_probs, float *out_entropy, int threads) {
    const long classes = widths[LAYERS - 1];
    const long span = BLOCKS * LANES, spans = (points + span - 1) / span;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long b = 0; b < spans; b++) {
        const long n = b * span;
        long lanes[BLOCKS];
        for (long r = 0; r < BLOCKS; r++) {
            const long left = points - n - r * LANES;
            lanes[r] = left < 0 ? 0 : left < LANES ? left : LANES;
        }
        vf entropy[BLOCKS], probs[MAX_WIDTH][BLOCKS];
        for (long r = 0; r < BLOCKS; r++) {
            entropy[r] = splat(0.0f);
            for (long c = 0; c < classes; c++)
                probs[c][r] = splat(0.0f);
        }
        for (long s = 0; s < samples; s++) {
            const float *theta = tail + s * tail_size;
            const float *g1 = first + s * widths[0] * points + n;
            vf g[MAX_WIDTH][BLOCKS], h[MAX_WIDTH][BLOCKS];
            for (long k = 0; k < widths[0]; k++)
                for (long r = 0; r < BLOCKS; r++)
                    g[k][r] = load_lanes(g1 + k * points + r * LANES, lanes[r]) + theta[k];
            theta += widths[0];
#pragma GCC unroll 16
            for (long j = 1; j < LAYERS; j++) {
                const long in = widths[j - 1], out = widths[j];
                for (long k = 0; k < in; k++)
                    for (long r = 0; r < BLOCKS; r++)
                        h[k][r] = activate(g[k][r]);
                const float *bias = theta + out * in;
                for (long i = 0; i < out; i++) {
                    const float *row = theta + i * in;
                    vf acc[BLOCKS];
                    for (long r = 0; r < BLOCKS; r++)
                        acc[r] = splat(bias[i]);
#pragma GCC unroll 64
                    for (long k = 0; k < in; k++)
                        for (long r = 0; r < BLOCKS; r++)
                            acc[r] += row[k] * h[k][r];
                    for (long r = 0; r < BLOCKS; r++)
                        g[i][r] = acc[r];
                }
                theta = bias + out;
            }
            /* g holds the logits */
            for (long r = 0; r < BLOCKS; r++) {
                vf top = g[0][r];
                for (long c = 1; c < classes; c++)
                    top = vmax(top, g[c][r]);
                vf total = {0}, moment = {0};
                for (long c = 0; c < classes; c++) {
                    vf shifted = g[c][r] - top;
                    vf e = vexp(shifted);
                    total += e;
                    moment += e * shifted;
                    g[c][r] = e;
                }
                entropy[r] += w[s] * (vlog(total) - moment / total);
                vf scale = w[s] / total;
                for (long c = 0; c < classes; c++)
                    probs[c][r] += g[c][r] * scale;
            }
        }
        for (long r = 0; r < BLOCKS; r++) {
            for (long c = 0; c < classes; c++)
                store_lanes(out_probs + c * points + n + r * LANES, probs[c][r], lanes[r]);
            store_lanes(out_entropy + n + r * LANES, entropy[r], lanes[r]);
        }
    }
}
