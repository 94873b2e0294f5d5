/* dataplane.c - what the data plane costs: a 7168-wide hidden state (the
 * width of DeepSeek-V3 / Kimi K2) sent through pipeline stages, measured
 * against computing the same layers in this process.
 *
 *   bench_dataplane [--tokens N] [--conc-tokens N] [--rounds N] [--no-chain]
 *       nodes in this process on 127.0.0.1 (about 20-40 s on 2 cores;
 *       temporary files go to $TMPDIR or /tmp and are removed at the end);
 *   bench_dataplane --write-model FILE
 *       writes the synthetic model below and exits (to split it into shards
 *       for `moontail node` processes);
 *   bench_dataplane --model FILE --route LABEL=ROUTE.json [--route ...] [...]
 *       the same measurements through nodes started elsewhere (other
 *       processes, other network namespaces: bench/netns.sh). Each route file
 *       (route.h) is one pipeline over FILE's layers; routes with the same
 *       LABEL are one way of reaching the nodes (a column of the tables). The
 *       files' "wire" and "chain" are ignored: every wire and mode is
 *       measured.
 *
 * It prints, side by side (one column per way):
 *   1. latency per decoded token, requester -> N stages -> requester, for each
 *      N, f32 and bf16 wire, the stages called in turn by the requester
 *      ("turn") and one-way stage to stage ("chain", route.h); next to the
 *      in-process run of the same layers: the overhead per stage round trip
 *      and the bytes of one round trip (request + reply, protocol payloads
 *      plus transport framing);
 *   2. aggregate tokens/s of 1, 4 and 16 concurrent sessions (one thread and
 *      one route each) through the longest pipeline of each way, and the ratio
 *      to 1 session.
 * Every measurement is paired: each timed token goes through the route right
 * after the same token went through the same layers in this process, and all
 * routes take turns token by token, so a change in the machine's load hits
 * all of them alike. Concurrency runs take turns by round (--rounds, median).
 * No thresholds: it measures, it does not judge. With the f32 wire every
 * route's logits must equal the local ones bit for bit; a difference is
 * reported.
 *
 * The model is synthetic (llama, dense, Q8_0): n_embd 7168 but narrow
 * attention (2 heads x 64) and FFN (64), so that a layer costs little
 * compute and the transport and protocol show (the same model as
 * `moontail mkmodel --arch llama --dense --type q8_0 --layers 4 --embd 7168
 * --heads 2 --heads-kv 1 --head-dim 64 --ff 64 --seed 11`). The requester
 * computes with one thread; nodes in this process with one each. */
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
    WARM = 4, /* prompt tokens before timing starts */
    MAX_TOKENS = 200,
    NODE_CTX = 256,          /* positions per session on in-process nodes */
    MAX_WAYS = 8,            /* labels */
    MAX_ROUTES = 8,          /* route files per label */
    MAX_STAGES = 16,         /* stages per route */
    MAX_SESSIONS = 16,       /* concurrent sessions */
    FRAME_OVERHEAD = 4 + 16, /* transport: u32 length + 16-byte MAC per frame */
};

static struct {
    int tokens;      /* timed decoded tokens per latency case */
    int conc_tokens; /* decoded tokens per session in the concurrency runs */
    int rounds;      /* concurrency rounds (median) */
    bool chain;      /* also chained routes */
    const char *model, *write_model;
} opt = {48, 16, 3, true, NULL, NULL};

/* ---- helpers --------------------------------------------------------------------------- */

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

/* Median of v[0..n) (sorts v). */
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int32_t token_at(int i, int32_t n_vocab) {
    return (int32_t)((7 * i + 3) % n_vocab);
}

/* ---- the model, and nodes in this process ----------------------------------------------- */

static void write_model(const char *path) {
    mt_synth_params p = mt_synth_default_params("llama");
    p.dense = true;
    p.type = MT_TYPE_Q8_0;
    p.n_layer = N_LAYER;
    p.n_embd = N_EMBD;
    p.n_head = 2, p.n_head_kv = 1, p.head_dim = 64;
    p.n_ff = 64;
    p.seed = 11;
    mt_error err = {{0}};
    if (mt_synth_write(&p, path, &err)) die("writing the model", &err);
}

