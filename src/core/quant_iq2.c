/* quant_iq2.c - reference kernels of the 2-bit grid i-quants IQ2_XXS, IQ2_XS
 * and IQ2_S (256-element super-blocks, against Q8_K activations).
 *
 * Layouts (docs/engine-reference.md, "Tensor types"): a super-block is 32
 * groups of 8 elements (group g: elements 8g..8g+7; sub-block s = g / 4 is
 * elements 32s..32s+31). A group takes its 8 magnitudes from a grid entry
 * (quant_iq2_grids.c: 3 magnitudes 8, 25, 43) and its signs from a sign
 * byte (bit j set: element j negative).
 *   IQ2_XXS (66 bytes): d f16 @0; qs @2: per sub-block 8 bytes, the 4 grid
 *     indices (bytes 0-3, of 256) and a u32 (bytes 4-7) holding four 7-bit
 *     sign indices (bits 7k..7k+6 for group k) and the 4-bit scale (bits 28-31).
 *   IQ2_XS (74 bytes): d f16 @0; qs[32] u16 @2: grid index (9 bits, of 512)
 *     | 7-bit sign index << 9; scales[8] @66: per sub-block two 4-bit scales
 *     (low nibble: elements 0-15, high: 16-31).
 *   IQ2_S (82 bytes): d f16 @0; qs[32] @2 (low 8 bits of the grid index, of
 *     1024); signs[32] @34 (a whole sign byte per group); qh[8] @66 (bits
 *     2k..2k+1 of qh[s]: top 2 index bits of group 4s+k); scales[8] @74 as XS.
 * A 7-bit sign index s7 gives the sign byte s7 | parity(s7) << 7 (the 8
 * signs hold an even number of minus signs).
 *
 * Decoding (as llama.cpp, bit for bit): db = (d * (0.5f + sc)) * 0.25f for
 * the element's 4-bit scale sc; y = +-(db * (float)magnitude).
 *
 * Dot against Q8_K: lane l (0..7) of a super-block is the exact int32 sum
 * over the 8 sub-blocks of ls * (the products w*x of the sub-block's
 * elements 4l..4l+3), with w = +-magnitude and ls = 2 * sc + 1 the
 * element's scale; lanes accumulate fmaf((float)lane, (0.125f * dw) * dx,
 * acc[l]) per super-block (0.125f * dw is exact); the result is
 * quant_hsum8(acc). */
#include "quant_kernels.h"

#include <pthread.h>
#include <stdlib.h>

/* --------------------------------------------------------------- tables */

uint64_t quant_iq2xxs_grid64[256];
uint64_t quant_iq2xs_grid64[512];
uint64_t quant_iq2s_grid64[1024];
uint8_t quant_iq2_sign7[128];
uint64_t quant_iq2_signs64[256];
uint64_t quant_iq2_signs64_7[128];
_Alignas(32) int16_t quant_iq2_ls16[256][16];

static void expand(const uint16_t *codes, uint64_t *out, int n) {
    for (int i = 0; i < n; i++) {
        uint64_t v = 0;
        for (int j = 0; j < 8; j++)
            v |= (uint64_t)quant_iq2_levels[(codes[i] >> (2 * j)) & 3] << (8 * j);
        out[i] = v;
    }
}

void quant_iq2_tables_init(void) {
    expand(quant_iq2xxs_grid, quant_iq2xxs_grid64, 256);
    expand(quant_iq2xs_grid, quant_iq2xs_grid64, 512);
    expand(quant_iq2s_grid, quant_iq2s_grid64, 1024);
    for (int s = 0; s < 128; s++) {
        int odd = 0;
        for (int j = 0; j < 7; j++) odd ^= (s >> j) & 1;
        quant_iq2_sign7[s] = (uint8_t)(s | odd << 7);
    }
    for (int s = 0; s < 256; s++) {
        uint64_t v = 0;
        for (int j = 0; j < 8; j++) v |= (uint64_t)((s >> j) & 1 ? 0xFF : 0x01) << (8 * j);
        quant_iq2_signs64[s] = v;
    }
    for (int s = 0; s < 128; s++) quant_iq2_signs64_7[s] = quant_iq2_signs64[quant_iq2_sign7[s]];
    for (int b = 0; b < 256; b++)
        for (int w = 0; w < 16; w++)
            quant_iq2_ls16[b][w] = (int16_t)(2 * (w < 8 ? b & 15 : b >> 4) + 1);
}

