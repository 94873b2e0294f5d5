/* selfcheck.c - the library half of `moontail check` (see selfcheck.h): cuts
 * a model into shards in a temporary directory, serves them from nodes in
 * this process on 127.0.0.1, runs a prompt through a two-stage pipeline, a
 * chained pipeline cut where the model is hardest to cut, a backbone +
 * expert server and a paired stage, and compares the logits bit for bit
 * with a local run of the whole model. */
#include "moontail/selfcheck.h"

#include "moontail/node.h"
#include "moontail/route.h"
#include "moontail/session.h"
#include "moontail/shard.h"
#include "moontail/file.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the scratch directory ----------------------------------------------------------- */

enum { MAX_FILES = 16, MAX_CUTS = 3 };

typedef struct scratch {
    char dir[512];
    char files[MAX_FILES][600];
    int n_files;
} scratch;

static int scratch_open(scratch *s, const char *tmp_dir, mt_error *err) {
    memset(s, 0, sizeof *s);
    if (mt_dir_temp(tmp_dir, "moontail-check", s->dir, sizeof s->dir) != 0)
        return mt_error_set(err, "cannot create a temporary directory in %s: %s",
                            tmp_dir ? tmp_dir : "the temporary directory", strerror(errno));
    return 0;
}

/* The path of a new file `name` in the directory, remembered for cleanup. */
static const char *scratch_file(scratch *s, const char *name) {
    char *p = s->files[s->n_files++];
    size_t k = strlen(s->dir); /* < sizeof s->dir < sizeof s->files[0] */
    memcpy(p, s->dir, k);
    snprintf(p + k, sizeof s->files[0] - k, "/%s", name);
    return p;
}

static void scratch_close(scratch *s) {
    for (int i = 0; i < s->n_files; i++) mt_file_remove(s->files[i]);
    if (s->dir[0]) mt_dir_remove(s->dir);
}

/* ---- comparing logits ------------------------------------------------------------------ */

static void compare(mt_selfcheck_case *c, const float *got, const float *ref, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        if (!(d <= worst)) worst = d; /* a NaN shows up as NaN */
    }
    c->max_diff = worst;
    c->status =
        memcmp(got, ref, n * sizeof(float)) == 0 ? MT_SELFCHECK_IDENTICAL : MT_SELFCHECK_DIFFERENT;
}

static void fail(mt_selfcheck_case *c, const char *what, const mt_error *e) {
    c->status = MT_SELFCHECK_FAILED;
    snprintf(c->why, sizeof c->why, "%s: %s", what, e->msg);
}

/* ---- one case ------------------------------------------------------------------------- */

typedef struct check_ctx {
    const mt_model *m;
    const int32_t *prompt;
    int32_t n;
    int threads;
    const float *ref; /* (n, n_vocab) */
    mt_keys node_keys, req_keys;
    mt_keys_authorized *auth; /* the requester */
} check_ctx;

static mt_node *start_node(check_ctx *x, const char *shard, const mt_node_partner *partners,
                           int n_partners, mt_error *err) {
    mt_node_config c = {.shard_path = shard,
                        .partners = partners,
                        .n_partners = n_partners,
                        .keys = &x->node_keys,
                        .authorized = x->auth,
                        .listen = "127.0.0.1:0",
                        .max_sessions = 4,
                        .n_ctx = x->n,
                        .threads = x->threads,
                        .timeout_ms = 10000,
                        .quiet = true};
    return mt_node_start(&c, err);
}

static mt_route_peer peer_of(const check_ctx *x, const mt_node *n) {
    mt_route_peer p;
    memset(&p, 0, sizeof p);
    snprintf(p.addr, sizeof p.addr, "%s", mt_node_addr(n));
    memcpy(p.pk, x->node_keys.pk, sizeof p.pk);
    return p;
}

/* Opens the route, evaluates the prompt (all but the last token in one
 * pass, then the last one alone, so that the nodes' session caches are
 * used) and compares every position's logits with the reference. */
