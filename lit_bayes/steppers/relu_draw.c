/* The relu pre-activation draw of the noisy-network Gibbs sweep (noisy-gibbs spec §2.3, eq. 10, App. E.1), for
 * lit_bayes/steppers/relu_draw.py: rounds of proposals (the arithmetic of truncated_gaussian.propose_relu, LANES
 * elements to a vector of doubles with GCC's vector extensions, 64 bytes where the compiler targets AVX-512, else
 * 32: lit_bayes/vector_exp.h), their random numbers drawn by torch's generator and passed in, then the exact draw
 * of what they leave.
 *
 * With d = x - omega, Delta = Delta_X + Delta_Z, the log-odds of the untruncated pieces (negative over positive) are
 *
 *   L = d^2 / 2 Delta - x^2 / 2 Delta_X + log(Delta / Delta_X) / 2,
 *
 * the positive piece is proposed when u >= sigmoid(L), and the candidate is omega + sqrt(Delta_Z) n (negative piece)
 * or omega + d Delta_Z / Delta + sqrt(Delta_X Delta_Z / Delta) n (positive piece), accepted when it lies on its
 * piece's side of 0 (z > 0 for the positive one). An accepted candidate has the law of eq. 10 exactly.
 *
 * Compiled with -DREAL=float or -DREAL=double: the dtype of omega, x, the normal draws and the output; the arithmetic
 * is in double, the uniform draws double. */
#define _GNU_SOURCE /* M_PI, M_SQRT1_2 */
#include <math.h>
#include <string.h>

#ifndef REAL
#error "compile with -DREAL=float or -DREAL=double"
#endif

#define DOUBLE 1 /* the arithmetic */
#include "../vector_exp.h"
#define BLOCK 256 /* elements of the first round between two compactions of the rejected indices */

typedef struct {
    double over_total, over_x, log_odds_shift, shift, std_negative, std_step;
} pieces;

static pieces relu_pieces(double delta_z, double delta_x) {
    const double total = delta_x + delta_z;
    return (pieces){0.5 / total, 0.5 / delta_x, 0.5 * log(total / delta_x), delta_z / total, sqrt(delta_z),
                    sqrt(delta_x * delta_z / total) - sqrt(delta_z)};
}

/* One proposal for LANES elements (omega, x) from uniforms u in [0, 1) and standard normals n, without branches
 * (the pieces and the acceptances are random): the candidates in *z, and a mask of those accepted. */
static inline vm propose(pieces p, vr omega, vr x, vr u, vr n, vr *z) {
    const vr d = x - omega;
    const vr log_odds = d * d * p.over_total - x * x * p.over_x + p.log_odds_shift;
    const vm positive = u >= 1.0 / (1.0 + vexp(-log_odds));
    const vr on = vselect(positive, splat(1.0), splat(0.0));
    *z = omega + n * (on * p.std_step + p.std_negative) + on * p.shift * d;
    return ~((*z > splat(0.0)) ^ positive);
}

typedef REAL vreal __attribute__((vector_size(LANES * sizeof(REAL)))); /* LANES elements of the arrays */

/* `lanes` elements of a from `start` into the vector v (whose other lanes stay as they are); a whole vector moves
 * through a memcpy of constant size, which compiles to one unaligned load */
#define LOAD_LANES(v, a, start, lanes) \
    do { \
        if ((lanes) == LANES) \
            memcpy(&(v), (a) + (start), sizeof(v)); \
        else \
            for (int l = 0; l < (lanes); l++) (v)[l] = (a)[(start) + l]; \
    } while (0)

static inline vr load(const REAL *a, long start, int lanes) {
    vreal v = {0};
    LOAD_LANES(v, a, start, lanes);
    return __builtin_convertvector(v, vr);
}

static inline vr load_double(const double *a, long start, int lanes) {
    vr v = {0};
    LOAD_LANES(v, a, start, lanes);
    return v;
}

/* the first `lanes` lanes of v into a from `start`, converted to REAL */
static inline void store(REAL *a, long start, int lanes, vr v) {
    const vreal converted = __builtin_convertvector(v, vreal);
    if (lanes == LANES)
        memcpy(a + start, &converted, sizeof converted);
    else
        for (int l = 0; l < lanes; l++) a[start + l] = converted[l];
}

