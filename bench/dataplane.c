/* dataplane.c - what the data plane costs: a 7168-wide hidden state (the
 * width of DeepSeek-V3 / Kimi K2) sent through pipeline stages on loopback,
 * measured against computing the same layers in this process.
 *
 * Run it with
 *     cmake --build build --target bench_dataplane && build/bench_dataplane
 * (about 10-30 s on 2 cores; temporary files go to $TMPDIR or /tmp and are
 * removed at the end). It prints, side by side:
 *   1. latency per decoded token, requester -> N stages -> requester
 *      (N = 1, 2, 4; f32 and bf16 wire) next to the in-process run of the
 *      same 4 layers, the overhead per stage round trip and the bytes of one
 *      round trip (request + reply, protocol payloads plus transport framing);
 *   2. aggregate tokens/s of 1, 4 and 16 concurrent sessions (one thread and
 *      one route each) through a 4-stage pipeline, and the ratio to 1 session.
 * No thresholds: it measures, it does not judge.
 *
 * The model is synthetic (llama, dense, Q8_0): n_embd 7168 but narrow
 * attention (2 heads x 64) and FFN (64), so that a layer costs little
 * compute and the transport and protocol show. Everything (requester and
 * nodes) runs in this one process on 127.0.0.1, each node with one compute
 * thread, the requester with one. The route executor visits the stages in
 * turn, so a pass over N stages is N round trips from the requester. */
#include "moontail/node.h"
#include "moontail/proto.h"
#include "moontail/route.h"
#include "moontail/session.h"
#include "moontail/shard.h"
#include "moontail/synth_model.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum {
    N_LAYER = 4,
    N_EMBD = 7168,
    WARM = 4,         /* prompt tokens before timing starts */
    DECODE = 48,      /* decoded tokens timed per latency configuration */
    CONC_DECODE = 16, /* decoded tokens per session in the concurrency runs */
    N_CTX = 64,
    FRAME_OVERHEAD = 4 + 16, /* transport: u32 length + 16-byte MAC per frame */
};

static mt_keys k_node, k_req;
static mt_keys_authorized *auth;
static char dir[512];
static char paths[16][600];
static int n_paths;

