/* The posterior predictive of an MLP classifier over one chunk of samples, above its first layer's products, in
 * one pass (FNBG Eqs. 3.1-3.2 and 3.5; built and loaded by lit_bayes/predictive_kernel.py).
 *
 * The kernel works on scaled pre-activations t_j = gamma_j g_j, with every constant of the activations folded into
 * the weights by lit_bayes/predictive_kernel.py, so that a hidden unit costs one exponential, one add and one
 * division: for a sigmoid or tanh network, r = 1 / (1 + 2^t) (sigmoid: gamma = -log2 e, r = sigma(g); tanh:
 * gamma = 2 log2 e, tanh g = 1 - 2 r), for a ReLU network, r = max(t, 0) (gamma = log2 e > 0). The next layer's
 * t' = W' r + b' with W', b' the folded weights; the logits come scaled by log2 e, so the softmax is in base 2.
 *
 * For every point n (LANES points per vector, BLOCKS vectors at a time) and every sample s of the chunk:
 * t_1 = scale * (W_1 x_n) + b'_1 (W_1 x given: the chunk's (S, K_1, B) matrix product), r_j as above,
 * t_{j+1} = W'_{j+1} r_j + b'_{j+1} up to the base-2 logits u = t_L; e_c = 2^(u_c - m) (m = max_c u_c),
 * T = sum_c e_c, p_s(c) = e_c / T and the entropy H_s / ln 2 = log2 T - sum_c e_c (u_c - m) / T.
 * Out: sum_s w_s p_s(c) for every class and sum_s w_s H_s. Nothing of size S x K x B goes back to memory: the
 * layers above the first stay in registers and the stack.
 *
 * The sums are in probability space, so a class probability below float32's normal range (2^-126) counts as 0;
 * lit_bayes/predictive_kernel.py recomputes in log space the points whose predictive comes near that.
 *
 * GCC's vector extensions (GCC and clang): 16 float lanes where the compiler targets AVX-512, else 8, with the
 * instruction set's min and max. exp2 and log2 are short polynomials (below).
 */
#include <string.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

#if defined(__AVX512F__)
#define LANES 16
#else
#define LANES 8
#endif
#define BLOCKS 2 /* vectors of points in flight: independent chains of multiply-adds for the processor to overlap */

typedef float vf __attribute__((vector_size(LANES * sizeof(float))));
typedef int vi __attribute__((vector_size(LANES * sizeof(int))));

enum { ACT_LOGISTIC = 0, ACT_RELU = 1 };

/* The network's shape is fixed when this file is compiled (once per shape), so that every loop over units has a
 * constant trip count and unrolls: LAYERS = L, WIDTHS = K_1, ..., K_L, MAX_WIDTH = max_j K_j (the size of the
 * per-point buffers), ACTIVATION = one of ACT_*. */
#if !defined(LAYERS) || !defined(WIDTHS) || !defined(MAX_WIDTH) || !defined(ACTIVATION)
#error "compile with -DLAYERS=L -DWIDTHS=K_1,...,K_L -DMAX_WIDTH=K -DACTIVATION=0|1 (lit_bayes/predictive_kernel.py)"
#endif
static const long widths[LAYERS] = {WIDTHS};

static inline vf splat(float a) { return (vf){0} + a; }

/* a > b ? a : b lane by lane, b where either is NaN (as the instruction set's max) */
static inline vf vmax(vf a, vf b) {
#if LANES == 16
    return (vf)_mm512_max_ps((__m512)a, (__m512)b);
#elif defined(__AVX__)
    return (vf)_mm256_max_ps((__m256)a, (__m256)b);
#else
    vi mask = a > b;
    return (vf)(((vi)a & mask) | ((vi)b & ~mask));
#endif
}

/* a < b ? a : b lane by lane, b where either is NaN (as the instruction set's min) */
static inline vf vmin(vf a, vf b) {
#if LANES == 16
    return (vf)_mm512_min_ps((__m512)a, (__m512)b);
#elif defined(__AVX__)
    return (vf)_mm256_min_ps((__m256)a, (__m256)b);
#else
    vi mask = a < b;
    return (vf)(((vi)a & mask) | ((vi)b & ~mask));
#endif
}

/* 2^t for t >= -127 or NaN: n = round(t) and f = t - n in [-1/2, 1/2] by one add of 1.5 * 2^23 + 127, which
 * leaves n + 127 in z's low mantissa bits, so that z's bits shifted left by 23 are those of 2^n (0 for n = -127,
 * +inf for n = 128); 2^f by a polynomial of degree 5 with p(0) = 1, its coefficients fitted for the least largest
 * relative error on [-1/2, 1/2] (9.2e-8, below float32's half ulp). Results below 2^-126 are 0, NaN stays NaN. */