/* ------------------------------------------------------- group access */

/* Group g (0..31) of a block: its grid entry (8 magnitude bytes), sign byte
 * and the 4-bit scales of its elements (both halves the same for XXS). */
typedef struct iq2_group {
    uint64_t grid;
    uint8_t signs;
    uint8_t sc; /* 4-bit scale */
} iq2_group;

static iq2_group group_of(mt_type t, const uint8_t *b, int g) {
    iq2_group r;
    const int s = g / 4, k = g % 4;
    if (t == MT_TYPE_IQ2_XXS) {
        uint32_t aux;
        memcpy(&aux, b + IQ2_XXS_QS + 8 * s + 4, 4);
        r.grid = quant_iq2xxs_grid64[b[IQ2_XXS_QS + 8 * s + k]];
        r.signs = quant_iq2_sign7[(aux >> (7 * k)) & 127];
        r.sc = (uint8_t)(aux >> 28);
    } else if (t == MT_TYPE_IQ2_XS) {
        uint16_t q;
        memcpy(&q, b + IQ2_XS_QS + 2 * g, 2);
        r.grid = quant_iq2xs_grid64[q & 511];
        r.signs = quant_iq2_sign7[q >> 9];
        r.sc = (uint8_t)((b[IQ2_XS_SCALES + s] >> (k / 2 * 4)) & 0xF);
    } else {
        const int idx = b[IQ2_S_QS + g] | (((b[IQ2_S_QH + s] >> (2 * k)) & 3) << 8);
        r.grid = quant_iq2s_grid64[idx];
        r.signs = b[IQ2_S_SIGNS + g];
        r.sc = (uint8_t)((b[IQ2_S_SCALES + s] >> (k / 2 * 4)) & 0xF);
    }
    return r;
}

static int block_bytes(mt_type t) {
    return t == MT_TYPE_IQ2_XXS ? IQ2_XXS_BYTES : t == MT_TYPE_IQ2_XS ? IQ2_XS_BYTES : IQ2_S_BYTES;
}

/* ------------------------------------------------------------ decode */

static void dequantize(mt_type t, const uint8_t *b, float *dst, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++, b += block_bytes(t)) {
        const float d = quant_load_f16(b);
        for (int g = 0; g < 32; g++, dst += 8) {
            const iq2_group q = group_of(t, b, g);
            const float db = d * (0.5f + (float)q.sc) * 0.25f;
            for (int j = 0; j < 8; j++) {
                const float v = db * (float)(uint8_t)(q.grid >> (8 * j));
                dst[j] = (q.signs >> j) & 1 ? -v : v;
            }
        }
    }
}

void quant_iq2_xxs_dequantize(const void *src, float *dst, int64_t n) {
    dequantize(MT_TYPE_IQ2_XXS, src, dst, n);
}
void quant_iq2_xs_dequantize(const void *src, float *dst, int64_t n) {
    dequantize(MT_TYPE_IQ2_XS, src, dst, n);
}
void quant_iq2_s_dequantize(const void *src, float *dst, int64_t n) {
    dequantize(MT_TYPE_IQ2_S, src, dst, n);
}

/* ------------------------------------------------------------ dot */

