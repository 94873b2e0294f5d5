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
    MT_TYPE_Q8_0 = 8,
    MT_TYPE_Q4_K = 12,
    MT_TYPE_Q6_K = 14,
    MT_TYPE_Q8_K = 15, /* activations only: the partner of the K-quants in dot products */
    MT_TYPE_BF16 = 30,
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
