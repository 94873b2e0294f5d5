/* quant_iq3_iq1.c - reference kernels of the grid i-quants IQ3_XXS, IQ3_S,
 * IQ1_S and IQ1_M (256-element super-blocks whose groups of 4 or 8 elements
 * take their magnitudes from a codebook, the "grid"; x Q8_K activations).
 *
 * Layouts (docs/engine-reference.md, "Tensor types"; the grids are in
 * quant_iq3_iq1_grids.c, measured from llama.cpp's decoder):
 *   IQ3_XXS (98 bytes): d f16 @0; qs[64] @2; sas[8] u32 @66. Sub-block s
 *     (elements 32s..32s+31) has the word sas[s]: bits 7l..7l+6 (l < 4) are
 *     the sign index of elements 32s+8l..+7 (quant_iq3xxs_signs), bits 28-31
 *     the scale code c. Group k (4 elements, 8 per sub-block) has magnitudes
 *     grid[qs[k]] (256 entries). y = d * (0.5 + c) * 0.5 * g * sign.
 *   IQ3_S (110 bytes): d f16 @0; qs[64] @2; qh[8] @66; signs[32] @74;
 *     scales[4] @106. Group k: grid index qs[k] | (bit k%8 of qh[k/8]) << 8
 *     (512 entries); element e is negative when bit e%8 of signs[e/8] is
 *     set; sub-block s has code c = nibble s%2 of scales[s/2] (low first).
 *     y = d * (1 + 2c) * g * sign.
 *   IQ1_S (50 bytes): d f16 @0; qs[32] @2; qh[8] u16 @34. Sub-block s: the
 *     word qh[s] holds the high 3 index bits of its group l at bits 3l..3l+2,
 *     the scale code c at bits 12-14 and the delta sign at bit 15. Group
 *     4s+l (8 elements) has values grid[qs[4s+l] | high << 8] in {-1,0,1}
 *     (2048 entries). y = d * (2c + 1) * (g + delta), delta = -1/8 if bit
 *     15 is set, else +1/8.
 *   IQ1_M (56 bytes): qs[32] @0; qh[16] @32; sc[4] u16 @48. d is the f16
 *     whose 4 nibbles are the top nibbles of sc[0..3] (quant_iq1m_d_bits).
 *     Group k: qh[k/2] nibble k%2 holds the high 3 index bits (bits 0-2) and
 *     the delta sign (bit 3). Elements 16h..16h+15 (h < 16) have scale code
 *     (sc[h/4] >> 3 * (h % 4)) & 7. y = d * (2c + 1) * (g + delta).
 * The float operations of the decoders are llama.cpp's, in its order
 * (test_quant_ggml compares the bits).
 *
 * Reduction order of the dot products (quant_kernels.h): every element has
 * an integer weight w (IQ3: +-g; IQ1: 8g + 8 delta = 8g +- 1) and an integer
 * scale sc (IQ3_XXS, IQ3_S, IQ1: 2c + 1 of its sub-block or half), so that
 * y = d * sc * w * k with k = 1/4 (IQ3_XXS), 1 (IQ3_S), 1/8 (IQ1). Lane l
 * (0..7) of a super-block is the exact int32 sum of sc * w * x over its
 * elements e with e mod 32 in [4l, 4l + 4); lanes accumulate
 * fmaf((float)lane, dw * dx, acc[l]) per super-block; the result is
 * k * quant_hsum8(acc). IQ1's delta is thus folded into the integer weight
 * (exact; its deltas change every 8 elements in IQ1_M, finer than Q8_K's
 * bsums of 16).
 *
 * Quantizers (no importance matrix): per sub-block (IQ1_M: half) a few
 * candidate scales, each element rounded to the nearest level and the group
 * replaced by the grid entry nearest to that rounded point (a precomputed
 * map), keeping the candidate of least squared error; the super-block scale
 * is the largest sub-block scale over the top code. Deterministic; a zero
 * super-block is all zero bytes (decodes to zeros). */
#include "quant_kernels.h"

#include <float.h>
#include <pthread.h>

/* ------------------------------------------------------------ grids */

/* Magnitude j (0..3) of IQ3 grid entry code c. */
static inline int iq3_value(const uint8_t *levels, uint16_t c, int j) {
    return levels[(c >> (3 * j)) & 7];
}

/* Value j (0..7) of IQ1 grid entry i: -1, 0 or 1. */
static inline int iq1_value(int i, int j) {
    return ((quant_iq1s_grid[i] >> (2 * j)) & 3) - 1;
}

