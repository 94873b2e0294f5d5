/* membw.c - STREAM-style memory bandwidth (triad and a read-only sum),
 * measured with the engine's own thread pool.
 *
 * STREAM (McCalpin) counts 24 bytes per triad element (two reads, one
 * write) and ignores the write-allocate read that most caches add, so its
 * figure is the bandwidth a program sees, not what the bus carries. The
 * read-only sum is closer to what decoding does (weights are only read).
 * Each thread first-touches the range it later streams, so on a NUMA
 * machine pages sit near the thread that uses them. */
#include "moontail/membw.h"
#include "moontail/clock.h"
#include "moontail/compat.h"

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

typedef struct triad_job {
    double *a, *b, *c;
    double s;
    double *partial; /* (n_ranges) read sums, one per range */
    int64_t n;       /* elements per array */
    int64_t n_ranges;
} triad_job;

/* Ranges are fixed slices of the arrays, one per work item. */
static void range_of(const triad_job *j, int64_t r, int64_t *lo, int64_t *hi) {
    *lo = j->n * r / j->n_ranges;
    *hi = j->n * (r + 1) / j->n_ranges;
}

static void job_init(void *ctx, int64_t begin, int64_t end) {
    triad_job *j = ctx;
    for (int64_t r = begin; r < end; r++) {
        int64_t lo, hi;
        range_of(j, r, &lo, &hi);
        for (int64_t i = lo; i < hi; i++) j->a[i] = 0.0, j->b[i] = 1.0, j->c[i] = 2.0;
    }
}

/* Built for AVX2 too (picked at load time where the CPU has it): wide loads
 * are what the decode kernels use, and narrow ones understate the memory.
 * Not under ThreadSanitizer: its instrumented ifunc resolver runs while the
 * dynamic loader relocates, before the TSan runtime exists, and crashes. Not
 * on Windows, whose loader has no ifunc. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_THREAD__) && !defined(_WIN32)
#define WIDE __attribute__((target_clones("avx2", "default")))
#else
#define WIDE
#endif

WIDE static void job_triad(void *ctx, int64_t begin, int64_t end) {
    triad_job *j = ctx;
    double *restrict a = j->a;
    const double *restrict b = j->b, *restrict c = j->c;
    const double s = j->s;
    for (int64_t r = begin; r < end; r++) {
        int64_t lo, hi;
        range_of(j, r, &lo, &hi);
        for (int64_t i = lo; i < hi; i++) a[i] = b[i] + s * c[i];
    }
}

/* Each range is read as 4 streams, a quarter of it apart, 256 bytes of
 * each in turn: the way the decode kernels read weights (qx_spread_plan in
 * quant_x86.inc). A core brings in more from several streams than from
 * one, so a single stream would understate what reading can get. */
enum { READ_STREAMS = 4, READ_STEP = 32 /* uint64 = 256 bytes */ };

WIDE static void job_read(void *ctx, int64_t begin, int64_t end) {
    triad_job *j = ctx;
    const uint64_t *restrict b = (const uint64_t *)j->b;
    for (int64_t r = begin; r < end; r++) {
        int64_t lo, hi;
        range_of(j, r, &lo, &hi);
        const int64_t q = (hi - lo) / READ_STREAMS / READ_STEP * READ_STEP;
        /* integer sums of the bits in 8 independent chains: the loads, not
         * the adds, set the pace (float adds would wait on each other) */
        uint64_t s[8] = {0};
        for (int64_t i = 0; i < q; i += READ_STEP)
            for (int k = 0; k < READ_STREAMS; k++) {
                const uint64_t *p = b + lo + k * q + i;
                for (int e = 0; e < READ_STEP; e += 8)
                    for (int l = 0; l < 8; l++) s[l] += p[e + l];
            }
        for (int64_t i = lo + READ_STREAMS * q; i < hi; i++) s[0] += b[i];
        uint64_t t = 0;
        for (int k = 0; k < 8; k++) t += s[k];
        j->partial[r] = (double)t;
    }
}

int mt_membw_measure(mt_pool *pool, size_t array_bytes, int reps, mt_membw *out) {
    triad_job j = {0};
    j.n = (int64_t)(array_bytes / sizeof(double));
    j.n_ranges = mt_pool_size(pool);
    j.s = 3.0;
    j.a = mt_aligned_alloc(64, (size_t)j.n * sizeof(double) + 64);
    j.b = mt_aligned_alloc(64, (size_t)j.n * sizeof(double) + 64);
    j.c = mt_aligned_alloc(64, (size_t)j.n * sizeof(double) + 64);
    j.partial = calloc((size_t)j.n_ranges, sizeof(double));
    int rc = -1;
    if (!j.a || !j.b || !j.c || !j.partial || j.n <= 0) goto done;
    mt_pool_run(pool, j.n_ranges, job_init, &j);
    double best_triad = 1e30, best_read = 1e30;
    for (int r = 0; r < (reps > 0 ? reps : 1); r++) {
        double t0 = mt_mono_s();
        mt_pool_run(pool, j.n_ranges, job_triad, &j);
        double t1 = mt_mono_s();
        mt_pool_run(pool, j.n_ranges, job_read, &j);
        double t2 = mt_mono_s();
        if (t1 - t0 < best_triad) best_triad = t1 - t0;
        if (t2 - t1 < best_read) best_read = t2 - t1;
    }
    volatile double sink = j.partial[0] + j.a[j.n / 2]; /* keep the work observable */
    (void)sink;
    out->triad_gbs = 3.0 * sizeof(double) * (double)j.n / best_triad / 1e9;
    out->read_gbs = sizeof(double) * (double)j.n / best_read / 1e9;
    out->array_bytes = (size_t)j.n * sizeof(double);
    rc = 0;
done:
    mt_aligned_free(j.a), mt_aligned_free(j.b), mt_aligned_free(j.c), free(j.partial);
    return rc;
}
