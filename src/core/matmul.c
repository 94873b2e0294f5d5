/* matmul.c - weight matrices times batches of activation rows (ggml's
 * mul_mat on the CPU, without its repacked or BLAS paths).
 *
 * Each activation row is converted once to the weight type's vec-dot
 * partner (Q8_0, Q8_K, F16, ...). Then a list of matrix products (tasks)
 * runs as ONE parallel section: the weight rows of all tasks are cut into
 * chunks and the chunk list into one contiguous slice per thread, balanced
 * by cost (bytes of weights times tokens). Each thread streams its own
 * slice front to back, then takes the last chunks of slower threads' slices,
 * and walks a chunk's rows in tiles (quant_tile): a tile's weight rows are
 * read from memory once and reused from cache for every group of tokens.
 * Decoding runs many small products per layer (q, k, v; gate and up of
 * every chosen expert), so one synchronisation for all of them instead of
 * one per product is what lets two or more threads help.
 *
 * Every output element equals quant_vec_dot of its two rows, so it never
 * depends on which thread computed it, on the slicing or tiling, or on the
 * other rows of the batch: y is bit-identical for every pool size and batch
 * composition. */
#include "moontail/matmul.h"

#include "moontail/quant.h"
#include "moontail/compat.h"

#include <stdatomic.h>
#include <stdbool.h>
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

/* Up to this many tokens (decoding, or a node's small batch) a whole run of
 * rows goes to the kernels at once, which read it as four streams
 * (qx_spread_plan in quant_x86.inc). */
enum { SPREAD_TOKENS = 3 };

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

/* A run of weight rows [r0, r1) of one task: the unit of work that threads
 * claim. */
typedef struct chunk {
    int task;
    int64_t r0, r1;
} chunk;

/* Chunks per thread when rows allow: enough that the last ones even out
 * the threads, few enough that claiming them costs nothing. */
enum { CHUNKS_PER_THREAD = 24, CHUNK_MIN_ROWS = 32 };

/* The chunks of a slice not yet claimed: [front, end) packed as
 * front | end << 32, one cache line each (the owner claims from it while
 * others run theirs). */
typedef struct slice_claim {
    _Alignas(64) _Atomic uint64_t next;
} slice_claim;

typedef struct tasks_job {
    const mt_matmul_task *tasks;
    const chunk *chunks;
    int n_slices;
    int n_chunks;
    const int *slice0;   /* (n_slices + 1) first chunk of each slice */
    slice_claim *claims; /* (n_slices) */
} tasks_job;

/* Cost of one weight row of a task: its bytes once from memory, and about
 * half that again per token it meets (the kernels run ~2x faster than
 * memory streams bytes). Only the balance between threads depends on it. */
static uint64_t row_cost(const mt_matmul_task *t) {
    return (uint64_t)t->w->row_bytes * (uint64_t)(2 + t->n_tok);
}

