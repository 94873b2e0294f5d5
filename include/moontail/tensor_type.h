/* tensor_type.h - ggml tensor type ids as stored in GGUF, and their block geometry.
 *
 * The ids are the on-disk values of ggml's `enum ggml_type`. Every id that
 * GGUF files in the wild use is listed so that a reader can compute tensor
 * sizes even for types the engine cannot compute with yet; `supported` says
 * whether the quant_* kernels handle it. */
#ifndef MOONTAIL_TENSOR_TYPE_H
#define MOONTAIL_TENSOR_TYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum mt_type {
    MT_TYPE_F32 = 0,
    MT_TYPE_F16 = 1,
    MT_TYPE_Q4_0 = 2,
    MT_TYPE_Q4_1 = 3,
    MT_TYPE_Q5_0 = 6,
    MT_TYPE_Q5_1 = 7,
    MT_TYPE_Q8_0 = 8,
    MT_TYPE_Q8_1 = 9, /* activations only: the partner of Q4_1 and Q5_1 */
    MT_TYPE_Q2_K = 10,
    MT_TYPE_Q3_K = 11,
    MT_TYPE_Q4_K = 12,
    MT_TYPE_Q5_K = 13,
    MT_TYPE_Q6_K = 14,
    MT_TYPE_Q8_K = 15, /* activations only: the partner of the K-, IQ- and TQ-types */
    MT_TYPE_IQ2_XXS = 16,
    MT_TYPE_IQ2_XS = 17,
    MT_TYPE_IQ3_XXS = 18,
    MT_TYPE_IQ1_S = 19,
    MT_TYPE_IQ4_NL = 20,
    MT_TYPE_IQ3_S = 21,
    MT_TYPE_IQ2_S = 22,
    MT_TYPE_IQ4_XS = 23,
    MT_TYPE_IQ1_M = 29,
    MT_TYPE_BF16 = 30,
    MT_TYPE_TQ1_0 = 34,
    MT_TYPE_TQ2_0 = 35,
    MT_TYPE_MXFP4 = 39,
    MT_TYPE_COUNT = 43 /* one past the largest id in the table */
} mt_type;

typedef struct mt_type_traits {
    const char *name; /* "Q4_K" */
    int blck;         /* elements per block */
    int type_size;    /* bytes per block */
    bool supported;   /* dequantize + vec_dot implemented */
} mt_type_traits;

/* Traits of type id `type`, or NULL if the id is not a known ggml type. */
const mt_type_traits *mt_type_traits_get(uint32_t type);

/* Type id for a name such as "q4_k" or "F32" (case-insensitive); -1 if unknown. */
int mt_type_from_name(const char *name);

/* Bytes of one row of n elements; n must be a multiple of the block size. */
size_t mt_type_row_size(mt_type type, int64_t n);

/* IEEE half <-> float and bfloat16 <-> float conversions (exact decode;
 * encode rounds to nearest even, as ggml does). */
float mt_f16_to_f32(uint16_t h);
uint16_t mt_f32_to_f16(float f);
float mt_bf16_to_f32(uint16_t h);
uint16_t mt_f32_to_bf16(float f);

#endif
