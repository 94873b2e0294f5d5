/* test_gen_turns.c - the local backend's turns on the model (src/model/gen_turns.c):
 * foreground slots (interactive requests) in arrival order, background slots (serve's batch
 * work) only when no foreground slot waits. Each case holds the turn, queues waiters in a
 * chosen order (waiting until gen_turns_waiting shows each one queued: no sleeps), gives
 * the turn back and checks the order in which the waiters then ran. */
#include "../src/model/gen_turns.h"
#include "check.h"

#include <pthread.h>
#include <sched.h>

static gen_turns turns;
static char order[16]; /* who ran, in order (guarded by order_mu) */
static int n_order;
static pthread_mutex_t order_mu = PTHREAD_MUTEX_INITIALIZER;

typedef struct waiter {
    char name;
    bool background;
    pthread_t thread;
} waiter;

static void *run(void *arg) {
    waiter *w = arg;
    gen_turns_take(&turns, w->background);
    pthread_mutex_lock(&order_mu);
    order[n_order++] = w->name;
    pthread_mutex_unlock(&order_mu);
    gen_turns_give(&turns, w->background);
    return NULL;
}

/* Starts w and returns once it waits (the holder keeps the turn, so it cannot run). */
static void queue(waiter *w, int waiting_before) {
    pthread_create(&w->thread, NULL, run, w);
    while (gen_turns_waiting(&turns) != waiting_before + 1) sched_yield();
}

/* The holder (background or not) has the turn; ws arrive in order; want: the order they run. */
static void one_case(const char *what, bool holder_background, waiter *ws, int n,
                     const char *want) {
    n_order = 0;
    memset(order, 0, sizeof order);
    gen_turns_take(&turns, holder_background);
    for (int i = 0; i < n; i++) queue(&ws[i], i);
    gen_turns_give(&turns, holder_background);
    for (int i = 0; i < n; i++) pthread_join(ws[i].thread, NULL);
    CHECK(strcmp(order, want) == 0, "%s: ran in the order %s, wanted %s", what, order, want);
    CHECK(gen_turns_waiting(&turns) == 0, "%s: %d still waiting", what, gen_turns_waiting(&turns));
}

int main(void) {
    gen_turns_init(&turns);
    /* a background slot alone takes its turn at once */
    gen_turns_take(&turns, true);
    gen_turns_give(&turns, true);
    CHECK(gen_turns_waiting(&turns) == 0, "a lone background turn left a waiter");
    /* a batch slot that came first still waits for an interactive one that came later */
    waiter a[] = {{'b', true, 0}, {'F', false, 0}};
    one_case("background then foreground", false, a, 2, "Fb");
    /* foreground slots keep their arrival order; background ones theirs, after them */
    waiter b[] = {{'b', true, 0}, {'F', false, 0}, {'c', true, 0}, {'G', false, 0}};
    one_case("two of each", false, b, 4, "FGbc");
    /* a running background evaluation is not cut short: the foreground waits for its end */
    waiter c[] = {{'F', false, 0}, {'b', true, 0}};
    one_case("behind a running background turn", true, c, 2, "Fb");
    /* only background slots: arrival order */
    waiter d[] = {{'b', true, 0}, {'c', true, 0}, {'d', true, 0}};
    one_case("background only", false, d, 3, "bcd");
    gen_turns_destroy(&turns);
    return check_report("test_gen_turns");
}