static void run_route(check_ctx *x, mt_selfcheck_case *c, const char *head, const char *backbone,
                      const mt_route_peer *stages, int n_stages, bool chain,
                      const mt_route_peer *experts, int n_experts) {
    mt_route_config rc = {.head = head,
                          .chain = chain,
                          .backbone = backbone,
                          .wire = MT_PROTO_F32,
                          .keys = &x->req_keys,
                          .stages = stages,
                          .n_stages = n_stages,
                          .experts = experts,
                          .n_experts = n_experts,
                          .threads = x->threads,
                          .timeout_ms = 10000,
                          .call_timeout_ms = 120000};
    mt_error err = {{0}};
    mt_route *r = mt_route_open(&rc, &err);
    if (!r) return fail(c, "opening the route", &err);
    const size_t V = (size_t)x->m->hp.n_vocab;
    float *logits = calloc((size_t)x->n * V, sizeof(float));
    mt_route_session *s = logits ? mt_route_session_new(r, x->n, &err) : NULL;
    if (!logits) mt_error_set(&err, "out of memory for %d x %zu logits", (int)x->n, V);
    int first = x->n > 1 ? x->n - 1 : x->n;
    int rcode = s ? mt_route_eval(r, s, x->prompt, first, true, logits, &err) : -1;
    if (rcode == 0 && first < x->n)
        rcode = mt_route_eval(r, s, x->prompt + first, 1, false, logits + (size_t)first * V, &err);
    if (rcode == 0)
        compare(c, logits, x->ref, (size_t)x->n * V);
    else
        fail(c, "running the prompt", &err);
    if (s) mt_route_session_end(r, s);
    free(logits);
    mt_route_close(r);
}

/* ---- a chained pipeline cut where it is hardest ----------------------------------------- */

/* Layer l (in (0, L)) as a cut of the given kind for the chained case. */
static bool cut_is(const mt_model *m, int kind, int32_t l) {
    const int32_t B = m->hp.attn_res_block;
    switch (kind) {
    case 0: /* inside an attention-residual block */
        return B > 1 && l % B != 0;
    case 1: /* on a block boundary: the next layer banks a checkpoint */
        return B > 0 && l % B == 0;
    default: /* between a KDA and an MLA layer */
        return m->layers[l].is_kda != m->layers[l - 1].is_kda;
    }
}

/* The cuts (layers a stage begins at, in (0, L)) of the chained case, sorted
 * and distinct, with what each one is. Kimi models: the first cut inside an
 * attention-residual block, the first on a block boundary and the first
 * between a KDA and an MLA layer (each not taken already, when there is
 * another); the others: a third and two thirds. Returns how many. */
static int pick_cuts(const mt_model *m, int32_t cuts[MAX_CUTS], const char *why[MAX_CUTS]) {
    static const char *kinds[MAX_CUTS] = {"in a residual block", "on a block boundary",
                                          "between KDA and MLA"};
    const int32_t L = m->hp.n_layer;
    int n = 0;
    if (mt_arch_is_kimi(m->hp.arch)) {
        for (int kind = 0; kind < MAX_CUTS; kind++) {
            int32_t pick = -1;
            for (int32_t l = 1; l < L; l++) {
                if (!cut_is(m, kind, l)) continue;
                bool taken = false;
                for (int i = 0; i < n; i++) taken |= cuts[i] == l;
                if (pick < 0) pick = l; /* the first, taken or not */
                if (!taken) {
                    pick = l;
                    break;
                }
            }
            bool dup = false;
            for (int i = 0; i < n; i++) dup |= cuts[i] == pick;
            if (pick > 0 && !dup) cuts[n] = pick, why[n++] = kinds[kind];
        }
    } else {
        const int32_t third[2] = {L / 3, 2 * L / 3};
        const char *what[2] = {"a third", "two thirds"};
        for (int k = 0; k < 2; k++)
            if (third[k] > 0 && third[k] < L && (n == 0 || cuts[n - 1] != third[k]))
                cuts[n] = third[k], why[n++] = what[k];
    }
    for (int i = 1; i < n; i++) /* insertion sort: at most three */
        for (int k = i; k > 0 && cuts[k] < cuts[k - 1]; k--) {
            int32_t c = cuts[k];
            cuts[k] = cuts[k - 1], cuts[k - 1] = c;
            const char *w = why[k];
            why[k] = why[k - 1], why[k - 1] = w;
        }
    return n;
}

/* Case (b): stages [0, c1) [c1, c2) ... [ck, L), the requester sending one
 * STAGE_FORWARD that the stages pass along (chain). -1 only when a shard
 * cannot be written. */