/* A scratch directory and the files in it, removed at the end. */
static char dir[512];
static char paths[16][600];
static int n_paths;

static const char *new_path(const char *name) {
    char *p = paths[n_paths++];
    snprintf(p, sizeof paths[0], "%s/%s", dir, name);
    return p;
}

static const char *write_shard(const mt_model *m, const mt_shard_layout *l, const char *source_id,
                               mt_shard_spec spec, const char *name) {
    mt_error err = {{0}};
    const char *path = new_path(name);
    if (mt_shard_write_with(m->gguf, l, source_id, &spec, path, &err)) die(name, &err);
    return path;
}

static mt_keys k_node, k_req;
static mt_keys_authorized *auth;
static mt_node *local_nodes[3][N_LAYER];

static mt_node *start_node(const char *shard) {
    mt_node_config c = {.shard_path = shard,
                        .keys = &k_node,
                        .authorized = auth,
                        .listen = "127.0.0.1:0",
                        .max_sessions = 64,
                        .n_ctx = NODE_CTX,
                        .threads = 1,
                        .quiet = true};
    mt_error err = {{0}};
    mt_node *n = mt_node_start(&c, &err);
    if (!n) die("starting a node", &err);
    return n;
}

/* ---- ways: routes to the stages --------------------------------------------------------- */

/* One pipeline: the stages' addresses and keys, the head and the requester's key. */
typedef struct route_spec {
    mt_route_config cfg;
    mt_route_peer peers[MAX_STAGES];
} route_spec;

/* One way to reach the nodes (a table column): its pipelines. */
typedef struct way {
    char label[32];
    route_spec routes[MAX_ROUTES];
    int n_routes;
} way;

static way ways[MAX_WAYS];
static int n_ways;
static mt_route_file files[MAX_WAYS * MAX_ROUTES];
static int n_files;

static way *way_named(const char *label) {
    for (int i = 0; i < n_ways; i++)
        if (strcmp(ways[i].label, label) == 0) return &ways[i];
    if (n_ways == MAX_WAYS) {
        fprintf(stderr, "bench_dataplane: at most %d labels\n", MAX_WAYS);
        exit(2);
    }
    way *w = &ways[n_ways++];
    snprintf(w->label, sizeof w->label, "%s", label);
    return w;
}

static route_spec *add_route(way *w, const mt_route_config *cfg) {
    if (w->n_routes == MAX_ROUTES || cfg->n_stages < 1 || cfg->n_stages > MAX_STAGES) {
        fprintf(stderr, "bench_dataplane: %s: at most %d routes of 1-%d stages\n", w->label,
                MAX_ROUTES, MAX_STAGES);
        exit(2);
    }
    route_spec *s = &w->routes[w->n_routes++];
    s->cfg = *cfg;
    memcpy(s->peers, cfg->stages, (size_t)cfg->n_stages * sizeof s->peers[0]);
    s->cfg.stages = s->peers;
    s->cfg.threads = 1;
    return s;
}

/* The way's route of n stages, or NULL. */
static route_spec *route_of(way *w, int n) {
    for (int i = 0; i < w->n_routes; i++)
        if (w->routes[i].cfg.n_stages == n) return &w->routes[i];
    return NULL;
}

static route_spec *longest_route(way *w) {
    route_spec *best = NULL;
    for (int i = 0; i < w->n_routes; i++)
        if (!best || w->routes[i].cfg.n_stages > best->cfg.n_stages) best = &w->routes[i];
    return best;
}

static mt_route *open_route(const route_spec *s, mt_proto_dtype wire, bool chain) {
    mt_route_config c = s->cfg;
    c.wire = wire;
    c.chain = chain;
    mt_error err = {{0}};
    mt_route *r = mt_route_open(&c, &err);
    if (!r) die("opening a route", &err);
    return r;
}

