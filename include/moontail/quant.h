/* quant.h - quantized block formats: dequantize, quantize, and dot products.
 *
 * A dot product of a weight row with activations follows ggml's CPU scheme:
 * activations are first converted to the weight type's partner format
 * (`quant_vec_dot_type`: Q8_0 for Q4_0/Q8_0/MXFP4, Q8_K for Q4_K/Q6_K, F16 for
 * F16, BF16 for BF16, F32 for F32), then `quant_vec_dot` reduces one weight
 * row against one converted activation row. Each output element is reduced
 * in one fixed order (the orders are spelled out in src/core/quant_kernels.h:
 * lanes that a vector unit fills at full width), so results never depend on
 * batching, tiling or threads. Kernels are reached through a function table
 * so that SIMD variants picked at run time (AVX2, AVX-512) replace the
 * portable reference ones with bit-identical results. */
#ifndef MOONTAIL_QUANT_H
#define MOONTAIL_QUANT_H

#include "moontail/tensor_type.h"

#include <stddef.h>
#include <stdint.h>

/* All functions take a type whose mt_type_traits `supported` flag is set (plus
 * Q8_K, the activation partner of the K-quants) and an n that is a multiple of
 * its block size; callers validate types when they load a model. Anything
 * else is a programming error: the call prints a message and aborts. */

/* Decodes n elements (a multiple of the block size) of a row of type t. */
void quant_dequantize_row(mt_type t, const void *src, float *dst, int64_t n);

/* Encodes n floats into type t (a simple round-to-nearest quantizer for
 * writing models; not tuned for quality). Returns bytes written. */
size_t quant_quantize_row(mt_type t, const float *src, void *dst, int64_t n);

/* The format activations take in a dot product with weights of type t;
 * MT_TYPE_COUNT if t has no dot product (Q8_K, unsupported types). */
mt_type quant_vec_dot_type(mt_type t);

/* Converts n activation floats to vec-dot type vt (as ggml does for its
 * CPU matmul). Returns bytes written = mt_type_row_size(vt, n). */
size_t quant_convert_activations(mt_type vt, const float *x, void *dst, int64_t n);

/* Dot product of one weight row of type t (n elements) with one activation
 * row already converted to quant_vec_dot_type(t). */
float quant_vec_dot(mt_type t, int64_t n, const void *w_row, const void *x_conv);

/* The vec_dot kernel for weights of type t, for loops that call it many
 * times (mt_matmul); same results as quant_vec_dot. */
typedef float (*quant_vec_dot_fn)(int64_t n, const void *w_row, const void *x_conv);
quant_vec_dot_fn quant_vec_dot_get(mt_type t);

/* A tile of a matrix product: y[t * y_stride + r] = vec_dot(n, row r of w,
 * row t of x) for r < nr, t < nt, with weight rows w_stride bytes apart and
 * converted activation rows x_stride apart. Each element is bit-identical to
 * quant_vec_dot of the same two rows (so to a 1 x 1 tile), whatever nr and
 * nt: the kernel only shares loads between elements, never a sum. */
typedef void (*quant_tile_fn)(int64_t n, const uint8_t *w, size_t w_stride, int64_t nr,
                              const uint8_t *x, size_t x_stride, int64_t nt, float *y,
                              size_t y_stride);
void quant_tile(mt_type t, int64_t n, const uint8_t *w, size_t w_stride, int64_t nr,
                const uint8_t *x, size_t x_stride, int64_t nt, float *y, size_t y_stride);

/* Name of the kernel set in use ("reference", "avx2", ...). The set is picked
 * on first use: the best one this CPU runs, or the one named by the
 * environment variable MT_KERNELS. */
const char *quant_kernel_name(void);

/* Switches to the kernel set `name` ("reference", "avx2", "avx512"); returns 0, or -1
 * if this build or CPU does not have it. Not thread-safe against running
 * kernels: call it at start-up (tests use it to compare sets). */
int quant_kernels_select(const char *name);

#endif
