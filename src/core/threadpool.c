/* threadpool.c - a fixed set of worker threads running parallel-for loops.
 *
 * The thread that calls mt_pool_run takes the first range itself; each of the
 * n_threads - 1 workers takes one of the others. A run is announced by
 * bumping a generation counter; workers spin on it briefly (a decode step
 * issues thousands of small runs, and sleeping on a condition variable costs
 * tens of microseconds per wake-up) and then sleep on a condition variable.
 * The caller waits for the pending-worker count to reach zero the same way.
 *
 * Runs from different threads are serialized. A run started from inside a
 * work function of the same pool executes inline (no deadlock). */
#include "moontail/threadpool.h"
#include "moontail/sysinfo.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* Spin iterations before sleeping: a few us to ~100 us, depending on the
 * latency of the pause instruction on this CPU. */
enum { SPIN_LIMIT = 2000 };

/* ------------------------------------------------------------ structs */

typedef struct worker {
    struct mt_pool *pool;
    int index; /* 1 .. n_threads-1: which range of a run this worker takes */
    pthread_t thread;
} worker;

struct mt_pool {
    int n_threads;   /* including the calling thread */
    worker *workers; /* (n_threads - 1) */

    pthread_mutex_t run_lock; /* one run at a time */

    pthread_mutex_t lock; /* guards sleeping on the two conditions below */
    pthread_cond_t work_cv;
    pthread_cond_t done_cv;

    atomic_uint_fast64_t generation; /* bumped to start a run (and to stop) */
    atomic_int pending;              /* workers that have not finished this run */
    atomic_bool stop;

    /* the current run; written before `generation` is bumped */
    mt_pool_fn fn;
    void *ctx;
    int64_t n;
};

/* The pool whose work function this thread is running, if any. */
static _Thread_local const mt_pool *running_in;

/* ------------------------------------------------------------ ranges */

/* Range i of n_threads over [0, n): contiguous, sizes differ by at most 1. */
static void range_of(int64_t n, int n_threads, int i, int64_t *begin, int64_t *end) {
    *begin = n * i / n_threads;
    *end = n * (i + 1) / n_threads;
}

static void run_range(mt_pool *pool, int i) {
    int64_t begin, end;
    range_of(pool->n, pool->n_threads, i, &begin, &end);
    if (begin < end) {
        const mt_pool *outer = running_in;
        running_in = pool;
        pool->fn(pool->ctx, begin, end);
        running_in = outer;
    }
}

/* ------------------------------------------------------------ workers */

static void *worker_main(void *arg) {
    worker *w = arg;
    mt_pool *pool = w->pool;
    uint_fast64_t seen = 0;
    for (;;) {
        /* wait for a new generation: spin, then sleep */
        uint_fast64_t gen = atomic_load_explicit(&pool->generation, memory_order_acquire);
        for (int spin = 0; gen == seen && spin < SPIN_LIMIT; spin++) {
            cpu_relax();
            gen = atomic_load_explicit(&pool->generation, memory_order_acquire);
        }
        if (gen == seen) {
            pthread_mutex_lock(&pool->lock);
            while ((gen = atomic_load_explicit(&pool->generation, memory_order_acquire)) == seen)
                pthread_cond_wait(&pool->work_cv, &pool->lock);
            pthread_mutex_unlock(&pool->lock);
        }
        seen = gen;
        if (atomic_load_explicit(&pool->stop, memory_order_acquire)) break;

        run_range(pool, w->index);

        if (atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&pool->lock);
            pthread_cond_signal(&pool->done_cv);
            pthread_mutex_unlock(&pool->lock);
        }
    }
    return NULL;
}

/* ------------------------------------------------------------ create / free */

static void stop_workers(mt_pool *pool, int n_started) {
    pthread_mutex_lock(&pool->lock);
    atomic_store_explicit(&pool->stop, true, memory_order_release);
    atomic_fetch_add_explicit(&pool->generation, 1, memory_order_acq_rel);
    pthread_cond_broadcast(&pool->work_cv);
    pthread_mutex_unlock(&pool->lock);
    for (int i = 0; i < n_started; i++) pthread_join(pool->workers[i].thread, NULL);
}

mt_pool *mt_pool_create(int n_threads) {
    if (n_threads <= 0) {
        n_threads = mt_sys_cpus();
    }
    mt_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return NULL;
    pool->n_threads = n_threads;
    pool->workers = calloc((size_t)n_threads, sizeof *pool->workers);
    if (!pool->workers) {
        free(pool);
        return NULL;
    }
    pthread_mutex_init(&pool->run_lock, NULL);
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->work_cv, NULL);
    pthread_cond_init(&pool->done_cv, NULL);
    atomic_init(&pool->generation, 0);
    atomic_init(&pool->pending, 0);
    atomic_init(&pool->stop, false);

    for (int i = 0; i < n_threads - 1; i++) {
        worker *w = &pool->workers[i];
        w->pool = pool;
        w->index = i + 1;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            stop_workers(pool, i);
            pool->n_threads = 1;
            mt_pool_free(pool);
            return NULL;
        }
    }
    return pool;
}

void mt_pool_free(mt_pool *pool) {
    if (!pool) return;
    if (pool->n_threads > 1) stop_workers(pool, pool->n_threads - 1);
    pthread_cond_destroy(&pool->done_cv);
    pthread_cond_destroy(&pool->work_cv);
    pthread_mutex_destroy(&pool->lock);
    pthread_mutex_destroy(&pool->run_lock);
    free(pool->workers);
    free(pool);
}

int mt_pool_size(const mt_pool *pool) {
    return pool ? pool->n_threads : 1;
}

/* ------------------------------------------------------------ run */

void mt_pool_run(mt_pool *pool, int64_t n, mt_pool_fn fn, void *ctx) {
    if (n <= 0) return;
    /* inline: no pool, one thread, a single item, or a nested run */
    if (!pool || pool->n_threads == 1 || n == 1 || running_in == pool) {
        fn(ctx, 0, n);
        return;
    }
    pthread_mutex_lock(&pool->run_lock);
    pool->fn = fn;
    pool->ctx = ctx;
    pool->n = n;
    atomic_store_explicit(&pool->pending, pool->n_threads - 1, memory_order_relaxed);
    pthread_mutex_lock(&pool->lock);
    atomic_fetch_add_explicit(&pool->generation, 1, memory_order_acq_rel);
    pthread_cond_broadcast(&pool->work_cv);
    pthread_mutex_unlock(&pool->lock);

    run_range(pool, 0);

    for (int spin = 0; spin < SPIN_LIMIT; spin++) {
        if (atomic_load_explicit(&pool->pending, memory_order_acquire) == 0) break;
        cpu_relax();
    }
    if (atomic_load_explicit(&pool->pending, memory_order_acquire) != 0) {
        pthread_mutex_lock(&pool->lock);
        while (atomic_load_explicit(&pool->pending, memory_order_acquire) != 0)
            pthread_cond_wait(&pool->done_cv, &pool->lock);
        pthread_mutex_unlock(&pool->lock);
    }
    pthread_mutex_unlock(&pool->run_lock);
}