/* One way through the in-process nodes: N = 1, 2, 4 stages of the model. */
static void start_local_nodes(const mt_model *m) {
    mt_error err = {{0}};
    mt_shard_layout layout;
    char source_id[MT_SHARD_HASH_HEX];
    if (mt_shard_layout_read(m->gguf, &layout, &err) ||
        mt_shard_source_id(m->gguf, source_id, NULL, &err))
        die("layout", &err);
    const char *head = write_shard(m, &layout, source_id,
                                   (mt_shard_spec){0, 0, false, true, NULL, 0}, "head.gguf");
    way *w = way_named("in-process nodes");
    static const int n_stages[3] = {1, 2, 4};
    for (int c = 0; c < 3; c++) {
        int n = n_stages[c], per = N_LAYER / n;
        mt_route_peer peers[N_LAYER];
        for (int i = 0; i < n; i++) {
            char name[64];
            snprintf(name, sizeof name, "stage-%dof%d.gguf", i, n);
            const char *p =
                write_shard(m, &layout, source_id,
                            (mt_shard_spec){i * per, (i + 1) * per, true, false, NULL, -1}, name);
            local_nodes[c][i] = start_node(p);
            memset(&peers[i], 0, sizeof peers[i]);
            snprintf(peers[i].addr, sizeof peers[i].addr, "%s", mt_node_addr(local_nodes[c][i]));
            memcpy(peers[i].pk, k_node.pk, sizeof peers[i].pk);
        }
        mt_route_config cfg = {.head = head, .keys = &k_req, .stages = peers, .n_stages = n};
        add_route(w, &cfg);
    }
    mt_shard_layout_free(&layout);
}

/* Loads "LABEL=FILE" as a route of way LABEL. */
static void load_route_arg(const char *arg) {
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg || eq - arg >= 32 || n_files == MAX_WAYS * MAX_ROUTES) {
        fprintf(stderr, "bench_dataplane: --route takes LABEL=FILE (label < 32 chars), not '%s'\n",
                arg);
        exit(2);
    }
    char label[32];
    snprintf(label, sizeof label, "%.*s", (int)(eq - arg), arg);
    mt_error err = {{0}};
    mt_route_file *f = &files[n_files++];
    if (mt_route_file_load(eq + 1, f, &err)) die(eq + 1, &err);
    if (f->cfg.backbone || f->cfg.n_experts) {
        fprintf(stderr, "bench_dataplane: %s: only pipelines of stages are measured\n", eq + 1);
        exit(2);
    }
    add_route(way_named(label), &f->cfg);
}

/* ---- bytes on the wire ------------------------------------------------------------------- */

static size_t encoded_bytes(const mt_proto_msg *m) {
    uint8_t *buf = NULL;
    size_t n = 0;
    mt_error err = {{0}};
    if (mt_proto_encode(m, &buf, &n, &err)) die("encoding", &err);
    free(buf);
    return n + FRAME_OVERHEAD;
}

/* Bytes of one stage round trip for one token, averaged over the pass:
 * turn: STAGE_FORWARD + STAGE_REPLY payloads as encoded, per stage; chain
 * (one-way passes): each stage's one-way STAGE_FORWARD (with the later hops
 * and the origin block) plus, once, the STAGE_AWAIT and the last stage's
 * STAGE_REPLY; plus the transport's framing of each message. */
static size_t round_trip_bytes(const route_spec *s, mt_proto_dtype wire, bool chain) {
    static float rows[N_EMBD];
    static mt_proto_hop hops[MAX_STAGES];
    int32_t pos = 0;
    const int n = s->cfg.n_stages;
    size_t total = 0;
    mt_proto_msg rep = {.type = MT_PROTO_STAGE_REPLY,
                        .request_id = 1,
                        .dtype = wire,
                        .n = 1,
                        .cols = N_EMBD,
                        .rows = rows};
    for (int k = 0; k < n; k++) {
        int n_hops = chain ? n - 1 - k : 0;
        for (int h = 0; h < n_hops; h++) {
            snprintf(hops[h].addr, sizeof hops[h].addr, "%s", s->peers[k + 1 + h].addr);
            hops[h].layer_begin = k + 1 + h, hops[h].layer_end = k + 2 + h;
        }
        mt_proto_msg req = {.type = MT_PROTO_STAGE_FORWARD,
                            .request_id = 1,
                            .session = 1,
                            .dtype = wire,
                            .n = 1,
                            .cols = N_EMBD,
                            .layer_begin = k,
                            .layer_end = k + 1,
                            .pos = &pos,
                            .n_hops = n_hops,
                            .hops = n_hops ? hops : NULL,
                            .oneway = chain,
                            .origin = {.pass_id = 1, .pass_end = 1},
                            .rows = rows};
        total += encoded_bytes(&req) + (chain ? 0 : encoded_bytes(&rep));
    }
    if (chain) {
        mt_proto_msg await = {.type = MT_PROTO_STAGE_AWAIT,
                              .request_id = 1,
                              .session = 1,
                              .origin = {.pass_id = 1, .pass_end = 1}};
        total += encoded_bytes(&await) + encoded_bytes(&rep);
    }
    return total / (size_t)n;
}

