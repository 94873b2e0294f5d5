/* registry_queue.c - admission: at most max_active requests hold routes at
 * once; the others wait in a first-come queue and are told their place.
 *
 * A request is a *ticket* (32 hex digits) handed out by POST /v1/routes. An
 * active ticket lets its holder get routes (also new ones after a
 * failure); a queued one gets 202 and its position until a slot frees. A
 * holder keeps its ticket alive by asking again (queued) or with
 * POST /v1/routes/keepalive (active), and gives it back with
 * POST /v1/routes/done; a ticket not heard of for ticket_ttl_ms is dropped,
 * so a requester that crashed does not hold a slot for ever. With
 * max_active 0 nobody waits (tickets are still issued and counted). */
#include "registry_internal.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

static void expire(mt_registry *r, int64_t now) {
    int32_t k = 0;
    for (int32_t i = 0; i < r->n_tickets; i++)
        if (now - r->tickets[i].last_ms <= r->cfg.ticket_ttl_ms) r->tickets[k++] = r->tickets[i];
    r->n_tickets = k;
}

/* Activates queued tickets, oldest first, while there is room. */
static void promote(mt_registry *r) {
    int32_t active = 0;
    for (int32_t i = 0; i < r->n_tickets; i++) active += r->tickets[i].active;
    for (int32_t i = 0; i < r->n_tickets; i++) {
        if (r->cfg.max_active > 0 && active >= r->cfg.max_active) break;
        if (!r->tickets[i].active) r->tickets[i].active = true, active++;
    }
}

static reg_ticket *find(mt_registry *r, const char *id) {
    for (int32_t i = 0; id && i < r->n_tickets; i++)
        if (strcmp(r->tickets[i].id, id) == 0) return &r->tickets[i];
    return NULL;
}

reg_ticket *reg_ticket_take(mt_registry *r, int64_t account, const char *id, int64_t now,
                            int32_t *position) {
    expire(r, now);
    reg_ticket *t = find(r, id);
    if (t && t->account != account) t = NULL; /* not yours: a new one */
    if (!t) {
        if (r->n_tickets == r->cap_tickets) {
            int32_t cap = r->cap_tickets ? 2 * r->cap_tickets : 64;
            reg_ticket *p = realloc(r->tickets, (size_t)cap * sizeof *p);
            if (!p) return NULL;
            r->tickets = p;
            r->cap_tickets = cap;
        }
        t = &r->tickets[r->n_tickets++];
        memset(t, 0, sizeof *t);
        uint8_t raw[16];
        randombytes_buf(raw, sizeof raw);
        sodium_bin2hex(t->id, sizeof t->id, raw, sizeof raw);
        t->account = account;
    }
    t->last_ms = now;
    char keep[33];
    memcpy(keep, t->id, sizeof keep);
    promote(r);
    t = find(r, keep);
    *position = 0;
    if (t && !t->active)
        for (int32_t i = 0; i < r->n_tickets && &r->tickets[i] != t; i++)
            *position += !r->tickets[i].active;
    if (t && !t->active) ++*position; /* 1 = next in line */
    return t;
}

bool reg_ticket_touch(mt_registry *r, const char *id, int64_t account, int64_t now) {
    expire(r, now);
    reg_ticket *t = find(r, id);
    if (!t || t->account != account) return false;
    t->last_ms = now;
    return true;
}

bool reg_ticket_done(mt_registry *r, const char *id, int64_t account) {
    for (int32_t i = 0; i < r->n_tickets; i++)
        if (strcmp(r->tickets[i].id, id) == 0 && r->tickets[i].account == account) {
            /* a stable removal: the queued ones keep their order of arrival */
            memmove(&r->tickets[i], &r->tickets[i + 1],
                    (size_t)(r->n_tickets - 1 - i) * sizeof r->tickets[0]);
            r->n_tickets--;
            promote(r);
            return true;
        }
    return false;
}

void reg_ticket_counts(mt_registry *r, int64_t now, int32_t *active, int32_t *waiting) {
    expire(r, now);
    *active = *waiting = 0;
    for (int32_t i = 0; i < r->n_tickets; i++) {
        if (r->tickets[i].active)
            ++*active;
        else
            ++*waiting;
    }
}
