/* requester.h - generation through a registry (docs/design.md "requester"): asks
 * the registry for a route per session, keeps the head (cell) or backbone
 * (swarm) shard locally (fetched once from the registry, verified, cached),
 * and survives node loss.
 *
 * Failover (docs/design.md invariant 4): when a call through the route fails
 * (a node stopped answering, or its connection broke and did not come
 * back), the requester reports which nodes failed, asks the registry for a
 * new route that avoids them, opens it, and replays the session's whole
 * token history on it before evaluating what was asked. With the f32 wire
 * the logits are bit-identical to an uninterrupted run, so the generated
 * text is too. The time from the failure to the first logits on the new
 * route is measured (mt_requester_stats).
 *
 * Spot-checking (docs/spot-checking.md): with spot_check > 0, that fraction
 * of (session, stage) pairs is computed twice, by the stage and by another
 * node the registry lists as holding the same layers, and the outputs are
 * compared bit for bit before the logits are used (route.h). On a
 * difference the requester reports both nodes to the registry, which checks
 * them itself and quarantines a node it finds wrong; the requester then
 * avoids the node found wrong (or, without a verdict, the checked one) and
 * replays on a new route as after a failure, so the text is the one a clean
 * run gives; it checks every stage for the rest of that request. */
#ifndef MOONTAIL_REQUESTER_H
#define MOONTAIL_REQUESTER_H

#include "moontail/generate.h"
#include "moontail/model.h"
#include "moontail/proto.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct mt_requester_config {
    const char *registry;  /* "http://host:port" */
    const char *token;     /* the account's token */
    const char *key_path;  /* the requester's identity (created if missing) */
    const char *cache_dir; /* where the head/backbone shard is kept (created if missing) */
    mt_proto_dtype wire;   /* f32 (exact, default) or bf16 */
    int threads, ubatch;
    mt_kv_type kv_type;      /* the backbone's cache in a swarm (0: f16) */
    int timeout_ms;          /* connect + handshake to nodes (<= 0: 5 s) */
    int call_timeout_ms;     /* the longest wait for a reply from a node (<= 0: 30 s); shorter
                                once a node's step times are known (route.h) */
    bool fixed_call_timeout; /* always wait call_timeout_ms */
    int max_failovers;       /* new routes per session before giving up (<= 0: 8) */
    double spot_check;       /* fraction of (session, stage) pairs checked on a replica, 0..1
                                (0: none; the commands default to 0.05) */
    bool chain;              /* cell routes chained (route.h: one call, the stages pass the rows
                                on): for kimi-k3, whose rows grow with every stage, the requester
                                then sends one hop's bytes instead of every stage's; spot-checks
                                do not apply to chained routes */
    bool quiet;
} mt_requester_config;

typedef struct mt_requester mt_requester;

/* Gets a certificate for the requester's key, a first route and the head
 * shard, and opens the route. */
mt_requester *mt_requester_open(const mt_requester_config *cfg, mt_error *err);
void mt_requester_close(mt_requester *q);

/* The local head model (its GGUF holds the tokenizer). */
const mt_model *mt_requester_head(const mt_requester *q);

/* Starts a new session of up to n_ctx positions (ends the previous one). */
int mt_requester_begin(mt_requester *q, int32_t n_ctx, mt_error *err);

/* Evaluates n tokens after the session's history; logits gets the last
 * token's n_vocab floats. Fails over as described at the top. */
int mt_requester_eval(mt_requester *q, const int32_t *ids, int32_t n, float *logits, mt_error *err);

/* Speculative decoding (generate.h): the same with every token's logits ((n, n_vocab)
 * floats) as a speculative pass (mt_route_eval_speculative), after which
 * mt_requester_rewind may take the session back inside it. A failover replays the history
 * kept (rewound tokens are gone from it) and then this pass. */
int mt_requester_eval_speculative(mt_requester *q, const int32_t *ids, int32_t n, float *logits,
                                  mt_error *err);
int mt_requester_rewind(mt_requester *q, int32_t n_past, mt_error *err);

/* Tells the registry how many tokens this account used (metering). */
int mt_requester_report_usage(mt_requester *q, int64_t tokens, mt_error *err);

typedef struct mt_requester_stats {
    int failovers;           /* new routes taken after failures */
    double last_recovery_ms; /* failure -> logits on the new route, last failover */
    double total_recovery_ms;
    int replays;      /* history replays inside routes (evictions, reconnects) */
    char route[1024]; /* the current route, as "addr[a,b) addr[b,c) ..." */
    char last_failure[512];
    /* spot-checks (summed over routes and sessions) */
    int64_t spot_checks;       /* (session, stage) pairs given a checker */
    int64_t spot_compared;     /* passes a checker confirmed bit for bit */
    int64_t spot_dropped;      /* checks dropped (a checker failed or was slow) */
    int64_t spot_mismatches;   /* outputs that differed */
    int reports;               /* mismatches reported to the registry */
    int reports_confirmed;     /* ... in which the registry found a node wrong */
    char last_spot_check[768]; /* the last mismatch and the registry's verdict */
} mt_requester_stats;

void mt_requester_get_stats(const mt_requester *q, mt_requester_stats *s);

/* ---- as the generation loop's backend (generate_registry.c) -------------------------------- */

/* A backend (generate.h) whose slots each have a requester of cfg (strings copied): slot 0
 * the one opened here (so the head shard and tokenizer are known: an error names what
 * failed), the others when their slot begins its first sequence. end() reports the
 * sequence's tokens as usage; a failure to is printed as "WHO: could not report ..."
 * unless cfg->quiet. */
mt_gen_backend *mt_requester_backend(const mt_requester_config *cfg, const char *who,
                                     mt_error *err);
/* The requester of one of its slots (NULL until the slot's first sequence). */
mt_requester *mt_requester_of_slot(void *slot);

#endif