static void die(const char *what, const mt_error *err) {
    fprintf(stderr, "bench_dataplane: %s: %s\n", what, err ? err->msg : strerror(errno));
    exit(1);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static const char *new_path(const char *name) {
    char *p = paths[n_paths++];
    size_t k = strlen(dir);
    memcpy(p, dir, k);
    snprintf(p + k, sizeof paths[0] - k, "/%s", name);
    return p;
}

static int32_t token_at(int i, int32_t n_vocab) {
    return (int32_t)((7 * i + 3) % n_vocab);
}

/* ---- setup: model, shards, nodes ----------------------------------------------------- */

static mt_model *make_model(void) {
    mt_synth_params p = mt_synth_default_params("llama");
    p.dense = true;
    p.type = MT_TYPE_Q8_0;
    p.n_layer = N_LAYER;
    p.n_embd = N_EMBD;
    p.n_head = 2, p.n_head_kv = 1, p.head_dim = 64;
    p.n_ff = 64;
    p.seed = 11;
    mt_error err = {{0}};
    const char *path = new_path("model.gguf");
    if (mt_synth_write(&p, path, &err)) die("writing the model", &err);
    mt_model *m = mt_model_load(path, &err);
    if (!m) die("loading the model", &err);
    return m;
}

static const char *write_shard(const mt_model *m, const mt_shard_layout *l, const char *source_id,
                               mt_shard_spec spec, const char *name) {
    mt_error err = {{0}};
    const char *path = new_path(name);
    if (mt_shard_write_with(m->gguf, l, source_id, &spec, path, &err)) die(name, &err);
    return path;
}

static mt_node *start_node(const char *shard) {
    mt_node_config c = {.shard_path = shard,
                        .keys = &k_node,
                        .authorized = auth,
                        .listen = "127.0.0.1:0",
                        .max_sessions = 64,
                        .n_ctx = N_CTX,
                        .threads = 1,
                        .quiet = true};
    mt_error err = {{0}};
    mt_node *n = mt_node_start(&c, &err);
    if (!n) die("starting a node", &err);
    return n;
}

static mt_route *open_route(const char *head, mt_node *const *nodes, int n, mt_proto_dtype wire) {
    mt_route_peer peers[N_LAYER];
    for (int i = 0; i < n; i++) {
        memset(&peers[i], 0, sizeof peers[i]);
        snprintf(peers[i].addr, sizeof peers[i].addr, "%s", mt_node_addr(nodes[i]));
        memcpy(peers[i].pk, k_node.pk, sizeof peers[i].pk);
    }
    mt_route_config c = {
        .head = head, .wire = wire, .keys = &k_req, .stages = peers, .n_stages = n, .threads = 1};
    mt_error err = {{0}};
    mt_route *r = mt_route_open(&c, &err);
    if (!r) die("opening a route", &err);
    return r;
}

/* Bytes of one stage round trip for one token: STAGE_FORWARD + STAGE_REPLY
 * payloads as encoded, plus the transport's framing of each. */
static size_t round_trip_bytes(mt_proto_dtype wire) {
    static float rows[N_EMBD];
    int32_t pos = 0;
    mt_proto_msg req = {.type = MT_PROTO_STAGE_FORWARD,
                        .request_id = 1,
                        .session = 1,
                        .dtype = wire,
                        .n = 1,
                        .layer_begin = 0,
                        .layer_end = 1,
                        .pos = &pos,
                        .rows = rows};
    mt_proto_msg rep = {
        .type = MT_PROTO_STAGE_REPLY, .request_id = 1, .dtype = wire, .n = 1, .rows = rows};
    uint8_t *buf = NULL;
    size_t a = 0, b = 0;
    mt_error err = {{0}};
    if (mt_proto_encode(&req, N_EMBD, &buf, &a, &err)) die("encoding", &err);
    free(buf);
    if (mt_proto_encode(&rep, N_EMBD, &buf, &b, &err)) die("encoding", &err);
    free(buf);
    return a + b + 2 * FRAME_OVERHEAD;
}

/* ---- 1. latency per token ----------------------------------------------------------- */

/* Median ms per decoded token in this process (threads 1, *local) and
 * through route r (*remote), one token of each in turn so that a change in
 * the machine's load hits both alike. */
static void ms_per_token(const mt_model *m, mt_route *r, double *local, double *remote) {
    mt_error err = {{0}};
    mt_session *ls = mt_session_new(m, N_CTX, 1, &err);
    if (!ls) die("local session", &err);
    mt_route_session *rs = mt_route_session_new(r, N_CTX, &err);
    if (!rs) die("route session", &err);
    const int32_t V = m->hp.n_vocab;
    float *logits = malloc((size_t)V * sizeof(float));
    int32_t warm[WARM];
    for (int i = 0; i < WARM; i++) warm[i] = token_at(i, V);
    if (mt_session_eval(ls, warm, WARM, 0, false, logits, &err)) die("local eval", &err);
    if (mt_route_eval(r, rs, warm, WARM, false, logits, &err)) die("route eval", &err);
    double tl[DECODE], tr[DECODE];
    for (int i = 0; i < DECODE; i++) {
        int32_t tok = token_at(WARM + i, V);
        double t0 = now_ms();
        if (mt_session_eval(ls, &tok, 1, 0, false, logits, &err)) die("local eval", &err);
        double t1 = now_ms();
        if (mt_route_eval(r, rs, &tok, 1, false, logits, &err)) die("route eval", &err);
        tl[i] = t1 - t0;
        tr[i] = now_ms() - t1;
    }
    free(logits);
    mt_route_session_end(r, rs);
    mt_session_free(ls);
    *local = median(tl, DECODE);
    *remote = median(tr, DECODE);
}

/* ---- 2. concurrent sessions ------------------------------------------------------------ */

typedef struct conc_job {
    const char *head;
    mt_node *const *nodes;
    mt_route *r;
    pthread_barrier_t *go;
    double t_start, t_end;
} conc_job;

static void *conc_main(void *arg) {
    conc_job *j = arg;
    mt_error err = {{0}};
    mt_route_session *s = mt_route_session_new(j->r, N_CTX, &err);
    if (!s) die("route session", &err);
    const int32_t V = mt_route_head(j->r)->hp.n_vocab;
    float *logits = malloc((size_t)V * sizeof(float));
    int32_t tok = token_at(0, V);
    if (mt_route_eval(j->r, s, &tok, 1, false, logits, &err)) die("route eval", &err);
    pthread_barrier_wait(j->go);
    j->t_start = now_ms();
    for (int i = 0; i < CONC_DECODE; i++) {
        tok = token_at(1 + i, V);
        if (mt_route_eval(j->r, s, &tok, 1, false, logits, &err)) die("route eval", &err);
    }
    j->t_end = now_ms();
    free(logits);
    mt_route_session_end(j->r, s);
    return NULL;
}

/* Aggregate decoded tokens/s of n_sessions sessions at once. */
static double concurrent_tps(const char *head, mt_node *const *nodes, int n_sessions) {
    conc_job jobs[16];
    pthread_t th[16];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, (unsigned)n_sessions);
    for (int i = 0; i < n_sessions; i++) {
        jobs[i] =
            (conc_job){head, nodes, open_route(head, nodes, N_LAYER, MT_PROTO_F32), &go, 0, 0};
        pthread_create(&th[i], NULL, conc_main, &jobs[i]);
    }
    double t0 = 1e300, t1 = 0;
    for (int i = 0; i < n_sessions; i++) {
        pthread_join(th[i], NULL);
        if (jobs[i].t_start < t0) t0 = jobs[i].t_start;
        if (jobs[i].t_end > t1) t1 = jobs[i].t_end;
        mt_route_close(jobs[i].r);
    }
    pthread_barrier_destroy(&go);
    return n_sessions * CONC_DECODE / ((t1 - t0) / 1e3);
}

