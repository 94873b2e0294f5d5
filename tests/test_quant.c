/* test_quant.c - checks the quantized block formats against expectations
 * derived independently of the kernels:
 *   - the type table against ggml's block geometry;
 *   - f16 decode and f32 -> f16 / bf16 rounding against slow references
 *     built from frexp/ldexp (all 65536 half patterns, every rounding tie);
 *   - hand-built blocks whose values follow from docs/engine-reference.md;
 *   - quantize -> dequantize error bounds per type;
 *   - activation conversion (ggml's x86 Q8_0 and Q8_1 rounding, Q8_1's s, Q8_K
 *     with bsums);
 *   - vec_dot: bit-exact against MoonTail's reduction order (quant_kernels.h)
 *     re-derived here from the spec's element decoding, close to a double
 *     dot of the decoded operands, and within a stated bound of the dot with
 *     raw f32 activations;
 *   - every kernel set (reference, avx2, avx512 where the CPU has them)
 *     bit-identical, for vec_dot and for matrix tiles of any shape.
 * Prints the measured figures; returns nonzero on any failure. */
#include "check.h"
#include "lib/quant_random.h"
#include "moontail/quant.h"
#include "moontail/tensor_type.h"
#include "moontail/vecops.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ harness */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rng_u64(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_uniform(void) {
    return ((double)(rng_u64() >> 11) + 0.5) / 9007199254740992.0;
}

