/* test_mathf.c - the project's own elementary functions (mathf.h) against
 * glibc's, an independent implementation whose double exp, log, sin, cos
 * and pow are within 1 ulp of the exact values (so within 1 ulp of each
 * other is what two good implementations give):
 *  - the double functions on millions of random inputs spanning their ranges
 *    (RoPE angles pos * base^(-2i / n_rot) among them, and the two ways of
 *    reducing sin and cos either side of 2^26) must be within MAX_ULP_DOUBLE
 *    ulps of glibc's;
 *  - the float functions must equal glibc's double result rounded to float
 *    on all but a counted few inputs (over 10 M each, mostly stepping through
 *    the floats' bit patterns), which are 1 float ulp away: both sides round
 *    a double that is off by an ulp or so, and differ only when the exact
 *    value lies that close to a midpoint between two floats;
 *  - special values (zeros, infinities, NaN, out of the domain, the
 *    overflow and underflow edges, powf's table of cases) as C gives them.
 * Without glibc only the special values are checked. */
#include "check.h"
#include "moontail/mathf.h"

#include <float.h>
#include <stdbool.h>
#include <stdint.h>

/* Tolerances: the double functions measure <= 1 ulp from glibc's; a float
 * result may differ from (float)glibc in at most 1 of FLOAT_DIFF_RATE
 * inputs (measured: none in 80 M), and then by one ulp. */
#define MAX_ULP_DOUBLE  2.0
#define FLOAT_DIFF_RATE 1000000

/* ------------------------------------------------------------ helpers */

