/* cellsim_load.c - the real side of cellsim's validation
 * (bench/cellsim-validate.sh): N requesters at once through a pipeline of
 * `moontail node` processes, each with its own route (so that the nodes batch
 * their sessions, as `moontail serve` slots do), and the figures cellsim
 * predicts for the same protocol.
 *
 *   cellsim_load --route FILE --users N [--prompt P] [--gen G] [--json]
 *
 * Every requester opens its route (route.h: head shard local, stages called
 * in turn, one compute thread), then all start together: a prompt of P
 * tokens as one pass, then G - 1 greedy tokens one at a time (G tokens in
 * all, as `moontail prompt -n G` computes them). Per requester: decode
 * tokens/s = (G - 1) / (last token - first token) and the time to the first
 * token; aggregate = all decoded tokens / (last token of anyone - first
 * token of anyone). With --stagger-ms S requester i starts its prompt i x S
 * ms after the others' common start, so prompts arrive while requester 0
 * decodes; the gaps between decode tokens (p50, p95, longest) are reported
 * for requester 0 and for everyone: requester 0's p95 against a run with
 * --users 1 is what a prompt arriving costs a decoding user. --others-gen G2
 * gives requesters 1.. G2 tokens instead (1: their prompts alone, so that
 * requester 0's gaps show what prompts cost, not what other decodes sharing
 * its steps do; per-user and aggregate rates then count requesters that
 * decoded). --chain sends
 * each pass to the first stage only, which passes it along (route.h).
 *
 * With --ours PID,... (the nodes of the experiment) it also measures the
 * CPU capacity the rest of the machine left the experiment while it ran:
 * every 20 ms it reads whether any thread of the nodes or of this process
 * (the sampler's own excluded) is runnable (/proc/PID/task/TID/stat), and the
 * CPU time they used (utime + stime). "cpu_used" is that time per second of
 * the run, "busy" the share of samples with a runnable thread, and
 * "cpu_capacity" = cpu_used / busy: the CPUs the experiment got when it
 * wanted them, which cellsim takes as the capacity of the machine its
 * simulated nodes share (other programs on a shared machine are not part of
 * the cell). Benchmarks measure; no thresholds here. */
#include "moontail/route.h"

#include <dirent.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { MAX_USERS = 256 };

typedef struct load_user {
    mt_route_config cfg;
    mt_route *r;
    pthread_barrier_t *go;
    int32_t prompt, gen;
    double delay_ms; /* wait after the common start (--stagger-ms) */
    double *gaps;    /* (gen - 1) times between decode tokens, ms */
    double open_ms, t_start, t_first, t_last;
    int failed;
    mt_error err;
} load_user;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + 1e-6 * (double)ts.tv_nsec;
}

static double now_ms(void);

/* ---- the CPU capacity ------------------------------------------------------------------ */

enum { MAX_OURS = 256, MAX_SAMPLES = 200000 };

typedef struct sampler {
    long ours[MAX_OURS]; /* this process first */
    int n_ours;
    long self_tid;
    volatile int stop;
    int n;
    double *t;       /* (MAX_SAMPLES) sample times */
    double *used;    /* (MAX_SAMPLES) CPU seconds our processes used so far */
    bool *busy;      /* (MAX_SAMPLES) some thread of ours was runnable */
    double self_cpu; /* the sampler's own CPU seconds so far */
} sampler;

