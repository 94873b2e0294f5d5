/* route_check.h - one spot-check of a route's stage (route.h, docs/spot-checking.md):
 * a shadow session on a checker, another node holding the same layers, that
 * gets the same input rows as the checked stage in every pass; the route
 * compares the two outputs bit for bit before the pass returns (docs/design.md
 * invariant 1: honest nodes agree exactly).
 *
 * The checker is called on a thread of its own, so its call overlaps the
 * checked stage and the stages after it: a check costs the route only the
 * time by which the checker answers later than the pass ends. A checker that
 * fails, or does not answer by the route's deadline, only drops the check
 * (route_check_wait says why); it never fails the generation. The thread
 * owns the checker's connection and outlives a dropped check until its call
 * returns, so nobody ever waits for a silent checker. Not a public API. */
#ifndef MOONTAIL_ROUTE_CHECK_H
#define MOONTAIL_ROUTE_CHECK_H

#include "moontail/route.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct route_check route_check;

typedef struct route_check_config {
    mt_route_peer peer;             /* the checker */
    const mt_keys *keys;            /* the requester's identity (copied) */
    int32_t layer_begin, layer_end; /* the checked stage's layers */
    int32_t width;                  /* floats per token: the model's whole hidden state */
    mt_proto_dtype wire;
    int timeout_ms, call_timeout_ms;
} route_check_config;

/* Starts the check's thread (it connects when the first rows come); NULL
 * with err when it cannot. */
route_check *route_check_start(const route_check_config *cfg, mt_error *err);

/* Hands the checker the checked stage's input rows (n, width) for positions
 * pos[0..n), copied; returns at once. speculative: the pass is sent as the
 * checked stage got it (MT_PROTO_FLAG_SPECULATIVE), so that the checker can
 * go back inside it as well. */
void route_check_send(route_check *k, const int32_t *pos, int32_t n, const float *rows,
                      bool speculative);

/* Keeps the checked stage's output rows of the rows last sent (copied). */
void route_check_keep_main(route_check *k, const float *rows);

typedef enum route_check_outcome {
    ROUTE_CHECK_SAME,   /* the checker's output equals the stage's, bit for bit */
    ROUTE_CHECK_DIFFER, /* it does not: hashes in the result */
    ROUTE_CHECK_LOST,   /* the checker failed or was too slow: why in the result */
} route_check_outcome;

typedef struct route_check_result {
    char main_hash[65], check_hash[65]; /* BLAKE2b-256 (hex) of each output's f32 rows */
    char why[256];
} route_check_result;

/* Waits until deadline_ms (CLOCK_MONOTONIC, ms) for the checker's answer to
 * the rows last sent, and compares. After ROUTE_CHECK_LOST the check is
 * done for: end it. */
route_check_outcome route_check_wait(route_check *k, double deadline_ms, route_check_result *out);

/* Lets go of the check: its thread ends the shadow session on the checker
 * (best effort) once its current call, if any, returns, and frees it. */
void route_check_end(route_check *k);

/* The checker's address (for messages). */
const char *route_check_addr(const route_check *k);
const uint8_t *route_check_pk(const route_check *k);

#endif