/* ------------------------------------------------------------ decode */

void quant_iq3_xxs_dequantize(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += IQ3_XXS_BYTES) {
        const float d = quant_load_f16(b);
        for (int s = 0; s < 8; s++) {
            uint32_t aux;
            memcpy(&aux, b + IQ3_XXS_SAS + 4 * s, 4);
            const float db = d * (0.5f + (float)(aux >> 28)) * 0.5f;
            for (int l = 0; l < 4; l++) {
                const uint8_t sg = quant_iq3xxs_signs((aux >> (7 * l)) & 127);
                for (int j = 0; j < 8; j++) {
                    const uint16_t c = quant_iq3xxs_grid[b[2 + 8 * s + 2 * l + j / 4]];
                    const float v = db * (float)iq3_value(quant_iq3xxs_levels, c, j % 4);
                    *dst++ = (sg >> j) & 1 ? -v : v;
                }
            }
        }
    }
}

void quant_iq3_s_dequantize(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += IQ3_S_BYTES) {
        const float d = quant_load_f16(b);
        for (int s = 0; s < 8; s++) {
            const int c = (b[IQ3_S_SCALES + s / 2] >> (4 * (s % 2))) & 0xF;
            const float db = d * (float)(1 + 2 * c);
            for (int e = 32 * s; e < 32 * s + 32; e++) {
                const int k = e / 4;
                const int idx = b[2 + k] | (((b[IQ3_S_QH + k / 8] >> (k % 8)) & 1) << 8);
                const float v =
                    db * (float)iq3_value(quant_iq3s_levels, quant_iq3s_grid[idx], e % 4);
                *dst++ = (b[IQ3_S_SIGNS + e / 8] >> (e % 8)) & 1 ? -v : v;
            }
        }
    }
}

void quant_iq1_s_dequantize(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += IQ1_S_BYTES) {
        const float d = quant_load_f16(b);
        for (int s = 0; s < 8; s++) {
            uint16_t qh;
            memcpy(&qh, b + IQ1_S_QH + 2 * s, 2);
            const float dl = d * (float)(2 * ((qh >> 12) & 7) + 1);
            const float delta = qh & 0x8000 ? -0.125f : 0.125f;
            for (int l = 0; l < 4; l++) {
                const int idx = b[2 + 4 * s + l] | (((qh >> (3 * l)) & 7) << 8);
                for (int j = 0; j < 8; j++) *dst++ = dl * ((float)iq1_value(idx, j) + delta);
            }
        }
    }
}

void quant_iq1_m_dequantize(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += IQ1_M_BYTES) {
        const float d = quant_f16_to_f32(quant_iq1m_d_bits(b));
        uint16_t sc[4];
        memcpy(sc, b + IQ1_M_SCALES, 8);
        for (int k = 0; k < 32; k++) { /* group k: elements 8k..8k+7 */
            const int h = k / 2, nib = (b[IQ1_M_QH + k / 2] >> (4 * (k % 2))) & 0xF;
            const float dl = d * (float)(2 * ((sc[h / 4] >> (3 * (h % 4))) & 7) + 1);
            const float delta = nib & 8 ? -0.125f : 0.125f;
            const int idx = b[k] | ((nib & 7) << 8);
            for (int j = 0; j < 8; j++) *dst++ = dl * ((float)iq1_value(idx, j) + delta);
        }
    }
}

/* ------------------------------------------------------------ dot */

enum { IQ_XXS, IQ_S3, IQ_1S, IQ_1M };

/* The integer weights w[256] and scales sc[16] (one per 16 elements) of a
 * block, and its f16 scale (see the top comment). */