static int chained_pipeline(check_ctx *x, scratch *sc, const mt_shard_layout *layout,
                            const char *source_id, const char *head, mt_selfcheck_case *c,
                            mt_error *err) {
    const mt_model *m = x->m;
    int32_t cuts[MAX_CUTS];
    const char *why[MAX_CUTS];
    const int n_cuts = pick_cuts(m, cuts, why);
    int off = snprintf(c->name, sizeof c->name, "chained, cut at");
    for (int i = 0; i < n_cuts && off < (int)sizeof c->name; i++)
        off += snprintf(c->name + off, sizeof c->name - (size_t)off, "%s %d (%s)", i ? "," : "",
                        (int)cuts[i], why[i]);
    if (n_cuts == 0) {
        snprintf(c->name, sizeof c->name, "chained pipeline");
        c->status = MT_SELFCHECK_SKIPPED;
        snprintf(c->why, sizeof c->why, "a model of one layer cannot be cut");
        return 0;
    }
    mt_node *nodes[MAX_CUTS + 1] = {NULL};
    mt_route_peer peers[MAX_CUTS + 1];
    const int n_stages = n_cuts + 1;
    mt_error e = {{0}};
    bool ok = true;
    for (int i = 0; i < n_stages && ok; i++) {
        mt_shard_spec spec = {
            i ? cuts[i - 1] : 0, i < n_cuts ? cuts[i] : m->hp.n_layer, true, false, NULL, -1};
        char name[32];
        snprintf(name, sizeof name, "chain-%d.gguf", i);
        const char *path = scratch_file(sc, name);
        if (mt_shard_write_with(m->gguf, layout, source_id, &spec, path, err)) {
            mt_error_prefix(err, "writing the %s shard", name);
            for (int k = 0; k < i; k++) mt_node_stop(nodes[k]);
            return -1;
        }
        if (!(nodes[i] = start_node(x, path, NULL, 0, &e))) {
            fail(c, "starting a stage node", &e);
            ok = false;
        } else {
            peers[i] = peer_of(x, nodes[i]);
        }
    }
    if (ok) run_route(x, c, head, NULL, peers, n_stages, true, NULL, 0);
    for (int i = 0; i < n_stages; i++) mt_node_stop(nodes[i]);
    return 0;
}

/* ---- the check ------------------------------------------------------------------------ */

