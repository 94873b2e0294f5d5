/* node_sizing.c - how many sessions of how many positions a node offers,
 * from the memory it offers (mt_node_size_sessions in node.h). */
#include "moontail/node.h"

#define SIZING_STEP         256  /* contexts are offered in multiples of this */
#define SIZING_TYPICAL      4096 /* positions a session is assumed to fill when counting them */
#define SIZING_MAX_SESSIONS (1 << 20) /* NODE_MAX_SESSIONS: a bound, not a budget */

static double mb(uint64_t b) {
    return (double)b / 1e6;
}

int mt_node_size_sessions(uint64_t memory_bytes, uint64_t weight_bytes, uint64_t fixed,
                          uint64_t per_position, int32_t n_ctx_train, int *n_ctx, int *max_sessions,
                          uint64_t *budget, mt_error *err) {
    if (n_ctx_train <= 0) n_ctx_train = 4096;
    int32_t least = n_ctx_train < SIZING_STEP ? n_ctx_train : SIZING_STEP;
    if (memory_bytes <= weight_bytes)
        return mt_error_set(err,
                            "%.1f MB of memory offered but the weights alone take %.1f MB;"
                            " offer more (--memory-mb) or hold fewer layers",
                            mb(memory_bytes), mb(weight_bytes));
    uint64_t b = memory_bytes - weight_bytes;
    *budget = b;
    /* the longest context one session can fill */
    uint64_t fits = b < fixed ? 0 : per_position ? (b - fixed) / per_position : UINT64_MAX;
    if (*n_ctx > 0) least = *n_ctx < least ? *n_ctx : least;
    if (fits < (uint64_t)least)
        return mt_error_set(err,
                            "%.1f MB offered, %.1f MB of it for the weights, leaves %.1f MB"
                            " for sessions: %llu positions of %llu bytes (after %llu bytes of"
                            " state), fewer than %d; offer more memory (--memory-mb), a smaller"
                            " KV type, or hold fewer layers",
                            mb(memory_bytes), mb(weight_bytes), mb(b), (unsigned long long)fits,
                            (unsigned long long)per_position, (unsigned long long)fixed, least);
    if (*n_ctx <= 0) {
        uint64_t c =
            fits < (uint64_t)n_ctx_train ? fits / SIZING_STEP * SIZING_STEP : (uint64_t)n_ctx_train;
        *n_ctx = (int)c;
    } else if ((uint64_t)*n_ctx > fits) {
        return mt_error_set(err,
                            "a context of %d positions needs %.1f MB but %.1f MB are left"
                            " for sessions after the weights; ask for at most %llu positions or"
                            " offer more memory (--memory-mb)",
                            *n_ctx, mb(fixed + (uint64_t)*n_ctx * per_position), mb(b),
                            (unsigned long long)fits);
    }
    if (*max_sessions <= 0) {
        uint64_t typical = (uint64_t)(*n_ctx < SIZING_TYPICAL ? *n_ctx : SIZING_TYPICAL);
        uint64_t each = fixed + typical * per_position;
        uint64_t s = each ? b / each : SIZING_MAX_SESSIONS;
        *max_sessions = s < 1 ? 1 : s > SIZING_MAX_SESSIONS ? SIZING_MAX_SESSIONS : (int)s;
    }
    return 0;
}