static float iq_unpack(int kind, const uint8_t *b, int8_t w[QK_K], int sc[16]) {
    switch (kind) {
    case IQ_XXS:
        for (int s = 0; s < 8; s++) {
            uint32_t aux;
            memcpy(&aux, b + IQ3_XXS_SAS + 4 * s, 4);
            sc[2 * s] = sc[2 * s + 1] = 2 * (int)(aux >> 28) + 1;
            for (int e = 0; e < 32; e++) {
                const uint8_t sg = quant_iq3xxs_signs((aux >> (7 * (e / 8))) & 127);
                const int g =
                    iq3_value(quant_iq3xxs_levels, quant_iq3xxs_grid[b[2 + 8 * s + e / 4]], e % 4);
                w[32 * s + e] = (int8_t)((sg >> (e % 8)) & 1 ? -g : g);
            }
        }
        return quant_load_f16(b);
    case IQ_S3:
        for (int e = 0; e < QK_K; e++) {
            const int k = e / 4, s = e / 32;
            const int idx = b[2 + k] | (((b[IQ3_S_QH + k / 8] >> (k % 8)) & 1) << 8);
            const int g = iq3_value(quant_iq3s_levels, quant_iq3s_grid[idx], e % 4);
            w[e] = (int8_t)((b[IQ3_S_SIGNS + e / 8] >> (e % 8)) & 1 ? -g : g);
            sc[e / 16] = 2 * ((b[IQ3_S_SCALES + s / 2] >> (4 * (s % 2))) & 0xF) + 1;
        }
        return quant_load_f16(b);
    case IQ_1S:
        for (int s = 0; s < 8; s++) {
            uint16_t qh;
            memcpy(&qh, b + IQ1_S_QH + 2 * s, 2);
            sc[2 * s] = sc[2 * s + 1] = 2 * ((qh >> 12) & 7) + 1;
            const int delta = qh & 0x8000 ? -1 : 1;
            for (int e = 0; e < 32; e++) {
                const int l = e / 8, idx = b[2 + 4 * s + l] | (((qh >> (3 * l)) & 7) << 8);
                w[32 * s + e] = (int8_t)(8 * iq1_value(idx, e % 8) + delta);
            }
        }
        return quant_load_f16(b);
    default: { /* IQ_1M */
        uint16_t s4[4];
        memcpy(s4, b + IQ1_M_SCALES, 8);
        for (int h = 0; h < 16; h++) sc[h] = 2 * ((s4[h / 4] >> (3 * (h % 4))) & 7) + 1;
        for (int k = 0; k < 32; k++) {
            const int nib = (b[IQ1_M_QH + k / 2] >> (4 * (k % 2))) & 0xF;
            const int idx = b[k] | ((nib & 7) << 8), delta = nib & 8 ? -1 : 1;
            for (int j = 0; j < 8; j++) w[8 * k + j] = (int8_t)(8 * iq1_value(idx, j) + delta);
        }
        return quant_f16_to_f32(quant_iq1m_d_bits(b));
    }
    }
}

static float iq_vec_dot(int kind, int64_t n, const void *w, const void *x) {
    static const int bytes[4] = {IQ3_XXS_BYTES, IQ3_S_BYTES, IQ1_S_BYTES, IQ1_M_BYTES};
    static const float k[4] = {0.25f, 1.0f, 0.125f, 0.125f};
    const uint8_t *wb = w, *xb = x;
    float lanes[8] = {0};
    for (int64_t i = 0; i < n / QK_K; i++, wb += bytes[kind], xb += Q8_K_BYTES) {
        int8_t q[QK_K];
        int sc[16];
        const float dw = iq_unpack(kind, wb, q, sc);
        const int8_t *xq = (const int8_t *)(xb + Q8_K_QS);
        int32_t acc[8] = {0};
        for (int e = 0; e < QK_K; e++) acc[(e % 32) / 4] += sc[e / 16] * (q[e] * xq[e]);
        const float d = dw * quant_load_f32(xb);
        for (int l = 0; l < 8; l++) lanes[l] = mt_fmaf((float)acc[l], d, lanes[l]);
    }
    return k[kind] * quant_hsum8(lanes);
}

float quant_iq3_xxs_vec_dot(int64_t n, const void *w, const void *x) {
    return iq_vec_dot(IQ_XXS, n, w, x);
}

float quant_iq3_s_vec_dot(int64_t n, const void *w, const void *x) {
    return iq_vec_dot(IQ_S3, n, w, x);
}

float quant_iq1_s_vec_dot(int64_t n, const void *w, const void *x) {
    return iq_vec_dot(IQ_1S, n, w, x);
}

float quant_iq1_m_vec_dot(int64_t n, const void *w, const void *x) {
    return iq_vec_dot(IQ_1M, n, w, x);
}

/* ------------------------------------------------------------ encode */

/* Nearest-grid maps, built once: for IQ3, the 12-bit code of four level
 * indices to the nearest grid entry (squared distance of the magnitudes);
 * for IQ1, the base-3 number of eight values in {-1, 0, 1} (digit j: value
 * j + 1) to the nearest of the 2048 entries. Ties: the lowest index. */
