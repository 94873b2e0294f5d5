/* tensor_type.c - the ggml type table (block geometry of every GGUF type id)
 * and the scalar half / bfloat16 conversions used by all kernels. */
#include "moontail/tensor_type.h"

#include <ctype.h>
#include <string.h>

/* ---------------------------------------------------------------- table */

/* Geometry per ggml type id (ggml.h / ggml-common.h; checked against sizeof of
 * every block_* struct there). Ids 4, 5 (removed Q4_2/Q4_3) and 31-33, 36-38
 * (removed or repacked layouts) are absent. */
static const mt_type_traits type_table[MT_TYPE_COUNT] = {
    [0] = {"F32", 1, 4, true},         [1] = {"F16", 1, 2, true},
    [2] = {"Q4_0", 32, 18, true},      [3] = {"Q4_1", 32, 20, true},
    [6] = {"Q5_0", 32, 22, true},      [7] = {"Q5_1", 32, 24, true},
    [8] = {"Q8_0", 32, 34, true},      [9] = {"Q8_1", 32, 36, true},
    [10] = {"Q2_K", 256, 84, true},    [11] = {"Q3_K", 256, 110, true},
    [12] = {"Q4_K", 256, 144, true},   [13] = {"Q5_K", 256, 176, true},
    [14] = {"Q6_K", 256, 210, true},   [15] = {"Q8_K", 256, 292, true},
    [16] = {"IQ2_XXS", 256, 66, true}, [17] = {"IQ2_XS", 256, 74, true},
    [18] = {"IQ3_XXS", 256, 98, true}, [19] = {"IQ1_S", 256, 50, true},
    [20] = {"IQ4_NL", 32, 18, true},   [21] = {"IQ3_S", 256, 110, true},
    [22] = {"IQ2_S", 256, 82, true},   [23] = {"IQ4_XS", 256, 136, true},
    [24] = {"I8", 1, 1, false},        [25] = {"I16", 1, 2, false},
    [26] = {"I32", 1, 4, false},       [27] = {"I64", 1, 8, false},
    [28] = {"F64", 1, 8, false},       [29] = {"IQ1_M", 256, 56, true},
    [30] = {"BF16", 1, 2, true},       [34] = {"TQ1_0", 256, 54, true},
    [35] = {"TQ2_0", 256, 66, true},   [39] = {"MXFP4", 32, 17, true},
    [40] = {"NVFP4", 64, 36, false},   [41] = {"Q1_0", 128, 18, false},
    [42] = {"Q2_0", 64, 18, false},
};

const mt_type_traits *mt_type_traits_get(uint32_t type) {
    if (type >= MT_TYPE_COUNT || type_table[type].name == NULL) return NULL;
    return &type_table[type];
}

int mt_type_from_name(const char *name) {
    for (int t = 0; t < MT_TYPE_COUNT; t++) {
        const char *n = type_table[t].name;
        if (!n) continue;
        size_t i = 0;
        while (n[i] && name[i] && toupper((unsigned char)name[i]) == n[i]) i++;
        if (n[i] == 0 && name[i] == 0) return t;
    }
    return -1;
}

size_t mt_type_row_size(mt_type type, int64_t n) {
    if ((unsigned)type >= MT_TYPE_COUNT || type_table[type].blck == 0) return 0; /* unknown id */
    const mt_type_traits *tr = &type_table[type];
    return (size_t)(n / tr->blck) * (size_t)tr->type_size;
}

/* ---------------------------------------------------------- conversions */

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float mt_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13)); /* inf / nan */
    if (exp == 0) {
        if (man == 0) return bits_f32(sign);
        /* subnormal: man * 2^-24 is exact in f32 */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t mt_f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* inf or nan (keep nan quiet) */
        return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));
    if (absx >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to >= 65520: inf */
    if (absx < 0x38800000u) {                                  /* below 2^-14: subnormal half */
        /* round(|f| * 2^24) to nearest even; adding 0.5 (2^-1 in units) is done in f32
         * arithmetic by the magic-number trick: |f| + 0.5 aligns the mantissa. */
        float v = bits_f32(absx) + 0.5f;
        return (uint16_t)(sign | (f32_bits(v) - f32_bits(0.5f)));
    }
    uint32_t mant_odd = (absx >> 13) & 1;
    absx += 0xc8000fffu + mant_odd; /* rebias exponent (-112 << 23) and round half to even */
    return (uint16_t)(sign | (absx >> 13));
}

float mt_bf16_to_f32(uint16_t h) {
    return bits_f32((uint32_t)h << 16);
}

uint16_t mt_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 64); /* quiet nan */
    return (uint16_t)((x + (0x7fff + ((x >> 16) & 1))) >> 16);
}