static inline vf vexp2_above(vf t) {
    const float shift = 12583039.0f; /* 1.5 * 2^23 + 127 */
    t = vmax(splat(-127.0f), t);
    vf z = t + shift;
    vf f = t - (z - shift);
    vf p = splat(1.326470205e-03f);
    p = p * f + 9.671504337e-03f;
    p = p * f + 5.550733728e-02f;
    p = p * f + 2.402224221e-01f;
    p = p * f + 6.931469777e-01f;
    p = p * f + 1.0f;
    return p * (vf)((vi)z << 23);
}

/* 2^t, t clamped to [-127, 128] first: above 2^127.5 infinite */
static inline vf vexp2(vf t) { return vexp2_above(vmin(splat(128.0f), t)); }

/* log2(x) for positive normal x (here sums of at least one term 1): x = 2^e m, m in [sqrt(1/2), sqrt(2)),
 * log2 m = (2 / ln 2) atanh(u), u = (m - 1) / (m + 1), |u| <= 0.1716, by the series to u^9 (truncation below
 * 2e-9). NaN and +inf stay themselves. */
static inline vf vlog2(vf x) {
    const float c = 2.88539008177792681f; /* 2 / ln 2 */
    vi bits = (vi)x;
    vi e = ((bits >> 23) & 0xff) - 127;
    vf m = (vf)((bits & 0x007fffff) | 0x3f800000); /* in [1, 2) */
    vi big = m > 1.41421356f;
    m = (vf)(((vi)(m * 0.5f) & big) | ((vi)m & ~big));
    e = e + (big & 1);
    vf u = (m - 1.0f) / (m + 1.0f);
    vf u2 = u * u;
    vf s = splat(c / 9.0f);
    s = s * u2 + c / 7.0f;
    s = s * u2 + c / 5.0f;
    s = s * u2 + c / 3.0f;
    s = s * u2 + c;
    vf out = u * s + __builtin_convertvector(e, vf);
    return out + (x - x); /* NaN for NaN and inf inputs, 0 otherwise */
}

static inline vf activate(vf t) {
    if (ACTIVATION == ACT_LOGISTIC)
        return 1.0f / (1.0f + vexp2(t)); /* 0 for t >= 128 (2^t infinite), 1 for t <= -127 */
    return vmax(splat(0.0f), t); /* NaN kept */
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
 *   first:       (samples, K_1, points) float32, W_1 x of every sample (no bias, not scaled)
 *   scale:       gamma_1, the first layer's scale
 *   tail:        (samples, tail_size) float32, every sample's b'_1, then W'_j (row-major) and b'_j for j = 2..L
 *   w:           (samples,) normalised weights
 *   out_probs:   (K_L, points) sum_s w_s p_s(c)
 *   out_entropy: (points,) sum_s w_s H_s
 *   threads:     OpenMP threads over the points (compiled with -fopenmp: the runtime torch has loaded, whose
 *                threads are awake after the first layer's product), else one */
void predictive_chunk(const float *first, float scale, const float *tail, long samples, long points,
                      long tail_size, const float *w, float *out_probs, float *out_entropy, int threads) {
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
            vf t[MAX_WIDTH][BLOCKS], h[MAX_WIDTH][BLOCKS];
            for (long k = 0; k < widths[0]; k++)
                for (long r = 0; r < BLOCKS; r++)
                    t[k][r] = load_lanes(g1 + k * points + r * LANES, lanes[r]) * scale + theta[k];
            theta += widths[0];
#pragma GCC unroll 16
            for (long j = 1; j < LAYERS; j++) {
                const long in = widths[j - 1], out = widths[j];
                for (long k = 0; k < in; k++)
                    for (long r = 0; r < BLOCKS; r++)
                        h[k][r] = activate(t[k][r]);
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
                        t[i][r] = acc[r];
                }
                theta = bias + out;
            }
            /* t holds the base-2 logits */
            for (long r = 0; r < BLOCKS; r++) {
                vf top = t[0][r];
                for (long c = 1; c < classes; c++)
                    top = vmax(top, t[c][r]);
                vf total = {0}, moment = {0};
                for (long c = 0; c < classes; c++) {
                    vf shifted = t[c][r] - top;
                    vf e = vexp2_above(shifted);
                    total += e;
                    moment += e * shifted;
                    t[c][r] = e;
                }
                entropy[r] += w[s] * (vlog2(total) - moment / total);
                vf weight = w[s] / total;
                for (long c = 0; c < classes; c++)
                    probs[c][r] += t[c][r] * weight;
            }
        }
        const float ln2 = 0.693147180559945309f;
        for (long r = 0; r < BLOCKS; r++) {
            for (long c = 0; c < classes; c++)
                store_lanes(out_probs + c * points + n + r * LANES, probs[c][r], lanes[r]);
            store_lanes(out_entropy + n + r * LANES, entropy[r] * ln2, lanes[r]);
        }
    }
}