static uint16_t map_xxs[4096], map_s3[4096], map_1[6561];
static pthread_once_t maps_once = PTHREAD_ONCE_INIT;

static void build_iq3_map(const uint8_t *levels, const uint16_t *grid, int n, uint16_t *map) {
    for (int c = 0; c < 4096; c++) {
        int best = 0, best_d = INT32_MAX;
        for (int i = 0; i < n; i++) {
            int dist = 0;
            for (int j = 0; j < 4; j++) {
                int t = iq3_value(levels, (uint16_t)c, j) - iq3_value(levels, grid[i], j);
                dist += t * t;
            }
            if (dist < best_d) best_d = dist, best = i;
        }
        map[c] = (uint16_t)best;
    }
}

static void build_maps(void) {
    build_iq3_map(quant_iq3xxs_levels, quant_iq3xxs_grid, 256, map_xxs);
    build_iq3_map(quant_iq3s_levels, quant_iq3s_grid, 512, map_s3);
    for (int c = 0; c < 6561; c++) {
        int v[8], r = c, best = 0, best_d = INT32_MAX;
        for (int j = 0; j < 8; j++) v[j] = r % 3 - 1, r /= 3;
        for (int i = 0; i < 2048; i++) {
            int dist = 0;
            for (int j = 0; j < 8; j++) {
                int t = v[j] - iq1_value(i, j);
                dist += t * t;
            }
            if (dist < best_d) best_d = dist, best = i;
        }
        map_1[c] = (uint16_t)best;
    }
}

/* f16 bits of a positive scale, at most the largest finite half. */
static uint16_t f16_scale(float d) {
    if (!(d < 65504.0f)) d = 65504.0f;
    return mt_f32_to_f16(d);
}

/* ---------------------------------------------------------- IQ3 encode */

/* A group of 4 magnitudes a[] at step db: the grid entry chosen and its
 * squared error. */
static int iq3_group(const uint8_t *levels, const uint16_t *grid, const uint16_t *map,
                     const float *a, float db, float *err) {
    int code = 0;
    const float inv = 1.0f / db, step = (float)(levels[7] - levels[0]) / 7.0f;
    for (int j = 0; j < 4; j++) {
        const float t = a[j] * inv;
        /* a guess from the mean level step, then to the nearest level */
        float g = (t - (float)levels[0]) / step + 0.5f;
        int c = g > 0.0f ? (g < 7.0f ? (int)g : 7) : 0; /* NaN: 0 */
        while (c < 7 && t > 0.5f * (float)(levels[c] + levels[c + 1])) c++;
        while (c > 0 && t <= 0.5f * (float)(levels[c - 1] + levels[c])) c--;
        code |= c << (3 * j);
    }
    const int idx = map[code];
    float e2 = 0.0f;
    for (int j = 0; j < 4; j++) {
        const float t = a[j] - db * (float)iq3_value(levels, grid[idx], j);
        e2 += t * t;
    }
    *err = e2;
    return idx;
}

/* The magnitudes of a 32-element sub-block to quantize and its sign bits
 * (one byte per 8 elements). IQ3_XXS (xxs): each group of 8 needs an even
 * number of negative elements; when it has an odd number, the element of
 * smallest magnitude takes the other sign and its magnitude target is 0. */
static void iq3_targets(const float *x, int xxs, float *a, uint8_t *signs) {
    for (int l = 0; l < 4; l++) {
        uint8_t sg = 0;
        int min_j = 0;
        for (int j = 0; j < 8; j++) {
            const float v = x[8 * l + j];
            a[8 * l + j] = fabsf(v);
            if (v < 0.0f) sg |= (uint8_t)(1 << j);
            if (fabsf(v) < fabsf(x[8 * l + min_j])) min_j = j;
        }
        if (xxs && (__builtin_popcount(sg) & 1)) {
            sg ^= (uint8_t)(1 << min_j);
            a[8 * l + min_j] = 0.0f;
        }
        signs[l] = sg;
    }
}

static float iq3_sub_error(const uint8_t *levels, const uint16_t *grid, const uint16_t *map,
                           const float *a, float db, int *idx) {
    float total = 0.0f;
    for (int k = 0; k < 8; k++) {
        float e;
        idx[k] = iq3_group(levels, grid, map, a + 4 * k, db, &e);
        total += e;
    }
    return total;
}