/* ---- 1. latency per token --------------------------------------------------------------- */

/* One route measured token by token against the same layers in this process. */
typedef struct lat_case {
    way *w;
    route_spec *s;
    mt_proto_dtype wire;
    bool chain;
    mt_route *r;
    mt_route_session *rs;
    mt_session *ls;
    double route_ms[MAX_TOKENS], local_ms[MAX_TOKENS];
    int mismatches; /* f32: tokens whose logits differ from the local ones */
} lat_case;

static lat_case *cases;
static int n_cases;

/* Cases in table order: N ascending, then wire, then turn before chain; each
 * row has one case per way that has a route of N stages. */
static void make_cases(void) {
    int ns[MAX_ROUTES * MAX_WAYS], n_ns = 0;
    for (int w = 0; w < n_ways; w++)
        for (int i = 0; i < ways[w].n_routes; i++) {
            int n = ways[w].routes[i].cfg.n_stages, k = 0;
            while (k < n_ns && ns[k] != n) k++;
            if (k == n_ns) ns[n_ns++] = n;
        }
    for (int i = 1; i < n_ns; i++) /* insertion sort: a handful */
        for (int k = i; k > 0 && ns[k - 1] > ns[k]; k--) {
            int t = ns[k];
            ns[k] = ns[k - 1], ns[k - 1] = t;
        }
    static const mt_proto_dtype wires[2] = {MT_PROTO_F32, MT_PROTO_BF16};
    cases = calloc((size_t)(n_ns * 4 * n_ways), sizeof *cases);
    if (!cases) die("memory", NULL);
    for (int i = 0; i < n_ns; i++)
        for (int wi = 0; wi < 2; wi++)
            for (int chain = 0; chain < (opt.chain && ns[i] > 1 ? 2 : 1); chain++)
                for (int w = 0; w < n_ways; w++) {
                    route_spec *s = route_of(&ways[w], ns[i]);
                    if (s)
                        cases[n_cases++] =
                            (lat_case){.w = &ways[w], .s = s, .wire = wires[wi], .chain = chain};
                }
}

/* Refuses a route whose head comes from another model than m (source_id). */
static void check_same_model(const mt_model *m, mt_route *r, const char *label) {
    static char want[MT_SHARD_HASH_HEX];
    mt_error err = {{0}};
    if (!*want && mt_shard_source_id(m->gguf, want, NULL, &err)) die("model source id", &err);
    mt_shard_info info;
    if (mt_shard_info_read(mt_route_head(r)->gguf, &info, &err)) die(label, &err);
    bool same = strcmp(info.source_id, want) == 0;
    mt_shard_info_free(&info);
    if (!same) {
        fprintf(stderr, "bench_dataplane: %s: the route's head is not a shard of --model\n", label);
        exit(1);
    }
}