static uint64_t f64_bits(double d) {
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static bool same_double(double a, double b) {
    return f64_bits(a) == f64_bits(b) || (isnan(a) && isnan(b));
}

static bool same_float(float a, float b) {
    return f32_bits(a) == f32_bits(b) || (isnan(a) && isnan(b));
}

/* The ulp of the double nearest to v (2^-1074 among subnormals). */
static double ulp_double(double v) {
    v = fabs(v);
    if (v < DBL_MIN) return ldexp(1.0, -1074);
    int e;
    frexp(v, &e);
    return ldexp(1.0, e - 53);
}

/* -------------------------------------------------- double functions */

#ifdef __GLIBC__

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint64_t next_u64(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

static double uniform(double a, double b) { /* in [a, b) */
    return a + (b - a) * ((double)(next_u64() >> 11) * 0x1p-53);
}

/* A magnitude spread evenly over the binades of [a, b), a random sign when
 * sign is set. */
static double log_uniform(double a, double b, bool sign) {
    const double x = exp(uniform(log(a), log(b)));
    return sign && (next_u64() & 1) ? -x : x;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The ulp of the float nearest to v (2^-149 among subnormals). */
static double ulp_float(double v) {
    v = fabs(v);
    if (v < FLT_MIN) return ldexp(1.0, -149);
    int e;
    frexp(v, &e);
    return ldexp(1.0, e - 24);
}

/* The angle of pair i at position pos: pos * base^(-2i / n_rot), for the
 * bases and rotary sizes of real models, positions up to 2^20. */
static double rope_angle(void) {
    static const double bases[] = {1e4, 5e4, 1e5, 5e5, 1e6, 1e7};
    static const int n_rots[] = {32, 64, 96, 128, 256};
    const double base = bases[next_u64() % 6];
    const int n_rot = n_rots[next_u64() % 5], i = (int)(next_u64() % (uint64_t)(n_rot / 2));
    const double pos = (double)(next_u64() % (1u << 20));
    return (double)(float)(pos * pow(base, -2.0 * i / n_rot));
}

enum gen_kind {
    G_UNIFORM,    /* uniform in [a, b) */
    G_LOG,        /* log-uniform in [a, b), positive */
    G_LOG_SIGNED, /* log-uniform in [a, b), either sign */
    G_ROPE,       /* rope_angle() */
};

static double generate(enum gen_kind g, double a, double b) {
    switch (g) {
    case G_UNIFORM:
        return uniform(a, b);
    case G_LOG:
        return log_uniform(a, b, false);
    case G_LOG_SIGNED:
        return log_uniform(a, b, true);
    default:
        return rope_angle();
    }
}

/* n inputs of one kind: ours within MAX_ULP_DOUBLE ulps of glibc's. */
static void cmp_double(const char *name, double (*ours)(double), double (*ref)(double),
                       enum gen_kind g, double a, double b, long n) {
    double worst = 0.0, worst_x = 0.0;
    long equal = 0;
    for (long i = 0; i < n; i++) {
        const double x = generate(g, a, b), got = ours(x), want = ref(x);
        if (same_double(got, want)) {
            equal++;
            continue;
        }
        const double err = isfinite(want) ? fabs(got - want) / ulp_double(want) : INFINITY;
        if (!(err <= worst)) worst = err, worst_x = x;
    }
    CHECK(worst <= MAX_ULP_DOUBLE, "%s(%a) = %a, glibc %a: %.2f ulp apart", name, worst_x,
          ours(worst_x), ref(worst_x), worst);
    printf("%s on %s [%g, %g): %ld inputs, %.2f%% equal to glibc, max %.2f ulp\n", name,
           g == G_UNIFORM ? "uniform"
           : g == G_ROPE  ? "RoPE angles"
                          : "log-uniform",
           a, b, n, 100.0 * (double)equal / (double)n, worst);
}

static void test_double(void) {
    const long n = 1000000;
    cmp_double("mt_math_exp", mt_math_exp, exp, G_UNIFORM, -745.1, 709.78, n);
    cmp_double("mt_math_exp", mt_math_exp, exp, G_UNIFORM, -1.0, 1.0, n);
    cmp_double("mt_math_exp", mt_math_exp, exp, G_LOG_SIGNED, 0x1p-60, 1.0, n);
    cmp_double("mt_math_log", mt_math_log, log, G_LOG, 0x1p-1074, DBL_MAX, n);
    cmp_double("mt_math_log", mt_math_log, log, G_UNIFORM, 0.5, 2.0, n);
    cmp_double("mt_math_log", mt_math_log, log, G_UNIFORM, 1.0 - 0x1p-10, 1.0 + 0x1p-10, n);
    const struct {
        enum gen_kind g;
        double a, b;
    } trig[] = {
        {G_UNIFORM, -8.0, 8.0},
        {G_LOG_SIGNED, 0x1p-30, 0x1p26},               /* Cody and Waite */
        {G_UNIFORM, 0x1p26 - 4096.0, 0x1p26 + 4096.0}, /* either side of the switch */
        {G_LOG_SIGNED, 0x1p26, DBL_MAX},               /* Payne and Hanek */
        {G_ROPE, 0.0, 0x1p20},
    };
    for (size_t i = 0; i < sizeof trig / sizeof trig[0]; i++) {
        cmp_double("mt_math_sin", mt_math_sin, sin, trig[i].g, trig[i].a, trig[i].b, n);
        cmp_double("mt_math_cos", mt_math_cos, cos, trig[i].g, trig[i].a, trig[i].b, n);
    }
    /* multiples of pi/2 rounded, the largest doubles, and either side of the
     * switch between the reductions */
    const double xs[] = {1.5707963267948966,
                         3.141592653589793,
                         4.71238898038469,
                         6.283185307179586,
                         1e22,
                         0x1p1023,
                         DBL_MAX,
                         0x1p26,
                         nextafter(0x1p26, 0.0),
                         nextafter(0x1p26, INFINITY)};
    for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
        for (int sg = 0; sg < 2; sg++) {
            const double x = sg ? -xs[i] : xs[i], s = mt_math_sin(x), c = mt_math_cos(x);
            CHECK(fabs(s - sin(x)) <= ulp_double(sin(x)) && fabs(c - cos(x)) <= ulp_double(cos(x)),
                  "sin/cos(%a) = %a %a, glibc %a %a", x, s, c, sin(x), cos(x));
            double s2, c2;
            mt_math_sincos(x, &s2, &c2);
            CHECK(same_double(s, s2) && same_double(c, c2),
                  "mt_math_sincos(%a) differs from sin/cos", x);
        }
    }
}

/* --------------------------------------------------- float functions */

/* Counts the inputs where a float function differs from glibc's double
 * function rounded once, each of them at most 1 ulp. */
typedef struct {
    const char *name;
    long n, diff;
    double worst;
    float worst_x;
} fcount;

static void fcount_add(fcount *c, float x, float got, double want_d) {
    const float want = (float)want_d;
    c->n++;
    if (same_float(got, want)) return;
    c->diff++;
    const double err = isfinite(want) && isfinite(got)
                           ? fabs((double)got - (double)want) / ulp_float((double)want)
                           : INFINITY;
    if (!(err <= c->worst)) c->worst = err, c->worst_x = x;
}

static void fcount_check(const fcount *c) {
    CHECK(c->worst <= 1.0, "%s(%a): %.2f float ulps from glibc", c->name, (double)c->worst_x,
          c->worst);
    CHECK(c->diff <= c->n / FLOAT_DIFF_RATE, "%s: %ld of %ld differ from glibc", c->name, c->diff,
          c->n);
    printf("%s: %ld inputs, %ld differ from (float) of glibc's double by 1 ulp\n", c->name, c->n,
           c->diff);
}

static void test_float(void) {
    fcount lg = {.name = "mt_math_logf"}, l2 = {.name = "mt_math_log2f"},
           sn = {.name = "mt_math_sinf"}, cs = {.name = "mt_math_cosf"};
    long not_both = 0; /* mt_math_sincosf unlike mt_math_sinf and mt_math_cosf */
    /* every 131st positive finite float (and its negative for sin and cos
     * below 2^24, where RoPE angles live), every 10007th above */
    for (uint32_t u = 1; u < 0x7f800000u; u += 131) {
        const float x = bits_f32(u);
        fcount_add(&lg, x, mt_math_logf(x), log((double)x));
        fcount_add(&l2, x, mt_math_log2f(x), log2((double)x));
    }
    for (uint32_t u = 0; u < 0x7f800000u; u += u < 0x4b800000u ? 131 : 10007) {
        for (int sg = 0; sg < 2; sg++) {
            const float x = bits_f32(u | (uint32_t)sg << 31);
            float s, c;
            mt_math_sincosf(x, &s, &c);
            fcount_add(&sn, x, s, sin((double)x));
            fcount_add(&cs, x, c, cos((double)x));
            not_both += !same_float(s, mt_math_sinf(x)) || !same_float(c, mt_math_cosf(x));
        }
    }
    /* RoPE angles */
    for (long i = 0; i < 2000000; i++) {
        const float x = (float)rope_angle();
        fcount_add(&sn, x, mt_math_sinf(x), sin((double)x));
        fcount_add(&cs, x, mt_math_cosf(x), cos((double)x));
    }
    CHECK(not_both == 0, "mt_math_sincosf differs from mt_math_sinf, mt_math_cosf on %ld floats",
          not_both);
    fcount_check(&lg);
    fcount_check(&l2);
    fcount_check(&sn);
    fcount_check(&cs);

    /* powf: random x > 0 and y with x^y in the float range, RoPE's
     * base^(-2/n_rot), and integer y of negative x */
    fcount pw = {.name = "mt_math_powf"};
    for (long i = 0; i < 4000000; i++) {
        const float x = (float)log_uniform(0x1p-30, 0x1p30, false), y = (float)uniform(-4.0, 4.0);
        fcount_add(&pw, x, mt_math_powf(x, y), pow((double)x, (double)y));
    }
    static const float bases[] = {1e4f, 5e4f, 1e5f, 5e5f, 1e6f, 1e7f, 10.0f, 2.0f};
    for (size_t b = 0; b < sizeof bases / sizeof bases[0]; b++)
        for (int n_rot = 2; n_rot <= 1024; n_rot += 2) {
            const float y = -2.0f / (float)n_rot;
            fcount_add(&pw, bases[b], mt_math_powf(bases[b], y), pow((double)bases[b], (double)y));
        }
    for (long i = 0; i < 200000; i++) {
        const float x = -(float)log_uniform(0.01, 100.0, false);
        const float y = (float)((int)(next_u64() % 41) - 20);
        fcount_add(&pw, x, mt_math_powf(x, y), pow((double)x, (double)y));
    }
    fcount_check(&pw);
}
#endif

/* ---------------------------------------------------- special values */

static void test_special(void) {
    CHECK(isnan(mt_math_exp(NAN)) && mt_math_exp(INFINITY) == INFINITY &&
              same_double(mt_math_exp(-INFINITY), 0.0),
          "mt_math_exp of NaN, inf, -inf");
    CHECK(mt_math_exp(0.0) == 1.0 && mt_math_exp(-0.0) == 1.0 && mt_math_exp(0x1p-1074) == 1.0,
          "mt_math_exp near 0");
    CHECK(isfinite(mt_math_exp(709.782712893384)) && mt_math_exp(709.7827128933841) == INFINITY &&
              mt_math_exp(1000.0) == INFINITY,
          "mt_math_exp at the overflow edge: %a %a", mt_math_exp(709.782712893384),
          mt_math_exp(709.7827128933841));
    CHECK(mt_math_exp(-745.1332191019411) == 0x1p-1074 &&
              same_double(mt_math_exp(-745.1332191019412), 0.0) &&
              same_double(mt_math_exp(-1000.0), 0.0),
          "mt_math_exp at the underflow edge: %a %a", mt_math_exp(-745.1332191019411),
          mt_math_exp(-745.1332191019412));
    CHECK(mt_math_log(0.0) == -INFINITY && mt_math_log(-0.0) == -INFINITY &&
              isnan(mt_math_log(-1.0)) && isnan(mt_math_log(-INFINITY)) &&
              isnan(mt_math_log(NAN)) && mt_math_log(INFINITY) == INFINITY &&
              same_double(mt_math_log(1.0), 0.0),
          "mt_math_log of 0, -0, -1, -inf, NaN, inf, 1");
    CHECK(fabs(mt_math_log(0x1p-1074) + 744.4400719213812) <= 0x1p-43 &&
              fabs(mt_math_log(DBL_MAX) - 709.782712893384) <= 0x1p-43,
          "mt_math_log of the smallest subnormal and the largest double: %a %a",
          mt_math_log(0x1p-1074), mt_math_log(DBL_MAX));
    for (int k = -1074; k <= 1023; k++)
        CHECK(fabs(mt_math_log(ldexp(1.0, k)) - k * 0.6931471805599453) <=
                  2 * ulp_double(k * 0.69314718),
              "mt_math_log(2^%d) = %a", k, mt_math_log(ldexp(1.0, k)));
    for (int k = -149; k <= 127; k++)
        CHECK(mt_math_log2f(ldexpf(1.0f, k)) == (float)k, "mt_math_log2f(2^%d) = %a", k,
              (double)mt_math_log2f(ldexpf(1.0f, k)));
    CHECK(mt_math_log2f(0.0f) == -INFINITY && isnan(mt_math_log2f(-1.0f)) &&
              mt_math_log2f(INFINITY) == INFINITY && mt_math_logf(-0.0f) == -INFINITY &&
              isnan(mt_math_logf(-2.0f)) && isnan(mt_math_logf(NAN)),
          "mt_math_log2f / mt_math_logf of 0, -1, inf, -0, -2, NaN");

    double s, c;
    mt_math_sincos(-0.0, &s, &c);
    CHECK(same_double(s, -0.0) && c == 1.0 && same_double(mt_math_sin(0.0), 0.0),
          "sin, cos of -0, 0");
    CHECK(mt_math_sin(0x1p-1074) == 0x1p-1074 && mt_math_sin(-1e-300) == -1e-300 &&
              mt_math_cos(1e-300) == 1.0,
          "sin, cos of tiny x");
    CHECK(isnan(mt_math_sin(INFINITY)) && isnan(mt_math_cos(-INFINITY)) &&
              isnan(mt_math_sin(NAN)) && isnan(mt_math_cos(NAN)),
          "sin, cos of inf, NaN");
    /* The double closest to a multiple of pi/2, 6381956970095103 2^797 (2^-61
     * from it), and its neighbours: sin and cos correctly rounded, from
     * mpmath at 3000 bits (glibc 2.36's cos is 8 ulps off at the first). */
    static const struct {
        double m, s, c;
    } hard[] = {
        {6381956970095103.0, 0x1p+0, -0x1.14ae72e6ba22fp-61},
        {6381956970095102.0, -0x1.392680b64726cp-1, 0x1.9511a46ce5cddp-1},
        {6381956970095104.0, -0x1.392680b64726cp-1, -0x1.9511a46ce5cddp-1},
    };
    for (size_t i = 0; i < sizeof hard / sizeof hard[0]; i++) {
        const double x = ldexp(hard[i].m, 797);
        mt_math_sincos(x, &s, &c);
        CHECK(same_double(s, hard[i].s) && same_double(c, hard[i].c),
              "sin/cos(%a) = %a %a, not %a %a", x, s, c, hard[i].s, hard[i].c);
        mt_math_sincos(-x, &s, &c);
        CHECK(same_double(s, -hard[i].s) && same_double(c, hard[i].c), "sin/cos(%a) = %a %a", -x, s,
              c);
    }
    float sf, cf;
    mt_math_sincosf(-0.0f, &sf, &cf);
    CHECK(same_float(sf, -0.0f) && cf == 1.0f && isnan(mt_math_sinf(INFINITY)) &&
              isnan(mt_math_cosf(NAN)),
          "mt_math_sincosf of -0, inf, NaN");

    /* powf's cases (C17 F.10.4.4), by value rather than against a libm */
    const float inf = INFINITY;
    const struct {
        float x, y, want;
    } pw[] = {
        {NAN, 0.0f, 1.0f},
        {NAN, -0.0f, 1.0f},
        {1.0f, NAN, 1.0f},
        {1.0f, inf, 1.0f},
        {-1.0f, inf, 1.0f},
        {-1.0f, -inf, 1.0f},
        {NAN, 1.0f, NAN},
        {2.0f, NAN, NAN},
        {-2.0f, 0.5f, NAN},
        {-2.0f, 3.0f, -8.0f},
        {-2.0f, -2.0f, 0.25f},
        {-1.0f, 3.0f, -1.0f},
        {-1.0f, 0.5f, NAN},
        {0.0f, -1.0f, inf},
        {-0.0f, -1.0f, -inf},
        {-0.0f, -2.0f, inf},
        {-0.0f, -0.5f, inf},
        {0.0f, 3.0f, 0.0f},
        {-0.0f, 3.0f, -0.0f},
        {-0.0f, 2.0f, 0.0f},
        {-0.0f, 0.5f, 0.0f},
        {0.0f, -inf, inf},
        {-0.0f, inf, 0.0f},
        {0.5f, inf, 0.0f},
        {0.5f, -inf, inf},
        {-2.0f, inf, inf},
        {-2.0f, -inf, 0.0f},
        {inf, 2.0f, inf},
        {inf, -0.5f, 0.0f},
        {-inf, 3.0f, -inf},
        {-inf, 2.0f, inf},
        {-inf, 0.5f, inf},
        {-inf, -3.0f, -0.0f},
        {-inf, -2.0f, 0.0f},
        {-inf, -0.5f, 0.0f},
        {-2.0f, 0x1p24f, inf},
        {-2.0f, 0x1p25f, inf},
        {-2.0f, 0x1p24f + 2.0f, inf},
        {2.0f, 10.0f, 1024.0f},
        {4.0f, 0.5f, 2.0f},
        {2.0f, 128.0f, inf},
        {2.0f, -149.0f, 0x1p-149f},
        {2.0f, -151.0f, 0.0f},
        {-0.5f, 0x1p24f + 1e9f, 0.0f},
        {-1.5f, -5.0f, -0.131687243f},
    };
    for (size_t i = 0; i < sizeof pw / sizeof pw[0]; i++) {
        const float got = mt_math_powf(pw[i].x, pw[i].y);
        CHECK(same_float(got, pw[i].want), "mt_math_powf(%a, %a) = %a, C says %a", (double)pw[i].x,
              (double)pw[i].y, (double)got, (double)pw[i].want);
    }
}

int main(void) {
    test_special();
#ifdef __GLIBC__
    test_double();
    test_float();
#else
    printf("the double and float functions are not compared (glibc's are the oracle)\n");
#endif
    return check_report("test_mathf");
}
