/* requester_backend.c - the generation loop's backend (generate.h) for a
 * requester (requester.h): `moontail prompt --registry` and `moontail demo`
 * evaluate through a registry's route, with failover, the same way. */
#include "generate.h"

static int req_open(void *ctx, int32_t n_ctx, mt_error *err) {
    return mt_requester_begin(((cli_requester_ctx *)ctx)->q, n_ctx, err);
}

static int req_eval(void *ctx, const int32_t *ids, int32_t n, float *logits, mt_error *err) {
    cli_requester_ctx *p = ctx;
    int rc = mt_requester_eval(p->q, ids, n, logits, err);
    if (rc == 0) p->tokens += n;
    return rc;
}

static void req_json(void *ctx, json_t *root) {
    cli_requester_ctx *p = ctx;
    mt_requester_stats s;
    mt_requester_get_stats(p->q, &s);
    json_object_set_new(root, "route", json_string(s.route));
    json_object_set_new(root, "failovers", json_integer(s.failovers));
    json_object_set_new(root, "recovery_ms", json_real(s.total_recovery_ms));
    json_object_set_new(root, "replays", json_integer(s.replays));
    if (s.failovers) json_object_set_new(root, "last_failure", json_string(s.last_failure));
    json_t *spot = json_pack(
        "{s:I, s:I, s:I, s:I, s:i, s:i}", "checks", (json_int_t)s.spot_checks, "compared",
        (json_int_t)s.spot_compared, "dropped", (json_int_t)s.spot_dropped, "mismatches",
        (json_int_t)s.spot_mismatches, "reports", s.reports, "confirmed", s.reports_confirmed);
    if (s.last_spot_check[0]) json_object_set_new(spot, "last", json_string(s.last_spot_check));
    json_object_set_new(root, "spot_check", spot);
}

cli_gen_backend cli_requester_backend(cli_requester_ctx *ctx) {
    cli_gen_backend be = {req_open, req_eval, req_json, ctx};
    return be;
}
