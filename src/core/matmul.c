/* matmul.c - weight matrices times batches of activation rows (ggml's
 * mul_mat on the CPU, without its repacked or BLAS paths).
 *
 * Each activation row is converted once to the weight type's vec-dot
 * partner (Q8_0, Q8_K, F16, ...). Then a list of matrix products (tasks)
 * runs as ONE parallel section: the weight rows of all tasks are cut into
 * one contiguous slice per thread, balanced by cost (bytes of weights times
 * tokens), and each thread walks its rows in tiles (quant_tile): a tile's
 * weight rows are read from memory once and reused from cache for every
 * group of tokens. Decoding runs many small products per layer (q, k, v;
 * gate and up of every chosen expert), so one synchronisation for all of
 * them instead of one per product is what lets two or more threads help.
 *
 * Every output element equals quant_vec_dot of its two rows, so it never
 * depends on which thread computed it, on the slicing or tiling, or on the
 * other rows of the batch: y is bit-identical for every pool size and batch
 * composition. */
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

/* Below this many activation elements a conversion runs on the calling
 * thread: waking the pool would cost more. */
enum { CONVERT_INLINE = 1 << 15 };

static _Noreturn void out_of_memory(const char *what, size_t bytes) {
    fprintf(stderr, "moontail: %s: out of memory (%zu bytes)\n", what, bytes);
    abort();
}

/* ------------------------------------------------------------ conversion */

typedef struct convert_job {
    mt_type vt;
    const float *x;
    int64_t n_cols;
    uint8_t *dst;
    size_t row_bytes;
} convert_job;

static void convert_range(void *ctx, int64_t begin, int64_t end) {
    const convert_job *j = ctx;
    for (int64_t t = begin; t < end; t++)
        quant_convert_activations(j->vt, j->x + t * j->n_cols, j->dst + (size_t)t * j->row_bytes,
                                  j->n_cols);
}

void mt_convert_rows(mt_type vt, const float *x, int64_t n_tok, int64_t n_cols, void *dst,
                     mt_pool *pool) {
    convert_job j = {vt, x, n_cols, dst, mt_type_row_size(vt, n_cols)};
    if (n_tok * n_cols < CONVERT_INLINE)
        convert_range(&j, 0, n_tok);
    else
        mt_pool_run(pool, n_tok, convert_range, &j);
}

/* ------------------------------------------------------------ task lists */

typedef struct tasks_job {
    const mt_matmul_task *tasks;
    int n_tasks;
    int n_slices;
    uint64_t *cost; /* (n_tasks + 1) prefix sums of the tasks' costs */
} tasks_job;

/* Cost of one weight row of a task: its bytes once from memory, and about
 * half that again per token it meets (the kernels run ~2x faster than
 * memory streams bytes). Only the balance between threads depends on it. */
static uint64_t row_cost(const mt_matmul_task *t) {
    return (uint64_t)t->w->row_bytes * (uint64_t)(2 + t->n_tok);
}

/* Where global cost c falls: task *k, row *r (rounded down to a multiple
 * of 4, the kernels' row group). Monotonic in c, so slices partition. */
static void locate(const tasks_job *j, uint64_t c, int *k, int64_t *r) {
    int i = 0;
    while (i < j->n_tasks && j->cost[i + 1] <= c) i++;
    if (i == j->n_tasks) {
        *k = i, *r = 0;
        return;
    }
    const int64_t row = (int64_t)((c - j->cost[i]) / row_cost(&j->tasks[i]));
    *k = i, *r = row & ~(int64_t)3;
}

static void run_rows(const mt_matmul_task *t, int64_t begin, int64_t end) {
    const mt_matrix *w = t->w;
    const uint8_t *wd = w->data, *xc = t->xc;
    for (int64_t r0 = begin; r0 < end; r0 += ROW_TILE) {
        const int64_t r1 = r0 + ROW_TILE < end ? r0 + ROW_TILE : end;
        for (int64_t t0 = 0; t0 < t->n_tok; t0 += TOK_TILE) {
            const int64_t t1 = t0 + TOK_TILE < t->n_tok ? t0 + TOK_TILE : t->n_tok;
            quant_tile(w->type, w->n_cols, wd + (size_t)r0 * w->row_bytes, w->row_bytes, r1 - r0,
                       xc + (size_t)t0 * t->xc_stride, t->xc_stride, t1 - t0,
                       t->y + (size_t)t0 * t->y_stride + (size_t)r0, t->y_stride);
        }
    }
}