/* The state and utime + stime (seconds) of a /proc/.../stat file; false when unreadable. */
static bool read_stat(const char *path, char *state, double *cpu_s) {
    char buf[1024];
    FILE *f = fopen(path, "r");
    if (!f) return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* the command may hold spaces and parentheses */
    unsigned long ut = 0, st = 0;
    if (!p ||
        sscanf(p + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", state, &ut, &st) != 3)
        return false;
    *cpu_s = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
    return true;
}

/* Whether a thread of process pid (other than tid skip) is runnable. */
static bool any_runnable(long pid, long skip) {
    char path[300], st;
    double cpu;
    snprintf(path, sizeof path, "/proc/%ld/task", pid);
    DIR *d = opendir(path);
    struct dirent *e;
    bool r = false;
    while (!r && d && (e = readdir(d))) {
        if (e->d_name[0] == '.' || atol(e->d_name) == skip) continue;
        snprintf(path, sizeof path, "/proc/%ld/task/%.20s/stat", pid, e->d_name);
        r = read_stat(path, &st, &cpu) && st == 'R';
    }
    if (d) closedir(d);
    return r;
}

static void sample(sampler *s) {
    double used = 0;
    bool busy = false;
    for (int i = 0; i < s->n_ours; i++) {
        char path[64], st;
        double cpu = 0;
        snprintf(path, sizeof path, "/proc/%ld/stat", s->ours[i]);
        if (read_stat(path, &st, &cpu)) used += cpu;
        if (!busy) busy = any_runnable(s->ours[i], s->self_tid);
    }
    s->used[s->n] = used - s->self_cpu; /* the sampler's own time is not the experiment's */
    s->busy[s->n] = busy;
    s->t[s->n++] = now_ms();
}

static void *sampler_main(void *arg) {
    sampler *s = arg;
    s->self_tid = (long)gettid();
    while (!s->stop && s->n < MAX_SAMPLES) {
        struct timespec c0, c1;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
        sample(s);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
        s->self_cpu += (double)(c1.tv_sec - c0.tv_sec) + 1e-9 * (double)(c1.tv_nsec - c0.tv_nsec);
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* ---- the requesters ---------------------------------------------------------------------- */

static int32_t argmax(const float *v, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

static void *user_main(void *arg) {
    load_user *u = arg;
    double t0 = now_ms();
    u->r = mt_route_open(&u->cfg, &u->err);
    u->open_ms = now_ms() - t0;
    mt_route_session *s = NULL;
    const int32_t V = u->r ? mt_route_head(u->r)->hp.n_vocab : 1;
    float *logits = malloc((size_t)V * sizeof(float));
    int32_t *ids = malloc((size_t)u->prompt * sizeof(int32_t));
    if (u->r && (!logits || !ids)) mt_error_set(&u->err, "out of memory");
    if (u->r && logits && ids) s = mt_route_session_new(u->r, u->prompt + u->gen + 1, &u->err);
    pthread_barrier_wait(u->go); /* everyone starts together, ready or not */
    if (!s) {
        u->failed = 1;
        goto done;
    }
    for (int32_t i = 0; i < u->prompt; i++) ids[i] = (i * 37 + 5) % V;
    if (u->delay_ms > 0) usleep((useconds_t)(u->delay_ms * 1e3));
    u->t_start = now_ms();
    if (mt_route_eval(u->r, s, ids, u->prompt, false, logits, &u->err)) {
        u->failed = 1;
        goto done;
    }
    u->t_first = u->t_last = now_ms();
    for (int32_t g = 1; g < u->gen; g++) {
        int32_t tok = argmax(logits, V);
        if (mt_route_eval(u->r, s, &tok, 1, false, logits, &u->err)) {
            u->failed = 1;
            goto done;
        }
        double t = now_ms();
        u->gaps[g - 1] = t - u->t_last;
        u->t_last = t;
    }
done:
    if (s) mt_route_session_end(u->r, s);
    free(logits);
    free(ids);
    return NULL;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile (0..1) of v[0..n) by the nearest rank; sorts v. 0 when n is 0. */
static double quantile(double *v, int n, double q) {
    if (n <= 0) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    int k = (int)(q * n + 0.999999);
    return v[k < 1 ? 0 : k > n ? n - 1 : k - 1];
}

static int int_arg(const char *opt, const char *v, int lo, int hi) {
    char *end = NULL;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "cellsim_load: %s takes a whole number in [%d, %d]\n", opt, lo, hi);
        exit(2);
    }
    return (int)x;
}

int main(int argc, char **argv) {
    const char *route = NULL, *ours = NULL;
    int users = 1, prompt = 32, gen = 32, others_gen = -1, stagger = 0;
    bool json = false, chain = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json") || !strcmp(a, "--chain")) {
            *(a[2] == 'j' ? &json : &chain) = true;
            continue;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            puts("usage: cellsim_load --route FILE --users N [--prompt P] [--gen G]"
                 " [--stagger-ms S] [--others-gen G2] [--chain] [--ours PIDS] [--json]\n"
                 "(see the top of bench/cellsim_load.c)");
            return 0;
        }
        i++;
        if (!strcmp(a, "--route"))
            route = v;
        else if (!strcmp(a, "--users"))
            users = int_arg(a, v, 1, MAX_USERS);
        else if (!strcmp(a, "--prompt"))
            prompt = int_arg(a, v, 1, 4096);
        else if (!strcmp(a, "--gen"))
            gen = int_arg(a, v, 2, 4096);
        else if (!strcmp(a, "--others-gen"))
            others_gen = int_arg(a, v, 1, 4096);
        else if (!strcmp(a, "--stagger-ms"))
            stagger = int_arg(a, v, 0, 600000);
        else if (!strcmp(a, "--ours"))
            ours = v;
        else {
            fprintf(stderr, "cellsim_load: unknown option '%s' (--help)\n", a);
            return 2;
        }
    }
    if (!route) {
        fprintf(stderr, "cellsim_load: --route FILE is required\n");
        return 2;
    }
    mt_error err = {{0}};
    mt_route_file f;
    if (mt_route_file_load(route, &f, &err)) {
        fprintf(stderr, "cellsim_load: %s\n", err.msg);
        return 1;
    }
    if (f.cfg.n_stages < 1 || f.cfg.backbone || f.cfg.n_experts) {
        fprintf(stderr, "cellsim_load: %s: a pipeline of stages is needed\n", route);
        mt_route_file_free(&f);
        return 1;
    }
    static sampler smp;
    pthread_t smp_th;
    smp.ours[smp.n_ours++] = (long)getpid();
    for (const char *p = ours; p && *p && smp.n_ours < MAX_OURS;) {
        char *end;
        long pid = strtol(p, &end, 10);
        if (end == p || pid <= 0 || (*end && *end != ',')) {
            fprintf(stderr, "cellsim_load: --ours takes process ids separated by commas\n");
            return 2;
        }
        smp.ours[smp.n_ours++] = pid;
        p = *end ? end + 1 : end;
    }
    smp.t = malloc(MAX_SAMPLES * sizeof *smp.t);
    smp.used = malloc(MAX_SAMPLES * sizeof *smp.used);
    smp.busy = malloc(MAX_SAMPLES * sizeof *smp.busy);
    bool sampling = ours && smp.t && smp.used && smp.busy &&
                    pthread_create(&smp_th, NULL, sampler_main, &smp) == 0;
    static load_user u[MAX_USERS];
    pthread_t th[MAX_USERS];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, (unsigned)users);
    for (int i = 0; i < users; i++) {
        u[i] = (load_user){.cfg = f.cfg,
                           .go = &go,
                           .prompt = prompt,
                           .gen = i > 0 && others_gen > 0 ? others_gen : gen,
                           .delay_ms = (double)i * stagger,
                           .gaps = calloc((size_t)gen, sizeof(double))};
        if (!u[i].gaps) {
            fprintf(stderr, "cellsim_load: out of memory\n");
            return 1;
        }
        u[i].cfg.threads = 1;
        u[i].cfg.chain = chain;
        pthread_create(&th[i], NULL, user_main, &u[i]);
    }
    for (int i = 0; i < users; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&go);
    if (sampling) {
        smp.stop = 1;
        pthread_join(smp_th, NULL);
    }
    int failed = 0;
    double t0 = 1e300, t1 = 0, sum_tps = 0, min_tps = 1e300, max_tps = 0, ttft = 0, open = 0;
    int n_dec = 0;       /* requesters that decoded */
    int64_t decoded = 0; /* their decode tokens */
    for (int i = 0; i < users; i++) {
        if (u[i].failed) {
            fprintf(stderr, "cellsim_load: requester %d: %s\n", i, u[i].err.msg);
            failed++;
            continue;
        }
        if (u[i].gen < 2) { /* a prompt alone (--others-gen 1): no decode rate */
            if (u[i].t_first < t0) t0 = u[i].t_first;
            ttft += u[i].t_first - u[i].t_start;
            open += u[i].open_ms / f.cfg.n_stages;
            continue;
        }
        double tps = (u[i].gen - 1) / ((u[i].t_last - u[i].t_first) / 1e3);
        sum_tps += tps;
        n_dec++;
        decoded += u[i].gen - 1;
        if (tps < min_tps) min_tps = tps;
        if (tps > max_tps) max_tps = tps;
        if (u[i].t_first < t0) t0 = u[i].t_first;
        if (u[i].t_last > t1) t1 = u[i].t_last;
        ttft += u[i].t_first - u[i].t_start;
        open += u[i].open_ms / f.cfg.n_stages;
    }
    for (int i = 0; i < users; i++) mt_route_close(u[i].r);
    int ok = users - failed;
    /* gaps between decode tokens: requester 0's (the first to start: with --stagger-ms the
     * others' prompts arrive while it decodes) and everyone's */
    double *all = malloc(((size_t)users * (size_t)gen + 1) * sizeof *all);
    int n_all = 0;
    for (int i = 0; all && i < users; i++)
        for (int g = 0; !u[i].failed && g < u[i].gen - 1; g++) all[n_all++] = u[i].gaps[g];
    double gap_p50 = all ? quantile(all, n_all, 0.5) : 0,
           gap_p95 = all ? quantile(all, n_all, 0.95) : 0;
    double first_p50 = 0, first_p95 = 0, first_max = 0;
    if (!u[0].failed) {
        first_p95 = quantile(u[0].gaps, gen - 1, 0.95);
        first_p50 = quantile(u[0].gaps, gen - 1, 0.5);
        first_max = u[0].gaps[gen - 2];
    }
    free(all);
    for (int i = 0; i < users; i++) free(u[i].gaps);
    /* the CPU over the run: from the first prompt to the last token */
    double t_begin = 1e300, used0 = 0, used1 = 0, tu0 = 0, tu1 = 0;
    int n_smp = 0, n_busy = 0;
    for (int i = 0; i < users; i++)
        if (!u[i].failed && u[i].t_start < t_begin) t_begin = u[i].t_start;
    for (int i = 0; i < smp.n; i++) {
        if (smp.t[i] < t_begin || smp.t[i] > t1) continue;
        if (n_smp++ == 0) used0 = smp.used[i], tu0 = smp.t[i];
        used1 = smp.used[i], tu1 = smp.t[i];
        n_busy += smp.busy[i];
    }
    free(smp.t), free(smp.used), free(smp.busy);
    double cpu_used = tu1 > tu0 ? (used1 - used0) / ((tu1 - tu0) / 1e3) : 0;
    double busy = n_smp ? (double)n_busy / n_smp : 0;
    double agg = ok && t1 > t0 ? (double)decoded / ((t1 - t0) / 1e3) : 0;
    if (json) {
        json_t *o =
            json_pack("{s:i,s:i,s:i,s:i,s:f,s:f,s:f,s:f,s:f,s:f,s:i}", "users", users, "stages",
                      f.cfg.n_stages, "prompt", prompt, "gen", gen, "agg_tps", agg, "user_tps",
                      n_dec ? sum_tps / n_dec : 0, "user_tps_min", n_dec ? min_tps : 0,
                      "user_tps_max", max_tps, "ttft_ms", ok ? ttft / ok : 0, "open_ms_per_stage",
                      ok ? open / ok : 0, "failed", failed);
        json_object_set_new(o, "stagger_ms", json_integer(stagger));
        json_object_set_new(o, "chain", json_boolean(chain));
        json_object_set_new(o, "gap_p50_ms", json_real(gap_p50));
        json_object_set_new(o, "gap_p95_ms", json_real(gap_p95));
        json_object_set_new(o, "first_gap_p50_ms", json_real(first_p50));
        json_object_set_new(o, "first_gap_p95_ms", json_real(first_p95));
        json_object_set_new(o, "first_gap_max_ms", json_real(first_max));
        if (sampling) {
            json_object_set_new(o, "cpu_used", json_real(cpu_used));
            json_object_set_new(o, "busy", json_real(busy));
            json_object_set_new(o, "cpu_capacity", json_real(busy > 0 ? cpu_used / busy : 0));
            json_object_set_new(o, "cpu_samples", json_integer(n_smp));
        }
        char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
        puts(s ? s : "{}");
        free(s);
        json_decref(o);
    } else {
        printf("%d users through %d stages: aggregate %.2f tok/s, per user %.2f tok/s"
               " (%.2f-%.2f), first token %.1f ms, route open %.2f ms per stage%s\n",
               users, f.cfg.n_stages, agg, n_dec ? sum_tps / n_dec : 0, n_dec ? min_tps : 0,
               max_tps, ok ? ttft / ok : 0, ok ? open / ok : 0, failed ? " (some failed)" : "");
        printf("gaps between decode tokens: p50 %.1f ms, p95 %.1f ms; requester 0: p50 %.1f,"
               " p95 %.1f, longest %.1f ms\n",
               gap_p50, gap_p95, first_p50, first_p95, first_max);
    }
    mt_route_file_free(&f);
    return failed ? 1 : 0;
}