int mt_selfcheck_run(const mt_model *m, const int32_t *prompt, int32_t n, int threads,
                     const char *tmp_dir, mt_selfcheck_case cases[MT_SELFCHECK_CASES],
                     mt_error *err) {
    memset(cases, 0, sizeof(mt_selfcheck_case) * MT_SELFCHECK_CASES);
    if (n < 1) return mt_error_set(err, "the prompt has no tokens");
    const int32_t L = m->hp.n_layer, X = m->hp.n_expert;
    const size_t V = (size_t)m->hp.n_vocab;

    check_ctx x = {.m = m, .prompt = prompt, .n = n, .threads = threads};
    scratch sc;
    mt_shard_layout layout;
    memset(&layout, 0, sizeof layout);
    float *ref = NULL;
    mt_session *sess = NULL;
    int32_t *low = NULL; /* (X) expert ids 0..X-1, split in two for the paired stage */
    int rc = -1;
    if (scratch_open(&sc, tmp_dir, err)) return -1;

    /* the reference: the whole model in this process */
    if (!(ref = malloc((size_t)n * V * sizeof(float)))) {
        mt_error_set(err, "out of memory for %d x %zu logits", (int)n, V);
        goto out;
    }
    if (!(sess = mt_session_new(m, n, MT_KV_DEFAULT, threads, err)) ||
        mt_session_eval(sess, prompt, n, 0, true, ref, err)) {
        mt_error_prefix(err, "local run of the whole model");
        goto out;
    }
    x.ref = ref;

    /* identities: one for the nodes, one for the requester (the only peer
     * the nodes accept) */
    if (mt_keys_generate(&x.node_keys, err) || mt_keys_generate(&x.req_keys, err)) goto out;
    if (!(x.auth = mt_keys_authorized_new()) ||
        mt_keys_authorized_add(x.auth, x.req_keys.pk, "requester", err) ||
        mt_keys_authorized_add(x.auth, x.node_keys.pk, "node", err)) /* partners, next hops */
        goto out;

    /* shards: head, two stages, backbone, all experts, and the paired stage's halves */
    char source_id[MT_SHARD_HASH_HEX];
    if (mt_shard_layout_read(m->gguf, &layout, err) ||
        mt_shard_source_id(m->gguf, source_id, NULL, err))
        goto out;
    const int32_t half = L >= 2 ? L / 2 : L;
    const bool two = half < L;
    if (X > 0 && !(low = malloc((size_t)X * sizeof *low))) {
        mt_error_set(err, "out of memory");
        goto out;
    }
    const int32_t n_low = X / 2;
    for (int32_t e = 0; e < X; e++) low[e] = e; /* experts [0, n_low), then [n_low, X) */
    struct {
        const char *file;
        mt_shard_spec spec;
        bool wanted;
        const char *path;
    } sh[] = {
        {"head.gguf", {0, 0, false, true, NULL, 0}, true, NULL},
        {"stage-0.gguf", {0, half, true, false, NULL, -1}, true, NULL},
        {"stage-1.gguf", {half, L, true, false, NULL, -1}, two, NULL},
        {"backbone.gguf", {0, L, true, true, NULL, 0}, X > 0, NULL},
        {"experts.gguf", {0, L, false, false, NULL, -1}, X > 0, NULL},
        {"paired.gguf", {0, L, true, false, low, n_low}, X > 1, NULL},
        {"partner.gguf", {0, L, false, false, low + n_low, X - n_low}, X > 1, NULL},
    };
    for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++) {
        if (!sh[i].wanted) continue;
        sh[i].path = scratch_file(&sc, sh[i].file);
        if (mt_shard_write_with(m->gguf, &layout, source_id, &sh[i].spec, sh[i].path, err)) {
            mt_error_prefix(err, "writing the %s shard", sh[i].file);
            goto out;
        }
    }

    /* (a) the pipeline */
    mt_selfcheck_case *c = &cases[0];
    if (two)
        snprintf(c->name, sizeof c->name, "pipeline, 2 stages: layers [0,%d) [%d,%d)", (int)half,
                 (int)half, (int)L);
    else
        snprintf(c->name, sizeof c->name, "pipeline, 1 stage: layers [0,%d)", (int)L);
    {
        mt_error e = {{0}};
        mt_node *nodes[2] = {NULL, NULL};
        mt_route_peer peers[2];
        int n_stages = two ? 2 : 1;
        for (int i = 0; i < n_stages; i++) {
            if (!(nodes[i] = start_node(&x, sh[1 + i].path, NULL, 0, &e))) {
                fail(c, "starting a stage node", &e);
                break;
            }
            peers[i] = peer_of(&x, nodes[i]);
        }
        if (nodes[n_stages - 1])
            run_route(&x, c, sh[0].path, NULL, peers, n_stages, false, NULL, 0);
        for (int i = 0; i < 2; i++)
            if (nodes[i]) mt_node_stop(nodes[i]);
    }

    /* (b) a chained pipeline cut where a stage boundary carries the most */
    if (chained_pipeline(&x, &sc, &layout, source_id, sh[0].path, &cases[1], err)) goto out;

    /* (c) backbone + one expert server */
    c = &cases[2];
    if (X > 0) {
        snprintf(c->name, sizeof c->name, "backbone + expert server (all %d experts)", (int)X);
        mt_error e = {{0}};
        mt_node *node = start_node(&x, sh[4].path, NULL, 0, &e);
        if (!node) {
            fail(c, "starting the expert server", &e);
        } else {
            mt_route_peer p = peer_of(&x, node);
            run_route(&x, c, sh[3].path, sh[3].path, NULL, 0, false, &p, 1);
            mt_node_stop(node);
        }
    } else {
        snprintf(c->name, sizeof c->name, "backbone + expert server");
        c->status = MT_SELFCHECK_SKIPPED;
        snprintf(c->why, sizeof c->why, "a dense model has no routed experts");
    }

    /* (d) a paired stage: every layer, half the experts, a partner with the rest */
    c = &cases[3];
    if (X > 1) {
        snprintf(c->name, sizeof c->name, "paired stage: experts 0-%d + partner %d-%d",
                 (int)n_low - 1, (int)n_low, (int)X - 1);
        mt_error e = {{0}};
        mt_node *partner = start_node(&x, sh[6].path, NULL, 0, &e), *stage = NULL;
        if (partner) {
            mt_node_partner pp = {.addr = mt_node_addr(partner)};
            memcpy(pp.pk, x.node_keys.pk, sizeof pp.pk);
            stage = start_node(&x, sh[5].path, &pp, 1, &e);
        }
        if (!stage) {
            fail(c, "starting the paired nodes", &e);
        } else {
            mt_route_peer p = peer_of(&x, stage);
            run_route(&x, c, sh[0].path, NULL, &p, 1, false, NULL, 0);
        }
        mt_node_stop(stage);
        mt_node_stop(partner);
    } else {
        snprintf(c->name, sizeof c->name, "paired stage");
        c->status = MT_SELFCHECK_SKIPPED;
        snprintf(c->why, sizeof c->why, "pairing needs a model with routed experts");
    }
    rc = 0;

out:
    mt_shard_layout_free(&layout);
    mt_keys_authorized_free(x.auth);
    mt_keys_wipe(&x.node_keys);
    mt_keys_wipe(&x.req_keys);
    mt_session_free(sess);
    free(low);
    free(ref);
    scratch_close(&sc);
    return rc;
}
