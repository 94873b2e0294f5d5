/* gen_turns.h - turns on one model for the local backend's slots (generate_local.c), in two
 * classes: foreground slots (interactive requests) take turns in arrival order; background
 * slots (batch work) take turns in arrival order too, but only when no foreground slot waits
 * or runs. One slot computes at a time. Results do not depend on the order (docs/design.md
 * invariant 1); only who waits does. Not a public API.
 *
 * Thread-safe: any number of threads may wait at once. */
#ifndef MOONTAIL_GEN_TURNS_H
#define MOONTAIL_GEN_TURNS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct gen_turns {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t fg_next, fg_serving; /* foreground tickets given out / turns over (mu) */
    uint64_t bg_next, bg_serving; /* the same for background slots (mu) */
    bool busy;                    /* a slot computes now (mu) */
} gen_turns;

void gen_turns_init(gen_turns *t);
void gen_turns_destroy(gen_turns *t);
/* Waits for this slot's turn (background: also until no foreground slot waits). */
void gen_turns_take(gen_turns *t, bool background);
/* Ends the turn taken with gen_turns_take(t, background). */
void gen_turns_give(gen_turns *t, bool background);
/* Slots waiting now (for tests: to know a waiter is queued without sleeping). */
int gen_turns_waiting(gen_turns *t);

#endif