/* ---- main ------------------------------------------------------------------------------ */

int main(void) {
    const char *env = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/moontail-bench-XXXXXX", env && *env ? env : "/tmp");
    if (!mkdtemp(dir)) die("creating a temporary directory", NULL);
    mt_error err = {{0}};
    if (mt_keys_generate(&k_node, &err) || mt_keys_generate(&k_req, &err)) die("keys", &err);
    if (!(auth = mt_keys_authorized_new()) ||
        mt_keys_authorized_add(auth, k_req.pk, "requester", &err))
        die("authorized keys", &err);

    double t_setup = now_ms();
    mt_model *m = make_model();
    mt_shard_layout layout;
    char source_id[MT_SHARD_HASH_HEX];
    if (mt_shard_layout_read(m->gguf, &layout, &err) ||
        mt_shard_source_id(m->gguf, source_id, NULL, &err))
        die("layout", &err);
    const char *head = write_shard(m, &layout, source_id,
                                   (mt_shard_spec){0, 0, false, true, NULL, 0}, "head.gguf");
    /* stage shards and nodes for N = 1, 2, 4 */
    static const int n_stages[3] = {1, 2, 4};
    mt_node *nodes[3][N_LAYER] = {{NULL}};
    for (int c = 0; c < 3; c++) {
        int n = n_stages[c], per = N_LAYER / n;
        for (int i = 0; i < n; i++) {
            char name[64];
            snprintf(name, sizeof name, "stage-%dof%d.gguf", i, n);
            const char *p =
                write_shard(m, &layout, source_id,
                            (mt_shard_spec){i * per, (i + 1) * per, true, false, NULL, -1}, name);
            nodes[c][i] = start_node(p);
        }
    }
    mt_shard_layout_free(&layout);
    printf("bench_dataplane: llama dense Q8_0, n_embd %d, %d layers (2 heads x 64, ff 64),"
           " vocab %d; setup %.1f s\n",
           N_EMBD, N_LAYER, (int)m->hp.n_vocab, (now_ms() - t_setup) / 1e3);
    printf("one token per pass, median of %d tokens; requester and nodes share this process"
           " (1 compute thread each)\n\n",
           DECODE);

    /* 1. latency */
    printf("%-22s %9s %10s %8s %14s %11s\n", "path", "ms/token", "in-proc ms", "x local",
           "us/stage trip", "bytes/trip");
    static const mt_proto_dtype wires[2] = {MT_PROTO_F32, MT_PROTO_BF16};
    for (int w = 0; w < 2; w++)
        for (int c = 0; c < 3; c++) {
            mt_route *r = open_route(head, nodes[c], n_stages[c], wires[w]);
            double local, t;
            ms_per_token(m, r, &local, &t);
            mt_route_close(r);
            char name[64];
            snprintf(name, sizeof name, "%d stage%s, %s wire", n_stages[c],
                     n_stages[c] > 1 ? "s" : "", mt_proto_dtype_name(wires[w]));
            printf("%-22s %9.3f %10.3f %8.2f %14.1f %11zu\n", name, t, local, t / local,
                   (t - local) * 1e3 / n_stages[c], round_trip_bytes(wires[w]));
        }
    printf("(in-proc ms: the same 4 layers + head in this process, timed in turn with the"
           " route;\n us/stage trip = (route - in-process) / N: transport, protocol and hand-offs"
           " per stage)\n\n");

    /* 2. concurrency through 4 stages */
    static const int conc[3] = {1, 4, 16};
    double base = 0;
    printf("%-24s %12s %10s\n", "4 stages, f32 wire", "tokens/s", "x 1 sess.");
    for (int i = 0; i < 3; i++) {
        double tps = concurrent_tps(head, nodes[2], conc[i]);
        if (i == 0) base = tps;
        char name[64];
        snprintf(name, sizeof name, "%d concurrent session%s", conc[i], conc[i] > 1 ? "s" : "");
        printf("%-24s %12.1f %10.2f\n", name, tps, tps / base);
    }
    mt_node_stats st;
    mt_node_get_stats(nodes[2][0], &st);
    printf("(stage 0: %llu steps, at most %d sessions batched in one forward)\n",
           (unsigned long long)st.steps, (int)st.max_stage_requests);

    for (int c = 0; c < 3; c++)
        for (int i = 0; i < n_stages[c]; i++) mt_node_stop(nodes[c][i]);
    mt_model_free(m);
    mt_keys_authorized_free(auth);
    mt_keys_wipe(&k_node);
    mt_keys_wipe(&k_req);
    for (int i = 0; i < n_paths; i++) unlink(paths[i]);
    rmdir(dir);
    return 0;
}