/* the elements index[0..lanes) of a into a vector (the other lanes 0) */
static inline vr gather(const REAL *a, const long *index, int lanes) {
    double values[LANES] = {0};
    for (int l = 0; l < lanes; l++) values[l] = a[index[l]];
    vr v;
    memcpy(&v, values, sizeof v);
    return v;
}

/* The first round over all `count` elements (omega, x and out contiguous): every element's candidate in out, the
 * indices of the rejected ones in pending (in order); returns their number. A block's proposals run first, then its
 * rejected indices are appended without branches, so that the proposals' long chains of arithmetic overlap. */
long relu_first_round(long count, const REAL *omega, const REAL *x, double delta_z, double delta_x, const double *u,
                      const REAL *normal, REAL *out, long *pending) {
    const pieces p = relu_pieces(delta_z, delta_x);
    long rejected = 0;
    long long accepted[BLOCK];
    for (long block = 0; block < count; block += BLOCK) {
        const long size = count - block < BLOCK ? count - block : BLOCK;
        for (long start = block; start < block + size; start += LANES) {
            const int lanes = block + size - start < LANES ? (int)(block + size - start) : LANES;
            vr z;
            const vm flags = propose(p, load(omega, start, lanes), load(x, start, lanes), load_double(u, start, lanes),
                                     load(normal, start, lanes), &z);
            store(out, start, lanes, z);
            for (int l = 0; l < lanes; l++) accepted[start - block + l] = flags[l];
        }
        for (long j = 0; j < size; j++) {
            pending[rejected] = block + j;
            rejected += accepted[j] == 0;
        }
    }
    return rejected;
}

/* Further rounds over the `count` pending elements (indices into omega, x and out), in order, each trial taking
 * the next of the `draws` (u, normal) pairs, until every element is accepted or the pairs run out; accepted
 * candidates go to out, and pending keeps the others (in order). Returns their number. */
long relu_retry(long count, long *pending, const REAL *omega, const REAL *x, double delta_z, double delta_x,
                long draws, const double *u, const REAL *normal, REAL *out) {
    const pieces p = relu_pieces(delta_z, delta_x);
    long next = 0;
    while (count > 0 && next < draws) {
        const long tried = count < draws - next ? count : draws - next;
        long kept = 0;
        for (long k = 0; k < tried;) {
            const int lanes = tried - k < LANES ? (int)(tried - k) : LANES;
            const long *index = pending + k;
            vr z;
            const vm accepted = propose(p, gather(omega, index, lanes), gather(x, index, lanes),
                                        load_double(u, next, lanes), load(normal, next, lanes), &z);
            for (int l = 0; l < lanes; l++) { /* a rejected candidate is written too: the element stays pending */
                const long i = index[l];
                out[i] = (REAL)z[l];
                pending[kept] = i;
                kept += accepted[l] == 0;
            }
            k += lanes;
            next += lanes;
        }
        for (long k = tried; k < count; k++) pending[kept++] = pending[k]; /* not tried: the pairs ran out */
        count = kept;
    }
    return count;
}

/* The exact draw (eq. 10 with the pieces of App. E.1), for the few elements the proposal rounds leave, one element at
 * a time. Its random numbers come from SplitMix64's outputs (Steele, Lea and Flood 2014) at positions
 * key + (i 2^32 + t) phi of the sequence (phi the odd golden-ratio increment, t = 0, 1, ...: element i's own stream),
 * the key drawn from torch's generator for the call, so every element has as many numbers as its rejection loops
 * take. */
#define GOLDEN 0x9e3779b97f4a7c15ULL
#define MAX_TRIALS 10000 /* an element still rejected after this many trials (NaN inputs) is left to the torch path */
#define HALF_LOG_2PI 0.91893853320467274178

typedef struct {
    unsigned long long base, next;
} stream;

/* the next uniform in (0, 1] of the stream */
static inline double uniform_open(stream *s) {
    unsigned long long z = s->base + (s->next++) * GOLDEN;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (double)((z >> 11) + 1) * 0x1.0p-53;
}