static void measure_latency(const mt_model *m) {
    mt_error err = {{0}};
    const int32_t V = m->hp.n_vocab, n_ctx = WARM + opt.tokens + 1;
    float *logits = malloc((size_t)V * sizeof(float)), *local = malloc((size_t)V * sizeof(float));
    if (!logits || !local) die("memory", NULL);
    int32_t warm[WARM];
    for (int i = 0; i < WARM; i++) warm[i] = token_at(i, V);
    for (int c = 0; c < n_cases; c++) {
        lat_case *k = &cases[c];
        k->r = open_route(k->s, k->wire, k->chain);
        if (opt.model) check_same_model(m, k->r, k->w->label);
        if (!(k->ls = mt_session_new(m, n_ctx, MT_KV_DEFAULT, 1, &err))) die("local session", &err);
        if (!(k->rs = mt_route_session_new(k->r, n_ctx, &err))) die("route session", &err);
        if (mt_session_eval(k->ls, warm, WARM, 0, false, local, &err)) die("local eval", &err);
        if (mt_route_eval(k->r, k->rs, warm, WARM, false, logits, &err)) die("route eval", &err);
    }
    for (int i = 0; i < opt.tokens; i++) {
        int32_t tok = token_at(WARM + i, V);
        for (int c = 0; c < n_cases; c++) {
            lat_case *k = &cases[c];
            double t0 = now_ms();
            if (mt_session_eval(k->ls, &tok, 1, 0, false, local, &err)) die("local eval", &err);
            double t1 = now_ms();
            if (mt_route_eval(k->r, k->rs, &tok, 1, false, logits, &err)) die("route eval", &err);
            k->route_ms[i] = now_ms() - t1;
            k->local_ms[i] = t1 - t0;
            if (k->wire == MT_PROTO_F32 && memcmp(local, logits, (size_t)V * sizeof(float)))
                k->mismatches++;
        }
    }
    for (int c = 0; c < n_cases; c++) {
        mt_route_session_end(cases[c].r, cases[c].rs);
        mt_route_close(cases[c].r);
        mt_session_free(cases[c].ls);
    }
    free(logits);
    free(local);
}

static void print_latency(void) {
    printf("%-24s %8s", "", "");
    for (int w = 0; w < n_ways; w++) printf(" | %-27.27s", ways[w].label);
    printf(" |\n%-24s %8s", "stages, wire, mode", "inproc");
    for (int w = 0; w < n_ways; w++) printf(" | %8s %6s %11s", "ms/tok", "x loc", "us/trip");
    printf(" | %10s\n", "bytes/trip");
    for (int c = 0; c < n_cases;) {
        /* one row: the cases of this N, wire and mode */
        int end = c;
        const int n = cases[c].s->cfg.n_stages;
        while (end < n_cases && cases[end].s->cfg.n_stages == n &&
               cases[end].wire == cases[c].wire && cases[end].chain == cases[c].chain)
            end++;
        double all_local[MAX_WAYS * MAX_TOKENS], v[MAX_TOKENS];
        int n_local = 0;
        for (int k = c; k < end; k++)
            for (int i = 0; i < opt.tokens; i++) all_local[n_local++] = cases[k].local_ms[i];
        char name[64];
        snprintf(name, sizeof name, "%d stage%s, %s, %s", n, n > 1 ? "s" : "",
                 mt_proto_dtype_name(cases[c].wire), cases[c].chain ? "chain" : "turn");
        printf("%-24s %8.3f", name, median(all_local, n_local));
        for (int w = 0; w < n_ways; w++) {
            const lat_case *k = NULL;
            for (int j = c; j < end; j++)
                if (cases[j].w == &ways[w]) k = &cases[j];
            if (!k) {
                printf(" | %8s %6s %11s", "-", "-", "-");
                continue;
            }
            for (int i = 0; i < opt.tokens; i++) v[i] = k->route_ms[i];
            double ms = median(v, opt.tokens);
            for (int i = 0; i < opt.tokens; i++) v[i] = k->route_ms[i] / k->local_ms[i];
            double x = median(v, opt.tokens);
            for (int i = 0; i < opt.tokens; i++) v[i] = k->route_ms[i] - k->local_ms[i];
            double us = median(v, opt.tokens) * 1e3 / n;
            printf(" | %8.3f %6.2f %11.1f", ms, x, us);
        }
        printf(" | %10zu\n", round_trip_bytes(cases[c].s, cases[c].wire, cases[c].chain));
        c = end;
    }
    printf(
        "(median of %d tokens each. inproc: ms/token of the same layers + head in this"
        " process, 1 thread;\n x loc: route / in-process, per token; us/trip: (route -"
        " in-process) / N per token: network,\n transport, protocol and hand-offs per stage"
        " round trip. turn: the requester calls each stage;\n chain: one-way, stage to stage,"
        " the last stage answers the requester. bytes/trip: request + reply\n payloads and framing,"
        " per stage, hop lists included)\n",
        opt.tokens);
    for (int c = 0; c < n_cases; c++)
        if (cases[c].mismatches)
            printf("NOTE: %s, %d stages, f32 %s: logits differ from the local run on %d of %d"
                   " tokens\n",
                   cases[c].w->label, cases[c].s->cfg.n_stages, cases[c].chain ? "chain" : "turn",
                   cases[c].mismatches, opt.tokens);
}