static void run_slices(void *ctx, int64_t begin, int64_t end) {
    const tasks_job *j = ctx;
    const uint64_t total = j->cost[j->n_tasks];
    for (int64_t s = begin; s < end; s++) {
        int k0, k1;
        int64_t r0, r1;
        locate(j, (uint64_t)((unsigned __int128)total * (uint64_t)s / (uint64_t)j->n_slices), &k0,
               &r0);
        locate(j, (uint64_t)((unsigned __int128)total * (uint64_t)(s + 1) / (uint64_t)j->n_slices),
               &k1, &r1);
        for (int k = k0; k <= k1 && k < j->n_tasks; k++) {
            const int64_t lo = k == k0 ? r0 : 0;
            const int64_t hi = k == k1 ? r1 : j->tasks[k].w->n_rows;
            if (lo < hi) run_rows(&j->tasks[k], lo, hi);
        }
    }
}

void mt_matmul_tasks(const mt_matmul_task *tasks, int n_tasks, mt_pool *pool) {
    uint64_t stack_cost[17], *cost = stack_cost;
    if (n_tasks <= 0) return;
    if (n_tasks > 16 && !(cost = malloc(((size_t)n_tasks + 1) * sizeof *cost)))
        out_of_memory("mt_matmul_tasks", ((size_t)n_tasks + 1) * sizeof *cost);
    cost[0] = 0;
    for (int k = 0; k < n_tasks; k++) {
        const mt_matmul_task *t = &tasks[k];
        (void)quant_vec_dot_get(t->w->type); /* aborts on an unsupported type */
        const int64_t rows = t->n_tok > 0 ? t->w->n_rows : 0;
        cost[k + 1] = cost[k] + (uint64_t)rows * row_cost(t);
        if (rows > 0) mt_matmul_count_bytes((uint64_t)rows * t->w->row_bytes);
    }
    tasks_job j = {tasks, n_tasks, mt_pool_size(pool), cost};
    if (cost[n_tasks] > 0) mt_pool_run(pool, j.n_slices, run_slices, &j);
    if (cost != stack_cost) free(cost);
}

/* ------------------------------------------------------------ one matrix */

void mt_matmul(const mt_matrix *w, const float *x, int64_t n_tok, float *y, mt_pool *pool) {
    if (n_tok <= 0 || w->n_rows <= 0) return;
    const mt_type vt = quant_vec_dot_type(w->type);
    (void)quant_vec_dot_get(w->type); /* aborts on an unsupported type */
    const size_t xc_row_bytes = mt_type_row_size(vt, w->n_cols);
    uint8_t *scratch = NULL;
    const void *xc = x; /* F32 weights: x is already in the vec-dot format; only read */
    if (vt != MT_TYPE_F32) {
        if (!(scratch = malloc((size_t)n_tok * xc_row_bytes)))
            out_of_memory("mt_matmul", (size_t)n_tok * xc_row_bytes);
        mt_convert_rows(vt, x, n_tok, w->n_cols, scratch, pool);
        xc = scratch;
    }
    mt_matmul_task t = {w, xc, xc_row_bytes, n_tok, y, (size_t)w->n_rows};
    mt_matmul_tasks(&t, 1, pool);
    free(scratch);
}

void mt_matmul_many(const mt_matrix *const *w, float *const *y, int n, const float *x,
                    int64_t n_tok, mt_pool *pool) {
    if (n <= 0 || n_tok <= 0) return;
    mt_matmul_task tasks[8];
    uint8_t *conv[8] = {0};
    if (n > 8) abort(); /* a programming error: callers pass q, k, v and the like */
    for (int k = 0; k < n; k++) {
        const mt_type vt = quant_vec_dot_type(w[k]->type);
        (void)quant_vec_dot_get(w[k]->type); /* aborts on an unsupported type */
        const size_t rb = mt_type_row_size(vt, w[k]->n_cols);
        const void *xc = x;
        if (vt != MT_TYPE_F32) {
            /* one conversion per distinct type (and width) among the matrices */
            int same = -1;
            for (int i = 0; i < k && same < 0; i++)
                if (conv[i] && quant_vec_dot_type(w[i]->type) == vt && w[i]->n_cols == w[k]->n_cols)
                    same = i;
            if (same >= 0) {
                xc = conv[same];
            } else {
                if (!(conv[k] = malloc((size_t)n_tok * rb)))
                    out_of_memory("mt_matmul_many", (size_t)n_tok * rb);
                mt_convert_rows(vt, x, n_tok, w[k]->n_cols, conv[k], pool);
                xc = conv[k];
            }
        }
        tasks[k] = (mt_matmul_task){w[k], xc, rb, n_tok, y[k], (size_t)w[k]->n_rows};
    }
    mt_matmul_tasks(tasks, n, pool);
    for (int k = 0; k < n; k++) free(conv[k]);
}

void mt_matrix_get_row(const mt_matrix *w, int64_t r, float *dst) {
    mt_matmul_count_bytes(w->row_bytes);
    quant_dequantize_row(w->type, (const uint8_t *)w->data + (size_t)r * w->row_bytes, dst,
                         w->n_cols);
}
