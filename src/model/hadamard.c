/* hadamard.c - the orthonormal Walsh-Hadamard rotation llama.cpp applies to
 * attention heads stored in a quantized (q8_0) KV cache: spreading each
 * head's outliers over its block before quantization loses less. Rows are
 * rotated block by block (block a power of two); the rotation is its own
 * inverse, so a rotated query against rotated keys gives the same scores,
 * and rotated values give a rotated output that one more rotation undoes. */
#include "model_internal.h"

void mt_hadamard_rows(float *x, int64_t n, int32_t block) {
    const float scale = 1.0f / sqrtf((float)block);
    for (int64_t b = 0; b + block <= n; b += block) {
        float *r = x + b;
        /* scaled first, then the butterflies, smallest span first: the same
         * operations in the same order as ggml's fast transform */
        for (int32_t j = 0; j < block; j++) r[j] *= scale;
        for (int32_t len = 1; len < block; len <<= 1)
            for (int32_t i = 0; i < block; i += 2 * len)
                for (int32_t j = 0; j < len; j++) {
                    const float u = r[i + j], v = r[i + len + j];
                    r[i + j] = u + v;
                    r[i + len + j] = u - v;
                }
    }
}

int32_t mt_hadamard_block_k(int32_t head_dim) {
    if (head_dim % 64) return 0;
    int32_t b = 64;
    while (head_dim % (2 * b) == 0) b *= 2;
    return b;
}

int32_t mt_hadamard_block_v(int32_t head_dim) {
    return head_dim % 64 ? 0 : 64;
}
