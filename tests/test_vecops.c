/* test_vecops.c - the float vector kernels of the forward pass (vecops.h):
 * mt_expf against the exponential in double precision; every kernel of the
 * portable set against its order re-derived here from the documented
 * formulas (vec_kernels.h), the KDA step against llama.cpp's row-by-row
 * delta rule; and every SIMD set this CPU runs (avx2, avx512)
 * against the portable set bit for bit (any NaN equals any NaN), on random
 * inputs of every length around the vector widths and on edge inputs:
 * zeros of both signs, subnormals, huge magnitudes, infinities, NaN, the
 * exponential's overflow and underflow thresholds, -inf attention scores. */
#include "check.h"
#include "moontail/quant.h"
#include "moontail/vecops.h"

#include <stdint.h>

/* ------------------------------------------------------------ helpers */

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint64_t f64_bits(double d) {
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t next_u32(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

static float uniform(float a) { /* in [-a, a) */
    return ((float)(next_u32() >> 8) / 8388608.0f - 1.0f) * a;
}

/* Edge values: signed zeros, subnormals, the largest floats, infinities,
 * NaNs with payloads, and the exponential's thresholds. */
static const uint32_t edge_bits[] =
    {
        0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007fffff, 0x807fffff,
        0x00800000, 0x7f7fffff, 0xff7fffff, 0x7f800000, 0xff800000, 0x7fc00000,
        0xffc12345, 0x7fa00001, 0x42b17218, /* 88.7228394: e^x overflows */
        0x42b17217,                         /* 88.7228317: the largest finite e^x */
        0xc2aeac50,                         /* -87.3365479: e^x near the smallest normal */
        0xc2cff1b5,                         /* -103.972: e^x near the smallest subnormal */
        0xc2d00000,                         /* -104 */
        0x42b20000,                         /* 89 */
        0x3f800000, 0xbf800000, 0x41a00000, 0xc1a00000, 0x2f800000, 0xaf800000,
};
enum { N_EDGE = sizeof edge_bits / sizeof edge_bits[0] };

/* n floats of kind k: 0 small, 1 unit, 2 attention-like (|x| < 30),
 * 3 huge, 4 mostly edge values, 5 subnormals */
static void fill(float *x, int64_t n, int k) {
    for (int64_t i = 0; i < n; i++) {
        switch (k) {
        case 0:
            x[i] = uniform(1e-3f);
            break;
        case 1:
            x[i] = uniform(1.0f);
            break;
        case 2:
            x[i] = uniform(30.0f);
            break;
        case 3:
            x[i] = uniform(3e38f);
            break;
        case 4:
            x[i] = next_u32() % 3 ? bits_f32(edge_bits[next_u32() % N_EDGE]) : uniform(120.0f);
            break;
        default:
            x[i] = bits_f32(next_u32() & 0x807fffffu);
            break;
        }
    }
}
enum { N_KINDS = 6 };

/* Equal bits, or both NaN: which NaN payload survives an operation on two
 * NaNs depends on operand order, which compilers treat as free. */
static bool same_float(float a, float b) {
    return f32_bits(a) == f32_bits(b) || (isnan(a) && isnan(b));
}

static bool same_double(double a, double b) {
    return f64_bits(a) == f64_bits(b) || (isnan(a) && isnan(b));
}

static bool same_floats(const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!same_float(a[i], b[i])) return false;
    return true;
}

/* The ulp of the float nearest to v (2^-149 among subnormals). */
static double ulp_of(double v) {
    v = fabs(v);
    if (v < ldexp(1.0, -126)) return ldexp(1.0, -149);
    int e;
    frexp(v, &e);
    return ldexp(1.0, e - 24);
}

/* ---------------------------------------------------------------- expf */

static void test_expf(void) {
    double worst = 0.0;
    float worst_x = 0.0f;
    long n = 0, exact = 0, bad_special = 0;
    for (uint64_t u = 0; u <= 0xffffffffull; u += 997) {
        const float x = bits_f32((uint32_t)u);
        const float y = mt_expf(x);
        if (isnan(x)) {
            bad_special += !isnan(y) || (f32_bits(y) | 0x00400000u) != (f32_bits(x) | 0x00400000u);
            continue;
        }
        const double e = exp((double)x);
        if (e > 3.4028235677973366e38) { /* beyond the largest float after rounding */
            bad_special += !(isinf(y) && y > 0);
            continue;
        }
        if (e < ldexp(1.0, -150)) { /* rounds to 0 */
            bad_special += y != 0.0f || signbit(y);
            continue;
        }
        const double err = fabs((double)y - e) / ulp_of(e);
        n++;
        exact += y == (float)e;
        if (err > worst) worst = err, worst_x = x;
    }
    CHECK(worst <= 1.0, "mt_expf: %.3f ulp at x = %.9g (%.9g, exact %.9g)", worst, worst_x,
          mt_expf(worst_x), exp((double)worst_x));
    CHECK(bad_special == 0, "mt_expf: %ld NaN, overflow or underflow results are wrong",
          bad_special);
    CHECK(mt_expf(INFINITY) == INFINITY && mt_expf(-INFINITY) == 0.0f && mt_expf(0.0f) == 1.0f &&
              mt_expf(-0.0f) == 1.0f,
          "mt_expf of inf, -inf, 0, -0");
    printf("mt_expf: %ld sampled floats, max error %.3f ulp (x = %.9g), %.1f%% correctly "
           "rounded\n",
           n, worst, worst_x, 100.0 * (double)exact / (double)n);
}

/* ------------------------------------------- the documented orders */

static double tree16d(const double a[16]) {
    double b[8];
    for (int l = 0; l < 8; l++) b[l] = a[l] + a[l + 8];
    return ((b[0] + b[4]) + (b[2] + b[6])) + ((b[1] + b[5]) + (b[3] + b[7]));
}

static float tree8(const float a[8]) {
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

/* tanh as vec_kernels.h documents it: the Taylor series in double by
 * Horner below 0.5, 1 - 2 / (e^2|x| + 1) above. */
static float doc_tanh(float x) {
    static const double c[10] = {1.0,
                                 -1.0 / 3.0,
                                 2.0 / 15.0,
                                 -17.0 / 315.0,
                                 62.0 / 2835.0,
                                 -1382.0 / 155925.0,
                                 21844.0 / 6081075.0,
                                 -929569.0 / 638512875.0,
                                 6404582.0 / 10854718875.0,
                                 -443861162.0 / 1856156927625.0};
    const float ax = fabsf(x);
    float t;
    if (ax < 0.5f) {
        const double d = ax;
        double sum = c[9];
        for (int i = 8; i >= 0; i--) sum = sum * (d * d) + c[i];
        t = (float)(sum * d);
    } else {
        t = 1.0f - 2.0f / (mt_expf(2.0f * ax) + 1.0f);
    }
    return x < 0.0f ? -t : t;
}

static float doc_situ(float g, float h, float beta, float lb) {
    const float a = doc_tanh(g * (1.0f / beta)) * beta * (1.0f / (1.0f + mt_expf(-g)));
    return a * (lb > 0.0f ? doc_tanh(h * (1.0f / lb)) * lb : h);
}

/* The KDA step as llama.cpp's fused operator writes it, S stored value-major
 * (row r = value channel r): decay, S k, delta, update, S q, row by row. */
static void doc_kda_step(float *S, int32_t hd, const float *ex, const float *k, const float *q,
                         const float *v, float beta, float scale, float *o) {
    for (int32_t r = 0; r < hd; r++) {
        float *row = S + (size_t)r * hd, sum = 0.0f;
        for (int32_t i = 0; i < hd; i++) row[i] *= ex[i];
        for (int32_t i = 0; i < hd; i++) sum += row[i] * k[i];
        const float d = (v[r] - sum) * beta;
        sum = 0.0f;
        for (int32_t i = 0; i < hd; i++) row[i] += d * k[i];
        for (int32_t i = 0; i < hd; i++) sum += row[i] * q[i];
        o[r] = sum * scale;
    }
}

/* The KDA steps of one head over a few tokens: the kernel (key-major state)
 * against doc_kda_step (value-major), state and outputs bit for bit. */
static int check_kda(int32_t hd, int kind) {
    enum { MAXHD = 130, STEPS = 3 };
    static float s[MAXHD * MAXHD], sr[MAXHD * MAXHD], ex[MAXHD], k[MAXHD], q[MAXHD], v[MAXHD],
        o[MAXHD], orf[MAXHD];
    fill(s, (int64_t)hd * hd, kind == 4 ? 1 : kind);
    for (int32_t r = 0; r < hd; r++)
        for (int32_t i = 0; i < hd; i++) sr[(size_t)r * hd + i] = s[(size_t)i * hd + r];
    int bad = 0;
    for (int step = 0; step < STEPS; step++) {
        for (int32_t i = 0; i < hd; i++) ex[i] = mt_expf(-fabsf(uniform(3.0f)));
        fill(k, hd, kind);
        fill(q, hd, kind);
        fill(v, hd, kind);
        const float beta = 1.0f / (1.0f + mt_expf(uniform(4.0f))), scale = 0.0883883f;
        mt_vec_kda_step(s, hd, ex, k, q, v, beta, scale, o);
        doc_kda_step(sr, hd, ex, k, q, v, beta, scale, orf);
        bad += !same_floats(o, orf, hd);
        for (int32_t r = 0; r < hd; r++)
            for (int32_t i = 0; i < hd; i++)
                bad += !same_float(s[(size_t)i * hd + r], sr[(size_t)r * hd + i]);
    }
    return bad != 0;
}

/* Each kernel (of the set in use) against vec_kernels.h's order written
 * out again here. */
/* mt_fmaf against glibc's fmaf, which rounds a * b + c once (the C
 * standard's fma; an independent implementation): random floats of every
 * exponent and products that nearly cancel c, so that the sum's last bits
 * and ties are exercised, plus every pair of edge values. (Other C
 * libraries' fmaf is not always fused, so the comparison needs glibc.) */
static void test_fmaf(void) {
#ifdef __GLIBC__
    long bad = 0, cases = 0;
    for (long i = 0; i < 4000000; i++) {
        uint32_t ua = next_u32() ^ next_u32() << 9, ub = next_u32() ^ next_u32() << 9;
        float a, b, c;
        memcpy(&a, &ua, 4);
        memcpy(&b, &ub, 4);
        if (i % 2) { /* c near -a * b: cancellation, exact halfway cases */
            c = -(a * b) * (1.0f + (float)(int)(next_u32() % 64 - 32) * 0x1p-23f);
            if (i % 4 == 1) c = -(float)((double)a * b) + (float)(next_u32() % 3) * 0x1p-30f * c;
        } else {
            uint32_t uc = next_u32() ^ next_u32() << 9;
            memcpy(&c, &uc, 4);
        }
        const float got = mt_fmaf(a, b, c), want = fmaf(a, b, c);
        cases++;
        if (f32_bits(got) != f32_bits(want) && !(isnan(got) && isnan(want)) && bad++ < 3)
            fprintf(stderr, "  mt_fmaf(%a, %a, %a) = %a, fmaf %a\n", (double)a, (double)b,
                    (double)c, (double)got, (double)want);
    }
    /* exact sums just below a midpoint between two floats, the lower one odd,
     * whose last term is lost when the sum is rounded to double first: (1 +
     * 2^-j) * 2^e (1 - 2^-j) + 2^(e+24) + 2^(e+1) = c + 2^e - 2^(e-2j) */
    for (int j = 15; j <= 23; j++)
        for (int e = -100; e <= 100; e += 5)
            for (int sg = 0; sg < 2; sg++) {
                const float sgn = sg ? -1.0f : 1.0f, a = 1.0f + ldexpf(1.0f, -j);
                const float b = sgn * ldexpf(1.0f - ldexpf(1.0f, -j), e);
                const float c = sgn * (ldexpf(1.0f, e + 24) + ldexpf(1.0f, e + 1));
                const float got = mt_fmaf(a, b, c), want = fmaf(a, b, c);
                cases++;
                if (f32_bits(got) != f32_bits(want)) bad++;
            }
    const size_t ne = sizeof edge_bits / sizeof edge_bits[0];
    for (size_t i = 0; i < ne; i++)
        for (size_t j = 0; j < ne; j++)
            for (size_t k = 0; k < ne; k++) {
                float a, b, c;
                memcpy(&a, &edge_bits[i], 4);
                memcpy(&b, &edge_bits[j], 4);
                memcpy(&c, &edge_bits[k], 4);
                const float got = mt_fmaf(a, b, c), want = fmaf(a, b, c);
                cases++;
                if (f32_bits(got) != f32_bits(want) && !(isnan(got) && isnan(want))) bad++;
            }
    CHECK(bad == 0, "mt_fmaf differs from glibc's fmaf in %ld of %ld cases", bad, cases);
    printf("mt_fmaf: %ld cases equal glibc's fmaf\n", cases);
#else
    printf("mt_fmaf: not compared (glibc's fmaf is the oracle)\n");
#endif
}

static void test_orders(void) {
    enum { N = 301 };
    static float x[N], w[N], y[N], v[N], ref[N], g[N], cs[N], sn[N];
    int bad = 0, cases = 0;
    for (int k = 0; k < N_KINDS; k++)
        for (int64_t n = 0; n <= N; n += 1 + n / 7) {
            fill(x, n, k);
            fill(w, n, (k + 1) % N_KINDS);
            cases++;
            double lanes[16] = {0};
            for (int64_t i = 0; i < n; i++) lanes[i % 16] += (double)(x[i] * x[i]);
            bad += !same_double(mt_vec_sum_squares(x, n), tree16d(lanes));

            const float s = uniform(2.0f);
            for (int64_t i = 0; i < n; i++) ref[i] = (x[i] * s) * w[i];
            mt_vec_scale_mul(x, s, w, y, n);
            bad += !same_floats(y, ref, n);

            const float max = k == 4 ? 0.0f : uniform(10.0f);
            double el[16] = {0};
            for (int64_t i = 0; i < n; i++) {
                ref[i] = mt_expf(x[i] - max);
                el[i % 16] += (double)ref[i];
            }
            memcpy(v, x, (size_t)n * sizeof *v);
            bad += !same_double(mt_vec_exp_sum(v, n, max), tree16d(el));
            bad += !same_floats(v, ref, n);

            memcpy(g, x, (size_t)n * sizeof *g);
            for (int64_t i = 0; i < n; i++) ref[i] = g[i] / (1.0f + mt_expf(-g[i])) * w[i];
            memcpy(y, w, (size_t)n * sizeof *y);
            mt_vec_swiglu(g, y, n);
            bad += !same_floats(y, ref, n);

            const int32_t half = (int32_t)(n / 2);
            fill(cs, half, 1);
            fill(sn, half, 1);
            memcpy(y, x, (size_t)n * sizeof *y);
            memcpy(ref, x, (size_t)n * sizeof *ref);
            for (int32_t i = 0; i < half; i++) {
                const float a = ref[i], b = ref[i + half];
                ref[i] = a * cs[i] - b * sn[i];
                ref[i + half] = a * sn[i] + b * cs[i];
            }
            mt_vec_rope_neox(y, cs, sn, half);
            bad += !same_floats(y, ref, n);
            memcpy(y, x, (size_t)n * sizeof *y);
            memcpy(ref, x, (size_t)n * sizeof *ref);
            for (int32_t i = 0; i < half; i++) {
                const float a = ref[2 * i], b = ref[2 * i + 1];
                ref[2 * i] = a * cs[i] - b * sn[i];
                ref[2 * i + 1] = a * sn[i] + b * cs[i];
            }
            mt_vec_rope_norm(y, cs, sn, half);
            bad += !same_floats(y, ref, n);

            for (int64_t i = 0; i < n; i++) ref[i] = 1.0f / (1.0f + mt_expf(-x[i]));
            mt_vec_sigmoid(x, y, n);
            bad += !same_floats(y, ref, n);
            for (int64_t i = 0; i < n; i++) ref[i] = x[i] / (1.0f + mt_expf(-x[i]));
            memcpy(y, x, (size_t)n * sizeof *y);
            mt_vec_silu(y, n);
            bad += !same_floats(y, ref, n);
            for (int lbi = 0; lbi < 2; lbi++) {
                const float beta = 2.0f, lb = lbi ? 3.0f : 0.0f;
                for (int64_t i = 0; i < n; i++) ref[i] = doc_situ(x[i], w[i], beta, lb);
                memcpy(y, w, (size_t)n * sizeof *y);
                mt_vec_situ(x, y, n, beta, lb);
                bad += !same_floats(y, ref, n);
            }
            const float a = -uniform(2.7f), lb = -5.0f;
            for (int64_t i = 0; i < n; i++)
                ref[i] = mt_expf(lb * (1.0f / (1.0f + mt_expf((x[i] + w[i]) * a))));
            mt_vec_kda_decay(x, w, a, lb, y, n);
            bad += !same_floats(y, ref, n);
        }
    /* head widths around the AVX2 and AVX-512 blocks (4 and 8 registers of sums) */
    static const int32_t hds[] = {1,  2,  3,  5,  7,  8,  9,  15,  16,  17,  20,
                                  31, 32, 33, 63, 64, 65, 96, 127, 128, 129, 130};
    for (int k = 0; k < N_KINDS; k++)
        for (size_t i = 0; i < sizeof hds / sizeof hds[0]; i++) {
            cases++;
            bad += check_kda(hds[i], k);
        }
    /* attention: n_pos rows of dk (stride dk + 3) */
    for (int k = 0; k < N_KINDS; k++)
        for (int32_t dk = 1; dk <= 40; dk += 1 + dk / 4) {
            enum { P = 13 };
            static float q[64], kk[P * 64], sc[P], scr[P], out[64], outr[64];
            const size_t stride = (size_t)dk + 3;
            fill(q, dk, k == 3 ? 1 : k);
            fill(kk, (int64_t)(P * stride), k);
            const float scale = 0.125f;
            float maxr = -INFINITY;
            for (int32_t s = 0; s < P; s++) {
                float l[8] = {0};
                for (int32_t j = 0; j < dk; j++) l[j % 8] = l[j % 8] + q[j] * kk[s * stride + j];
                scr[s] = tree8(l) * scale;
                if (scr[s] > maxr) maxr = scr[s];
            }
            const float max = mt_vec_attn_scores(q, kk, stride, dk, P, scale, sc);
            cases++;
            bad += !same_floats(sc, scr, P) || !same_float(max, maxr);
            const float inv = 0.01f;
            for (int32_t d = 0; d < dk; d++) {
                outr[d] = 0.0f;
                for (int32_t s = 0; s < P; s++)
                    outr[d] = outr[d] + (scr[s] * inv) * kk[s * stride + d];
            }
            memset(out, 0, (size_t)dk * sizeof *out);
            mt_vec_attn_mix(scr, inv, kk, stride, dk, P, out);
            bad += !same_floats(out, outr, dk);
        }
    CHECK(bad == 0, "%s vector kernels: %d of %d cases differ from the documented orders",
          quant_kernel_name(), bad, cases);
    printf("%s: sums, scale, exp, SwiGLU, RoPE, attention, sigmoid, SiLU, situ, KDA follow the "
           "documented orders (%d cases)\n",
           quant_kernel_name(), cases);
}

/* -------------------------------------------------- SIMD == portable */

/* Runs one kernel call under the reference set and under `name` on copies
 * of the same inputs; compares every output bit. */
typedef struct vec_case {
    int64_t n;      /* elements (sum, scale, exp, swiglu), 2 * half (RoPE) */
    int32_t dk, np; /* attention: width, positions */
    size_t stride;
    float s;
} vec_case;

enum { MAXN = 5000 };
static float in_x[MAXN + 16], in_w[MAXN + 16], in_t[MAXN + 16], in_u[MAXN + 16];

/* All kernels on one input set; outputs into o (MAXN floats each, N_OUT of
 * them) and r (4 returned values). */
enum { N_OUT = 12 };
static void run_all(const vec_case *c, int off, float *o, double *r) {
    const int64_t n = c->n;
    const float *x = in_x + off, *w = in_w + off;
    r[0] = mt_vec_sum_squares(x, n);
    mt_vec_scale_mul(x, c->s, w, o, n);
    float *e = o + MAXN;
    memcpy(e, x, (size_t)n * sizeof *e);
    r[1] = mt_vec_exp_sum(e, n, c->s);
    float *h = o + 2 * MAXN;
    memcpy(h, w, (size_t)n * sizeof *h);
    mt_vec_swiglu(x, h, n);
    float *rn = o + 3 * MAXN, *rm = o + 4 * MAXN;
    const int32_t half = (int32_t)(n / 2);
    memcpy(rn, x, (size_t)n * sizeof *rn);
    memcpy(rm, x, (size_t)n * sizeof *rm);
    mt_vec_rope_neox(rn, in_t, in_u, half);
    mt_vec_rope_norm(rm, in_t, in_u, half);
    /* attention: q = in_t, rows of in_x / in_w, scores then mix */
    float *sc = o + 5 * MAXN, *mix = sc + 64;
    const float max = mt_vec_attn_scores(in_t, x, c->stride, c->dk, c->np, c->s, sc);
    r[2] = max;
    r[3] = mt_vec_exp_sum(sc, c->np, max);
    memset(mix, 0, (size_t)c->dk * sizeof *mix);
    mt_vec_attn_mix(sc, (float)(1.0 / r[3]), w, c->stride, c->dk, c->np, mix);
    /* sigmoid, SiLU, situ with and without the linear bound, K3's decay */
    mt_vec_sigmoid(x, o + 6 * MAXN, n);
    float *si = o + 7 * MAXN, *su = o + 8 * MAXN, *sv = o + 9 * MAXN;
    memcpy(si, x, (size_t)n * sizeof *si);
    mt_vec_silu(si, n);
    memcpy(su, w, (size_t)n * sizeof *su);
    mt_vec_situ(x, su, n, 2.0f, 3.0f);
    memcpy(sv, w, (size_t)n * sizeof *sv);
    mt_vec_situ(x, sv, n, 0.5f, 0.0f);
    mt_vec_kda_decay(x, w, c->s, -5.0f, o + 10 * MAXN, n);
    /* a KDA step of width dk: state (dk x dk) from in_u, k/q/v from the others */
    const int32_t hd = c->dk;
    float *st = o + 11 * MAXN, *ko = st + (size_t)hd * hd;
    memcpy(st, in_u, (size_t)hd * hd * sizeof *st);
    mt_vec_kda_step(st, hd, in_u + 16, x, in_t, w, 0.7f, 0.125f, ko);
}

static void test_set(const char *name) {
    static float o_ref[N_OUT * MAXN], o_set[N_OUT * MAXN];
    double r_ref[4], r_set[4];
    int bad = 0, cases = 0;
    static const int64_t lens[] = {0,   1,   2,   3,   7,   8,   9,    15,   16,
                                   17,  23,  31,  32,  33,  47,  63,   64,   65,
                                   127, 128, 129, 255, 257, 768, 1000, 2048, 4099};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (int k = 0; k < N_KINDS; k++)
            for (int off = 0; off < 2; off++) {
                const int64_t n = lens[li];
                fill(in_x, MAXN, k);
                fill(in_w, MAXN, (k + 2) % N_KINDS);
                fill(in_t, MAXN, k == 3 ? 1 : k);
                fill(in_u, MAXN, 1);
                if (k == 2) /* attention masks: some keys give -inf scores */
                    for (int64_t i = 0; i < MAXN; i += 37) in_x[i] = -INFINITY;
                vec_case c = {n, 0, 0, 0, k == 4 ? 0.0f : uniform(4.0f)};
                c.dk = (int32_t)(n < 64 ? n : 64 + n % 7);
                c.np =
                    c.dk ? (int32_t)((MAXN - 64) / (c.dk + 5) < 37 ? (MAXN - 64) / (c.dk + 5) : 37)
                         : 0;
                c.stride = (size_t)c.dk + 5;
                memset(o_ref, 0, sizeof o_ref);
                memset(o_set, 0, sizeof o_set);
                quant_kernels_select("reference");
                run_all(&c, off, o_ref, r_ref);
                quant_kernels_select(name);
                run_all(&c, off, o_set, r_set);
                cases++;
                bool same = same_floats(o_ref, o_set, N_OUT * MAXN);
                for (int i = 0; i < 4; i++) same &= same_double(r_ref[i], r_set[i]);
                if (!same && bad++ < 5)
                    fprintf(stderr, "  %s: length %lld, inputs %d, offset %d differ\n", name,
                            (long long)n, k, off);
            }
    quant_kernels_select("reference");
    CHECK(bad == 0, "%s vector kernels differ from the portable ones in %d of %d cases", name, bad,
          cases);
    printf("%s vector kernels == portable: %d cases bit-identical\n", name, cases);
}

int main(void) {
    printf("kernels: %s\n", quant_kernel_name());
    test_expf();
    test_fmaf();
    static const char *const sets[] = {"reference", "avx2", "avx512"};
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
        if (quant_kernels_select(sets[i]) != 0) {
            printf("%s: not available on this CPU\n", sets[i]);
            continue;
        }
        test_orders();
        if (i > 0) test_set(sets[i]);
    }
    quant_kernels_select("reference");
    return check_report("test_vecops");
}