static float vec_dot(mt_type t, int64_t n, const uint8_t *wb, const uint8_t *xb) {
    float lanes[8] = {0};
    for (int64_t i = 0; i < n / QK_K; i++, wb += block_bytes(t), xb += Q8_K_BYTES) {
        const int8_t *xq = (const int8_t *)(xb + Q8_K_QS);
        int32_t acc[8] = {0};
        for (int g = 0; g < 32; g++) {
            const iq2_group q = group_of(t, wb, g);
            const int ls = 2 * q.sc + 1;
            for (int h = 0; h < 2; h++) { /* lane 2 * (g % 4) + h: elements 4h..4h+3 */
                int32_t p = 0;
                for (int j = 4 * h; j < 4 * h + 4; j++) {
                    const int m = (uint8_t)(q.grid >> (8 * j));
                    p += ((q.signs >> j) & 1 ? -m : m) * xq[8 * g + j];
                }
                acc[2 * (g % 4) + h] += ls * p;
            }
        }
        const float d = (0.125f * quant_load_f16(wb)) * quant_load_f32(xb);
        for (int l = 0; l < 8; l++) lanes[l] = mt_fmaf((float)acc[l], d, lanes[l]);
    }
    return quant_hsum8(lanes);
}

float quant_iq2_xxs_vec_dot(int64_t n, const void *w, const void *x) {
    return vec_dot(MT_TYPE_IQ2_XXS, n, w, x);
}
float quant_iq2_xs_vec_dot(int64_t n, const void *w, const void *x) {
    return vec_dot(MT_TYPE_IQ2_XS, n, w, x);
}
float quant_iq2_s_vec_dot(int64_t n, const void *w, const void *x) {
    return vec_dot(MT_TYPE_IQ2_S, n, w, x);
}

/* ------------------------------------------------------------ encode */

/* The search: for each of the 3^8 patterns of per-element levels, the
 * NEAR grid entries closest to it (squared distance of the magnitudes),
 * built on first use for each grid. */
enum { NEAR = 4, PATTERNS = 6561 };

typedef struct iq2_search {
    const uint64_t *grid;
    int entries;
    uint16_t near[PATTERNS][NEAR];
} iq2_search;

static iq2_search *searches[3];
static pthread_once_t search_once[3] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT};

static iq2_search *search_build(const uint64_t *grid, int entries) {
    iq2_search *s = malloc(sizeof *s);
    if (!s) abort();
    s->grid = grid;
    s->entries = entries;
    for (int p = 0; p < PATTERNS; p++) {
        int lv[8], q = p;
        for (int j = 0; j < 8; j++, q /= 3) lv[j] = quant_iq2_levels[q % 3];
        int32_t best[NEAR];
        for (int k = 0; k < NEAR; k++) best[k] = INT32_MAX, s->near[p][k] = 0;
        for (int e = 0; e < entries; e++) {
            int32_t dist = 0;
            for (int j = 0; j < 8; j++) {
                const int32_t diff = (int32_t)(uint8_t)(grid[e] >> (8 * j)) - lv[j];
                dist += diff * diff;
            }
            for (int k = 0; k < NEAR; k++)
                if (dist < best[k]) { /* insert at k (ties: the lower index first) */
                    for (int m = NEAR - 1; m > k; m--)
                        best[m] = best[m - 1], s->near[p][m] = s->near[p][m - 1];
                    best[k] = dist;
                    s->near[p][k] = (uint16_t)e;
                    break;
                }
        }
    }
    return s;
}

static void build_xxs(void) {
    searches[0] = search_build(quant_iq2xxs_grid64, 256);
}
static void build_xs(void) {
    searches[1] = search_build(quant_iq2xs_grid64, 512);
}
static void build_s(void) {
    searches[2] = search_build(quant_iq2s_grid64, 1024);
}

static const iq2_search *search_for(mt_type t) {
    const int k = t == MT_TYPE_IQ2_XXS ? 0 : t == MT_TYPE_IQ2_XS ? 1 : 2;
    static void (*const build[3])(void) = {build_xxs, build_xs, build_s};
    pthread_once(&search_once[k], build[k]);
    return searches[k];
}

/* One group of 8 at step D (y = D * magnitude): signs from the elements
 * (with the parity rule, the smallest magnitude takes the flipped sign),
 * then the nearest of the candidate grid entries. Returns the squared
 * error; *idx and *signs receive the choice. */
