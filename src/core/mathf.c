/* mathf.c - exp, log, sin and cos in double, and the float functions built
 * on them (mathf.h), computed the same on every platform instead of by the
 * C library (whose last bits differ between glibc and mingw-w64).
 *
 * Only IEEE double +, -, *, / (round to nearest) and integer operations, each
 * rounded on its own: CMakeLists.txt compiles this file with
 * -ffp-contract=off, so no compiler fuses a multiply and an add, and no
 * libm call is made. Exact steps rely on three classic facts:
 *  - Sterbenz: a - b is exact when b/2 <= a <= 2b;
 *  - two_sum: s = fl(a + b) and the error e with s + e = a + b exactly
 *    (fast_two_sum when the exponent of a is at least that of b);
 *  - two_prod: p = fl(a * b) and e with p + e = a * b exactly, from Veltkamp's
 *    split of each factor into two 26-bit halves (Dekker's product).
 *
 * exp: e^x = 2^n e^r with n = round(x / ln 2), r = x - n ln 2 (ln 2 in two
 * parts, the first with 42 bits so that n ln2_hi is exact and the difference
 * too by Sterbenz), |r| <= 0.347; e^r by its Taylor series to r^13 (the next
 * term is below 6e-18 of the result), 2^n applied as two normal powers of 2.
 *
 * log: x = 2^k m with m in [sqrt(1/2), sqrt(2)]; ln m = 2 atanh(s),
 * s = (m - 1) / (m + 1), |s| <= 0.1716, with s carried to double-double
 * (m - 1 and m + 1 are exact as two doubles), and atanh(s) = s + s^3/3 +
 * s^5/5 + ... to s^21 (the next term is below 1e-18 of s); ln x = k ln 2 +
 * ln m with ln 2 in the two parts of exp.
 *
 * sin, cos: x = n pi/2 + r, |r| <= pi/4 (plus a rounding), r as a
 * double-double rh + rl. For |x| <= 2^26 (Cody and Waite): n < 2^26, and
 * pi/2 is split into four 27-bit parts, whose products with n are exact, and
 * a 53-bit tail (168 bits of pi/2); where x - n pi/2 cancels the subtractions
 * are exact, so r is off by about 2^-106 |r| + 2^-113. No float comes nearer
 * than 2^-27.8 to a multiple of pi/2 (checked over every float up to 2^26),
 * and a double is expected no nearer than about 2^-57 (counting: 2^52
 * doubles against 2^k / 1.57 multiples per binade).
 * Beyond 2^26 (Payne and Hanek): x = M 2^e with an integer M of 53 bits;
 * y = x 2/pi mod 4 is the integer product of M with the 256 bits of 2/pi
 * that can matter at that e (the earlier bits only add multiples of 4, the
 * later ones less than 2^-170); the integer part mod 4 gives the quadrant
 * and the 192 bits below the point the fraction, times pi/2 in
 * double-double.
 * Then sin r = r + r^3 (-1/6 + r^2/120 - ...) to r^17 and cos r = 1 - r^2/2
 * + r^4 (1/24 - ...) to r^16 (Taylor; the next terms are below 3e-18 of the
 * result at pi/4), with rl added to first order. */
