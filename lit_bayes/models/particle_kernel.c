/* A partial BNN with one stochastic linear layer, for J particles of that layer, forward and backward in one pass
 * each (Feynman-Kac spec Eqs. 5-6, the psi-gradient of OHSMC; built and loaded by
 * lit_bayes/models/particle_kernel.py).
 *
 * The network is linear layers l = 0..L-1 with activations between them: a_l = W_l z_{l-1} + b_l, z_l = act_l(a_l),
 * z_{-1} = x, outputs a_{L-1}. Layer S is the particles': W_S^j, b_S^j for particle j; the others are psi, shared.
 * The trunk (layers below S) runs once per point, the layers from S up once per particle and point. The forward
 * writes the outputs for every particle and point, (J, B, K_{L-1}). The backward takes the gradient of a loss with
 * respect to those outputs, recomputes the forward, and goes back down to psi's gradients:
 *
 *   dL/dW_l = sum G_l z_{l-1}^T,   dL/db_l = sum G_l,   G_{l-1} = (W_l^T G_l) * act_{l-1}'(a_{l-1}),
 *
 * the sums over particles and points above S, over points below it, where G_{S-1} = sum_j (W_S^j^T G_S^j) *
 * act_{S-1}'(a_{S-1}) (the particles' own parameters get no gradient). Points go LANES to a vector, so every unit
 * of a layer is a few vector multiply-adds of a broadcast weight; nothing of size J x B x K goes to memory but the
 * outputs.
 *
 * GCC's vector extensions (GCC and clang): 64-byte vectors where the compiler targets AVX-512, else 32 bytes
 * (lit_bayes/vector_exp.h). exp is a polynomial (vexp, there); tanh and the logistic function are built on it.
 */
#include <stdlib.h>
#include <string.h>

/* Fixed when this file is compiled (once per shape and dtype): DOUBLE (1: float64, 0: float32), INPUT = the width
 * of x, LAYERS = L, WIDTHS = K_0, ..., K_{L-1} (the layers' output widths), ACTS = act_0, ..., act_{L-1} (one of
 * ACT_*, act_{L-1} unused), STOCHASTIC = S, MAX_WIDTH = max(INPUT, K_l). */
#if !defined(DOUBLE) || !defined(INPUT) || !defined(LAYERS) || !defined(WIDTHS) || !defined(ACTS) || \
    !defined(STOCHASTIC) || !defined(MAX_WIDTH)
#error "compile with -DDOUBLE=0|1 -DINPUT=D -DLAYERS=L -DWIDTHS=K_0,... -DACTS=a_0,... -DSTOCHASTIC=S -DMAX_WIDTH=K"
#endif

#include "../vector_exp.h"

enum { ACT_IDENTITY = 0, ACT_RELU = 1, ACT_TANH = 2, ACT_SIGMOID = 3, ACT_GELU_TANH = 4 };

static const int widths[LAYERS] = {WIDTHS};
static const int acts[LAYERS] = {ACTS};

/* the input width of layer l */
static inline int width_in(int l) { return l == 0 ? INPUT : widths[l - 1]; }

/* where layer l's gradient sums start among every psi layer's, dL/dW_l (K_l x in_l vectors) then dL/db_l (K_l) */
static inline long sums_offset(int l) {
    long offset = 0;
    for (int m = 0; m < l; m++)
        if (m != STOCHASTIC) offset += (long)widths[m] * (width_in(m) + 1);
    return offset;
}

/* 1 / (1 + e^-x) */
static inline vr vlogistic(vr x) { return 1 / (1 + vexp(-x)); }

#define GELU_C 0.7978845608028654 /* sqrt(2 / pi): the tanh GELU is x sigma(2u), u = GELU_C (x + GELU_K x^3) */
#define GELU_K 0.044715

/* z = act(a); *saved gets what the backward needs besides a and z (the tanh GELU's logistic factor sigma(2u)) */
static inline vr act_forward(int act, vr a, vr *saved) {
    switch (act) {
    case ACT_RELU:
        return (vr)((vm)a & ~(a <= splat(0))); /* max(a, 0), NaN stays NaN */
    case ACT_TANH:
        return 1 - 2 / (1 + vexp(2 * a));
    case ACT_SIGMOID:
        return vlogistic(a);
    case ACT_GELU_TANH:
        *saved = vlogistic((real)(2 * GELU_C) * (a + (real)GELU_K * a * a * a));
        return a * *saved;
    default:
        return a;
    }
}