static void run_rows(const mt_matmul_task *t, int64_t begin, int64_t end) {
    const mt_matrix *w = t->w;
    const uint8_t *wd = w->data, *xc = t->xc;
    if (t->n_tok <= SPREAD_TOKENS) { /* decoding: the whole run in one call (read as streams) */
        quant_tile(w->type, w->n_cols, wd + (size_t)begin * w->row_bytes, w->row_bytes, end - begin,
                   xc, t->xc_stride, t->n_tok, t->y + (size_t)begin, t->y_stride);
        return;
    }
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

/* Claims the next chunk of a slice from its front (its owner) or its back
 * (a thread that finished its own); false when none is left. */
static bool claim(_Atomic uint64_t *c, bool back, int *idx) {
    uint64_t v = atomic_load_explicit(c, memory_order_relaxed);
    for (;;) {
        const uint32_t f = (uint32_t)v, e = (uint32_t)(v >> 32);
        if (f >= e) return false;
        const uint64_t nv =
            back ? (uint64_t)f | (uint64_t)(e - 1) << 32 : (uint64_t)(f + 1) | (uint64_t)e << 32;
        if (atomic_compare_exchange_weak_explicit(c, &v, nv, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            *idx = back ? (int)e - 1 : (int)f;
            return true;
        }
    }
}

/* Bytes of a chunk's first rows fetched into L2 while the chunk before it
 * runs, when it starts another matrix: it would otherwise begin with a few
 * rows of cache misses before the kernels' own prefetching (rows ahead of
 * the ones they read, which runs on into a chunk that continues the same
 * rows) gets going. A burst of prefetches waits for free fill buffers, so
 * it is kept short. */
enum { PREFETCH_START = 2048 };

static void prefetch_start(const tasks_job *j, const chunk *c, const chunk *next) {
    if (next->task == c->task && next->r0 == c->r1) return;
    const mt_matrix *w = j->tasks[next->task].w;
    const char *p = (const char *)w->data + (size_t)next->r0 * w->row_bytes;
    size_t n = (size_t)(next->r1 - next->r0) * w->row_bytes;
    if (n > PREFETCH_START) n = PREFETCH_START;
    for (size_t o = 0; o < n; o += 64) __builtin_prefetch(p + o, 0, 2);
}

/* Thread s works through slice s from the front, then takes chunks from the
 * back of the others' slices: a thread that was slowed down (by memory, or
 * by another process on its core) leaves its last chunks to the others
 * instead of making them wait. */
static void run_slices(void *ctx, int64_t begin, int64_t end) {
    const tasks_job *j = ctx;
    int idx;
    for (int64_t s = begin; s < end; s++)
        while (claim(&j->claims[s].next, false, &idx)) {
            const chunk *c = &j->chunks[idx];
            if (idx + 1 < j->n_chunks) prefetch_start(j, c, &j->chunks[idx + 1]);
            run_rows(&j->tasks[c->task], c->r0, c->r1);
        }
    for (int k = 1; k < j->n_slices; k++) {
        const int o = (int)((begin + k) % j->n_slices);
        while (claim(&j->claims[o].next, true, &idx)) {
            const chunk *c = &j->chunks[idx];
            run_rows(&j->tasks[c->task], c->r0, c->r1);
        }
    }
}

/* Cuts the tasks' rows into chunks of about `target` cost (multiples of 4
 * rows, the kernels' row group; at least CHUNK_MIN_ROWS) and the chunk list
 * into n slices of about equal cost. Returns the number of chunks, or -1 if
 * `cap` is too small. */
static int make_chunks(const mt_matmul_task *tasks, int n_tasks, uint64_t total, int n,
                       chunk *chunks, int cap, int *slice0) {
    const uint64_t target = total / ((uint64_t)n * CHUNKS_PER_THREAD) + 1;
    int nc = 0;
    for (int k = 0; k < n_tasks; k++) {
        const int64_t rows = tasks[k].n_tok > 0 ? tasks[k].w->n_rows : 0;
        if (rows == 0) continue;
        int64_t per = (int64_t)(target / row_cost(&tasks[k]));
        per = per < CHUNK_MIN_ROWS ? CHUNK_MIN_ROWS : (per + 3) & ~(int64_t)3;
        for (int64_t r = 0; r < rows; r += per) {
            if (nc == cap) return -1;
            chunks[nc++] = (chunk){k, r, r + per < rows ? r + per : rows};
        }
    }
    /* slice s starts at the first chunk whose cost begins at or past s/n of
     * the total */
    uint64_t c = 0;
    int s = 0;
    for (int i = 0; i < nc; i++) {
        while (s < n && c >= (uint64_t)((unsigned __int128)total * (uint64_t)s / (uint64_t)n))
            slice0[s++] = i;
        const chunk *ch = &chunks[i];
        c += (uint64_t)(ch->r1 - ch->r0) * row_cost(&tasks[ch->task]);
    }
    while (s <= n) slice0[s++] = nc;
    return nc;
}

void mt_matmul_tasks(const mt_matmul_task *tasks, int n_tasks, mt_pool *pool) {
    if (n_tasks <= 0) return;
    uint64_t total = 0;
    for (int k = 0; k < n_tasks; k++) {
        const mt_matmul_task *t = &tasks[k];
        (void)quant_vec_dot_get(t->w->type); /* aborts on an unsupported type */
        const int64_t rows = t->n_tok > 0 ? t->w->n_rows : 0;
        total += (uint64_t)rows * row_cost(t);
        if (rows > 0) mt_matmul_count_bytes((uint64_t)rows * t->w->row_bytes);
    }
    if (total == 0) return;
    const int n = mt_pool_size(pool);
    /* chunks of at least 31/32 of the target: below 2 * CHUNKS_PER_THREAD per
     * thread, plus one per task for its last, short chunk */
    const int cap = 2 * n * CHUNKS_PER_THREAD + n_tasks + 1;
    chunk stack_chunks[512], *chunks = stack_chunks;
    int stack_slice0[65], *slice0 = stack_slice0;
    slice_claim stack_claims[64], *claims = stack_claims;
    if (cap > 512 && !(chunks = malloc((size_t)cap * sizeof *chunks)))
        out_of_memory("mt_matmul_tasks", (size_t)cap * sizeof *chunks);
    if (n > 64 && (!(slice0 = malloc((size_t)(n + 1) * sizeof *slice0)) ||
                   !(claims = mt_aligned_alloc(64, (size_t)n * sizeof *claims))))
        out_of_memory("mt_matmul_tasks", (size_t)n * (sizeof *slice0 + sizeof *claims));
    const int nc = make_chunks(tasks, n_tasks, total, n, chunks, cap, slice0);
    if (nc < 0) abort(); /* cap bounds the chunk count; a bug otherwise */
    for (int s = 0; s < n; s++)
        atomic_init(&claims[s].next, (uint64_t)slice0[s] | (uint64_t)slice0[s + 1] << 32);
    tasks_job j = {tasks, chunks, n, nc, slice0, claims};
    mt_pool_run(pool, n, run_slices, &j);
    if (chunks != stack_chunks) free(chunks);
    if (slice0 != stack_slice0) free(slice0), mt_aligned_free(claims);
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

void mt_matmul_pairs(const mt_matrix *const *w, const float *const *x, float *const *y, int n,
                     int64_t n_tok, mt_pool *pool) {
    if (n <= 0 || n_tok <= 0) return;
    if (n > 8) abort(); /* a programming error: callers pass q, k, v and the like */
    mt_matmul_task tasks[8] = {0};
    uint8_t *conv[8] = {0};
    for (int k = 0; k < n; k++) {
        const mt_type vt = quant_vec_dot_type(w[k]->type);
        (void)quant_vec_dot_get(w[k]->type); /* aborts on an unsupported type */
        const size_t rb = mt_type_row_size(vt, w[k]->n_cols);
        const void *xc = x[k];
        if (vt != MT_TYPE_F32) {
            /* one conversion per distinct input, vec-dot type and width */
            int same = -1;
            for (int i = 0; i < k && same < 0; i++)
                if (conv[i] && x[i] == x[k] && quant_vec_dot_type(w[i]->type) == vt &&
                    w[i]->n_cols == w[k]->n_cols)
                    same = i;
            if (same >= 0) {
                xc = conv[same];
            } else {
                if (!(conv[k] = malloc((size_t)n_tok * rb)))
                    out_of_memory("mt_matmul_pairs", (size_t)n_tok * rb);
                mt_convert_rows(vt, x[k], n_tok, w[k]->n_cols, conv[k], pool);
                xc = conv[k];
            }
        }
        tasks[k] = (mt_matmul_task){w[k], xc, rb, n_tok, y[k], (size_t)w[k]->n_rows};
    }
    mt_matmul_tasks(tasks, n, pool);
    for (int k = 0; k < n; k++) free(conv[k]);
}

void mt_matmul_many(const mt_matrix *const *w, float *const *y, int n, const float *x,
                    int64_t n_tok, mt_pool *pool) {
    const float *xs[8] = {x, x, x, x, x, x, x, x};
    if (n > 8) abort(); /* a programming error: callers pass q, k, v and the like */
    mt_matmul_pairs(w, xs, y, n, n_tok, pool);
}

void mt_matrix_get_row(const mt_matrix *w, int64_t r, float *dst) {
    mt_matmul_count_bytes(w->row_bytes);
    quant_dequantize_row(w->type, (const uint8_t *)w->data + (size_t)r * w->row_bytes, dst,
                         w->n_cols);
}