#include "moontail/mathf.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Each double operation must round to double, not to x87's extended
 * precision (FLT_EVAL_METHOD 2) or an unknown one (-1); 0, 1 and 16 (only
 * _Float16 widened, GCC's value with AVX512-FP16) evaluate double in double. */
#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD < 0 || FLT_EVAL_METHOD == 2
#error "mathf.c needs double arithmetic evaluated in double (FLT_EVAL_METHOD 0, 1 or 16)"
#endif

/* ------------------------------------------------------------ helpers */

static uint64_t dbits(double d) {
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
}

static double bitsd(uint64_t u) {
    double d;
    memcpy(&d, &u, 8);
    return d;
}

/* 2^k for -1022 <= k <= 1023. */
static double pow2(int k) {
    return bitsd((uint64_t)(k + 1023) << 52);
}

/* Adding and subtracting 1.5 * 2^52 rounds |y| < 2^51 to the nearest
 * integer (ties to even). */
#define ROUND_MAGIC 0x1.8p52

static void two_sum(double a, double b, double *s, double *e) {
    *s = a + b;
    const double bb = *s - a;
    *e = (a - (*s - bb)) + (b - bb);
}

/* Needs exponent(a) >= exponent(b) (or a == 0). */
static void fast_two_sum(double a, double b, double *s, double *e) {
    *s = a + b;
    *e = b - (*s - a);
}

/* Veltkamp's split: a = hi + lo, each with at most 26 significant bits
 * (|a| < 2^995). */
static void split(double a, double *hi, double *lo) {
    const double c = 134217729.0 * a; /* 2^27 + 1 */
    *hi = c - (c - a);
    *lo = a - *hi;
}

/* a * b = *p + *e exactly (Dekker's product, no fused multiply-add). */
static void two_prod(double a, double b, double *p, double *e) {
    double ah, al, bh, bl;
    split(a, &ah, &al);
    split(b, &bh, &bl);
    *p = a * b;
    *e = ((ah * bh - *p) + ah * bl + al * bh) + al * bl;
}

/* ln 2 = LN2_HI + LN2_LO, LN2_HI with 42 significant bits. */
#define LN2_HI  0x1.62e42fefa3800p-1
#define LN2_LO  0x1.ef35793c76730p-45
#define INV_LN2 0x1.71547652b82fep+0

/* ------------------------------------------------------------ exp */

#define EXP_MAX 709.79 /* e^x overflows above 709.7827 */
#define EXP_MIN -745.2 /* e^x rounds to 0 below -745.1332 */

double mt_math_exp(double x) {
    if (x != x) return x + x;
    if (x > EXP_MAX) return INFINITY;
    if (x < EXP_MIN) return 0.0;
    const double nd = (x * INV_LN2 + ROUND_MAGIC) - ROUND_MAGIC; /* |n| <= 1076 */
    double rh, rl;
    two_sum(x - nd * LN2_HI, -(nd * LN2_LO), &rh, &rl);
    /* e^r - 1 - r = r^2 (1/2! + r/3! + ... + r^11/13!) */
    static const double c[12] = {1.0 / 2.0,        1.0 / 6.0,         1.0 / 24.0,
                                 1.0 / 120.0,      1.0 / 720.0,       1.0 / 5040.0,
                                 1.0 / 40320.0,    1.0 / 362880.0,    1.0 / 3628800.0,
                                 1.0 / 39916800.0, 1.0 / 479001600.0, 1.0 / 6227020800.0};
    double p = c[11];
    for (int i = 10; i >= 0; i--) p = p * rh + c[i];
    /* e^(rh + rl) = e^rh (1 + rl) to first order; 1 + rh exactly as hi + e */
    const double q = rh * rh * p + rl * (1.0 + rh);
    double hi, e;
    fast_two_sum(1.0, rh, &hi, &e);
    const double y = hi + (e + q);
    const int n = (int)nd, n1 = n / 2, n2 = n - n1; /* each in [-538, 512] */
    return y * pow2(n1) * pow2(n2);
}

/* ------------------------------------------------------------ log */

/* ln m for m in [sqrt(1/2), sqrt(2)] as hi + *lo (hi = 2 s_hi, exact). */
static double log_mant(double m, double *lo) {
    const double f = m - 1.0; /* exact */
    double dh, dl;
    fast_two_sum(1.0, m, &dh, &dl); /* m + 1 = dh + dl exactly */
    const double sh = f / dh;
    double ph, pl;
    two_prod(sh, dh, &ph, &pl);
    const double sl = (((f - ph) - pl) - sh * dl) / dh; /* s = sh + sl */
    /* 2 atanh(s) - 2s = s^3 (2/3 + s^2 2/5 + ... + s^18 2/21) */
    static const double c[10] = {2.0 / 3.0,  2.0 / 5.0,  2.0 / 7.0,  2.0 / 9.0,  2.0 / 11.0,
                                 2.0 / 13.0, 2.0 / 15.0, 2.0 / 17.0, 2.0 / 19.0, 2.0 / 21.0};
    const double z = sh * sh;
    double q = c[9];
    for (int i = 8; i >= 0; i--) q = q * z + c[i];
    *lo = 2.0 * sl + sh * z * q;
    return 2.0 * sh;
}

/* x = 2^k m, m in [sqrt(1/2), sqrt(2)], for finite x > 0. */
static double log_split(double x, int *k) {
    uint64_t u = dbits(x);
    *k = 0;
    if (u < (UINT64_C(1) << 52)) { /* subnormal */
        u = dbits(x * 0x1p54);
        *k = -54;
    }
    *k += (int)(u >> 52) - 1023;
    double m = bitsd((u & ((UINT64_C(1) << 52) - 1)) | UINT64_C(0x3ff0000000000000));
    if (m > 0x1.6a09e667f3bcdp+0) { /* sqrt(2) */
        m *= 0.5;
        *k += 1;
    }
    return m;
}

double mt_math_log(double x) {
    if (x != x) return x + x;
    if (x < 0.0) return NAN;
    if (x == 0.0) return -INFINITY;
    if (x == INFINITY) return x;
    int k;
    double lo;
    const double m = log_split(x, &k), kd = (double)k;
    const double b = log_mant(m, &lo);
    double hi, e;
    two_sum(kd * LN2_HI, b, &hi, &e); /* kd * LN2_HI is exact: |k| <= 1075 */
    return hi + (e + (kd * LN2_LO + lo));
}

/* ------------------------------------------------------------ sin, cos */

/* pi/2 = PIO2_1 + ... + PIO2_4 (27 bits each) + PIO2_5 to 168 bits. */
#define PIO2_1 0x1.921fb54000000p+0
#define PIO2_2 0x1.10b4610000000p-30
#define PIO2_3 0x1.a626330000000p-58
#define PIO2_4 0x1.45c06e0000000p-86
#define PIO2_5 0x1.cd129024e088ap-115
/* pi/2 = PIO2_HI + PIO2_LO to 107 bits, and 2/pi rounded */
#define PIO2_HI       0x1.921fb54442d18p+0
#define PIO2_LO       0x1.1a62633145c07p-54
#define TWO_OVER_PI   0x1.45f306dc9c883p-1
#define REDUCE_CW_MAX 0x1p26

/* 2/pi = sum of two_over_pi[j] 2^(-32 (j + 1)): its first 1280 bits. */
// clang-format off
static const uint32_t two_over_pi[40] = {
    0xa2f9836e, 0x4e441529, 0xfc2757d1, 0xf534ddc0, 0xdb629599, 0x3c439041, 0xfe5163ab, 0xdebbc561,
    0xb7246e3a, 0x424dd2e0, 0x06492eea, 0x09d1921c, 0xfe1deb1c, 0xb129a73e, 0xe88235f5, 0x2ebb4484,
    0xe99c7026, 0xb45f7e41, 0x3991d639, 0x835339f4, 0x9c845f8b, 0xbdf9283b, 0x1ff897ff, 0xde05980f,
    0xef2f118b, 0x5a0a6d1f, 0x6d367ecf, 0x27cb09b7, 0x4f463f66, 0x9e5fea2d, 0x7527bac7, 0xebe5f17b,
    0x3d0739f7, 0x8a5292ea, 0x6bfb5fb1, 0x1f8d5d08, 0x56033046, 0xfc7b6bab, 0xf0cfbc20, 0x9af4361d,
};
// clang-format on

/* Cody and Waite, |x| <= 2^26: x - n pi/2 = rh + rl, returns n. */
static int64_t reduce_cw(double x, double *rh, double *rl) {
    const double nd = (x * TWO_OVER_PI + ROUND_MAGIC) - ROUND_MAGIC; /* |n| < 2^26 */
    const double t = x - nd * PIO2_1; /* exact: both products and (Sterbenz) the difference */
    double s1, e1, s2, e2;
    two_sum(t, -(nd * PIO2_2), &s1, &e1);
    two_sum(s1, -(nd * PIO2_3), &s2, &e2);
    const double lo = ((e1 + e2) - nd * PIO2_4) - nd * PIO2_5;
    two_sum(s2, lo, rh, rl);
    return (int64_t)nd;
}

/* The 64 bits of the (10 x 32)-bit integer p starting at bit pos (>= 0). */
static uint64_t bits_at(const uint32_t p[10], int pos) {
    const int w = pos >> 5, b = pos & 31;
    const uint64_t w0 = w < 10 ? p[w] : 0, w1 = w + 1 < 10 ? p[w + 1] : 0;
    const uint64_t w2 = w + 2 < 10 ? p[w + 2] : 0;
    const uint64_t lo = w0 | w1 << 32;
    return b ? lo >> b | w2 << (64 - b) : lo;
}

/* Payne and Hanek, for finite x > 2^26: x - n pi/2 = rh + rl, returns n mod
 * 4. x = M 2^e; word j of 2/pi contributes M w_j 2^(e - 32 (j + 1)), a
 * multiple of 4 while 32 (j + 1) <= e - 2, so words j0.. j0 + 7 (j0 the first
 * that is not) make an integer product P = M W whose point sits s bits up,
 * s = 32 (j0 + 8) - e in [223, 282]. */
static int64_t reduce_ph(double x, double *rh, double *rl) {
    const uint64_t u = dbits(x);
    const int e = (int)(u >> 52) - 1075; /* in [-26, 971] */
    const uint64_t m = (u & ((UINT64_C(1) << 52) - 1)) | UINT64_C(1) << 52;
    const int j0 = e > 2 ? (e - 2) / 32 : 0; /* <= 30 */
    uint32_t p[10] = {0};                    /* P, 32-bit words, least significant first */
    const uint32_t mw[2] = {(uint32_t)m, (uint32_t)(m >> 32)};
    for (int k = 0; k < 2; k++) {
        uint64_t carry = 0;
        for (int i = 0; i < 8; i++) {
            const uint64_t t = (uint64_t)two_over_pi[j0 + 7 - i] * mw[k] + p[i + k] + carry;
            p[i + k] = (uint32_t)t;
            carry = t >> 32;
        }
        p[8 + k] = (uint32_t)carry;
    }
    const int s = 32 * (j0 + 8) - e;
    int64_t n = (int64_t)(bits_at(p, s) & 3);
    uint64_t f[3] = {bits_at(p, s - 64), bits_at(p, s - 128), bits_at(p, s - 192)}; /* fraction */
    const int neg = (int)(f[0] >> 63); /* fraction >= 1/2: round n up, r = -(1 - fraction) */
    if (neg) {
        n++;
        f[2] = ~f[2] + 1;
        f[1] = ~f[1] + (f[2] == 0);
        f[0] = ~f[0] + (f[2] == 0 && f[1] == 0);
    }
    int lz = 0;
    while (f[0] == 0 && lz < 128) {
        f[0] = f[1], f[1] = f[2], f[2] = 0;
        lz += 64;
    }
    if (f[0] == 0) { /* not for any double (pi is irrational), but defined */
        *rh = *rl = 0.0;
        return n;
    }
    const int z = __builtin_clzll(f[0]);
    if (z) {
        f[0] = f[0] << z | f[1] >> (64 - z);
        f[1] = f[1] << z | f[2] >> (64 - z);
    }
    lz += z;
    /* fraction = (a 2^-53 + b 2^-106) 2^-lz, a and b of 53 bits */
    const uint64_t a = f[0] >> 11, b = (f[0] & 0x7ff) << 42 | f[1] >> 22;
    const double fh = (double)a * pow2(-53 - lz), fl = (double)b * pow2(-106 - lz);
    double ph, pl;
    two_prod(fh, PIO2_HI, &ph, &pl);
    fast_two_sum(ph, pl + (fh * PIO2_LO + fl * PIO2_HI), rh, rl);
    if (neg) *rh = -*rh, *rl = -*rl;
    return n;
}

/* sin and cos of rh + rl, |rh| <= pi/4 + 2^-26 and |rl| <= ulp(rh). */
static void sincos_kernel(double rh, double rl, double *s, double *c) {
    static const double cs[8] = {
        -1.0 / 6.0,        1.0 / 120.0,        -1.0 / 5040.0,          1.0 / 362880.0,
        -1.0 / 39916800.0, 1.0 / 6227020800.0, -1.0 / 1307674368000.0, 1.0 / 355687428096000.0};
    static const double cc[7] = {
        1.0 / 24.0,        -1.0 / 720.0,         1.0 / 40320.0,         -1.0 / 3628800.0,
        1.0 / 479001600.0, -1.0 / 87178291200.0, 1.0 / 20922789888000.0};
    const double z = rh * rh;
    double ps = cs[7];
    for (int i = 6; i >= 0; i--) ps = ps * z + cs[i];
    double pc = cc[6];
    for (int i = 5; i >= 0; i--) pc = pc * z + cc[i];
    /* sin(rh + rl) = sin rh + rl cos rh, cos(rh + rl) = cos rh - rl sin rh */
    *s = rh + (rh * z * ps + rl * (1.0 - 0.5 * z));
    const double h = 0.5 * z, w = 1.0 - h;
    *c = w + (((1.0 - w) - h) + (z * z * pc - rh * rl));
}

void mt_math_sincos(double x, double *s, double *c) {
    const double ax = fabs(x);
    if (!(ax <= 0x1.fffffffffffffp1023)) { /* NaN (kept), or inf (NaN, the same on every CPU) */
        *s = *c = x != x ? x + x : NAN;
        return;
    }
    if (ax < 0x1p-27) { /* sin x = x, cos x = 1 after rounding (and sin -0 = -0) */
        *s = x;
        *c = 1.0;
        return;
    }
    double rh, rl;
    int64_t n;
    if (ax <= REDUCE_CW_MAX) {
        n = reduce_cw(x, &rh, &rl);
    } else {
        n = reduce_ph(ax, &rh, &rl);
        if (x < 0) n = -n, rh = -rh, rl = -rl;
    }
    double sr, cr;
    sincos_kernel(rh, rl, &sr, &cr);
    switch ((uint64_t)n & 3) {
    case 0:
        *s = sr, *c = cr;
        break;
    case 1:
        *s = cr, *c = -sr;
        break;
    case 2:
        *s = -sr, *c = -cr;
        break;
    default:
        *s = -cr, *c = sr;
        break;
    }
}

double mt_math_sin(double x) {
    double s, c;
    mt_math_sincos(x, &s, &c);
    return s;
}

double mt_math_cos(double x) {
    double s, c;
    mt_math_sincos(x, &s, &c);
    return c;
}

/* ------------------------------------------------------------ floats */

float mt_math_logf(float x) {
    return (float)mt_math_log((double)x);
}

/* log2 x = k + ln m / ln 2: exact k for x = 2^k. */
float mt_math_log2f(float x) {
    if (!(x > 0.0f) || x == INFINITY) return (float)mt_math_log((double)x);
    int k;
    double lo;
    const double m = log_split((double)x, &k);
    const double b = log_mant(m, &lo);
    return (float)((double)k + (b + lo) * INV_LN2);
}

float mt_math_sinf(float x) {
    return (float)mt_math_sin((double)x);
}

float mt_math_cosf(float x) {
    return (float)mt_math_cos((double)x);
}

void mt_math_sincosf(float x, float *s, float *c) {
    double sd, cd;
    mt_math_sincos((double)x, &sd, &cd);
    *s = (float)sd;
    *c = (float)cd;
}

/* Whether the finite float y is an integer, and an odd one. */
static int float_int_kind(float y, int *odd) {
    *odd = 0;
    if (fabsf(y) >= 0x1p24f) return 1; /* every float from 2^24 up is an even integer */
    const int32_t i = (int32_t)y;
    if ((float)i != y) return 0;
    *odd = i & 1;
    return 1;
}

float mt_math_powf(float x, float y) {
    if (y == 0.0f || x == 1.0f) return 1.0f;
    if (x != x) return x + x; /* one NaN operand: its payload, whatever the operand order */
    if (y != y) return y + y;
    float ax = fabsf(x);
    double sign = 1.0;
    if (signbit(x) && fabsf(y) != INFINITY) { /* x < 0 or x = -0, y finite */
        int odd;
        const int integer = float_int_kind(y, &odd);
        if (!integer && x < 0.0f && x != -INFINITY) return NAN;
        if (odd) sign = -1.0;
    }
    if (ax == 1.0f) return (float)sign; /* (-1)^y for integer y, and (-1)^(+-inf) */
    /* ax = 0 or inf: ln ax = -+inf, and e^(y ln ax) is 0 or inf as C says */
    return (float)(sign * mt_math_exp((double)y * mt_math_log((double)ax)));
}