static float quantize_group(const iq2_search *s, bool parity, const float *x, float D, int *idx,
                            uint8_t *signs) {
    float t[8];
    uint8_t sg = 0;
    int smallest = 0;
    for (int j = 0; j < 8; j++) {
        t[j] = fabsf(x[j]);
        if (x[j] < 0) sg |= (uint8_t)(1u << j);
        if (t[j] < t[smallest]) smallest = j;
    }
    if (parity) {
        int odd = 0;
        for (int j = 0; j < 8; j++) odd ^= (sg >> j) & 1;
        if (odd) {
            sg ^= (uint8_t)(1u << smallest);
            t[smallest] = -t[smallest];
        }
    }
    int p = 0;
    const float inv = D > 0 ? 1.0f / D : 0.0f;
    const float m0 = quant_iq2_levels[0], m1 = quant_iq2_levels[1], m2 = quant_iq2_levels[2];
    for (int j = 7; j >= 0; j--) {
        const float u = t[j] * inv;
        const int lv = u < 0.5f * (m0 + m1) ? 0 : u < 0.5f * (m1 + m2) ? 1 : 2;
        p = 3 * p + lv;
    }
    float best = INFINITY;
    int bi = s->near[p][0];
    for (int k = 0; k < NEAR; k++) {
        const uint64_t gr = s->grid[s->near[p][k]];
        float e = 0.0f;
        for (int j = 0; j < 8; j++) {
            const float diff = D * (float)(uint8_t)(gr >> (8 * j)) - t[j];
            e += diff * diff;
        }
        if (e < best) best = e, bi = s->near[p][k];
    }
    *idx = bi;
    *signs = sg;
    return best;
}

/* Squared error of a scale group of `len` elements (len / 8 groups) at step D. */
static float group_error(const iq2_search *s, bool parity, const float *x, int len, float D) {
    float e = 0.0f;
    int idx;
    uint8_t sg;
    for (int g = 0; g < len / 8; g++) e += quantize_group(s, parity, x + 8 * g, D, &idx, &sg);
    return e;
}

/* Least-squares step for the grid entries chosen at D. */
static float refit(const iq2_search *s, bool parity, const float *x, int len, float D) {
    double num = 0.0, den = 0.0;
    for (int g = 0; g < len / 8; g++) {
        int idx;
        uint8_t sg;
        quantize_group(s, parity, x + 8 * g, D, &idx, &sg);
        for (int j = 0; j < 8; j++) {
            const double m = (uint8_t)(s->grid[idx] >> (8 * j));
            const double v = (sg >> j) & 1 ? -x[8 * g + j] : x[8 * g + j];
            num += m * v;
            den += m * m;
        }
    }
    return den > 0 && num > 0 ? (float)(num / den) : D;
}

/* The best step of a scale group: a few multiples of amax / 43, then one
 * least-squares refit of the best. */
static float best_step(const iq2_search *s, bool parity, const float *x, int len) {
    float amax = 0.0f;
    for (int i = 0; i < len; i++) amax = fmaxf(amax, fabsf(x[i]));
    if (!(amax > 0.0f)) return 0.0f;
    static const float f[] = {0.6f, 0.75f, 0.9f, 1.05f};
    float bestD = amax / quant_iq2_levels[2], beste = INFINITY;
    for (size_t k = 0; k < sizeof f / sizeof f[0]; k++) {
        const float D = amax / quant_iq2_levels[2] * f[k];
        const float e = group_error(s, parity, x, len, D);
        if (e < beste) beste = e, bestD = D;
    }
    const float D2 = refit(s, parity, x, len, bestD);
    return group_error(s, parity, x, len, D2) < beste ? D2 : bestD;
}

/* No importance matrix: per scale group (32 elements for XXS, 16 for XS
 * and S) the best step by a small search, the block scale d so that the
 * largest step is 31/8 d (4-bit code 15), each code then the better of the
 * two nearest, every group its nearest candidate grid entry. A zero
 * block is all zero bytes (it decodes to zeros). Deterministic. */
