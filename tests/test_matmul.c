/* test_matmul.c - checks the thread pool and mt_matmul.
 *
 * Pool: every index of [0, n) is visited exactly once in contiguous ranges,
 * for many n and pool sizes, repeatedly; NULL pools and nested runs execute
 * inline. Matmul, for every supported weight type on odd shapes: each y
 * element equals quant_vec_dot of its weight row with its converted
 * activation row; y is bit-identical for pool sizes 1-4 and NULL, and for a
 * token run alone (n_tok = 1) or inside a batch of 7; results stay within a
 * stated bound of a double-precision product with the raw activations;
 * expert views (data at an offset) and mt_matrix_get_row work. */
#include "check.h"
#include "moontail/matmul.h"
#include "moontail/quant.h"
#include "moontail/threadpool.h"

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ harness */

static uint64_t rng_state = 0x243F6A8885A308D3ull;

static uint64_t rng_u64(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float rng_gauss(void) {
    double u = ((double)(rng_u64() >> 11) + 0.5) / 9007199254740992.0;
    double v = ((double)(rng_u64() >> 11) + 0.5) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

/* ------------------------------------------------------------ thread pool */

typedef struct visit_ctx {
    atomic_int *count; /* (n) visits per index */
    int64_t n;
    atomic_int calls;
    atomic_int bad_range;
} visit_ctx;

static void visit(void *p, int64_t begin, int64_t end) {
    visit_ctx *c = p;
    atomic_fetch_add(&c->calls, 1);
    if (begin < 0 || end > c->n || begin >= end) atomic_fetch_add(&c->bad_range, 1);
    for (int64_t i = begin; i < end && i < c->n; i++) atomic_fetch_add(&c->count[i], 1);
}

typedef struct nest_ctx {
    mt_pool *pool;
    atomic_long sum;
} nest_ctx;

static void nest_inner(void *p, int64_t begin, int64_t end) {
    nest_ctx *c = p;
    for (int64_t i = begin; i < end; i++) atomic_fetch_add(&c->sum, (long)i);
}

static void nest_outer(void *p, int64_t begin, int64_t end) {
    nest_ctx *c = p;
    for (int64_t i = begin; i < end; i++) mt_pool_run(c->pool, 10, nest_inner, c); /* inline */
}

static void test_pool(void) {
    static const int64_t sizes[] = {0, 1, 2, 3, 4, 5, 7, 64, 100, 1001};
    atomic_int *count = calloc(1001, sizeof *count);
    for (int nt = 0; nt <= 5; nt++) {
        mt_pool *pool = nt == 0 ? NULL : mt_pool_create(nt);
        CHECK(nt == 0 || pool != NULL, "mt_pool_create(%d) failed", nt);
        CHECK(mt_pool_size(pool) == (nt == 0 ? 1 : nt), "mt_pool_size = %d for %d threads",
              mt_pool_size(pool), nt);
        for (int rep = 0; rep < 200; rep++) {
            for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
                int64_t n = sizes[k];
                visit_ctx c = {.count = count, .n = n};
                for (int64_t i = 0; i < n; i++) atomic_store(&count[i], 0);
                mt_pool_run(pool, n, visit, &c);
                int wrong = 0;
                for (int64_t i = 0; i < n; i++) wrong += atomic_load(&count[i]) != 1;
                CHECK(wrong == 0 && atomic_load(&c.bad_range) == 0,
                      "pool %d, n=%lld: %d indices not visited exactly once", nt, (long long)n,
                      wrong);
                int max_calls = nt == 0 ? 1 : nt;
                CHECK(atomic_load(&c.calls) <= max_calls && (n == 0 || atomic_load(&c.calls) >= 1),
                      "pool %d, n=%lld: %d ranges (want 1..%d contiguous ranges)", nt, (long long)n,
                      atomic_load(&c.calls), max_calls);
            }
        }
        if (pool) {
            nest_ctx nc = {.pool = pool};
            mt_pool_run(pool, 6, nest_outer, &nc);
            CHECK(atomic_load(&nc.sum) == 6 * 45, "nested runs: sum %ld, want 270",
                  atomic_load(&nc.sum));
        }
        mt_pool_free(pool);
    }
    mt_pool *def = mt_pool_create(0);
    CHECK(def && mt_pool_size(def) >= 1, "mt_pool_create(0) picks the CPU count");
    mt_pool_free(def);
    free(count);
    printf("pool: sizes NULL,1-5 x n in {0..1001} x 200 repetitions, nested runs: ok\n");
}

/* ------------------------------------------------------------ matmul */

static const struct {
    mt_type t;
    const char *name;
} types[] = {
    {MT_TYPE_F32, "F32"},   {MT_TYPE_F16, "F16"},   {MT_TYPE_BF16, "BF16"},
    {MT_TYPE_Q8_0, "Q8_0"}, {MT_TYPE_Q4_0, "Q4_0"}, {MT_TYPE_MXFP4, "MXFP4"},
    {MT_TYPE_Q4_K, "Q4_K"}, {MT_TYPE_Q6_K, "Q6_K"},
};

/* Quantizes an (n_rows, n_cols) f32 matrix into `buf`, row by row. */
static mt_matrix make_matrix(mt_type t, int64_t n_rows, int64_t n_cols, const float *w,
                             uint8_t *buf) {
    mt_matrix m = {.type = t, .n_cols = n_cols, .n_rows = n_rows};
    m.row_bytes = mt_type_row_size(t, n_cols);
    for (int64_t r = 0; r < n_rows; r++)
        quant_quantize_row(t, w + r * n_cols, buf + r * m.row_bytes, n_cols);
    m.data = buf;
    return m;
}

static void test_matmul_type(int ti, mt_pool **pools, int n_pools) {
    const mt_type t = types[ti].t;
    const mt_type vt = quant_vec_dot_type(t);
    const int64_t n_cols = 768; /* 3 super-blocks, 24 blocks */
    static const int64_t row_counts[] = {1, 5, 37};
    enum { N_TOK = 7, N_EXPERT = 3 };
    const int64_t max_rows = 37;
    float *w = malloc((size_t)(N_EXPERT * max_rows * n_cols) * sizeof *w);
    float *x = malloc((size_t)(N_TOK * n_cols) * sizeof *x);
    float *y_ref = malloc((size_t)(N_TOK * max_rows) * sizeof *y_ref);
    float *y = malloc((size_t)(N_TOK * max_rows) * sizeof *y);
    float *row = malloc((size_t)n_cols * sizeof *row);
    uint8_t *wq = malloc((size_t)(N_EXPERT * max_rows) * mt_type_row_size(t, n_cols));
    uint8_t *xc = malloc(mt_type_row_size(vt, n_cols));
    double worst_loose = 0;

    for (size_t rc = 0; rc < sizeof row_counts / sizeof row_counts[0]; rc++) {
        const int64_t n_rows = row_counts[rc];
        for (int64_t i = 0; i < N_EXPERT * n_rows * n_cols; i++) w[i] = rng_gauss() * 0.05f;
        for (int64_t i = 0; i < N_TOK * n_cols; i++)
            x[i] = rng_gauss() * ((i % 53) == 7 ? 8.0f : 1.0f);
        /* a merged expert tensor (n_expert, n_rows, n_cols); use expert 1 */
        mt_matrix all = make_matrix(t, N_EXPERT * n_rows, n_cols, w, wq);
        mt_matrix m = all;
        m.n_rows = n_rows;
        m.data = (const uint8_t *)all.data + 1 * n_rows * all.row_bytes;

        mt_matmul(&m, x, N_TOK, y_ref, NULL);

        /* each element is exactly one vec_dot of converted activations */
        int not_dot = 0;
        for (int t_ = 0; t_ < N_TOK; t_++) {
            quant_convert_activations(vt, x + t_ * n_cols, xc, n_cols);
            for (int64_t r = 0; r < n_rows; r++) {
                float d = quant_vec_dot(t, n_cols, (const uint8_t *)m.data + r * m.row_bytes, xc);
                not_dot += memcmp(&d, &y_ref[t_ * n_rows + r], sizeof d) != 0;
            }
        }
        CHECK(not_dot == 0, "%s %lld rows: %d elements differ from quant_vec_dot", types[ti].name,
              (long long)n_rows, not_dot);

        /* bit-identical for every pool size */
        for (int p = 0; p < n_pools; p++) {
            memset(y, 0xff, (size_t)(N_TOK * n_rows) * sizeof *y);
            mt_matmul(&m, x, N_TOK, y, pools[p]);
            CHECK(memcmp(y, y_ref, (size_t)(N_TOK * n_rows) * sizeof *y) == 0,
                  "%s %lld rows: pool of %d threads changes the result", types[ti].name,
                  (long long)n_rows, mt_pool_size(pools[p]));
        }

        /* a token alone equals the same token inside the batch */
        for (int t_ = 0; t_ < N_TOK; t_++) {
            mt_matmul(&m, x + t_ * n_cols, 1, y, pools[t_ % n_pools]);
            CHECK(memcmp(y, y_ref + t_ * n_rows, (size_t)n_rows * sizeof *y) == 0,
                  "%s %lld rows: token %d alone differs from the batch of %d", types[ti].name,
                  (long long)n_rows, t_, N_TOK);
        }

        /* get_row decodes the expert's row; the product is close to the
         * double-precision product with raw activations */
        for (int64_t r = 0; r < n_rows; r++) {
            mt_matrix_get_row(&m, r, row);
            float want[768];
            quant_dequantize_row(t, (const uint8_t *)m.data + r * m.row_bytes, want, n_cols);
            CHECK(memcmp(row, want, sizeof want) == 0, "%s: get_row %lld", types[ti].name,
                  (long long)r);
            for (int t_ = 0; t_ < N_TOK; t_++) {
                double exact = 0, mag = 0;
                for (int64_t c = 0; c < n_cols; c++) {
                    exact += (double)row[c] * x[t_ * n_cols + c];
                    mag += fabs((double)row[c] * x[t_ * n_cols + c]);
                }
                /* activation rounding: <= 1/254 of the block max for Q8_0/Q8_K
                 * (x of ~N(0,1) with 8x outliers: under 1% of sum |w*x| in
                 * practice), 2^-9 for BF16, 2^-12 for F16, ~0 for F32 */
                double tol = vt == MT_TYPE_F32 ? 1e-6 : vt == MT_TYPE_F16 ? 1e-3 : 2e-2;
                double err = fabs(y_ref[t_ * n_rows + r] - exact) / mag;
                CHECK(err <= tol, "%s: y[%d][%lld] = %g, exact %g (rel to sum|w*x| %.2e)",
                      types[ti].name, t_, (long long)r, y_ref[t_ * n_rows + r], exact, err);
                if (err > worst_loose) worst_loose = err;
            }
        }
    }
    printf("  %-6s rows {1,5,37} x 768 cols x 7 tokens: bit-identical over pools and batch; "
           "max |y - exact(raw x)| / sum|w*x| = %.2e\n",
           types[ti].name, worst_loose);
    free(w);
    free(x);
    free(y_ref);
    free(y);
    free(row);
    free(wq);
    free(xc);
}

static void test_matmul(void) {
    mt_pool *pools[5] = {NULL, mt_pool_create(1), mt_pool_create(2), mt_pool_create(3),
                         mt_pool_create(4)};
    printf("matmul (%s kernels):\n", quant_kernel_name());
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        test_matmul_type((int)ti, pools, 5);
    for (int p = 0; p < 5; p++) mt_pool_free(pools[p]);
}

int main(void) {
    test_pool();
    test_matmul();
    if (quant_kernels_select("avx2") == 0 && strcmp(quant_kernel_name(), "avx2") == 0) {
        /* already tested with the default set; repeat with the reference one */
        quant_kernels_select("reference");
        test_matmul();
    }
    return check_report("test_matmul");
}