/* g act'(a) from the upstream gradient g, a, z = act(a) and what act_forward saved */
static inline vr act_backward(int act, vr g, vr a, vr z, vr saved) {
    switch (act) {
    case ACT_RELU:
        return (vr)((vm)g & (a > splat(0)));
    case ACT_TANH:
        return g * (1 - z * z);
    case ACT_SIGMOID:
        return g * z * (1 - z);
    case ACT_GELU_TANH: {
        vr slope = (real)(2 * GELU_C) * a * (1 + (real)(3 * GELU_K) * a * a); /* a 2u' */
        return g * (saved + slope * saved * (1 - saved));
    }
    default:
        return g;
    }
}

/* out = w x + b for a vector of points x (in vectors), w (out, in) row-major, b (out) or NULL: the inputs in the
 * outer loop, so that the out sums are independent chains of multiply-adds */
static inline void product(const int in, const int out, const vr *x, const real *w, const real *b, vr *sum) {
    for (int o = 0; o < out; o++) sum[o] = splat(b ? b[o] : 0);
    for (int i = 0; i < in; i++) {
        const vr xi = x[i];
#pragma GCC unroll 64
        for (int o = 0; o < out; o++) sum[o] += w[o * in + i] * xi;
    }
}

typedef vr layers_t[LAYERS][MAX_WIDTH];

/* a_l, z_l and what act_l saved for layers first..last on one vector of points, z_{first-1} = below; layer S's
 * parameters are w_s and b_s (b_s may be NULL), every other layer's params[2l] and params[2l+1] (may be NULL) */
static inline void forward_layers(int first, int last, const vr *below, const real *w_s, const real *b_s,
                                  const real *const *params, layers_t a, layers_t z, layers_t saved) {
#pragma GCC unroll 8
    for (int l = first; l <= last; l++) {
        const vr *in = l == first ? below : z[l - 1];
        if (l == STOCHASTIC) product(width_in(l), widths[l], in, w_s, b_s, a[l]);
        else product(width_in(l), widths[l], in, params[2 * l], params[2 * l + 1], a[l]);
        if (l < LAYERS - 1)
            for (int o = 0; o < widths[l]; o++) z[l][o] = act_forward(acts[l], a[l][o], &saved[l][o]);
    }
}

/* Back through psi layers last..first from g = dL/da_last (overwritten): each layer's gradient sums into sum, and
 * g left as dL/da_{first-1} where first > 0; z_{first-1} = below */
static inline void backward_layers(int first, int last, const vr *below, const real *const *params, layers_t a,
                                   layers_t z, layers_t saved, vr *g, vr *sum) {
    vr back[MAX_WIDTH];
#pragma GCC unroll 8
    for (int l = last; l >= first; l--) {
        const int in = width_in(l), out = widths[l];
        const vr *input = l == first ? below : z[l - 1];
        vr *s = sum + sums_offset(l);
        for (int o = 0; o < out; o++) {
            for (int i = 0; i < in; i++) s[o * in + i] += g[o] * input[i];
            s[out * in + o] += g[o];
        }
        if (l == 0) return;
        const real *w = params[2 * l];
        for (int i = 0; i < in; i++) {
            vr total = splat(0);
            for (int o = 0; o < out; o++) total += w[o * in + i] * g[o];
            back[i] = act_backward(acts[l - 1], total, a[l - 1][i], z[l - 1][i], saved[l - 1][i]);
        }
        memcpy(g, back, sizeof(vr) * in);
    }
}

/* x (points, INPUT) row-major as (vectors of LANES points) x INPUT vectors, the points past the last zero */
static vr *points_by_vector(long points, const real *x) {
    long vectors = (points + LANES - 1) / LANES;
    vr *t = aligned_alloc(VBYTES, (size_t)(vectors * INPUT) * VBYTES);
    if (!t) return NULL;
    memset(t, 0, (size_t)(vectors * INPUT) * VBYTES);
    for (long b = 0; b < points; b++)
        for (int i = 0; i < INPUT; i++) t[(b / LANES) * INPUT + i][b % LANES] = x[b * INPUT + i];
    return t;
}

/* the trunk's output on vector v of points: z_{S-1}, or x for S = 0 */
static inline const vr *trunk(const vr *x, const real *const *params, layers_t a, layers_t z, layers_t saved) {
    if (STOCHASTIC == 0) return x;
    forward_layers(0, STOCHASTIC - 1, x, NULL, NULL, params, a, z, saved);
    return z[STOCHASTIC - 1];
}

/* out (particles, points, K_{L-1}) = the network's outputs for every particle (weight (particles, K_S, in_S),
 * bias (particles, K_S) or NULL) on every point of x (points, INPUT). Returns 0, or -1 where memory ran out. */