static float rng_gauss(void) {
    double u = rng_uniform(), v = rng_uniform();
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Fills x with one of several value shapes used for quantizer tests. */
static void fill(float *x, int64_t n, int kind) {
    for (int64_t i = 0; i < n; i++) {
        switch (kind) {
        case 0:
            x[i] = rng_gauss();
            break; /* N(0,1) */
        case 1:
            x[i] = (float)(rng_uniform() * 2.0 - 1.0) * 0.02f;
            break; /* small uniform */
        case 2:
            x[i] = rng_gauss() * ((i % 97) == 5 ? 40.0f : 1.0f);
            break; /* outliers */
        default:
            x[i] = (float)rng_uniform() * 3.0f + 1.0f;
            break; /* all positive */
        }
    }
}

/* ------------------------------------------------------------ type table */

static void test_type_table(void) {
    /* (id, name, block, bytes) from ggml.h / ggml-common.h */
    static const struct {
        int id;
        const char *name;
        int blck, size;
    } want[] = {
        {0, "F32", 1, 4},         {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},
        {3, "Q4_1", 32, 20},      {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},
        {8, "Q8_0", 32, 34},      {9, "Q8_1", 32, 36},      {10, "Q2_K", 256, 84},
        {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
        {14, "Q6_K", 256, 210},   {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66},
        {17, "IQ2_XS", 256, 74},  {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},
        {20, "IQ4_NL", 32, 18},   {21, "IQ3_S", 256, 110},  {22, "IQ2_S", 256, 82},
        {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},         {25, "I16", 1, 2},
        {26, "I32", 1, 4},        {27, "I64", 1, 8},        {28, "F64", 1, 8},
        {29, "IQ1_M", 256, 56},   {30, "BF16", 1, 2},       {34, "TQ1_0", 256, 54},
        {35, "TQ2_0", 256, 66},   {39, "MXFP4", 32, 17},    {40, "NVFP4", 64, 36},
        {41, "Q1_0", 128, 18},    {42, "Q2_0", 64, 18},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const mt_type_traits *tr = mt_type_traits_get((uint32_t)want[i].id);
        CHECK(tr != NULL, "type %d missing", want[i].id);
        if (!tr) continue;
        CHECK(strcmp(tr->name, want[i].name) == 0 && tr->blck == want[i].blck &&
                  tr->type_size == want[i].size,
              "type %d: got %s %d/%d, want %s %d/%d", want[i].id, tr->name, tr->blck, tr->type_size,
              want[i].name, want[i].blck, want[i].size);
        CHECK(mt_type_from_name(want[i].name) == want[i].id, "name %s", want[i].name);
    }
    static const int absent[] = {4, 5, 31, 32, 33, 36, 37, 38, 43, 1000};
    for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++)
        CHECK(mt_type_traits_get((uint32_t)absent[i]) == NULL, "id %d should be unknown",
              absent[i]);
    CHECK(mt_type_from_name("q4_k") == MT_TYPE_Q4_K, "lower-case name");
    CHECK(mt_type_from_name("Q4_K_M") == -1, "Q4_K_M is a file type, not a tensor type");
    CHECK(mt_type_row_size(MT_TYPE_Q4_K, 7168) == 28 * 144, "row size Q4_K");
    CHECK(mt_type_row_size(MT_TYPE_MXFP4, 2880) == 90 * 17, "row size MXFP4");
}

/* ------------------------------------------------------------ f16 / bf16 */

/* Value of half pattern h, from the IEEE definition. */
static double ref_f16_value(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 31 ? (m ? NAN : INFINITY) : e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

/* Round-to-nearest-even of a finite or infinite float to a format with
 * `mbits` explicit mantissa bits and minimum normal exponent emin, maximum
 * emax. Returns the magnitude bits (exponent field << mbits | mantissa). */
static uint32_t ref_round_bits(double a, int mbits, int emin, int emax) {
    if (isinf(a)) return (uint32_t)(emax - emin + 2) << mbits; /* all-ones exponent */
    if (a == 0.0) return 0;
    int e;
    frexp(a, &e);
    int E = e - 1; /* a in [2^E, 2^(E+1)) */
    if (E < emin) E = emin;
    double q = ldexp(a, mbits - E); /* in units of the quantum 2^(E - mbits) */
    double fl = floor(q);
    uint64_t k = (uint64_t)fl;
    double r = q - fl;
    if (r > 0.5 || (r == 0.5 && (k & 1))) k++;
    if (k == (2ull << mbits)) {
        k = 1ull << mbits;
        E++;
    }
    if (k < (1ull << mbits)) return (uint32_t)k;               /* subnormal (E == emin) */
    if (E > emax) return (uint32_t)(emax - emin + 2) << mbits; /* overflow: inf */
    return (uint32_t)((uint64_t)(E - emin + 1) << mbits | (k - (1ull << mbits)));
}

static uint16_t ref_f32_to_f16(float f) {
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    if (isnan(f)) return sign | 0x7e00;
    return (uint16_t)(sign | ref_round_bits(fabs((double)f), 10, -14, 15));
}

static uint16_t ref_f32_to_bf16(float f) {
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    if (isnan(f)) return (uint16_t)((quant_f32_bits(f) >> 16) | 0x40);
    return (uint16_t)(sign | ref_round_bits(fabs((double)f), 7, -126, 127));
}

static void test_f16(void) {
    int bad_decode = 0, bad_trip = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        double want = ref_f16_value((uint16_t)h);
        float got = mt_f16_to_f32((uint16_t)h);
        if (isnan(want)) {
            if (!isnan(got) || !!signbit(got) != ((h & 0x8000) != 0)) bad_decode++;
            uint16_t back = mt_f32_to_f16(got); /* NaN stays NaN with its sign */
            if ((back & 0x7c00) != 0x7c00 || (back & 0x3ff) == 0 || (back & 0x8000) != (h & 0x8000))
                bad_trip++;
            continue;
        }
        if ((double)got != want || !!signbit(got) != ((h & 0x8000) != 0)) bad_decode++;
        if (mt_f32_to_f16(got) != h) bad_trip++;
    }
    CHECK(bad_decode == 0, "f16 decode: %d of 65536 patterns differ from the IEEE value",
          bad_decode);
    { /* every kernel set's F16 rows: each pattern decoded, and floats of every
       * kind (all decoded halves, ties, NaN, infinities, random bits)
       * encoded, as mt_f16_to_f32 and mt_f32_to_f16 do, in rows whose
       * lengths leave SIMD tails */
        enum { NF = 65536 + 4096 };
        static uint16_t all[65536], enc[NF];
        static float dec[65536], src[NF];
        for (uint32_t h = 0; h < 65536; h++) all[h] = (uint16_t)h;
        for (uint32_t h = 0; h < 65536; h++) src[h] = mt_f16_to_f32((uint16_t)(h * 40503u));
        for (int i = 65536; i < NF; i++) {
            const uint32_t u = (uint32_t)rng_u64();
            src[i] = i % 3 ? bits_f32(u)
                           : ldexpf(1.0f + (float)(u & 0xfff) / 2048.0f, (int)(u >> 28) - 20);
        }
        const char *start = quant_kernel_name();
        static const char *const kernel_sets[] = {"reference", "avx2", "avx512"};
        for (int k = 0; k < 3; k++) {
            if (quant_kernels_select(kernel_sets[k]) != 0) continue;
            int bad_row = 0, bad_enc = 0;
            for (int64_t off = 0; off < 65536; off += 16381) {
                const int64_t len = off + 16381 <= 65536 ? 16381 : 65536 - off;
                quant_dequantize_row(MT_TYPE_F16, all + off, dec + off, len);
            }
            for (uint32_t h = 0; h < 65536; h++) {
                float want = mt_f16_to_f32((uint16_t)h);
                bad_row += memcmp(&dec[h], &want, 4) != 0;
            }
            quant_quantize_row(MT_TYPE_F16, src, enc, NF - 3);
            for (int i = 0; i < NF - 3; i++) bad_enc += enc[i] != mt_f32_to_f16(src[i]);
            CHECK(bad_row == 0,
                  "F16 row decode (%s kernels): %d of 65536 patterns differ from mt_f16_to_f32",
                  kernel_sets[k], bad_row);
            CHECK(bad_enc == 0,
                  "F16 row encode (%s kernels): %d of %d floats differ from mt_f32_to_f16",
                  kernel_sets[k], bad_enc, NF - 3);
        }
        quant_kernels_select(start);
    }
    CHECK(bad_trip == 0, "f16 round trip: %d patterns do not survive f16->f32->f16", bad_trip);

    /* Every tie and its neighbours: the midpoint between each pair of adjacent
     * finite halves (including subnormals and the step to infinity), +-1 ulp. */
    int bad_ties = 0, n_ties = 0;
    for (uint32_t h = 0; h < 0x7c00; h++) {
        double lo = ref_f16_value((uint16_t)h);
        double hi = h + 1 < 0x7c00 ? ref_f16_value((uint16_t)(h + 1)) : 65536.0;
        float mid = (float)((lo + hi) / 2); /* exact: needs at most 12 bits */
        float cases[3] = {nextafterf(mid, 0.0f), mid, nextafterf(mid, INFINITY)};
        for (int c = 0; c < 3; c++)
            for (int s = 0; s < 2; s++) {
                float f = s ? -cases[c] : cases[c];
                n_ties++;
                if (mt_f32_to_f16(f) != ref_f32_to_f16(f)) {
                    if (bad_ties++ < 3)
                        fprintf(stderr, "  f16(%a) = %04x, want %04x\n", (double)f,
                                mt_f32_to_f16(f), ref_f32_to_f16(f));
                }
            }
    }
    CHECK(bad_ties == 0, "f32->f16 at ties: %d of %d differ from round-to-nearest-even", bad_ties,
          n_ties);

    /* random bit patterns over the whole f32 range, and values in the half range */
    int bad_rand = 0;
    for (int i = 0; i < 1000000; i++) {
        uint32_t u = (uint32_t)rng_u64();
        if (i & 1) u = (u & 0x8fffffffu) | 0x30000000u; /* exponents near the half range */
        float f = bits_f32(u);
        uint16_t got = mt_f32_to_f16(f), want = ref_f32_to_f16(f);
        if (isnan(f) ? (got & 0x7e00) != 0x7e00 || (got & 0x8000) != (want & 0x8000) : got != want)
            bad_rand++;
    }
    CHECK(bad_rand == 0, "f32->f16 on random floats: %d of 1e6 differ", bad_rand);
    CHECK(mt_f32_to_f16(65519.996f) == 0x7bff && mt_f32_to_f16(65520.0f) == 0x7c00,
          "f16 overflow threshold");
    CHECK(mt_f32_to_f16(ldexpf(1.0f, -25)) == 0 && mt_f32_to_f16(ldexpf(1.5f, -25)) == 1,
          "f16 smallest subnormal rounding");
    printf("f16: 65536 patterns decode and round-trip exactly; %d tie cases and 1e6 random "
           "floats round to nearest even\n",
           n_ties);
}

static void test_bf16(void) {
    int bad_decode = 0;
    for (uint32_t h = 0; h < 65536; h++)
        if (quant_f32_bits(mt_bf16_to_f32((uint16_t)h)) != h << 16) bad_decode++;
    CHECK(bad_decode == 0, "bf16 decode: %d patterns are not the top 16 bits", bad_decode);

    int bad = 0, n = 0;
    for (uint32_t h = 0; h < 0x7f80; h++) { /* ties between adjacent bf16 values */
        uint32_t mid = (h << 16) | 0x8000;
        uint32_t cases[3] = {mid - 1, mid, mid + 1};
        for (int c = 0; c < 3; c++)
            for (int s = 0; s < 2; s++) {
                float f = bits_f32(cases[c] | (s ? 0x80000000u : 0));
                n++;
                if (mt_f32_to_bf16(f) != ref_f32_to_bf16(f)) bad++;
            }
    }
    for (int i = 0; i < 1000000; i++) {
        float f = bits_f32((uint32_t)rng_u64());
        n++;
        if (mt_f32_to_bf16(f) != ref_f32_to_bf16(f)) bad++;
    }
    CHECK(bad == 0, "f32->bf16: %d of %d differ from round-to-nearest-even", bad, n);
    CHECK(mt_f32_to_bf16(bits_f32(0x7f7fffff)) == 0x7f80, "bf16: FLT_MAX rounds to inf");
    CHECK(mt_f32_to_bf16(bits_f32(0x3f808000)) == 0x3f80 &&
              mt_f32_to_bf16(bits_f32(0x3f818000)) == 0x3f82,
          "bf16 ties to even");
    printf("bf16: 65536 patterns decode exactly; %d values round to nearest even\n", n);
}

/* ------------------------------------------------------------ hand-built blocks */

static void put_f16(uint8_t *p, float f) {
    uint16_t h = mt_f32_to_f16(f);
    memcpy(p, &h, 2);
}

static void test_blocks(void) {
    float y[256];

    /* Q8_0: d = 0.5, qs[j] = j - 16 */
    uint8_t q8[34];
    put_f16(q8, 0.5f);
    for (int j = 0; j < 32; j++) q8[2 + j] = (uint8_t)(int8_t)(j - 16);
    quant_dequantize_row(MT_TYPE_Q8_0, q8, y, 32);
    for (int j = 0; j < 32; j++) CHECK(y[j] == 0.5f * (j - 16), "Q8_0 y[%d] = %g", j, y[j]);

    /* Q4_0: d = -2, qs[j] = j | (15-j) << 4: low nibbles first half, high second */
    uint8_t q4[18];
    put_f16(q4, -2.0f);
    for (int j = 0; j < 16; j++) q4[2 + j] = (uint8_t)(j | ((15 - j) << 4));
    quant_dequantize_row(MT_TYPE_Q4_0, q4, y, 32);
    for (int j = 0; j < 16; j++) {
        CHECK(y[j] == -2.0f * (j - 8), "Q4_0 y[%d] = %g", j, y[j]);
        CHECK(y[j + 16] == -2.0f * (7 - j), "Q4_0 y[%d] = %g", j + 16, y[j + 16]);
    }

    /* MXFP4: the E2M1 table (doubled) at e = 128 (scale 1), and the subnormal
     * scales e = 0 (2^-128) and e = 1 (2^-127) */
    static const double table[16] = {0, 1, 2, 3, 4, 6, 8, 12, -0.0, -1, -2, -3, -4, -6, -8, -12};
    uint8_t mx[17];
    for (int j = 0; j < 16; j++) mx[1 + j] = (uint8_t)(j | ((15 - j) << 4));
    const int exps[] = {128, 0, 1, 127, 130, 250}; /* 12 * 2^(e-128) overflows f32 from e = 253 */
    for (size_t k = 0; k < sizeof exps / sizeof exps[0]; k++) {
        mx[0] = (uint8_t)exps[k];
        quant_dequantize_row(MT_TYPE_MXFP4, mx, y, 32);
        for (int j = 0; j < 16; j++) {
            double s = ldexp(1.0, exps[k] - 128);
            CHECK((double)y[j] == table[j] * s, "MXFP4 e=%d y[%d] = %a", exps[k], j, (double)y[j]);
            CHECK((double)y[j + 16] == table[15 - j] * s, "MXFP4 e=%d y[%d] = %a", exps[k], j + 16,
                  (double)y[j + 16]);
        }
    }
    mx[0] = 0;
    quant_dequantize_row(MT_TYPE_MXFP4, mx, y, 32);
    CHECK(y[1] == ldexpf(1.0f, -128) && quant_f32_bits(y[1]) == 0x00200000u, "MXFP4 e=0 scale");
    mx[0] = 1;
    quant_dequantize_row(MT_TYPE_MXFP4, mx, y, 32);
    CHECK(quant_f32_bits(y[1]) == 0x00400000u && y[7] == 12.0f * ldexpf(1.0f, -127), "MXFP4 e=1");

    /* Q4_K: random scale bytes; sc/m unpacked by the spec formulas for s < 4
     * and s >= 4; d and dmin powers of two so every value is exact. */
    for (int trial = 0; trial < 50; trial++) {
        uint8_t b[144];
        for (int i = 0; i < 144; i++) b[i] = (uint8_t)rng_u64();
        put_f16(b, 0.25f);
        put_f16(b + 2, 0.5f);
        const uint8_t *sb = b + 4, *qs = b + 16;
        quant_dequantize_row(MT_TYPE_Q4_K, b, y, 256);
        for (int i = 0; i < 256; i++) {
            int s = i / 32, l = i % 32, c = s / 2;
            int sc = s < 4 ? sb[s] & 63 : (sb[s + 4] & 0xF) | ((sb[s - 4] >> 6) << 4);
            int m = s < 4 ? sb[s + 4] & 63 : (sb[s + 4] >> 4) | ((sb[s] >> 6) << 4);
            int q = (s % 2 == 0) ? qs[32 * c + l] & 0xF : qs[32 * c + l] >> 4;
            double want = 0.25 * sc * q - 0.5 * m;
            CHECK((double)y[i] == want, "Q4_K trial %d y[%d] = %g, want %g", trial, i, y[i], want);
        }
    }
    { /* one explicit case of the s >= 4 packing */
        uint8_t b[144] = {0};
        put_f16(b, 1.0f);
        put_f16(b + 2, 1.0f);
        b[4 + 1] = 0x80 | 7; /* sc[1] = 7; top bits 0b10 -> high bits of sc[5] */
        b[4 + 5] = 0x40 | 9; /* m[1] = 9; top bits 0b01 -> high bits of m[5] */
        b[4 + 9] = 0x3A;     /* sc[5] low = 0xA, m[5] low = 0x3 */
        for (int l = 0; l < 32; l++) b[16 + 64 + l] = 0x50; /* chunk 2: s=4 q=0, s=5 q=5 */
        quant_dequantize_row(MT_TYPE_Q4_K, b, y, 256);
        CHECK(y[5 * 32] == 42.0f * 5 - 19.0f, "Q4_K s=5: got %g, want sc=42 m=19 -> %g", y[5 * 32],
              42.0 * 5 - 19);
        CHECK(y[1 * 32] == -9.0f, "Q4_K s=1 (q=0): got %g want -9", y[32]);
    }

    /* Q6_K: quant of element i is (7i + 3) % 64, placed by the spec's
     * ql/qh rules; scales[k] = 3k - 20 (signed); d = 0.125. */
    {
        uint8_t b[210] = {0};
        for (int i = 0; i < 256; i++) {
            int q = (7 * i + 3) % 64;
            int h = i / 128, r = i % 128, k = r / 32, l = r % 32;
            int qli = 64 * h + (k == 1 || k == 3 ? 32 : 0) + l;
            b[qli] |= (uint8_t)(k < 2 ? (q & 0xF) : (q & 0xF) << 4);
            b[128 + 32 * h + l] |= (uint8_t)((q >> 4) << (2 * k));
        }
        for (int k = 0; k < 16; k++) b[192 + k] = (uint8_t)(int8_t)(3 * k - 20);
        put_f16(b + 208, 0.125f);
        quant_dequantize_row(MT_TYPE_Q6_K, b, y, 256);
        for (int i = 0; i < 256; i++) {
            double want = 0.125 * (3 * (i / 16) - 20) * ((7 * i + 3) % 64 - 32);
            CHECK((double)y[i] == want, "Q6_K y[%d] = %g, want %g", i, y[i], want);
        }
    }

    /* Q8_K: f32 d, int8 quants */
    {
        uint8_t b[292] = {0};
        float d = -0.375f;
        memcpy(b, &d, 4);
        for (int j = 0; j < 256; j++) b[4 + j] = (uint8_t)(int8_t)(j - 128);
        quant_dequantize_row(MT_TYPE_Q8_K, b, y, 256);
        for (int j = 0; j < 256; j++) CHECK(y[j] == -0.375f * (j - 128), "Q8_K y[%d]", j);
    }
    printf("hand-built blocks: Q8_0, Q4_0, MXFP4 (e=0,1,127,128,130,250), Q4_K (50 random "
           "scale packings + explicit s>=4 case), Q6_K, Q8_K decode as specified\n");
}

/* ------------------------------------------------------------ quantize -> dequantize */

typedef struct {
    mt_type t;
    const char *name;
} qtype;

/* Every weight type the engine computes with. A type whose kernels are not
 * in yet (traits.supported false) is skipped by the loops below. */
static const qtype all_weight_types[] = {
    {MT_TYPE_F32, "F32"},         {MT_TYPE_F16, "F16"},       {MT_TYPE_BF16, "BF16"},
    {MT_TYPE_Q8_0, "Q8_0"},       {MT_TYPE_Q4_0, "Q4_0"},     {MT_TYPE_MXFP4, "MXFP4"},
    {MT_TYPE_Q4_K, "Q4_K"},       {MT_TYPE_Q6_K, "Q6_K"},     {MT_TYPE_Q4_1, "Q4_1"},
    {MT_TYPE_Q5_0, "Q5_0"},       {MT_TYPE_Q5_1, "Q5_1"},     {MT_TYPE_IQ4_NL, "IQ4_NL"},
    {MT_TYPE_Q2_K, "Q2_K"},       {MT_TYPE_Q3_K, "Q3_K"},     {MT_TYPE_Q5_K, "Q5_K"},
    {MT_TYPE_IQ4_XS, "IQ4_XS"},   {MT_TYPE_TQ1_0, "TQ1_0"},   {MT_TYPE_TQ2_0, "TQ2_0"},
    {MT_TYPE_IQ2_XXS, "IQ2_XXS"}, {MT_TYPE_IQ2_XS, "IQ2_XS"}, {MT_TYPE_IQ2_S, "IQ2_S"},
    {MT_TYPE_IQ3_XXS, "IQ3_XXS"}, {MT_TYPE_IQ3_S, "IQ3_S"},   {MT_TYPE_IQ1_S, "IQ1_S"},
    {MT_TYPE_IQ1_M, "IQ1_M"},
};
enum { N_ALL_WTYPES = sizeof all_weight_types / sizeof all_weight_types[0] };
static qtype weight_types[N_ALL_WTYPES];
static int N_WTYPES;

/* weight_types: the supported subset of all_weight_types, in its order. */
static void pick_weight_types(void) {
    N_WTYPES = 0;
    for (int i = 0; i < N_ALL_WTYPES; i++)
        if (mt_type_traits_get((uint32_t)all_weight_types[i].t)->supported)
            weight_types[N_WTYPES++] = all_weight_types[i];
}

/* Error bound for element i of x quantized to t, from the format's step
 * (stated per type; see the comments). */
static double err_bound(mt_type t, const float *x, int64_t i) {
    const int64_t b32 = i / 32 * 32, b16 = i / 16 * 16, b256 = i / 256 * 256;
    double amax32 = 0, amax16 = 0, amax256 = 0, lo256 = 0, hi256 = -INFINITY;
    for (int j = 0; j < 32; j++) amax32 = fmax(amax32, fabs(x[b32 + j]));
    for (int j = 0; j < 16; j++) amax16 = fmax(amax16, fabs(x[b16 + j]));
    if (mt_type_traits_get((uint32_t)t)->blck == 256)
        for (int j = 0; j < 256; j++) {
            amax256 = fmax(amax256, fabs(x[b256 + j]));
            lo256 = fmin(lo256, x[b256 + j]);
            hi256 = fmax(hi256, x[b256 + j]);
        }
    switch (t) {
    case MT_TYPE_F32:
        return 0;
    case MT_TYPE_F16:
        return fabs(x[i]) * ldexp(1, -11) + ldexp(1, -25);
    case MT_TYPE_BF16:
        return fabs(x[i]) * ldexp(1, -8);
    /* half a step d = amax/127, plus 127 times d's f16 rounding (2^-11 d) */
    case MT_TYPE_Q8_0:
        return amax32 / 127 * (0.5 + 127 * ldexp(1, -11)) + 1e-6 * amax32;
    /* one step d = amax/8: the element -max needs quant 16 and gets 15 */
    case MT_TYPE_Q4_0:
        return amax32 / 8 * (1 + 16 * ldexp(1, -11)) + 1e-6 * amax32;
    /* one step d = amax/16: the element -max needs quant 32 and gets 31 */
    case MT_TYPE_Q5_0:
        return amax32 / 16 * (1 + 32 * ldexp(1, -11)) + 1e-6 * amax32;
    /* half a step d = range/15 (/31), d rounded to f16 (so the top element
     * may fall 15 (31) f16 roundings of d short), and the f16 rounding of the
     * minimum m */
    case MT_TYPE_Q4_1:
    case MT_TYPE_Q5_1: {
        const double top = t == MT_TYPE_Q4_1 ? 15 : 31;
        double lo = INFINITY, hi = -INFINITY;
        for (int j = 0; j < 32; j++) lo = fmin(lo, x[b32 + j]), hi = fmax(hi, x[b32 + j]);
        return (hi - lo) / top * (0.5 + (top + 1) * ldexp(1, -11)) + fabs(lo) * ldexp(1, -10) +
               1e-6 * amax32;
    }
    case MT_TYPE_MXFP4: { /* half the largest gap (4 units), or the clip above 12 units */
        int k = (int)floor(log2(amax32));
        double unit = ldexp(1, k - 3);
        return fmax(2 * unit, amax32 - 12 * unit) + 1e-6 * amax32;
    }
    /* half a step; the step is at most (range + a min step)/15 plus one
     * super-block step: about range/30 * 1.04 */
    case MT_TYPE_Q4_K:
        return (hi256 - lo256) / 30 * 1.05 + 1e-6 * amax256;
    /* half a step amax16/31 plus half a super-block step amax256/(31*127) */
    case MT_TYPE_Q6_K:
        return amax16 / 62 * 1.002 + amax256 / (62.0 * 127) * 1.01 + 1e-7 * amax256;
    /* Q2_K: half a step; the step is at most (range + a min step)/3 plus
     * one super-block step, range * 0.3794 with the f16 round-ups */
    case MT_TYPE_Q2_K:
        return (hi256 - lo256) / 5.2 + 1e-6 * amax256;
    /* Q5_K: as Q4_K with 31 steps: half of range * 0.0333 */
    case MT_TYPE_Q5_K:
        return (hi256 - lo256) / 62 * 1.05 + 1e-6 * amax256;
    /* Q3_K: one step (an element of the other sign near amax16 clamps to
     * 3), the step at most amax16/4 plus a super-block step amax256/124 */
    case MT_TYPE_Q3_K:
        return amax16 / 4 * 1.002 + amax256 / 124 * 1.01 + 1e-6 * amax256;
    /* 14 steps: 113 is the largest positive table value, so an element of
     * the other sign than the block's max (which maps to -127) may clip
     * there; elsewhere half the largest gap (12). Step d = amax/127 rounded
     * up to f16 (2^-10 relative, or a subnormal's 2^-24). */
    case MT_TYPE_IQ4_NL:
        return 14 * (amax32 / 127 * (1 + ldexp(1, -10)) + ldexp(1, -24)) + 1e-6 * amax32;
    /* as IQ4_NL with the step d * l, l = ceil(ds / d) <= ds / d + 1: at most
     * the sub-block's ds = amax32/127 plus the super-block step
     * d = amax256/(127 * 31), rounded up to f16 */
    case MT_TYPE_IQ4_XS:
        return 14 * (amax32 / 127 + amax256 / (127.0 * 31) * (1 + ldexp(1, -10)) + ldexp(1, -24)) *
                   (1 + 1e-5) +
               1e-6 * amax256;
    /* ternary: half the step d = amax256 (rounded up to f16) */
    case MT_TYPE_TQ1_0:
    case MT_TYPE_TQ2_0:
        return 0.5 * (amax256 * (1 + ldexp(1, -10)) + ldexp(1, -24)) + 1e-6 * amax256;
    /* grid i-quants: a group takes the nearest grid entry, which may be far
     * from the element (and IQ3_XXS flips one sign per odd group), so the
     * bound is the element plus the largest value the quantizer lets it
     * decode to: the top level times a sub-block step of at most 1.1
     * (IQ3) or 1.25 (IQ1: level 1 + 1/8) times amax256 over the top level,
     * grown by the f16 rounding of d */
    case MT_TYPE_IQ3_XXS:
    case MT_TYPE_IQ3_S:
        return amax32 + 1.1 * 1.002 * amax256;
    case MT_TYPE_IQ1_S:
    case MT_TYPE_IQ1_M:
        return amax32 + 1.25 * 1.002 * amax256;
    /* 2-bit codebooks (3 magnitudes, 256-1024 of the 6561 patterns of 8):
     * no rounding step to bound by; what the quantizer keeps is an error
     * below the scale group's largest magnitude (the one sign the parity
     * rule may force costs |x| plus the smallest level, 8 of 43) */
    case MT_TYPE_IQ2_XXS:
    case MT_TYPE_IQ2_XS:
    case MT_TYPE_IQ2_S:
        return amax32;
    default:
        return 0;
    }
}

static void test_roundtrip(void) {
    enum { N = 4096 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    uint8_t *q = malloc(N * 4 + 64);
    printf("quantize -> dequantize, max |error| / block amax over 4 value shapes:\n");
    for (int ti = 0; ti < N_WTYPES; ti++) {
        mt_type t = weight_types[ti].t;
        double worst_rel = 0, worst_ratio = 0;
        for (int kind = 0; kind < 4; kind++) {
            fill(x, N, kind);
            size_t bytes = quant_quantize_row(t, x, q, N);
            CHECK(bytes == mt_type_row_size(t, N), "%s: quantize returned %zu bytes",
                  weight_types[ti].name, bytes);
            quant_dequantize_row(t, q, y, N);
            for (int64_t i = 0; i < N; i++) {
                double err = fabs((double)y[i] - x[i]), bound = err_bound(t, x, i);
                CHECK(isfinite(y[i]) && err <= bound,
                      "%s kind %d: x[%lld] = %g decodes to %g (error %g > bound %g)",
                      weight_types[ti].name, kind, (long long)i, x[i], y[i], err, bound);
                double amax = 0;
                for (int j = 0; j < 32; j++) amax = fmax(amax, fabs(x[i / 32 * 32 + j]));
                worst_rel = fmax(worst_rel, err / amax);
                if (bound > 0) worst_ratio = fmax(worst_ratio, err / bound);
            }
        }
        printf("  %-6s %.3e   (max error / stated bound = %.2f)\n", weight_types[ti].name,
               worst_rel, worst_ratio);

        /* zeros stay zeros; a constant block decodes close to the constant */
        for (int64_t i = 0; i < 256; i++) x[i] = 0.0f;
        quant_quantize_row(t, x, q, 256);
        quant_dequantize_row(t, q, y, 256);
        int nonzero = 0;
        for (int i = 0; i < 256; i++) nonzero += y[i] != 0.0f;
        CHECK(nonzero == 0, "%s: zeros decode to %d nonzero values", weight_types[ti].name,
              nonzero);
    }
    free(x);
    free(y);
    free(q);
}

/* ------------------------------------------------------------ activation conversion */

static void test_convert(void) {
    enum { N = 1024 };
    float x[N];
    uint8_t buf[N * 4];

    /* Q8_0: d = f16(amax/127), q = round-half-even(x * (127/amax)) in f32 (ggml x86) */
    int bad = 0;
    for (int kind = 0; kind < 4; kind++) {
        fill(x, N, kind);
        quant_convert_activations(MT_TYPE_Q8_0, x, buf, N);
        for (int b = 0; b < N / 32; b++) {
            float amax = 0;
            for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[32 * b + j]));
            uint16_t d;
            memcpy(&d, buf + 34 * b, 2);
            if (d != mt_f32_to_f16(amax / 127.0f)) bad++;
            float id = 127.0f / amax;
            for (int j = 0; j < 32; j++) {
                float v = x[32 * b + j] * id;
                if ((int8_t)buf[34 * b + 2 + j] != (int)nearbyintf(v)) bad++;
            }
        }
    }
    CHECK(bad == 0, "Q8_0 activations: %d scales or quants differ from ggml's x86 formula", bad);
    { /* ties: amax = 127 makes 127/amax = 1, so x = k + 0.5 lands on a tie */
        for (int j = 0; j < 32; j++) x[j] = 0.0f;
        x[0] = 127.0f, x[1] = 2.5f, x[2] = 3.5f, x[3] = -2.5f, x[4] = -0.5f, x[5] = 0.5f;
        quant_convert_activations(MT_TYPE_Q8_0, x, buf, 32);
        int8_t *qs = (int8_t *)(buf + 2);
        CHECK(qs[0] == 127 && qs[1] == 2 && qs[2] == 4 && qs[3] == -2 && qs[4] == 0 && qs[5] == 0,
              "Q8_0 activation ties round half to even: %d %d %d %d %d %d", qs[0], qs[1], qs[2],
              qs[3], qs[4], qs[5]);
        for (int j = 0; j < 32; j++) x[j] = 0.0f;
        quant_convert_activations(MT_TYPE_Q8_0, x, buf, 32);
        int nz = 0;
        for (int j = 0; j < 34; j++) nz += buf[j] != 0;
        CHECK(nz == 0, "Q8_0 activations: zero block is not all zero bytes");
    }

    /* Q8_1 (ggml x86 quantize_row_q8_1): d and quants as Q8_0's, then
     * s = f16(amax/127 * sum(qs)), the product in f32 from the unrounded d */
    bad = 0;
    for (int kind = 0; kind < 4; kind++) {
        fill(x, N, kind);
        quant_convert_activations(MT_TYPE_Q8_1, x, buf, N);
        for (int b = 0; b < N / 32; b++) {
            float amax = 0;
            for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[32 * b + j]));
            uint16_t d, sh;
            memcpy(&d, buf + 36 * b, 2);
            memcpy(&sh, buf + 36 * b + 2, 2);
            if (d != mt_f32_to_f16(amax / 127.0f)) bad++;
            float id = 127.0f / amax;
            int sum = 0;
            for (int j = 0; j < 32; j++) {
                int q = (int)nearbyintf(x[32 * b + j] * id);
                sum += q;
                if ((int8_t)buf[36 * b + 4 + j] != q) bad++;
            }
            if (sh != mt_f32_to_f16(amax / 127.0f * (float)sum)) bad++;
        }
    }
    CHECK(bad == 0, "Q8_1 activations: %d scales, sums or quants differ from ggml's x86 formula",
          bad);
    { /* s from the f32 d: amax = 127 * (1 + 2^-12) gives d = 1 + 2^-12 (1 in
       * f16) and quants 127; 31 of them make s = 3937 * d = 3937.96..., 3938
       * in f16, where 3937 * (f16 d) would round to 3936 (a tie to even) */
        for (int j = 0; j < 32; j++) x[j] = 127.0f * (1.0f + 0x1p-12f);
        x[31] = 0.0f;
        quant_convert_activations(MT_TYPE_Q8_1, x, buf, 32);
        uint16_t d, sh;
        memcpy(&d, buf, 2);
        memcpy(&sh, buf + 2, 2);
        CHECK(mt_f16_to_f32(d) == 1.0f && mt_f16_to_f32(sh) == 3938.0f && (int8_t)buf[4] == 127,
              "Q8_1: d %g, s %g, q %d (want 1, 3938: s from the f32 d; 127)",
              (double)mt_f16_to_f32(d), (double)mt_f16_to_f32(sh), (int8_t)buf[4]);
    }

    /* Q8_K: max = first element of largest magnitude, iscale = -127/max,
     * q = min(127, rne(iscale*x)), d = 1/iscale, bsums */
    bad = 0;
    int sign_flipped = 0;
    for (int kind = 0; kind < 4; kind++) {
        fill(x, N, kind);
        quant_convert_activations(MT_TYPE_Q8_K, x, buf, N);
        for (int b = 0; b < N / 256; b++) {
            const float *xb = x + 256 * b;
            const uint8_t *kb = buf + 292 * b;
            float amax = 0, max = 0;
            for (int j = 0; j < 256; j++)
                if (fabsf(xb[j]) > amax) amax = fabsf(xb[j]), max = xb[j];
            float iscale = -127.0f / max, d;
            memcpy(&d, kb, 4);
            if (quant_f32_bits(d) != quant_f32_bits(1.0f / iscale)) bad++;
            if (max > 0 && d < 0) sign_flipped++;
            const int8_t *qs = (const int8_t *)(kb + 4);
            for (int j = 0; j < 256; j++) {
                int want = (int)nearbyintf(iscale * xb[j]);
                if (qs[j] != (want > 127 ? 127 : want)) bad++;
            }
            for (int g = 0; g < 16; g++) {
                int s = 0;
                for (int j = 0; j < 16; j++) s += qs[16 * g + j];
                int16_t bs;
                memcpy(&bs, kb + 260 + 2 * g, 2);
                if (bs != s) bad++;
            }
        }
    }
    CHECK(bad == 0, "Q8_K activations: %d fields differ from ggml's quantize_row_q8_K_ref", bad);
    CHECK(sign_flipped > 0, "Q8_K: expected d < 0 for blocks whose max is positive");

    /* F16 / BF16 / F32 activations: elementwise conversion */
    fill(x, N, 0);
    quant_convert_activations(MT_TYPE_F16, x, buf, N);
    bad = 0;
    for (int i = 0; i < N; i++) {
        uint16_t h;
        memcpy(&h, buf + 2 * i, 2);
        bad += h != mt_f32_to_f16(x[i]);
    }
    quant_convert_activations(MT_TYPE_BF16, x, buf, N);
    for (int i = 0; i < N; i++) {
        uint16_t h;
        memcpy(&h, buf + 2 * i, 2);
        bad += h != mt_f32_to_bf16(x[i]);
    }
    quant_convert_activations(MT_TYPE_F32, x, buf, N);
    bad += memcmp(buf, x, sizeof x) != 0;
    CHECK(bad == 0, "F16/BF16/F32 activation conversion: %d mismatches", bad);
    printf("activations: Q8_0 and Q8_1 (x86 formula, ties to even; s), Q8_K (ref formula, bsums), "
           "F16/BF16/F32 convert as specified\n");
}