/* IQ3_XXS (xxs = 1) and IQ3_S (xxs = 0). */
static size_t iq3_quantize(int xxs, const float *src, void *dst, int64_t n) {
    pthread_once(&maps_once, build_maps);
    const uint8_t *levels = xxs ? quant_iq3xxs_levels : quant_iq3s_levels;
    const uint16_t *grid = xxs ? quant_iq3xxs_grid : quant_iq3s_grid;
    const uint16_t *map = xxs ? map_xxs : map_s3;
    const int bytes = xxs ? IQ3_XXS_BYTES : IQ3_S_BYTES;
    /* db = d * unit(c): unit = (2c + 1) / 4 (IQ3_XXS), 2c + 1 (IQ3_S) */
    const float unit = xxs ? 0.25f : 1.0f;
    static const float cand[5] = {1.0f, 0.9f, 0.8f, 0.7f, 1.1f};
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, b += bytes, src += QK_K) {
        memset(b, 0, (size_t)bytes);
        float a[QK_K], best_db[8], max_db = 0.0f;
        uint8_t signs[32];
        for (int s = 0; s < 8; s++) {
            iq3_targets(src + 32 * s, xxs, a + 32 * s, signs + 4 * s);
            float amax = 0.0f;
            for (int e = 0; e < 32; e++) amax = fmaxf(amax, a[32 * s + e]);
            best_db[s] = 0.0f;
            float best = FLT_MAX;
            for (int c = 0; c < 5 && amax > 0.0f; c++) {
                const float db = amax / (float)levels[7] * cand[c];
                int idx[8];
                const float e = iq3_sub_error(levels, grid, map, a + 32 * s, db, idx);
                if (e < best) best = e, best_db[s] = db;
            }
            max_db = fmaxf(max_db, best_db[s]);
        }
        const uint16_t d_bits = f16_scale(max_db / (31.0f * unit));
        const float d = mt_f16_to_f32(d_bits);
        if (!(d > 0.0f)) continue; /* a zero block (or one too small for a half) */
        memcpy(b, &d_bits, 2);
        for (int s = 0; s < 8; s++) {
            int c = quant_nearest_int((best_db[s] / (d * unit) - 1.0f) * 0.5f);
            c = c < 0 ? 0 : c > 15 ? 15 : c;
            const float db = xxs ? d * (0.5f + (float)c) * 0.5f : d * (float)(1 + 2 * c);
            int idx[8];
            iq3_sub_error(levels, grid, map, a + 32 * s, db, idx);
            for (int k = 0; k < 8; k++) {
                b[2 + 8 * s + k] = (uint8_t)idx[k];
                if (!xxs) b[IQ3_S_QH + s] |= (uint8_t)((idx[k] >> 8) << k);
            }
            if (xxs) {
                uint32_t aux = (uint32_t)c << 28;
                for (int l = 0; l < 4; l++) aux |= (uint32_t)(signs[4 * s + l] & 127) << (7 * l);
                memcpy(b + IQ3_XXS_SAS + 4 * s, &aux, 4);
            } else {
                memcpy(b + IQ3_S_SIGNS + 4 * s, signs + 4 * s, 4);
                b[IQ3_S_SCALES + s / 2] |= (uint8_t)(c << (4 * (s % 2)));
            }
        }
    }
    return (size_t)(n / QK_K) * (size_t)bytes;
}

size_t quant_iq3_xxs_quantize(const float *src, void *dst, int64_t n) {
    return iq3_quantize(1, src, dst, n);
}

size_t quant_iq3_s_quantize(const float *src, void *dst, int64_t n) {
    return iq3_quantize(0, src, dst, n);
}

/* ---------------------------------------------------------- IQ1 encode */

/* A group of 8 elements x at step dl with delta sign ds (+1 / -1): the grid
 * entry chosen and its squared error. */
static int iq1_group(const float *x, float dl, int ds, float *err) {
    const float delta = 0.125f * (float)ds, inv = 1.0f / dl;
    int code = 0;
    for (int j = 7; j >= 0; j--) {
        const float t = x[j] * inv - delta;
        code = 3 * code + (t < -0.5f ? 0 : t > 0.5f ? 2 : 1);
    }
    const int idx = map_1[code];
    float e2 = 0.0f;
    for (int j = 0; j < 8; j++) {
        const float t = x[j] - dl * ((float)iq1_value(idx, j) + delta);
        e2 += t * t;
    }
    *err = e2;
    return idx;
}

/* The best delta signs and entries of ng groups at step dl: one delta for
 * all of them (shared, IQ1_S) or one per group (IQ1_M). Returns the error. */