/* ---- 2. concurrent sessions ------------------------------------------------------------- */

typedef struct conc_job {
    mt_route *r;
    pthread_barrier_t *go;
    double t_start, t_end;
} conc_job;

static void *conc_main(void *arg) {
    conc_job *j = arg;
    mt_error err = {{0}};
    mt_route_session *s = mt_route_session_new(j->r, opt.conc_tokens + 1, &err);
    if (!s) die("route session", &err);
    const int32_t V = mt_route_head(j->r)->hp.n_vocab;
    float *logits = malloc((size_t)V * sizeof(float));
    int32_t tok = token_at(0, V);
    if (mt_route_eval(j->r, s, &tok, 1, false, logits, &err)) die("route eval", &err);
    pthread_barrier_wait(j->go);
    j->t_start = now_ms();
    for (int i = 0; i < opt.conc_tokens; i++) {
        tok = token_at(1 + i, V);
        if (mt_route_eval(j->r, s, &tok, 1, false, logits, &err)) die("route eval", &err);
    }
    j->t_end = now_ms();
    free(logits);
    mt_route_session_end(j->r, s);
    return NULL;
}

/* Aggregate decoded tokens/s of n_sessions sessions at once, f32 wire. */
static double concurrent_tps(const route_spec *rs, bool chain, int n_sessions) {
    conc_job jobs[MAX_SESSIONS];
    pthread_t th[MAX_SESSIONS];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, (unsigned)n_sessions);
    for (int i = 0; i < n_sessions; i++) {
        jobs[i] = (conc_job){open_route(rs, MT_PROTO_F32, chain), &go, 0, 0};
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
    return n_sessions * opt.conc_tokens / ((t1 - t0) / 1e3);
}

static void measure_concurrency(void) {
    static const int conc[3] = {1, 4, MAX_SESSIONS};
    enum { MAX_ROUNDS = 16 };
    static double tps[MAX_WAYS][2][3][MAX_ROUNDS];
    const int modes = opt.chain ? 2 : 1;
    for (int r = 0; r < opt.rounds; r++)
        for (int i = 0; i < 3; i++)
            for (int chain = 0; chain < modes; chain++)
                for (int w = 0; w < n_ways; w++)
                    tps[w][chain][i][r] = concurrent_tps(longest_route(&ways[w]), chain, conc[i]);

    printf("%-24s", "");
    for (int w = 0; w < n_ways; w++) printf(" | %-19.19s", ways[w].label);
    printf(" |\n%-24s", "f32 wire, longest route");
    for (int w = 0; w < n_ways; w++) printf(" | %9s %9s", "tokens/s", "x 1 sess");
    printf(" |\n");
    for (int chain = 0; chain < modes; chain++)
        for (int i = 0; i < 3; i++) {
            char name[64];
            snprintf(name, sizeof name, "%d session%s, %s", conc[i], conc[i] > 1 ? "s" : "",
                     chain ? "chain" : "turn");
            printf("%-24s", name);
            for (int w = 0; w < n_ways; w++) {
                double base = median(tps[w][chain][0], opt.rounds);
                double t = median(tps[w][chain][i], opt.rounds);
                printf(" | %9.1f %9.2f", t, t / base);
            }
            printf(" |\n");
        }
    printf("(median of %d rounds; each session decodes %d tokens on its own thread and route;"
           " stages:",
           opt.rounds, opt.conc_tokens);
    for (int w = 0; w < n_ways; w++)
        printf("%s %d", w ? "," : "", longest_route(&ways[w])->cfg.n_stages);
    printf(")\n");
}

/* ---- main ------------------------------------------------------------------------------ */

static void usage(const char *msg) {
    fprintf(stderr,
            "bench_dataplane: %s\n"
            "usage: bench_dataplane [--tokens N] [--conc-tokens N] [--rounds N] [--no-chain]\n"
            "       bench_dataplane --write-model FILE\n"
            "       bench_dataplane --model FILE --route LABEL=ROUTE.json [--route ...] [...]\n"
            "(see the top of bench/dataplane.c)\n",
            msg);
    exit(2);
}

