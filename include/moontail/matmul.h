/* matmul.h - weight matrix times a batch of activation rows.
 *
 * `mt_matrix` is a 2-D view of (part of) a GGUF tensor: n_rows rows of
 * n_cols elements (ggml ne[1] rows of ne[0]), row_bytes apart. An expert of a
 * merged `_exps` tensor is such a view at offset e * nb2. */
#ifndef MOONTAIL_MATMUL_H
#define MOONTAIL_MATMUL_H

#include "moontail/tensor_type.h"
#include "moontail/threadpool.h"

#include <stddef.h>
#include <stdint.h>

typedef struct mt_matrix {
    mt_type type;
    int64_t n_cols;   /* ne[0], elements per row */
    int64_t n_rows;   /* ne[1] */
    size_t row_bytes; /* mt_type_row_size(type, n_cols) */
    const void *data; /* n_rows * row_bytes bytes */
} mt_matrix;

/* y[t][r] = sum_c W[r][c] * x[t][c] for t < n_tok, r < n_rows.
 * x is (n_tok, n_cols) row-major f32, y is (n_tok, n_rows). Each y element is
 * bit-identical to quant_vec_dot of its two rows (tiles share loads, never
 * sums), so y does not depend on n_tok, the tiling or the pool size. */
void mt_matmul(const mt_matrix *w, const float *x, int64_t n_tok, float *y, mt_pool *pool);

/* One product of a task list: y[t * y_stride + r] = W[r] . x[t] for
 * t < n_tok, r < w->n_rows, where the n_tok activation rows xc are already
 * converted to quant_vec_dot_type(w->type), xc_stride bytes apart. */
typedef struct mt_matmul_task {
    const mt_matrix *w;
    const void *xc;
    size_t xc_stride;
    int64_t n_tok;
    float *y;
    size_t y_stride; /* floats between token rows of y */
} mt_matmul_task;

/* Runs every task of the list in one parallel section of the pool (the
 * weight rows of all tasks are split among the threads by cost), so many
 * small products cost one synchronisation. Each y element is bit-identical
 * to what mt_matmul computes for it. */
void mt_matmul_tasks(const mt_matmul_task *tasks, int n_tasks, mt_pool *pool);

/* y[k] = w[k] . x for k < n (n <= 8) in one parallel section: products
 * that share their input (q, k and v), each y[k] as mt_matmul gives it;
 * x is converted once per distinct vec-dot type. */
void mt_matmul_many(const mt_matrix *const *w, float *const *y, int n, const float *x,
                    int64_t n_tok, mt_pool *pool);

/* y[k] = w[k] . x[k] for k < n (n <= 8) in one parallel section: products
 * that do not wait for each other, with inputs of their own; each y[k] as
 * mt_matmul gives it. An input that several products of one vec-dot type
 * and width share is converted once. */
void mt_matmul_pairs(const mt_matrix *const *w, const float *const *x, float *const *y, int n,
                     int64_t n_tok, mt_pool *pool);

/* Converts n_tok rows of n_cols floats (x, row-major) to the vec-dot type vt
 * into dst (rows mt_type_row_size(vt, n_cols) bytes apart); small batches
 * on the calling thread, large ones in the pool. */
void mt_convert_rows(mt_type vt, const float *x, int64_t n_tok, int64_t n_cols, void *dst,
                     mt_pool *pool);

/* Row r of w decoded to f32 (n_cols floats), e.g. an embedding lookup. */
void mt_matrix_get_row(const mt_matrix *w, int64_t r, float *dst);

/* Bytes of weights the matmuls of this process have read so far: every
 * mt_matmul adds n_rows * row_bytes once (its rows are streamed once per
 * call, whatever n_tok), an embedding lookup adds one row. `moontail bench`
 * divides the growth over a decode step by the step's time. */
uint64_t mt_matmul_weight_bytes(void);

/* Adds to that count (kernels outside mt_matmul that stream weights). */
void mt_matmul_count_bytes(uint64_t bytes);

#endif
