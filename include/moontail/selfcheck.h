/* selfcheck.h - `moontail check`: proves on this machine that the network
 * paths compute exactly what the whole model computes (docs/design.md invariant 1).
 *
 * The model is cut into shards in a temporary directory, nodes (node.h) are
 * started in this process on 127.0.0.1 with freshly generated keys, and a
 * prompt is run five ways:
 *   - locally, on the whole model (the reference),
 *   - through a two-stage pipeline: a head shard kept by the requester and
 *     two nodes holding the first and the second half of the layers,
 *   - through a chained pipeline (the stages pass the rows along) cut where
 *     a boundary is hardest: for kimi models inside an attention-residual
 *     block, on a block boundary and between a KDA and an MLA layer (the
 *     checkpoints and the recurrent state must cross or stay exactly); for
 *     the others at a third and two thirds,
 *   - through a local backbone (head + every layer's attention part) whose
 *     routed experts run on one expert server holding all of them,
 *   - through one paired stage: a node with every layer's attention and half
 *     the routed experts, its partner holding the other half (MoE models
 *     only; a dense model skips the last two cases).
 * Each route's logits for every prompt position are compared bit for bit
 * with the reference (f32 wire). Shards, keys and nodes are gone when the
 * call returns. */
#ifndef MOONTAIL_SELFCHECK_H
#define MOONTAIL_SELFCHECK_H

#include "moontail/model.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum mt_selfcheck_status {
    MT_SELFCHECK_IDENTICAL, /* every logit has the reference's bits */
    MT_SELFCHECK_DIFFERENT, /* ran, but some logit differs */
    MT_SELFCHECK_FAILED,    /* could not run (why says what went wrong) */
    MT_SELFCHECK_SKIPPED,   /* does not apply to this model (why says why) */
} mt_selfcheck_status;

typedef struct mt_selfcheck_case {
    char name[128]; /* e.g. "pipeline, 2 stages: layers [0,2) [2,4)" */
    mt_selfcheck_status status;
    double max_diff; /* largest |logit - reference| (when it ran) */
    char why[640];   /* for FAILED and SKIPPED */
} mt_selfcheck_case;

#define MT_SELFCHECK_CASES 4

/* Runs the check on model m (a whole model, not a shard; m->gguf is read to
 * cut the shards, so the file behind it need not still have a name) with
 * the n tokens of prompt, using `threads` compute threads (<= 0: all CPUs)
 * and temporary files under tmp_dir (NULL: $TMPDIR or /tmp).
 *
 * Fills cases[0] (pipeline), cases[1] (chained pipeline), cases[2] (expert
 * server) and cases[3] (paired stage). Returns 0 when the
 * check ran (look at each case's status), -1 with err when it could not
 * start at all (shards not writable, the reference run failed, ...). */
int mt_selfcheck_run(const mt_model *m, const int32_t *prompt, int32_t n, int threads,
                     const char *tmp_dir, mt_selfcheck_case cases[MT_SELFCHECK_CASES],
                     mt_error *err);

#endif