static int int_arg(const char *what, const char *v, int lo, int hi) {
    char *end = NULL;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || x < lo || x > hi) {
        char msg[128];
        snprintf(msg, sizeof msg, "%s takes a number in [%d, %d]", what, lo, hi);
        usage(msg);
    }
    return (int)x;
}

int main(int argc, char **argv) {
    const char *route_args[MAX_WAYS * MAX_ROUTES];
    int n_route_args = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) usage("the data plane's cost");
        if (strcmp(a, "--no-chain") == 0) {
            opt.chain = false;
            continue;
        }
        if (!v) usage("an option lacks its value");
        i++;
        if (strcmp(a, "--tokens") == 0)
            opt.tokens = int_arg(a, v, 1, MAX_TOKENS);
        else if (strcmp(a, "--conc-tokens") == 0)
            opt.conc_tokens = int_arg(a, v, 1, 1000);
        else if (strcmp(a, "--rounds") == 0)
            opt.rounds = int_arg(a, v, 1, 16);
        else if (strcmp(a, "--write-model") == 0)
            opt.write_model = v;
        else if (strcmp(a, "--model") == 0)
            opt.model = v;
        else if (strcmp(a, "--route") == 0 && n_route_args < MAX_WAYS * MAX_ROUTES)
            route_args[n_route_args++] = v;
        else
            usage("unknown option, or too many routes");
    }
    if (opt.write_model) {
        write_model(opt.write_model);
        return 0;
    }
    if (!opt.model != !n_route_args) usage("--model and --route go together");

    mt_error err = {{0}};
    double t_setup = now_ms();
    mt_model *m;
    if (opt.model) { /* external nodes */
        if (!(m = mt_model_load(opt.model, &err))) die(opt.model, &err);
        for (int i = 0; i < n_route_args; i++) load_route_arg(route_args[i]);
    } else { /* nodes in this process */
        const char *env = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/moontail-bench-XXXXXX", env && *env ? env : "/tmp");
        if (!mkdtemp(dir)) die("creating a temporary directory", NULL);
        if (mt_keys_generate(&k_node, &err) || mt_keys_generate(&k_req, &err)) die("keys", &err);
        /* the nodes' own key too: chained stages call each other */
        if (!(auth = mt_keys_authorized_new()) ||
            mt_keys_authorized_add(auth, k_req.pk, "requester", &err) ||
            mt_keys_authorized_add(auth, k_node.pk, "node", &err))
            die("authorized keys", &err);
        const char *path = new_path("model.gguf");
        write_model(path);
        if (!(m = mt_model_load(path, &err))) die("loading the model", &err);
        start_local_nodes(m);
    }
    printf("bench_dataplane: llama dense Q8_0, n_embd %d, %d layers (2 heads x 64, ff 64),"
           " vocab %d; setup %.1f s\n",
           (int)m->hp.n_embd, (int)m->hp.n_layer, (int)m->hp.n_vocab, (now_ms() - t_setup) / 1e3);
    printf("one token per pass; the requester computes with 1 thread; %s\n\n",
           opt.model ? "nodes are other processes" : "nodes share this process (1 thread each)");

    make_cases();
    measure_latency(m);
    print_latency();
    printf("\n");
    measure_concurrency();
    if (!opt.model) {
        mt_node_stats st;
        mt_node_get_stats(local_nodes[2][0], &st);
        printf("(stage 0 of 4: %llu steps, at most %d sessions batched in one forward)\n",
               (unsigned long long)st.steps, (int)st.max_stage_requests);
    }

    for (int c = 0; c < 3; c++)
        for (int i = 0; i < N_LAYER; i++)
            if (local_nodes[c][i]) mt_node_stop(local_nodes[c][i]);
    for (int i = 0; i < n_files; i++) mt_route_file_free(&files[i]);
    free(cases);
    mt_model_free(m);
    mt_keys_authorized_free(auth);
    mt_keys_wipe(&k_node);
    mt_keys_wipe(&k_req);
    for (int i = 0; i < n_paths; i++) unlink(paths[i]);
    if (*dir) rmdir(dir);
    return 0;
}