/* ------------------------------------------------------------ vec_dot */

/* The reduction orders of quant_kernels.h, re-derived from the spec's
 * element decoding; each must match quant_vec_dot bit for bit. Q8_0-family:
 * 8 exact int lanes of 4 consecutive products per block, lane floats
 * acc = fmaf(lane, dw * dx, acc) (even blocks lanes 0-7, odd blocks 8-15),
 * then b = a[l] + a[l+8] and ((b0+b4)+(b2+b6)) + ((b1+b5)+(b3+b7)).
 * Q4_K: lanes of 4 consecutive elements per sub-block, scaled by the
 * sub-block scale and summed over the super-block as ints; floats as above,
 * minus the fmaf chain of the mins. Q6_K: ggml's generic order (element
 * index mod 8, lanes added 0..7). */
static float tree8(const float a[8]) {
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

static float order_dot(mt_type t, int64_t n, const uint8_t *w, const uint8_t *xc) {
    if (t == MT_TYPE_Q8_0 || t == MT_TYPE_Q4_0 || t == MT_TYPE_MXFP4) {
        static const int T[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
        const int wbytes = t == MT_TYPE_Q8_0 ? 34 : t == MT_TYPE_Q4_0 ? 18 : 17;
        float acc[16] = {0};
        for (int64_t b = 0; b < n / 32; b++) {
            const uint8_t *wb = w + wbytes * b, *xb = xc + 34 * b;
            uint16_t dwh, dxh;
            memcpy(&dxh, xb, 2);
            memcpy(&dwh, wb, 2);
            int lane[8] = {0};
            for (int j = 0; j < 32; j++) {
                int xq = (int8_t)xb[2 + j], wq;
                if (t == MT_TYPE_Q8_0)
                    wq = (int8_t)wb[2 + j];
                else if (t == MT_TYPE_Q4_0)
                    wq = (j < 16 ? wb[2 + j] & 0xF : wb[2 + j - 16] >> 4) - 8;
                else
                    wq = T[j < 16 ? wb[1 + j] & 0xF : wb[1 + j - 16] >> 4];
                lane[j / 4] += wq * xq;
            }
            float dx = mt_f16_to_f32(dxh);
            float d = t == MT_TYPE_MXFP4 ? dx * ldexpf(1.0f, wb[0] - 128) : mt_f16_to_f32(dwh) * dx;
            float *a = acc + 8 * (b % 2);
            for (int l = 0; l < 8; l++) a[l] = mt_fmaf((float)lane[l], d, a[l]);
        }
        float sum8[8];
        for (int l = 0; l < 8; l++) sum8[l] = acc[l] + acc[l + 8];
        return tree8(sum8);
    }
    float lanes[8] = {0}, mins = 0;
    for (int64_t b = 0; b < n / 256; b++) {
        const uint8_t *xb = xc + 292 * b;
        float dx;
        memcpy(&dx, xb, 4);
        int acc[8] = {0}, summ = 0;
        if (t == MT_TYPE_Q4_K) {
            const uint8_t *wb = w + 144 * b, *sb = wb + 4;
            for (int i = 0; i < 256; i++) {
                int s = i / 32, l = i % 32;
                int sc = s < 4 ? sb[s] & 63 : (sb[s + 4] & 0xF) | ((sb[s - 4] >> 6) << 4);
                int q =
                    (s % 2 == 0) ? wb[16 + 32 * (s / 2) + l] & 0xF : wb[16 + 32 * (s / 2) + l] >> 4;
                acc[l / 4] += sc * q * (int8_t)xb[4 + i];
            }
            for (int g = 0; g < 16; g++) {
                int s = g / 2;
                int m = s < 4 ? sb[s + 4] & 63 : (sb[s + 4] >> 4) | ((sb[s] >> 6) << 4);
                int16_t bs;
                memcpy(&bs, xb + 260 + 2 * g, 2);
                summ += bs * m;
            }
            uint16_t dh, dminh;
            memcpy(&dh, wb, 2);
            memcpy(&dminh, wb + 2, 2);
            float d = mt_f16_to_f32(dh) * dx;
            for (int l = 0; l < 8; l++) lanes[l] = mt_fmaf((float)acc[l], d, lanes[l]);
            mins = mt_fmaf(mt_f16_to_f32(dminh) * dx, (float)summ, mins);
        } else {
            const uint8_t *wb = w + 210 * b;
            for (int i = 0; i < 256; i++) {
                int h = i / 128, r = i % 128, k = r / 32, l = r % 32;
                int qlv = wb[64 * h + (k & 1) * 32 + l];
                int q =
                    (k < 2 ? qlv & 0xF : qlv >> 4) | (((wb[128 + 32 * h + l] >> (2 * k)) & 3) << 4);
                acc[i % 8] += (int8_t)wb[192 + i / 16] * (q - 32) * (int8_t)xb[4 + i];
            }
            uint16_t dh;
            memcpy(&dh, wb + 208, 2);
            float d = mt_f16_to_f32(dh) * dx;
            for (int l = 0; l < 8; l++) lanes[l] += d * (float)acc[l];
        }
    }
    if (t == MT_TYPE_Q4_K) return tree8(lanes) - mins;
    float sumf = 0;
    for (int l = 0; l < 8; l++) sumf += lanes[l];
    return sumf;
}

static void test_vec_dot(void) {
    enum { N = 4096, OFF = 1 }; /* rows placed at odd addresses on purpose */
    float *w = malloc(N * sizeof *w), *x = malloc(N * sizeof *x);
    float *wd = malloc(N * sizeof *wd), *xd = malloc(N * sizeof *xd);
    uint8_t *wq_buf = malloc(N * 4 + 64), *xc_buf = malloc(N * 4 + 64);
    uint8_t *wq = wq_buf + OFF, *xc = xc_buf + OFF;
    printf("vec_dot, n = %d (worst over 20 random rows each):\n", N);
    printf("  type    |dot - exact(decoded)| / sum|w*x|   |dot - exact(raw x)| / stated bound\n");
    for (int ti = 0; ti < N_WTYPES; ti++) {
        mt_type t = weight_types[ti].t, vt = quant_vec_dot_type(t);
        double worst_tight = 0, worst_loose = 0;
        int not_order = 0;
        for (int trial = 0; trial < 20; trial++) {
            fill(w, N, trial % 3);
            fill(x, N, (trial + 1) % 4 == 3 ? 0 : (trial + 1) % 4);
            quant_quantize_row(t, w, wq, N);
            quant_convert_activations(vt, x, xc, N);
            quant_dequantize_row(t, wq, wd, N);
            quant_dequantize_row(vt, xc, xd, N);
            float dot = quant_vec_dot(t, N, wq, xc);
            CHECK(dot == quant_vec_dot_get(t)(N, wq, xc), "%s: quant_vec_dot_get differs",
                  weight_types[ti].name);
            if (t == MT_TYPE_Q8_0 || t == MT_TYPE_Q4_0 || t == MT_TYPE_MXFP4 || t == MT_TYPE_Q4_K ||
                t == MT_TYPE_Q6_K)
                not_order += quant_f32_bits(dot) != quant_f32_bits(order_dot(t, N, wq, xc));

            /* tight: the exact dot of the decoded operands (with Q8_1's s) */
            double s_bound, exact = quant_q8_1_min_shift(t, N, wq, xc, &s_bound), mag = 0;
            for (int i = 0; i < N; i++) {
                exact += (double)wd[i] * xd[i];
                mag += fabs((double)wd[i] * xd[i]);
            }
            double tight = fabs(dot - exact) / mag;
            worst_tight = fmax(worst_tight, tight);
            CHECK(tight <= 1e-5, "%s trial %d: dot %.9g vs exact %.9g (rel %.2e)",
                  weight_types[ti].name, trial, dot, exact, tight);

            /* loose: against raw f32 activations; bound = sum |w_i| * (the
             * activation rounding bound of element i) + the tight tolerance */
            double raw = 0, bound = 1e-5 * mag + s_bound;
            for (int i = 0; i < N; i++) {
                raw += (double)wd[i] * x[i];
                double ax = 0;
                int blk = vt == MT_TYPE_Q8_K ? 256 : 32;
                for (int j = 0; j < blk; j++) ax = fmax(ax, fabs(x[i / blk * blk + j]));
                double dx = vt == MT_TYPE_Q8_0 || vt == MT_TYPE_Q8_1
                                ? ax / 127 * (0.5 + 127 * ldexp(1, -11) + 1e-4)
                            : vt == MT_TYPE_Q8_K ? ax / 127 * (0.5 + 1e-4)
                            : vt == MT_TYPE_F16  ? fabs(x[i]) * ldexp(1, -11)
                            : vt == MT_TYPE_BF16 ? fabs(x[i]) * ldexp(1, -8)
                                                 : 0;
                bound += fabs(wd[i]) * dx;
            }
            double loose = fabs(dot - raw);
            CHECK(loose <= bound, "%s trial %d: dot %.9g vs raw-activation dot %.9g (bound %g)",
                  weight_types[ti].name, trial, dot, raw, bound);
            worst_loose = fmax(worst_loose, loose / bound);
        }
        CHECK(not_order == 0, "%s: %d of 20 dots differ from the specified reduction order",
              weight_types[ti].name, not_order);
        printf("  %-6s  %.2e                               %.3f\n", weight_types[ti].name,
               worst_tight, worst_loose);
    }
    free(w);
    free(x);
    free(wd);
    free(xd);
    free(wq_buf);
    free(xc_buf);
}

/* ------------------------------------------------------------ kernel sets */

/* Overwrites a row of quantized weights with random bytes, keeping the f16
 * scale fields finite (some subnormal) and MXFP4 exponents moderate. */
static void random_blocks(mt_type t, uint8_t *row, int64_t len) {
    quant_random_blocks(t, row, len, &rng_state);
}

/* Compares kernel set `name` with the reference set. */
static void compare_set(const char *name) {
    const char *start = quant_kernel_name();
    if (quant_kernels_select(name) != 0) {
        printf("%s kernels not available here; nothing to compare\n", name);
        quant_kernels_select(start);
        return;
    }
    enum { N = 2048, N_TILE = 2304 /* the widest tile rows below */ };
    float *w = malloc(N_TILE * sizeof *w), *x = malloc(N * sizeof *x);
    float *y1 = malloc(N * sizeof *y1), *y2 = malloc(N * sizeof *y2);
    uint8_t *wq = malloc(N * 4), *xc1 = malloc(N * 4), *xc2 = malloc(N * 4);
    int bad = 0, n = 0;
    for (int ti = 0; ti < N_WTYPES; ti++) {
        mt_type t = weight_types[ti].t, vt = quant_vec_dot_type(t);
        for (int trial = 0; trial < 30; trial++) {
            const int blck = mt_type_traits_get(t)->blck;
            int64_t len = trial >= 10 ? N : blck == 1 ? 1 + 7 * trial : blck; /* odd float tails */
            fill(w, len, trial % 4);
            fill(x, len, (trial / 4) % 4);
            if (trial == 29) /* extreme quants: activations hitting +-127 everywhere */
                for (int64_t i = 0; i < len; i++) x[i] = (i & 1) ? 1.0f : -1.0f;
            quant_kernels_select("reference");
            quant_quantize_row(t, w, wq, len);
            size_t xb1 = quant_convert_activations(vt, x, xc1, len);
            float d1 = quant_vec_dot(t, len, wq, xc1);
            quant_dequantize_row(t, wq, y1, len);
            quant_kernels_select(name);
            size_t xb2 = quant_convert_activations(vt, x, xc2, len);
            float d2 = quant_vec_dot(t, len, wq, xc1);
            quant_dequantize_row(t, wq, y2, len);
            n++;
            if (quant_f32_bits(d1) != quant_f32_bits(d2) || xb1 != xb2 ||
                memcmp(xc1, xc2, xb1) != 0 || memcmp(y1, y2, (size_t)len * sizeof *y1) != 0) {
                if (bad++ < 5)
                    fprintf(stderr, "  %s trial %d: reference %a, %s %a\n", weight_types[ti].name,
                            trial, (double)d1, name, (double)d2);
            }
        }
    }
    /* random bytes: any quant (int8 -128 included), any 6-bit code, any sign
     * of the Q6_K scales; only the f16/f32 scale fields are kept finite */
    for (int ti = 0; ti < N_WTYPES; ti++) {
        mt_type t = weight_types[ti].t, vt = quant_vec_dot_type(t);
        if (t == MT_TYPE_F32 || t == MT_TYPE_F16 || t == MT_TYPE_BF16) continue;
        const int xblk = mt_type_traits_get(vt)->type_size;
        const int64_t nb = N / mt_type_traits_get(t)->blck;
        for (int trial = 0; trial < 50; trial++) {
            random_blocks(t, wq, N);
            for (int64_t i = 0; i < (int64_t)mt_type_row_size(vt, N); i++)
                xc1[i] = (uint8_t)rng_u64();
            for (int64_t b = 0; b < nb; b++) { /* activation scales: finite, some subnormal */
                uint8_t *xb = xc1 + b * xblk;
                if (vt == MT_TYPE_Q8_K) {
                    float d = rng_gauss();
                    memcpy(xb, &d, 4);
                } else {
                    uint16_t h = (uint16_t)(rng_u64() & 0xbbff);
                    memcpy(xb, &h, 2);
                    if (vt == MT_TYPE_Q8_1) { /* s: finite, some subnormal */
                        h = (uint16_t)(rng_u64() & 0xbbff);
                        memcpy(xb + 2, &h, 2);
                    }
                }
            }
            quant_kernels_select("reference");
            float d1 = quant_vec_dot(t, N, wq, xc1);
            quant_kernels_select(name);
            float d2 = quant_vec_dot(t, N, wq, xc1);
            n++;
            if (quant_f32_bits(d1) != quant_f32_bits(d2) && !(isnan(d1) && isnan(d2))) {
                if (bad++ < 5)
                    fprintf(stderr, "  %s random bytes %d: reference %a, %s %a\n",
                            weight_types[ti].name, trial, (double)d1, name, (double)d2);
            }
        }
    }
    /* activation conversion of special values: NaN and infinite elements,
     * zero blocks, blocks too small for 127/amax, exact ties */
    {
        enum { NS = 1024 };
        float xs[NS];
        uint8_t c1[NS * 2], c2[NS * 2];
        for (int v = 0; v < 6; v++) {
            fill(xs, NS, v % 4);
            for (int i = 0; i < NS; i++) {
                if (v == 0 && i % 37 == 5) xs[i] = NAN;
                if (v == 1 && i % 300 == 7) xs[i] = i % 2 ? INFINITY : -INFINITY;
                if (v == 2 && i < 512) xs[i] = 0.0f;
                if (v == 3 && i >= 256 && i < 768) xs[i] *= 1e-38f;
                if (v == 4) xs[i] = (float)((i % 9) - 4) * 0.5f; /* many ties */
                if (v == 5 && i % 64 == 0) xs[i] = -xs[i] * 1e6f;
            }
            const mt_type vts[3] = {MT_TYPE_Q8_0, MT_TYPE_Q8_K, MT_TYPE_Q8_1};
            for (int k = 0; k < 3; k++) {
                quant_kernels_select("reference");
                size_t b1 = quant_convert_activations(vts[k], xs, c1, NS);
                quant_kernels_select(name);
                size_t b2 = quant_convert_activations(vts[k], xs, c2, NS);
                n++;
                if ((b1 != b2 || memcmp(c1, c2, b1) != 0) && bad++ < 5)
                    fprintf(stderr, "  %s conversion of special values (case %d) differs\n",
                            mt_type_traits_get(vts[k])->name, v);
            }
        }
    }
    /* tiles of every shape up to 9 x 9 (all micro-tile remainders) against
     * the reference vec_dot of each element, on quantized weights and (pass
     * 1) on random-byte weights with finite scales */
    for (int pass = 0; pass < 2; pass++)
        for (int ti = 0; ti < N_WTYPES; ti++) {
            mt_type t = weight_types[ti].t, vt = quant_vec_dot_type(t);
            if (pass == 1 && (t == MT_TYPE_F32 || t == MT_TYPE_F16 || t == MT_TYPE_BF16)) continue;
            const int blck = mt_type_traits_get(t)->blck; /* odd block counts on purpose */
            /* pass 1: K-quant rows wide enough that a tile's prepared activations
             * do not fit on the stack */
            const int64_t len = blck == 1 ? 77 : blck == 32 ? 544 : pass ? N_TILE : 768;
            const size_t wrow = mt_type_row_size(t, len), xrow = mt_type_row_size(vt, len);
            uint8_t *tw = malloc(9 * wrow), *tx = malloc(9 * xrow);
            float xf[N_TILE], yt[81], yr[81];
            quant_kernels_select("reference");
            for (int r = 0; r < 9; r++) {
                fill(w, len, r % 4);
                quant_quantize_row(t, w, tw + r * wrow, len);
                if (pass == 1) random_blocks(t, tw + r * wrow, len);
            }
            for (int k = 0; k < 9; k++) {
                fill(xf, len, (k + 1) % 4);
                quant_convert_activations(vt, xf, tx + k * xrow, len);
            }
            for (int r = 0; r < 9; r++)
                for (int k = 0; k < 9; k++)
                    yr[k * 9 + r] = quant_vec_dot(t, len, tw + r * wrow, tx + k * xrow);
            quant_kernels_select(name);
            for (int nr = 1; nr <= 9; nr++)
                for (int nt = 1; nt <= 9; nt++) {
                    memset(yt, 0, sizeof yt);
                    quant_tile(t, len, tw, wrow, nr, tx, xrow, nt, yt, 9);
                    n++;
                    bool same = true;
                    for (int r = 0; r < nr; r++)
                        for (int k = 0; k < nt; k++)
                            same &= quant_f32_bits(yt[k * 9 + r]) == quant_f32_bits(yr[k * 9 + r]);
                    if (!same && bad++ < 5)
                        fprintf(stderr,
                                "  %s tile %d x %d (%s weights): an element differs from vec_dot\n",
                                weight_types[ti].name, nr, nt, pass ? "random-byte" : "quantized");
                }
            free(tw);
            free(tx);
        }
    /* decoding runs: 1-3 tokens against up to 41 rows, which the kernels
     * read as four streams from 16 rows on (every run length and remainder) */
    for (int ti = 0; ti < N_WTYPES; ti++) {
        enum { MAX_ROWS = 41, MAX_TOK = 3 };
        mt_type t = weight_types[ti].t, vt = quant_vec_dot_type(t);
        const int blck = mt_type_traits_get(t)->blck;
        const int64_t len = blck == 1 ? 77 : blck == 32 ? 544 : 768;
        const size_t wrow = mt_type_row_size(t, len), xrow = mt_type_row_size(vt, len);
        uint8_t *tw = malloc(MAX_ROWS * wrow), *tx = malloc(MAX_TOK * xrow);
        float xf[768], yt[MAX_TOK * MAX_ROWS], yr[MAX_TOK * MAX_ROWS];
        quant_kernels_select("reference");
        for (int r = 0; r < MAX_ROWS; r++) {
            fill(w, len, r % 4);
            quant_quantize_row(t, w, tw + r * wrow, len);
            if (r % 3 == 1 && blck > 1) random_blocks(t, tw + r * wrow, len);
        }
        for (int k = 0; k < MAX_TOK; k++) {
            fill(xf, len, k + 1);
            quant_convert_activations(vt, xf, tx + k * xrow, len);
        }
        for (int k = 0; k < MAX_TOK; k++)
            for (int r = 0; r < MAX_ROWS; r++)
                yr[k * MAX_ROWS + r] = quant_vec_dot(t, len, tw + r * wrow, tx + k * xrow);
        quant_kernels_select(name);
        for (int nt = 1; nt <= MAX_TOK; nt++)
            for (int nr = 1; nr <= MAX_ROWS; nr++) {
                memset(yt, 0, sizeof yt);
                quant_tile(t, len, tw, wrow, nr, tx, xrow, nt, yt, MAX_ROWS);
                n++;
                bool same = true;
                for (int k = 0; k < nt; k++)
                    same &=
                        memcmp(yt + k * MAX_ROWS, yr + k * MAX_ROWS, (size_t)nr * sizeof *yt) == 0;
                if (!same && bad++ < 5)
                    fprintf(stderr,
                            "  %s decoding %d rows x %d tokens: an element differs from vec_dot\n",
                            weight_types[ti].name, nr, nt);
            }
        free(tw);
        free(tx);
    }
    CHECK(bad == 0, "%s kernels differ from reference in %d of %d cases", name, bad, n);
    printf("%s vs reference: %d cases (dot, tiles, conversion, decode; quantized and random-byte "
           "blocks) bit-identical\n",
           name, n - bad);
    quant_kernels_select(start);
    free(w);
    free(x);
    free(y1);
    free(y2);
    free(wq);
    free(xc1);
    free(xc2);
}

static void test_kernel_sets(void) {
    printf("kernel set in use: %s\n", quant_kernel_name());
    CHECK(quant_kernels_select("reference") == 0, "reference kernels must always exist");
    CHECK(quant_kernels_select("no-such-set") == -1, "unknown kernel set accepted");
    compare_set("reference"); /* tiles against vec_dot within the reference set */
    compare_set("avx2");
    compare_set("avx512");
}

int main(void) {
    printf("quant kernels: %s\n", quant_kernel_name());
    pick_weight_types();
    test_type_table();
    test_f16();
    test_bf16();
    test_blocks();
    test_roundtrip();
    test_convert();
    static const char *const sets[] = {"reference", "avx2", "avx512"};
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
        if (quant_kernels_select(sets[i]) != 0) continue;
        printf("(%s kernels)\n", sets[i]);
        test_vec_dot();
    }
    quant_kernels_select("reference");
    test_kernel_sets();
    return check_report("test_quant");
}
