/* gen_turns.c - the two-class turn queue of the local backend (gen_turns.h): foreground
 * tickets first, background tickets when no foreground ticket is outstanding. */
#include "gen_turns.h"

void gen_turns_init(gen_turns *t) {
    *t = (gen_turns){.busy = false};
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
}

void gen_turns_destroy(gen_turns *t) {
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
}

void gen_turns_take(gen_turns *t, bool background) {
    pthread_mutex_lock(&t->mu);
    if (background) {
        const uint64_t ticket = t->bg_next++;
        /* a foreground ticket not yet served (waiting or running) goes first */
        while (t->busy || t->bg_serving != ticket || t->fg_next != t->fg_serving)
            pthread_cond_wait(&t->cv, &t->mu);
    } else {
        const uint64_t ticket = t->fg_next++;
        while (t->busy || t->fg_serving != ticket) pthread_cond_wait(&t->cv, &t->mu);
    }
    t->busy = true;
    pthread_mutex_unlock(&t->mu);
}

void gen_turns_give(gen_turns *t, bool background) {
    pthread_mutex_lock(&t->mu);
    if (background)
        t->bg_serving++;
    else
        t->fg_serving++;
    t->busy = false;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

int gen_turns_waiting(gen_turns *t) {
    pthread_mutex_lock(&t->mu);
    int n =
        (int)(t->fg_next - t->fg_serving) + (int)(t->bg_next - t->bg_serving) - (t->busy ? 1 : 0);
    pthread_mutex_unlock(&t->mu);
    return n;
}