/* a standard normal (Box and Muller, one of the pair) */
static inline double standard_normal(stream *s) {
    const double radius = sqrt(-2.0 * log(uniform_open(s)));
    return radius * cos(2.0 * M_PI * uniform_open(s));
}

/* log Phi(a): through erfc where Phi(a) or 1 - Phi(a) is in float64's normal range (a >= -37), else the asymptotic
 * series log Phi(a) = -a^2 / 2 - log(-a) - log(2 pi) / 2 + log(1 - 1/a^2 + 3/a^4 - 15/a^6 + 105/a^8 - 945/a^10),
 * whose next term, 10395 / a^12, is below 2e-15 there (spec §8 item 1: no log of an underflowed erfc). */
static double log_normal_cdf(double a) {
    if (a > 0.0) return log1p(-0.5 * erfc(a * M_SQRT1_2));
    if (a > -37.0) return log(0.5 * erfc(-a * M_SQRT1_2));
    const double r = 1.0 / (a * a);
    const double series = r * (-1.0 + r * (3.0 + r * (-15.0 + r * (105.0 - 945.0 * r))));
    return -0.5 * a * a - log(-a) - HALF_LOG_2PI + log1p(series);
}

/* X ~ N(0, 1) conditioned on X >= alpha, exactly, in *draw (returns 0 where MAX_TRIALS pass first): below 0,
 * rejection from N(0, 1) (acceptance above 1/2); from 0 on, Robert's (1995) exponential proposal alpha + E / lambda
 * with lambda = (alpha + sqrt(alpha^2 + 4)) / 2, accepted with probability exp(-(X - lambda)^2 / 2) (acceptance above
 * 3/4, towards 1 in the tail: spec §8 item 2, no inverse CDF). */
static int normal_above(double alpha, stream *s, double *draw) {
    if (alpha < 0.0) {
        for (int t = 0; t < MAX_TRIALS; t++)
            if ((*draw = standard_normal(s)) >= alpha) return 1;
        return 0;
    }
    const double lambda = 0.5 * (alpha + sqrt(alpha * alpha + 4.0));
    for (int t = 0; t < MAX_TRIALS; t++) {
        *draw = alpha - log(uniform_open(s)) / lambda;
        const double gap = *draw - lambda;
        if (uniform_open(s) <= exp(-0.5 * gap * gap)) return 1;
    }
    return 0;
}

/* The exact draw of the `count` pending elements (indices into omega, x and out) into out: the piece by its mass,
 * M = e^k sqrt(v) Phi(+-m / sqrt v) in log space (negative piece N(omega, Delta_Z), k = -x^2 / 2 Delta_X; positive
 * piece N(omega + d Delta_Z / Delta, Delta_X Delta_Z / Delta), k = -d^2 / 2 Delta), then the truncated normal on its
 * side of 0. pending keeps the elements not drawn (MAX_TRIALS passed: NaN inputs); returns their number. */
long relu_exact(long count, long *pending, const REAL *omega, const REAL *x, double delta_z, double delta_x,
                unsigned long long key, REAL *out) {
    const double total = delta_x + delta_z, std_negative = sqrt(delta_z);
    const double std_positive = sqrt(delta_x * delta_z / total);
    const double log_std_negative = log(std_negative), log_std_positive = log(std_positive);
    long kept = 0;
    for (long k = 0; k < count; k++) {
        const long i = pending[k];
        stream s = {key + ((unsigned long long)i << 32) * GOLDEN, 0};
        const double w = omega[i], d = x[i] - w, mean_positive = w + d * (delta_z / total);
        const double log_negative = -0.5 * x[i] * x[i] / delta_x + log_std_negative +
                                    log_normal_cdf(-w / std_negative);
        const double log_positive = -0.5 * d * d / total + log_std_positive +
                                    log_normal_cdf(mean_positive / std_positive);
        const int negative = uniform_open(&s) <= 1.0 / (1.0 + exp(log_positive - log_negative));
        double draw;
        const int drawn = negative ? normal_above(w / std_negative, &s, &draw)
                                   : normal_above(-mean_positive / std_positive, &s, &draw);
        if (drawn)
            out[i] = (REAL)(negative ? w - std_negative * draw : mean_positive + std_positive * draw);
        else
            pending[kept++] = i;
    }
    return kept;
}
