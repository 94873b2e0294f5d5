/* matmul.c - weight matrix times a batch of activation rows (ggml's
 * mul_mat on the CPU, without its repacked or BLAS paths).
 *
 * Each activation row is converted once to the weight type's vec-dot
 * partner (Q8_0, Q8_K, F16, ...) into a scratch buffer; then the weight rows
 * are split among the pool's threads in contiguous chunks, and each thread
 * walks its rows in tiles (quant_tile): a tile's weight rows are read from
 * memory once and reused from cache for every group of tokens. Every output
 * element equals quant_vec_dot of its two rows, so it never depends on which
 * thread computed it, on the tiling, or on the other rows of the batch: y is
 * bit-identical for every pool size and batch composition. */
#include "moontail/matmul.h"

#include "moontail/quant.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

static atomic_uint_fast64_t weight_bytes; /* mt_matmul_weight_bytes */

uint64_t mt_matmul_weight_bytes(void) {
    return atomic_load_explicit(&weight_bytes, memory_order_relaxed);
}

void mt_matmul_count_bytes(uint64_t bytes) {
    atomic_fetch_add_explicit(&weight_bytes, bytes, memory_order_relaxed);
}

/* Tiles of the row loop: ROW_TILE weight rows stay in cache while TOK_TILE
 * converted activation rows stream past them. Only speed depends on these. */
enum { ROW_TILE = 32, TOK_TILE = 64 };

typedef struct matmul_job {
    const mt_matrix *w;
    const float *x; /* (n_tok, n_cols) f32 */
    int64_t n_tok;
    mt_type vt;          /* quant_vec_dot_type(w->type) */
    uint8_t *xc;         /* (n_tok, xc_row_bytes): x converted to vt */
    size_t xc_row_bytes; /* mt_type_row_size(vt, n_cols) */
    float *y;            /* (n_tok, n_rows) */
} matmul_job;

/* ------------------------------------------------------------ stages */

static void convert_rows(void *ctx, int64_t begin, int64_t end) {
    matmul_job *job = ctx;
    const int64_t n_cols = job->w->n_cols;
    for (int64_t t = begin; t < end; t++)
        quant_convert_activations(job->vt, job->x + t * n_cols, job->xc + t * job->xc_row_bytes,
                                  n_cols);
}

static void dot_rows(void *ctx, int64_t begin, int64_t end) {
    const matmul_job *job = ctx;
    const mt_matrix *w = job->w;
    const uint8_t *wd = w->data;
    for (int64_t r0 = begin; r0 < end; r0 += ROW_TILE) {
        const int64_t r1 = r0 + ROW_TILE < end ? r0 + ROW_TILE : end;
        for (int64_t t0 = 0; t0 < job->n_tok; t0 += TOK_TILE) {
            const int64_t t1 = t0 + TOK_TILE < job->n_tok ? t0 + TOK_TILE : job->n_tok;
            quant_tile(w->type, w->n_cols, wd + (size_t)r0 * w->row_bytes, w->row_bytes, r1 - r0,
                       job->xc + (size_t)t0 * job->xc_row_bytes, job->xc_row_bytes, t1 - t0,
                       job->y + (size_t)t0 * (size_t)w->n_rows + (size_t)r0, (size_t)w->n_rows);
        }
    }
}

/* ------------------------------------------------------------ entry points */

void mt_matmul(const mt_matrix *w, const float *x, int64_t n_tok, float *y, mt_pool *pool) {
    if (n_tok <= 0 || w->n_rows <= 0) return;
    mt_matmul_count_bytes((uint64_t)w->n_rows * w->row_bytes);
    matmul_job job = {
        .w = w,
        .x = x,
        .n_tok = n_tok,
        .vt = quant_vec_dot_type(w->type),
        .y = y,
    };
    (void)quant_vec_dot_get(w->type); /* aborts on an unsupported type */
    job.xc_row_bytes = mt_type_row_size(job.vt, w->n_cols);
    uint8_t *scratch = NULL;
    if (job.vt == MT_TYPE_F32) {
        job.xc = (uint8_t *)(uintptr_t)x; /* already in the vec-dot format; only read */
    } else {
        scratch = malloc((size_t)n_tok * job.xc_row_bytes);
        if (!scratch) {
            fprintf(stderr, "moontail: mt_matmul: out of memory (%lld x %zu bytes)\n",
                    (long long)n_tok, job.xc_row_bytes);
            abort();
        }
        job.xc = scratch;
        mt_pool_run(pool, n_tok, convert_rows, &job);
    }
    mt_pool_run(pool, w->n_rows, dot_rows, &job);
    free(scratch);
}

void mt_matrix_get_row(const mt_matrix *w, int64_t r, float *dst) {
    mt_matmul_count_bytes(w->row_bytes);
    quant_dequantize_row(w->type, (const uint8_t *)w->data + (size_t)r * w->row_bytes, dst,
                         w->n_cols);
}
