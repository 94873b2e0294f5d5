/* cellsim_events.c - the simulation's event queue: a binary min-heap on
 * (time, push order), so that events at the same time run in the order they
 * were scheduled and a run is reproducible. O(log n) push and pop. */
#include "cellsim.h"

#include <stdlib.h>

static bool earlier(const cs_event *x, const cs_event *y) {
    return x->t < y->t || (x->t == y->t && x->seq < y->seq);
}

int cs_queue_push(cs_queue *q, double t, int32_t kind, int32_t a, int64_t b) {
    if (q->n == q->cap) {
        int64_t cap = q->cap ? 2 * q->cap : 1024;
        cs_event *v = realloc(q->v, (size_t)cap * sizeof *v);
        if (!v) return -1;
        q->v = v;
        q->cap = cap;
    }
    cs_event e = {t, q->next_seq++, kind, a, b};
    int64_t i = q->n++;
    while (i > 0) {
        int64_t parent = (i - 1) / 2;
        if (!earlier(&e, &q->v[parent])) break;
        q->v[i] = q->v[parent];
        i = parent;
    }
    q->v[i] = e;
    return 0;
}

bool cs_queue_pop(cs_queue *q, cs_event *out) {
    if (q->n == 0) return false;
    *out = q->v[0];
    cs_event last = q->v[--q->n];
    int64_t i = 0;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= q->n) break;
        if (c + 1 < q->n && earlier(&q->v[c + 1], &q->v[c])) c++;
        if (!earlier(&q->v[c], &last)) break;
        q->v[i] = q->v[c];
        i = c;
    }
    if (q->n > 0) q->v[i] = last;
    return true;
}

void cs_queue_free(cs_queue *q) {
    free(q->v);
    q->v = NULL;
    q->n = q->cap = 0;
}