static float iq1_run(const float *x, int ng, float dl, int shared, int *idx, int *ds) {
    float total = 0.0f;
    if (shared) {
        float e[2] = {0, 0};
        int id[2][4];
        for (int v = 0; v < 2; v++)
            for (int g = 0; g < ng; g++) {
                float eg;
                id[v][g] = iq1_group(x + 8 * g, dl, v ? -1 : 1, &eg);
                e[v] += eg;
            }
        const int v = e[1] < e[0];
        for (int g = 0; g < ng; g++) idx[g] = id[v][g], ds[g] = v ? -1 : 1;
        return e[v];
    }
    for (int g = 0; g < ng; g++) {
        float ep, en;
        const int ip = iq1_group(x + 8 * g, dl, 1, &ep), in = iq1_group(x + 8 * g, dl, -1, &en);
        idx[g] = en < ep ? in : ip;
        ds[g] = en < ep ? -1 : 1;
        total += en < ep ? en : ep;
    }
    return total;
}

/* IQ1_S (m = 0: 8 runs of 32, one delta each) and IQ1_M (m = 1: 16 runs of
 * 16, a delta per 8). */
static size_t iq1_quantize(int m, const float *src, void *dst, int64_t n) {
    pthread_once(&maps_once, build_maps);
    const int bytes = m ? IQ1_M_BYTES : IQ1_S_BYTES, nrun = m ? 16 : 8, rl = QK_K / nrun;
    static const float cand[6] = {1.0f, 0.8f, 0.65f, 0.5f, 1.25f, 0.4f};
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, b += bytes, src += QK_K) {
        memset(b, 0, (size_t)bytes);
        float best_dl[16], max_dl = 0.0f;
        for (int r = 0; r < nrun; r++) {
            float amax = 0.0f;
            for (int e = 0; e < rl; e++) amax = fmaxf(amax, fabsf(src[rl * r + e]));
            best_dl[r] = 0.0f;
            float best = FLT_MAX;
            for (int c = 0; c < 6 && amax > 0.0f; c++) {
                const float dl = amax / 1.125f * cand[c];
                int idx[4], ds[4];
                const float e = iq1_run(src + rl * r, rl / 8, dl, !m, idx, ds);
                if (e < best) best = e, best_dl[r] = dl;
            }
            max_dl = fmaxf(max_dl, best_dl[r]);
        }
        const uint16_t d_bits = f16_scale(max_dl / 15.0f);
        const float d = mt_f16_to_f32(d_bits);
        if (!(d > 0.0f)) continue;
        uint16_t words[8] = {0};
        if (!m) memcpy(b, &d_bits, 2);
        for (int r = 0; r < nrun; r++) {
            int c = quant_nearest_int((best_dl[r] / d - 1.0f) * 0.5f);
            c = c < 0 ? 0 : c > 7 ? 7 : c;
            const float dl = d * (float)(2 * c + 1);
            int idx[4], ds[4];
            iq1_run(src + rl * r, rl / 8, dl, !m, idx, ds);
            for (int g = 0; g < rl / 8; g++) {
                const int k = (rl / 8) * r + g; /* group number */
                if (m) {
                    b[k] = (uint8_t)idx[g];
                    const int nib = (idx[g] >> 8) | (ds[g] < 0 ? 8 : 0);
                    b[IQ1_M_QH + k / 2] |= (uint8_t)(nib << (4 * (k % 2)));
                } else {
                    b[2 + k] = (uint8_t)idx[g];
                    words[r] |= (uint16_t)((idx[g] >> 8) << (3 * g));
                }
            }
            if (m)
                words[r / 4] |= (uint16_t)(c << (3 * (r % 4)));
            else
                words[r] |= (uint16_t)((c << 12) | (ds[0] < 0 ? 0x8000 : 0));
        }
        if (m) {
            for (int w = 0; w < 4; w++) words[w] |= (uint16_t)(((d_bits >> (4 * w)) & 0xF) << 12);
            memcpy(b + IQ1_M_SCALES, words, 8);
        } else {
            memcpy(b + IQ1_S_QH, words, 16);
        }
    }
    return (size_t)(n / QK_K) * (size_t)bytes;
}

size_t quant_iq1_s_quantize(const float *src, void *dst, int64_t n) {
    return iq1_quantize(0, src, dst, n);
}

size_t quant_iq1_m_quantize(const float *src, void *dst, int64_t n) {
    return iq1_quantize(1, src, dst, n);
}