int particle_network_forward(long points, long particles, const real *x, const real *weight, const real *bias,
                             const real *const *params, real *out) {
    vr *xv = points_by_vector(points, x);
    if (!xv) return -1;
    const long vectors = (points + LANES - 1) / LANES, top = widths[LAYERS - 1];
    const long k = widths[STOCHASTIC], in = width_in(STOCHASTIC);
    layers_t a, z, saved;
    for (long v = 0; v < vectors; v++) {
        const vr *h = trunk(xv + v * INPUT, params, a, z, saved);
        for (long j = 0; j < particles; j++) {
            forward_layers(STOCHASTIC, LAYERS - 1, h, weight + j * k * in, bias ? bias + j * k : NULL, params, a, z,
                           saved);
            for (long lane = 0; lane < LANES && v * LANES + lane < points; lane++)
                for (int o = 0; o < top; o++) out[(j * points + v * LANES + lane) * top + o] = a[LAYERS - 1][o][lane];
        }
    }
    free(xv);
    return 0;
}

/* The backward of particle_network_forward for grad_out (particles, points, K_{L-1}): grads[2l] = dL/dW_l and
 * grads[2l+1] = dL/db_l of every layer l but S (NULL where the bias is), written whole. A particle's points whose
 * gradients are all 0 add nothing (they are skipped), even where its parameters or outputs are NaN or infinite.
 * Returns 0, or -1 where memory ran out. */
int particle_network_backward(long points, long particles, const real *x, const real *weight, const real *bias,
                              const real *const *params, const real *grad_out, real *const *grads) {
    const long vectors = (points + LANES - 1) / LANES, top = widths[LAYERS - 1], sums = sums_offset(LAYERS);
    const long k = widths[STOCHASTIC], in = width_in(STOCHASTIC);
    vr *xv = points_by_vector(points, x);
    vr *sum = aligned_alloc(VBYTES, (size_t)sums * VBYTES + VBYTES);
    if (!xv || !sum) {
        free(xv);
        free(sum);
        return -1;
    }
    memset(sum, 0, (size_t)sums * VBYTES);
    layers_t a, z, saved;
    vr g[MAX_WIDTH], gh[MAX_WIDTH];
    for (long v = 0; v < vectors; v++) {
        const vr *h = trunk(xv + v * INPUT, params, a, z, saved);
        for (int i = 0; i < in; i++) gh[i] = splat(0);
        for (long j = 0; j < particles; j++) {
            const real *w = weight + j * k * in;
            for (int o = 0; o < top; o++) g[o] = splat(0); /* the points past the last have no gradient */
            int nonzero = 0;
            for (long lane = 0; lane < LANES && v * LANES + lane < points; lane++)
                for (int o = 0; o < top; o++) {
                    g[o][lane] = grad_out[(j * points + v * LANES + lane) * top + o];
                    nonzero |= g[o][lane] != 0;
                }
            if (!nonzero) continue; /* a particle without weight (not resampled, or NaN): nothing, not 0 x NaN */
            forward_layers(STOCHASTIC, LAYERS - 1, h, w, bias ? bias + j * k : NULL, params, a, z, saved);
            if (STOCHASTIC < LAYERS - 1)
                backward_layers(STOCHASTIC + 1, LAYERS - 1, z[STOCHASTIC], params, a, z, saved, g, sum);
            if (STOCHASTIC > 0) /* g = dL/da_S: its part of dL/dz_{S-1} */
                for (int i = 0; i < in; i++) {
                    vr total = gh[i];
                    for (int o = 0; o < k; o++) total += w[o * in + i] * g[o];
                    gh[i] = total;
                }
        }
        if (STOCHASTIC > 0) { /* the trunk's forward again (the particles' layers overwrote nothing of it) */
            for (int i = 0; i < in; i++)
                gh[i] = act_backward(acts[STOCHASTIC - 1], gh[i], a[STOCHASTIC - 1][i], z[STOCHASTIC - 1][i],
                                     saved[STOCHASTIC - 1][i]);
            backward_layers(0, STOCHASTIC - 1, xv + v * INPUT, params, a, z, saved, gh, sum);
        }
    }
    for (int l = 0; l < LAYERS; l++) {
        if (l == STOCHASTIC) continue;
        const vr *s = sum + sums_offset(l);
        const long count = (long)widths[l] * (width_in(l) + 1), weights = (long)widths[l] * width_in(l);
        for (long c = 0; c < count; c++) {
            real total = 0;
            for (long lane = 0; lane < LANES; lane++) total += s[c][lane];
            if (c < weights) grads[2 * l][c] = total;
            else if (grads[2 * l + 1]) grads[2 * l + 1][c - weights] = total;
        }
    }
    free(xv);
    free(sum);
    return 0;
}