static size_t quantize(mt_type t, const float *src, uint8_t *b, int64_t n) {
    const iq2_search *s = search_for(t);
    const bool parity = t != MT_TYPE_IQ2_S;
    const int len = t == MT_TYPE_IQ2_XXS ? 32 : 16, ngr = QK_K / len;
    const int bytes = block_bytes(t);
    for (int64_t i = 0; i < n / QK_K; i++, b += bytes, src += QK_K) {
        memset(b, 0, (size_t)bytes);
        float D[16], Dmax = 0.0f;
        for (int k = 0; k < ngr; k++) {
            D[k] = best_step(s, parity, src + len * k, len);
            Dmax = fmaxf(Dmax, D[k]);
        }
        float dd = Dmax * 8.0f / 31.0f;
        if (dd > 65504.0f) dd = 65504.0f;
        const uint16_t d_bits = mt_f32_to_f16(dd);
        const float d = mt_f16_to_f32(d_bits);
        if (!(d > 0.0f)) continue; /* zero (or negligible) block */
        memcpy(b, &d_bits, 2);
        for (int k = 0; k < ngr; k++) {
            const float *x = src + len * k;
            const int c0 = (int)floorf((D[k] * 8.0f / d - 1.0f) * 0.5f);
            int sc = 0;
            float beste = INFINITY;
            for (int c = c0; c <= c0 + 1; c++) {
                if (c < 0 || c > 15) continue;
                const float e = group_error(s, parity, x, len, d * (0.5f + (float)c) * 0.25f);
                if (e < beste) beste = e, sc = c;
            }
            const float step = d * (0.5f + (float)sc) * 0.25f;
            for (int g = 0; g < len / 8; g++) {
                const int gi = k * (len / 8) + g; /* group index in the block */
                int idx;
                uint8_t sg;
                quantize_group(s, parity, x + 8 * g, step, &idx, &sg);
                const int sb = gi / 4, kk = gi % 4;
                if (t == MT_TYPE_IQ2_XXS) {
                    b[IQ2_XXS_QS + 8 * sb + kk] = (uint8_t)idx;
                    uint32_t aux;
                    memcpy(&aux, b + IQ2_XXS_QS + 8 * sb + 4, 4);
                    aux |= (uint32_t)(sg & 127) << (7 * kk);
                    if (kk == 0) aux |= (uint32_t)sc << 28;
                    memcpy(b + IQ2_XXS_QS + 8 * sb + 4, &aux, 4);
                } else if (t == MT_TYPE_IQ2_XS) {
                    const uint16_t q = (uint16_t)(idx | (sg & 127) << 9);
                    memcpy(b + IQ2_XS_QS + 2 * gi, &q, 2);
                    if (g == 0) b[IQ2_XS_SCALES + sb] |= (uint8_t)(sc << (kk / 2 * 4));
                } else {
                    b[IQ2_S_QS + gi] = (uint8_t)(idx & 0xFF);
                    b[IQ2_S_QH + sb] |= (uint8_t)((idx >> 8) << (2 * kk));
                    b[IQ2_S_SIGNS + gi] = sg;
                    if (g == 0) b[IQ2_S_SCALES + sb] |= (uint8_t)(sc << (kk / 2 * 4));
                }
            }
        }
    }
    return (size_t)(n / QK_K) * (size_t)bytes;
}

size_t quant_iq2_xxs_quantize(const float *src, void *dst, int64_t n) {
    return quantize(MT_TYPE_IQ2_XXS, src, dst, n);
}
size_t quant_iq2_xs_quantize(const float *src, void *dst, int64_t n) {
    return quantize(MT_TYPE_IQ2_XS, src, dst, n);
}
size_t quant_iq2_s_quantize(const float *src, void *dst, int64_t n) {
    return quantize(MT_TYPE_IQ2_S, src, dst, n);
}
