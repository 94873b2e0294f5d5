/* placement.c - the placement engine's entry point (see moontail/placement.h):
 * checks the inputs, keeps the previous plan where it still holds or plans
 * from scratch, reserves hot spares, and turns the working pieces into the
 * plan with its summary (coverage, balance, moves, reasons). Also the
 * helpers both modes share: the snake draft, filling a lost shard from free
 * nodes and the expert water-fill. The modes' own planning is in
 * placement_cell.c and placement_swarm.c; routes are in placement_route.c. */
#include "placement_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- names */

const char *mt_place_role_name(mt_place_role r) {
    static const char *const names[] = {"none", "stage", "partner", "experts", "spare"};
    return (unsigned)r < 5 ? names[r] : "?";
}

const char *mt_place_mode_name(mt_place_mode m) {
    return m == MT_PLACE_CELL ? "cell" : "swarm";
}

mt_place_params mt_place_default_params(mt_place_mode mode) {
    mt_place_params p = {
        .mode = mode,
        .replicas = 2,
        .spares = mode == MT_PLACE_CELL ? 1 : 0,
        .max_group = 8,
        .bytes_per_ms = 1e7,
        .partner_call_ms = 0.25,
        .sessions = 64, /* the node's defaults (node.h: max_sessions, n_ctx) */
        .n_ctx = 4096,
    };
    return p;
}

mt_place_model mt_place_model_from_layout(const mt_shard_layout *l, int32_t n_expert_used) {
    mt_place_model m = {
        .n_layer = l->n_layer,
        .n_expert = l->n_expert,
        .n_expert_used = l->n_expert > 0 ? n_expert_used : 0,
        .attn_bytes = l->attn_bytes,
        .expert_bytes = l->expert_bytes,
    };
    return m;
}

const char *pl_fmt_bytes(uint64_t n, char *buf, size_t cap) {
    if (n < 1000000)
        snprintf(buf, cap, "%llu B", (unsigned long long)n);
    else if (n < 1000000000)
        snprintf(buf, cap, "%.1f MB", (double)n / 1e6);
    else
        snprintf(buf, cap, "%.1f GB", (double)n / 1e9);
    return buf;
}

/* ---------------------------------------------------------------- pieces */

int pl_push(pl_pieces *l, pl_piece p) {
    if (l->n == l->cap) {
        int32_t cap = l->cap ? 2 * l->cap : 64;
        pl_piece *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) return -1;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = p;
    return 0;
}

void pl_pieces_free(pl_pieces *l) {
    free(l->v);
    memset(l, 0, sizeof *l);
}

uint64_t pl_piece_bytes(const pl_ctx *c, int32_t a, int32_t b, bool attention, int32_t eb,
                        int32_t ee) {
    return (attention ? pl_attn(c, a, b) : 0) + (uint64_t)(ee - eb) * pl_exp(c, a, b);
}

uint64_t pl_piece_room(const pl_ctx *c, int32_t a, int32_t b, bool attention, int32_t eb,
                       int32_t ee) {
    return pl_piece_bytes(c, a, b, attention, eb, ee) + (attention ? pl_work(c, a, b) : 0);
}

typedef struct node_key {
    double speed;
    uint64_t cap;
    int64_t id;
    int32_t idx;
} node_key;

static int cmp_fastest(const void *pa, const void *pb) {
    const node_key *a = pa, *b = pb;
    if (a->speed != b->speed) return a->speed > b->speed ? -1 : 1;
    if (a->cap != b->cap) return a->cap > b->cap ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

static int cmp_largest(const void *pa, const void *pb) {
    const node_key *a = pa, *b = pb;
    if (a->cap != b->cap) return a->cap > b->cap ? -1 : 1;
    if (a->speed != b->speed) return a->speed > b->speed ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

static void sort_nodes(const pl_ctx *c, int32_t *v, int32_t n,
                       int (*cmp)(const void *, const void *)) {
    node_key small[64], *k = n <= 64 ? small : malloc((size_t)n * sizeof *k);
    if (!k) { /* out of memory: an insertion sort needs none */
        for (int32_t i = 1; i < n; i++)
            for (int32_t j = i; j > 0; j--) {
                const mt_place_node *x = &c->nodes[v[j - 1]], *y = &c->nodes[v[j]];
                node_key kx = {x->speed, x->capacity, x->id, v[j - 1]};
                node_key ky = {y->speed, y->capacity, y->id, v[j]};
                if (cmp(&kx, &ky) <= 0) break;
                int32_t t = v[j];
                v[j] = v[j - 1];
                v[j - 1] = t;
            }
        return;
    }
    for (int32_t i = 0; i < n; i++) {
        const mt_place_node *x = &c->nodes[v[i]];
        k[i] = (node_key){x->speed, x->capacity, x->id, v[i]};
    }
    qsort(k, (size_t)n, sizeof *k, cmp);
    for (int32_t i = 0; i < n; i++) v[i] = k[i].idx;
    if (k != small) free(k);
}

void pl_sort_fastest(const pl_ctx *c, int32_t *v, int32_t n) {
    sort_nodes(c, v, n, cmp_fastest);
}

/* ------------------------------------------------------------ water-fill */

bool pl_water_fill(int32_t X, int32_t k, const double *speed, const int32_t *lo, const int32_t *max,
                   int32_t *n) {
    int64_t sum = 0, room = 0;
    for (int32_t i = 0; i < k; i++) {
        if (lo[i] > max[i]) return false;
        n[i] = lo[i];
        sum += lo[i];
        room += max[i];
    }
    if (sum > X || room < X) return false;
    /* one expert at a time to whoever would finish it soonest */
    for (int64_t r = X - sum; r > 0; r--) {
        int32_t best = -1;
        double best_t = 0;
        for (int32_t i = 0; i < k; i++) {
            if (n[i] >= max[i]) continue;
            double t = (n[i] + 1) / speed[i];
            if (best < 0 || t < best_t) best = i, best_t = t;
        }
        n[best]++;
    }
    return true;
}

/* ----------------------------------------------------------------- draft */

static uint64_t list_capacity(const pl_ctx *c, const int32_t *v, int32_t n) {
    uint64_t s = 0;
    for (int32_t i = 0; i < n; i++) s += c->nodes[v[i]].capacity;
    return s;
}

int pl_draft(const pl_ctx *c, const int32_t *v, int32_t n, int32_t r, pl_feasible_fn ok,
             uint64_t need_bytes, int32_t *lists, int32_t *len) {
    for (int32_t k = 0; k < r; k++) len[k] = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t round = i / r, pos = i % r, k = round % 2 == 0 ? pos : r - 1 - pos;
        lists[(size_t)k * n + len[k]++] = v[i];
    }
    bool *feasible = malloc((size_t)r * sizeof *feasible);
    int32_t *tmp = malloc((size_t)n * sizeof *tmp);
    if (!feasible || !tmp) {
        free(feasible);
        free(tmp);
        return -1;
    }
    for (int32_t k = 0; k < r; k++) feasible[k] = ok(c, lists + (size_t)k * n, len[k]);
    int rc = 0;
    for (int32_t iter = 0; iter <= n; iter++) {
        int32_t p = -1;
        for (int32_t k = 0; k < r && p < 0; k++)
            if (!feasible[k]) p = k;
        if (p < 0) {
            rc = 1;
            break;
        }
        /* donor: the feasible list with the most capacity beyond one model */
        int32_t q = -1;
        uint64_t best = 0;
        for (int32_t k = 0; k < r; k++) {
            if (!feasible[k]) continue;
            uint64_t cap = list_capacity(c, lists + (size_t)k * n, len[k]);
            uint64_t surplus = cap > need_bytes ? cap - need_bytes : 0;
            if (q < 0 || surplus > best) q = k, best = surplus;
        }
        if (q < 0) break;
        int32_t *lq = lists + (size_t)q * n, *lp = lists + (size_t)p * n;
        /* try the donor's largest nodes first, a few of them */
        memcpy(tmp, lq, (size_t)len[q] * sizeof *tmp);
        sort_nodes(c, tmp, len[q], cmp_largest);
        bool moved = false;
        for (int32_t t = 0; t < len[q] && t < 8 && !moved; t++) {
            int32_t node = tmp[t], j = 0;
            while (lq[j] != node) j++;
            memmove(lq + j, lq + j + 1, (size_t)(len[q] - j - 1) * sizeof *lq);
            len[q]--;
            if (ok(c, lq, len[q])) {
                lp[len[p]++] = node;
                pl_sort_fastest(c, lp, len[p]);
                feasible[p] = ok(c, lp, len[p]);
                moved = true;
            } else { /* put it back where it was */
                memmove(lq + j + 1, lq + j, (size_t)(len[q] - j) * sizeof *lq);
                lq[j] = node;
                len[q]++;
            }
        }
        if (!moved) break;
    }
    free(feasible);
    free(tmp);
    return rc;
}

static int cmp_slowest(const void *pa, const void *pb) {
    return -cmp_fastest(pa, pb);
}

int pl_balance(const pl_ctx *c, int32_t *lists, int32_t *len, int32_t n, int32_t r,
               pl_time_fn time) {
    if (r < 2) return 0;
    double *T = malloc((size_t)r * sizeof *T);
    int32_t *ls = malloc((size_t)n * sizeof *ls), *lq = malloc((size_t)n * sizeof *lq);
    int32_t *slow = malloc((size_t)n * sizeof *slow), *fast = malloc((size_t)r * sizeof *fast);
    int rc = -1;
    if (!T || !ls || !lq || !slow || !fast) goto done;
    for (int32_t k = 0; k < r; k++)
        if ((T[k] = time(c, lists + (size_t)k * n, len[k])) < 0) goto done;
    for (int round = 0; round < 40; round++) {
        int32_t s = 0;
        for (int32_t k = 1; k < r; k++)
            if (T[k] > T[s]) s = k;
        int32_t *vs = lists + (size_t)s * n, n_fast = 0;
        for (int32_t k = 0; k < r; k++) /* the 3 fastest other lists */
            if (k != s) fast[n_fast++] = k;
        for (int32_t i = 1; i < n_fast; i++)
            for (int32_t j = i; j > 0 && T[fast[j]] < T[fast[j - 1]]; j--) {
                int32_t t = fast[j];
                fast[j] = fast[j - 1];
                fast[j - 1] = t;
            }
        if (n_fast > 3) n_fast = 3;
        memcpy(slow, vs, (size_t)len[s] * sizeof *slow);
        sort_nodes(c, slow, len[s], cmp_slowest);
        double best = T[s] * (1 - 1e-6);
        int32_t best_a = -1, best_b = -1, best_q = -1;
        double best_ts = 0, best_tq = 0;
        for (int32_t ia = 0; ia < len[s] && ia < 3; ia++) {
            const mt_place_node *a = &c->nodes[slow[ia]];
            for (int32_t fi = 0; fi < n_fast; fi++) {
                int32_t q = fast[fi], *vq = lists + (size_t)q * n;
                /* up to two of q's nodes: faster than a, at least its capacity,
                 * the least fast first (they cost q the least) */
                int32_t cand[2] = {-1, -1};
                for (int32_t j = len[q] - 1; j >= 0 && cand[1] < 0; j--) {
                    const mt_place_node *b = &c->nodes[vq[j]];
                    if (b->speed > a->speed && b->capacity >= a->capacity)
                        cand[cand[0] < 0 ? 0 : 1] = vq[j];
                }
                for (int32_t ci = 0; ci < 2 && cand[ci] >= 0; ci++) {
                    for (int32_t j = 0; j < len[s]; j++)
                        ls[j] = vs[j] == slow[ia] ? cand[ci] : vs[j];
                    for (int32_t j = 0; j < len[q]; j++)
                        lq[j] = vq[j] == cand[ci] ? slow[ia] : vq[j];
                    pl_sort_fastest(c, ls, len[s]);
                    pl_sort_fastest(c, lq, len[q]);
                    double ts = time(c, ls, len[s]), tq = time(c, lq, len[q]);
                    if (ts < 0 || tq < 0) goto done;
                    double worst = ts > tq ? ts : tq;
                    if (worst < best)
                        best = worst, best_a = slow[ia], best_b = cand[ci], best_q = q,
                        best_ts = ts, best_tq = tq;
                }
            }
        }
        if (best_a < 0) break;
        int32_t *vq = lists + (size_t)best_q * n;
        for (int32_t j = 0; j < len[s]; j++)
            if (vs[j] == best_a) vs[j] = best_b;
        for (int32_t j = 0; j < len[best_q]; j++)
            if (vq[j] == best_b) vq[j] = best_a;
        pl_sort_fastest(c, vs, len[s]);
        pl_sort_fastest(c, vq, len[best_q]);
        T[s] = best_ts;
        T[best_q] = best_tq;
    }
    rc = 0;
done:
    free(T);
    free(ls);
    free(lq);
    free(slow);
    free(fast);
    return rc;
}

int32_t pl_build(const pl_ctx *c, const int32_t *pool, int32_t n_pool, int32_t want,
                 const int32_t *idx, pl_pieces *out, uint64_t need_bytes, pl_feasible_fn feasible,
                 pl_time_fn time, pl_fill_fn fill) {
    if (n_pool <= 0 || want <= 0) return 0;
    int32_t n = n_pool, made = 0, r_max = want < n ? want : n;
    int32_t *v = malloc((size_t)n * sizeof *v), *len = malloc((size_t)r_max * sizeof *len);
    int32_t *lists = malloc((size_t)r_max * (size_t)n * sizeof *lists);
    pl_pieces tmp = {0};
    if (!v || !len || !lists) {
        made = -1;
        goto done;
    }
    memcpy(v, pool, (size_t)n * sizeof *v);
    pl_sort_fastest(c, v, n);
    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++) total += c->nodes[v[i]].capacity;
    /* as many copies as the nodes allow, from `want` down */
    for (int32_t r = r_max; r >= 1 && made == 0; r--) {
        if (total / (uint64_t)r < need_bytes) continue;
        int rc = pl_draft(c, v, n, r, feasible, need_bytes, lists, len);
        if (rc < 0) {
            made = -1;
            break;
        }
        if (rc == 0) continue;
        if (pl_balance(c, lists, len, n, r, time)) {
            made = -1;
            break;
        }
        tmp.n = 0;
        bool ok = true;
        for (int32_t k = 0; k < r && ok; k++) {
            int f = fill(c, lists + (size_t)k * n, len[k], idx[k], &tmp);
            if (f < 0) {
                made = -1;
                goto done;
            }
            ok = f == 1;
        }
        if (!ok) continue;
        for (int32_t i = 0; i < tmp.n; i++)
            if (pl_push(out, tmp.v[i])) {
                made = -1;
                goto done;
            }
        made = r;
    }
done:
    free(v);
    free(len);
    free(lists);
    pl_pieces_free(&tmp);
    return made;
}

/* ------------------------------------------------------ filling a lost shard */

int32_t pl_fill_piece(const pl_ctx *c, bool *used, int32_t a, int32_t b, bool attention, int32_t eb,
                      int32_t ee, pl_part *got, int32_t max_got) {
    uint64_t whole = pl_piece_room(c, a, b, attention, eb, ee);
    int32_t best = -1;
    for (int32_t i = 0; i < c->n_nodes; i++) {
        const mt_place_node *x = &c->nodes[i];
        if (!x->available || used[i] || x->capacity < whole) continue;
        if (best < 0) {
            best = i;
            continue;
        }
        /* fastest, then smallest: capacities negated (mod 2^64) sort ascending */
        node_key kx = {x->speed, -x->capacity, x->id, i};
        const mt_place_node *y = &c->nodes[best];
        node_key ky = {y->speed, -y->capacity, y->id, best};
        if (cmp_fastest(&kx, &ky) < 0) best = i;
    }
    if (best >= 0 && max_got >= 1) {
        got[0] = (pl_part){best, eb, ee, attention};
        used[best] = true;
        return 1;
    }
    uint64_t E = pl_exp(c, a, b), A = attention ? pl_attn_room(c, a, b) : 0;
    if (E == 0 || ee <= eb) return 0;
    int32_t *free_nodes = malloc((size_t)c->n_nodes * sizeof *free_nodes), n_free = 0;
    if (!free_nodes) return 0;
    for (int32_t i = 0; i < c->n_nodes; i++)
        if (c->nodes[i].available && !used[i]) free_nodes[n_free++] = i;
    sort_nodes(c, free_nodes, n_free, cmp_largest);
    int32_t n_got = 0, next = eb, first = 0;
    if (attention) { /* the largest free node takes the attention part */
        if (n_free == 0 || c->nodes[free_nodes[0]].capacity < A) goto fail;
        uint64_t m = (c->nodes[free_nodes[0]].capacity - A) / E;
        int32_t take = m < (uint64_t)(ee - next) ? (int32_t)m : ee - next;
        got[n_got++] = (pl_part){free_nodes[0], next, next + take, true};
        next += take;
        first = 1;
    }
    for (int32_t j = first; j < n_free && next < ee; j++) {
        uint64_t m = c->nodes[free_nodes[j]].capacity / E;
        if (m == 0) break; /* the rest are smaller still */
        if (n_got == max_got) goto fail;
        int32_t take = m < (uint64_t)(ee - next) ? (int32_t)m : ee - next;
        got[n_got++] = (pl_part){free_nodes[j], next, next + take, false};
        next += take;
    }
    if (next < ee) goto fail;
    for (int32_t j = 0; j < n_got; j++) used[got[j].node] = true;
    free(free_nodes);
    return n_got;
fail:
    free(free_nodes);
    return 0;
}

/* ------------------------------------------------------------ rectangles */

int pl_rects(const bool *need, int32_t X, int32_t a, int32_t b, int32_t eb, int32_t ee,
             pl_rect_fn fn, void *ctx) {
    int32_t cap = (ee - eb) / 2 + 2;
    int32_t *open = malloc((size_t)cap * 3 * sizeof *open), n_open = 0; /* (eb, ee, a) */
    int32_t *next = malloc((size_t)cap * 3 * sizeof *next), n_next;
    int rc = 0;
    if (!open || !next) {
        free(open);
        free(next);
        return -1;
    }
    for (int32_t l = a; l <= b && rc == 0; l++) {
        n_next = 0;
        int32_t k = 0; /* open runs are sorted by eb, as are this layer's */
        for (int32_t e = eb; l < b && e < ee;) {
            if (!need[(size_t)l * X + e]) {
                e++;
                continue;
            }
            int32_t f = e;
            while (f < ee && need[(size_t)l * X + f]) f++;
            while (k < n_open && open[3 * k] < e) { /* runs that end here */
                if (rc == 0) rc = fn(ctx, open[3 * k + 2], l, open[3 * k], open[3 * k + 1]);
                k++;
            }
            int32_t start = l;
            if (k < n_open && open[3 * k] == e && open[3 * k + 1] == f)
                start = open[3 * k + 2], k++;
            else if (k < n_open && open[3 * k] == e) { /* same start, other end: closes */
                if (rc == 0) rc = fn(ctx, open[3 * k + 2], l, open[3 * k], open[3 * k + 1]);
                k++;
            }
            next[3 * n_next] = e, next[3 * n_next + 1] = f, next[3 * n_next + 2] = start;
            n_next++;
            e = f;
        }
        for (; k < n_open; k++)
            if (rc == 0) rc = fn(ctx, open[3 * k + 2], l, open[3 * k], open[3 * k + 1]);
        int32_t *t = open;
        open = next;
        next = t;
        n_open = n_next;
    }
    free(open);
    free(next);
    return rc;
}

/* ------------------------------------------------------------ validation */

/* Working memory of layer il's attention part: sessions x (state + n_ctx x
 * position bytes); false when that overflows 64 bits. */
static bool layer_work(const mt_place_params *p, int32_t il, uint64_t *out) {
    uint64_t state = p->state_bytes ? p->state_bytes[il] : 0;
    uint64_t pos = p->position_bytes ? p->position_bytes[il] : 0, per_session;
    *out = 0;
    if (p->sessions <= 0) return true;
    return !__builtin_mul_overflow(pos, (uint64_t)(p->n_ctx > 0 ? p->n_ctx : 0), &per_session) &&
           !__builtin_add_overflow(per_session, state, &per_session) &&
           !__builtin_mul_overflow(per_session, (uint64_t)p->sessions, out);
}

static int check_inputs(const mt_place_model *m, const mt_place_node *nodes, int32_t n,
                        const mt_place_params *p, mt_error *err) {
    if (!m || !p || (n > 0 && !nodes) || n < 0)
        return mt_error_set(err, "placement: model, params and %d nodes are required", n);
    if (m->n_layer < 1 || m->n_layer > 100000)
        return mt_error_set(err, "placement: n_layer %d is outside 1..100000", m->n_layer);
    if (m->n_expert < 0 || m->n_expert > 100000)
        return mt_error_set(err, "placement: n_expert %d is outside 0..100000", m->n_expert);
    if (!m->attn_bytes || !m->expert_bytes)
        return mt_error_set(err, "placement: the model's attn_bytes and expert_bytes are required");
    if (m->n_expert > 0 && (m->n_expert_used < 1 || m->n_expert_used > m->n_expert))
        return mt_error_set(err, "placement: n_expert_used %d must be in 1..%d (n_expert)",
                            m->n_expert_used, m->n_expert);
    uint64_t total = 0;
    bool moe = false;
    for (int32_t il = 0; il < m->n_layer; il++) {
        uint64_t e = m->expert_bytes[il], x;
        if (e > 0 && m->n_expert == 0)
            return mt_error_set(err,
                                "placement: layer %d has routed expert bytes but the model has no"
                                " experts (n_expert 0)",
                                il);
        moe |= e > 0;
        if (__builtin_mul_overflow(e, (uint64_t)m->n_expert, &x) ||
            __builtin_add_overflow(total, x, &total) ||
            __builtin_add_overflow(total, m->attn_bytes[il], &total) || total > (1ull << 62))
            return mt_error_set(err,
                                "placement: the model's sizes add up past 2^62 bytes at layer"
                                " %d; check attn_bytes and expert_bytes",
                                il);
    }
    if (p->mode != MT_PLACE_CELL && p->mode != MT_PLACE_SWARM)
        return mt_error_set(err, "placement: mode %d is neither cell nor swarm", (int)p->mode);
    if (p->mode == MT_PLACE_SWARM && !moe)
        return mt_error_set(err, "placement: swarm mode places routed experts and this model has"
                                 " none; use cell mode");
    if (p->replicas < 1 || p->replicas > 1024)
        return mt_error_set(err, "placement: replicas %d is outside 1..1024", p->replicas);
    if (p->spares < 0 || p->spares > 1000000)
        return mt_error_set(err, "placement: spares %d is outside 0..1000000", p->spares);
    if (p->max_group < 1 || p->max_group > PL_MAX_GROUP)
        return mt_error_set(err, "placement: max_group %d is outside 1..%d", p->max_group,
                            PL_MAX_GROUP);
    if (!(p->bytes_per_ms > 0) || !isfinite(p->bytes_per_ms))
        return mt_error_set(err, "placement: bytes_per_ms must be a positive number");
    if (!(p->partner_call_ms >= 0) || !isfinite(p->partner_call_ms))
        return mt_error_set(err, "placement: partner_call_ms must be a number >= 0");
    if (p->state_bytes || p->position_bytes) {
        if (p->sessions < 0 || p->sessions > (1 << 20))
            return mt_error_set(err, "placement: sessions %d is outside 0..2^20", p->sessions);
        if (p->n_ctx < 0 || p->n_ctx > (1 << 24))
            return mt_error_set(err, "placement: n_ctx %d is outside 0..2^24", p->n_ctx);
        for (int32_t il = 0; il < m->n_layer; il++) {
            uint64_t w;
            if (!layer_work(p, il, &w) || __builtin_add_overflow(total, w, &total) ||
                total > (1ull << 62))
                return mt_error_set(err,
                                    "placement: the model's sizes and working memory (%d sessions"
                                    " x %d positions) add up past 2^62 bytes at layer %d; check"
                                    " state_bytes and position_bytes",
                                    p->sessions, p->n_ctx, il);
        }
    }
    if (n > (1 << 20)) return mt_error_set(err, "placement: %d nodes is more than 2^20", n);
    for (int32_t i = 0; i < n; i++) {
        if (!(nodes[i].speed > 0) || !isfinite(nodes[i].speed) || nodes[i].speed > 1e9)
            return mt_error_set(err, "placement: node %lld has speed %g; it must be in (0, 1e9]",
                                (long long)nodes[i].id, nodes[i].speed);
        if (nodes[i].capacity > (1ull << 43)) /* so that sums over 2^20 nodes fit 64 bits */
            return mt_error_set(err,
                                "placement: node %lld has capacity %llu bytes; at most 2^43 (8 TiB)"
                                " is supported",
                                (long long)nodes[i].id, (unsigned long long)nodes[i].capacity);
    }
    int64_t *ids = malloc((size_t)(n > 0 ? n : 1) * sizeof *ids);
    if (!ids) return mt_error_set(err, "out of memory");
    for (int32_t i = 0; i < n; i++) ids[i] = nodes[i].id;
    int rc = 0;
    /* shell sort (gaps n/2, n/4, ...), then neighbours must differ */
    for (int32_t gap = n / 2; gap > 0; gap /= 2)
        for (int32_t i = gap; i < n; i++)
            for (int32_t j = i; j >= gap && ids[j - gap] > ids[j]; j -= gap) {
                int64_t t = ids[j];
                ids[j] = ids[j - gap];
                ids[j - gap] = t;
            }
    for (int32_t i = 1; i < n && !rc; i++)
        if (ids[i] == ids[i - 1])
            rc = mt_error_set(err, "placement: node id %lld is listed twice; ids must be unique",
                              (long long)ids[i]);
    free(ids);
    return rc;
}

static int ctx_init(pl_ctx *c, const mt_place_model *m, const mt_place_node *nodes, int32_t n,
                    const mt_place_params *p) {
    memset(c, 0, sizeof *c);
    c->m = m;
    c->nodes = nodes;
    c->n_nodes = n;
    c->p = p;
    c->L = m->n_layer;
    c->X = m->n_expert;
    c->U = m->n_expert > 0 ? m->n_expert_used : 0;
    c->attn_pre = calloc((size_t)c->L + 1, sizeof *c->attn_pre);
    c->exp_pre = calloc((size_t)c->L + 1, sizeof *c->exp_pre);
    c->moe_pre = calloc((size_t)c->L + 1, sizeof *c->moe_pre);
    c->work_pre = calloc((size_t)c->L + 1, sizeof *c->work_pre);
    if (!c->attn_pre || !c->exp_pre || !c->moe_pre || !c->work_pre) return -1;
    for (int32_t il = 0; il < c->L; il++) {
        uint64_t w;
        layer_work(p, il, &w); /* check_inputs saw it fit */
        c->attn_pre[il + 1] = c->attn_pre[il] + m->attn_bytes[il];
        c->exp_pre[il + 1] = c->exp_pre[il] + m->expert_bytes[il];
        c->moe_pre[il + 1] = c->moe_pre[il] + (m->expert_bytes[il] > 0);
        c->work_pre[il + 1] = c->work_pre[il] + w;
    }
    c->experts_bytes = (uint64_t)c->X * c->exp_pre[c->L];
    c->model_bytes = c->attn_pre[c->L] + c->experts_bytes;
    c->model_need = c->model_bytes + c->work_pre[c->L];
    return 0;
}

static void ctx_free(pl_ctx *c) {
    free(c->attn_pre);
    free(c->exp_pre);
    free(c->moe_pre);
    free(c->work_pre);
}

/* ---------------------------------------------------------------- planning */

/* Plans up to `want` pipelines / replicas from pool (every node offered),
 * then keeps `spares` of the nodes out of them: the nodes the plan leaves
 * unused, and if there are too few, the slowest nodes that can hold the
 * plan's largest shard with its working memory (then the largest others),
 * as many as the plan can do without and keep its number of pipelines.
 * Appends the pieces and marks their nodes in used. */
static int32_t build_with_spares(const pl_ctx *c, const int32_t *pool, int32_t n_pool, int32_t want,
                                 const int32_t *idx, pl_pieces *out, bool *used) {
    pl_build_fn build = c->p->mode == MT_PLACE_CELL ? pl_cell_build : pl_swarm_build;
    pl_pieces best = {0}, tmp = {0};
    int32_t *pool2 = malloc((size_t)(n_pool > 0 ? n_pool : 1) * sizeof *pool2);
    int32_t *cand = malloc((size_t)(n_pool > 0 ? n_pool : 1) * sizeof *cand);
    bool *in = calloc((size_t)c->n_nodes + 1, sizeof *in);
    int32_t built = -1;
    if (!pool2 || !cand || !in) goto done;
    built = build(c, pool, n_pool, want, idx, &best);
    if (built <= 0) goto done;
    for (int32_t i = 0; i < best.n; i++) in[best.v[i].node] = true;
    int32_t n_used = 0;
    uint64_t largest = 0;
    for (int32_t j = 0; j < n_pool; j++) n_used += in[pool[j]];
    for (int32_t i = 0; i < best.n; i++) {
        const pl_piece *q = &best.v[i];
        uint64_t room = pl_piece_room(c, q->a, q->b, q->attention, q->eb, q->ee);
        if (room > largest) largest = room;
    }
    int32_t missing = c->p->spares - (n_pool - n_used);
    if (missing <= 0) goto done;
    /* candidates: used nodes able to hold the largest shard, slowest first;
     * then the others, largest first */
    int32_t n_cand = 0;
    for (int32_t j = 0; j < n_pool; j++)
        if (in[pool[j]] && c->nodes[pool[j]].capacity >= largest) cand[n_cand++] = pool[j];
    pl_sort_fastest(c, cand, n_cand);
    for (int32_t i = 0; i < n_cand / 2; i++) {
        int32_t t = cand[i];
        cand[i] = cand[n_cand - 1 - i];
        cand[n_cand - 1 - i] = t;
    }
    int32_t n_big = n_cand;
    for (int32_t j = 0; j < n_pool; j++)
        if (in[pool[j]] && c->nodes[pool[j]].capacity < largest) cand[n_cand++] = pool[j];
    sort_nodes(c, cand + n_big, n_cand - n_big, cmp_largest);
    /* the most candidates (up to `missing`) the plan can do without: bisection,
     * as reserving more never gives more pipelines */
    int32_t lo = 0, hi = missing < n_cand ? missing : n_cand;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo + 1) / 2, n2 = 0;
        for (int32_t t = 0; t < n_cand; t++) in[cand[t]] = t < mid; /* in = reserved now */
        for (int32_t j = 0; j < n_pool; j++)
            if (!in[pool[j]]) pool2[n2++] = pool[j];
        tmp.n = 0;
        int32_t b2 = build(c, pool2, n2, built, idx, &tmp);
        if (b2 < 0) {
            built = -1;
            goto done;
        }
        if (b2 == built) {
            pl_pieces t = best;
            best = tmp;
            tmp = t;
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
done:
    if (built > 0) {
        for (int32_t i = 0; i < best.n; i++) {
            if (pl_push(out, best.v[i])) {
                built = -1;
                break;
            }
            used[best.v[i].node] = true;
        }
    }
    pl_pieces_free(&best);
    pl_pieces_free(&tmp);
    free(pool2);
    free(cand);
    free(in);
    return built;
}

static int32_t plan_from_scratch(const pl_ctx *c, pl_pieces *out, bool *used) {
    int32_t *pool = malloc((size_t)(c->n_nodes + 1) * sizeof *pool), n_pool = 0;
    int32_t *idx = malloc((size_t)c->p->replicas * sizeof *idx);
    int32_t built = -1;
    if (pool && idx) {
        for (int32_t i = 0; i < c->n_nodes; i++)
            if (c->nodes[i].available) pool[n_pool++] = i;
        for (int32_t k = 0; k < c->p->replicas; k++) idx[k] = k;
        built = build_with_spares(c, pool, n_pool, c->p->replicas, idx, out, used);
    }
    free(pool);
    free(idx);
    return built;
}

static int cmp_int32(const void *pa, const void *pb) {
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    return (a > b) - (a < b);
}

/* Keeps what the nodes' current assignments describe, then builds the
 * missing pipelines from the free nodes. Returns the pipelines made;
 * *n_kept_out gets how many of them were kept. */
static int32_t plan_keeping(const pl_ctx *c, pl_pieces *out, bool *used, int32_t *n_kept_out) {
    int32_t R = c->p->replicas, n = c->n_nodes;
    int32_t *kept = malloc((size_t)(n + 1) * sizeof *kept);
    int32_t *pool = malloc((size_t)(n + 1) * sizeof *pool);
    int32_t *idx = malloc((size_t)R * sizeof *idx);
    int32_t count = -1;
    if (!kept || !pool || !idx) goto done;
    int32_t n_kept = c->p->mode == MT_PLACE_CELL ? pl_cell_keep(c, used, out, kept)
                                                 : pl_swarm_keep(c, used, out, kept);
    if (n_kept < 0) goto done;
    *n_kept_out = n_kept;
    qsort(kept, (size_t)n_kept, sizeof *kept, cmp_int32);
    if (n_kept > R) { /* fewer replicas asked than before: drop the highest indices */
        int32_t w = 0;
        for (int32_t i = 0; i < out->n; i++) {
            if (out->v[i].pipeline > kept[R - 1])
                used[out->v[i].node] = false;
            else
                out->v[w++] = out->v[i];
        }
        out->n = w;
        n_kept = R;
    }
    count = n_kept;
    if (n_kept < R) {
        int32_t n_pool = 0, next = 0, k = 0;
        for (int32_t i = 0; i < n; i++)
            if (c->nodes[i].available && !used[i]) pool[n_pool++] = i;
        for (int32_t j = 0; k < R - n_kept; next++) { /* smallest indices not kept */
            while (j < n_kept && kept[j] < next) j++;
            if (j < n_kept && kept[j] == next) continue;
            idx[k++] = next;
        }
        int32_t built = build_with_spares(c, pool, n_pool, R - n_kept, idx, out, used);
        count = built < 0 ? -1 : n_kept + built;
    }
done:
    free(kept);
    free(pool);
    free(idx);
    return count;
}

/* ---------------------------------------------------------------- the plan */

/* Order of the plan's assignments: pipelines by index, groups by first
 * layer, the stage before its partners, experts ascending; spares last. */
typedef struct keyed_piece {
    pl_piece q;
    int64_t id; /* the node's id */
} keyed_piece;

static int cmp_piece(const void *pa, const void *pb) {
    const keyed_piece *ka = pa, *kb = pb;
    const pl_piece *a = &ka->q, *b = &kb->q;
    bool sa = a->role == MT_PLACE_SPARE, sb = b->role == MT_PLACE_SPARE;
    if (sa != sb) return sa ? 1 : -1;
    if (!sa) {
        if (a->pipeline != b->pipeline) return a->pipeline < b->pipeline ? -1 : 1;
        if (a->a != b->a) return a->a < b->a ? -1 : 1;
        if (a->attention != b->attention) return a->attention ? -1 : 1;
        if (a->eb != b->eb) return a->eb < b->eb ? -1 : 1;
    }
    return (ka->id > kb->id) - (ka->id < kb->id);
}

static double piece_ms(const pl_ctx *c, const pl_piece *q) {
    if (q->role == MT_PLACE_SPARE) return 0;
    double touched = (q->attention ? (double)pl_attn(c, q->a, q->b) : 0);
    if (c->X > 0) touched += (double)c->U * (q->ee - q->eb) / c->X * (double)pl_exp(c, q->a, q->b);
    return touched / pl_speed_bpm(c, q->node);
}

static bool same_shard(const mt_place_assign *cur, const pl_piece *q) {
    bool holds_cur = cur->role == MT_PLACE_STAGE || cur->role == MT_PLACE_PARTNER ||
                     cur->role == MT_PLACE_EXPERTS;
    bool holds_new = q->role != MT_PLACE_SPARE;
    if (!holds_cur || !holds_new) return holds_cur == holds_new;
    return cur->layer_begin == q->a && cur->layer_end == q->b && cur->attention == q->attention &&
           cur->expert_begin == q->eb && cur->expert_end == q->ee;
}

static void append(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t cap, const char *fmt, ...) {
    size_t len = strlen(buf);
    if (len >= cap - 1) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, cap - len, fmt, ap);
    va_end(ap);
}

/* Why the available nodes cannot make `want` pipelines / replicas. */
static void explain(const pl_ctx *c, int32_t made, char *buf, size_t cap) {
    int32_t R = c->p->replicas, n_avail = 0;
    bool cell = c->p->mode == MT_PLACE_CELL;
    uint64_t total = 0, largest = 0;
    char b1[32], b2[32], b3[32];
    for (int32_t i = 0; i < c->n_nodes; i++)
        if (c->nodes[i].available) {
            n_avail++;
            total += c->nodes[i].capacity;
            if (c->nodes[i].capacity > largest) largest = c->nodes[i].capacity;
        }
    const char *what = cell ? "pipelines" : "replicas";
    if (made == 0)
        snprintf(buf, cap, "no complete %s: ", cell ? "pipeline" : "replica");
    else
        snprintf(buf, cap, "made %d of %d %s: ", made, R, what);
    uint64_t one = cell ? c->model_need : c->experts_bytes;
    uint64_t work = cell ? c->work_pre[c->L] : 0; /* swarm: the requester keeps attention */
    if (n_avail == 0) {
        append(buf, cap, "no available node (%d known, none available): start or resume nodes",
               c->n_nodes);
        return;
    }
    if (total < (uint64_t)(made + 1) * one) {
        append(buf, cap, "total capacity %s of %d available node%s < %d replica%s x %s",
               pl_fmt_bytes(total, b1, sizeof b1), n_avail, n_avail == 1 ? "" : "s", made + 1,
               made + 1 == 1 ? "" : "s", pl_fmt_bytes(one, b2, sizeof b2));
        if (work)
            append(buf, cap, " (%s of it working memory: %d sessions x %d positions)",
                   pl_fmt_bytes(work, b3, sizeof b3), c->p->sessions, c->p->n_ctx);
        append(buf, cap, ": add nodes");
        return;
    }
    for (int32_t il = 0; il < c->L; il++) {
        uint64_t piece = cell ? pl_attn_room(c, il, il + 1) : c->m->expert_bytes[il];
        if (piece > largest) {
            append(buf, cap, "%s of layer %d (%s",
                   cell ? "the attention part" : "one routed expert", il,
                   pl_fmt_bytes(cell ? c->m->attn_bytes[il] : piece, b1, sizeof b1));
            if (cell && pl_work(c, il, il + 1))
                append(buf, cap, " + %s working memory",
                       pl_fmt_bytes(pl_work(c, il, il + 1), b3, sizeof b3));
            append(buf, cap,
                   ") fits on no available node (the largest holds %s): add a larger node",
                   pl_fmt_bytes(largest, b2, sizeof b2));
            return;
        }
    }
    uint64_t layer_max = 0;
    for (int32_t il = 0; il < c->L; il++) {
        uint64_t w = cell ? pl_piece_room(c, il, il + 1, true, 0, c->X) : c->m->expert_bytes[il];
        if (w > layer_max) layer_max = w;
    }
    append(buf, cap,
           "the %d available nodes (total %s, largest %s) cannot be packed into %d complete %s"
           " (largest %s %s): add nodes or larger ones",
           n_avail, pl_fmt_bytes(total, b1, sizeof b1), pl_fmt_bytes(largest, b2, sizeof b2),
           made + 1, what, cell ? "layer" : "expert of a layer",
           pl_fmt_bytes(layer_max, b3, sizeof b3));
}

/* The assignment that needs the most room (bytes + working memory). */
static const mt_place_assign *largest_need(const mt_place_plan *plan) {
    for (int32_t k = 0; k < plan->n_assign; k++)
        if (plan->assign[k].bytes + plan->assign[k].work_bytes == plan->largest_need)
            return &plan->assign[k];
    return &plan->assign[0];
}

static int finish(const pl_ctx *c, pl_pieces *w, bool *used, int32_t count, bool replanned,
                  mt_place_plan *out, mt_error *err) {
    int32_t L = c->L, X = c->X;
    bool cell = c->p->mode == MT_PLACE_CELL;
    for (int32_t i = 0; i < c->n_nodes; i++)
        if (c->nodes[i].available && !used[i] &&
            pl_push(w, (pl_piece){i, MT_PLACE_SPARE, -1, 0, 0, false, 0, 0, -1}))
            return mt_error_set(err, "out of memory");
    keyed_piece *kp = malloc((size_t)(w->n > 0 ? w->n : 1) * sizeof *kp);
    if (!kp) return mt_error_set(err, "out of memory");
    for (int32_t i = 0; i < w->n; i++) kp[i] = (keyed_piece){w->v[i], c->nodes[w->v[i].node].id};
    qsort(kp, (size_t)w->n, sizeof *kp, cmp_piece);
    for (int32_t i = 0; i < w->n; i++) w->v[i] = kp[i].q;
    free(kp);

    out->mode = c->p->mode;
    out->n_layer = L;
    out->n_expert = X;
    out->replicas_wanted = c->p->replicas;
    out->replanned = replanned;
    size_t n_cov = cell ? (size_t)L : (size_t)L * (size_t)(X > 0 ? X : 1);
    out->moe_layer = calloc((size_t)L, sizeof *out->moe_layer);
    out->coverage = calloc(n_cov, sizeof *out->coverage);
    out->assign = calloc((size_t)(w->n > 0 ? w->n : 1), sizeof *out->assign);
    out->pipelines = calloc((size_t)w->n + 1, sizeof *out->pipelines); /* at most one each */
    double *layer_max = calloc((size_t)L, sizeof *layer_max);
    if (!out->moe_layer || !out->coverage || !out->assign || !out->pipelines || !layer_max) {
        free(layer_max);
        return mt_error_set(err, "out of memory");
    }
    for (int32_t il = 0; il < L; il++) out->moe_layer[il] = c->m->expert_bytes[il] > 0;

    /* assignments, group numbers */
    int32_t group = -1, prev_pipe = -1, prev_a = -1;
    for (int32_t i = 0; i < w->n; i++) {
        const pl_piece *q = &w->v[i];
        mt_place_assign *a = &out->assign[i];
        if (q->role != MT_PLACE_SPARE) {
            if (q->pipeline != prev_pipe) group = -1, prev_a = -1;
            if (!cell || q->a != prev_a) group++;
            prev_pipe = q->pipeline;
            prev_a = q->a;
        }
        *a = (mt_place_assign){
            .node = c->nodes[q->node].id,
            .role = q->role,
            .pipeline = q->role == MT_PLACE_SPARE ? -1 : q->pipeline,
            .group = q->role == MT_PLACE_SPARE ? -1 : group,
            .layer_begin = q->a,
            .layer_end = q->b,
            .attention = q->attention,
            .expert_begin = q->eb,
            .expert_end = q->ee,
            .paired_with = q->role == MT_PLACE_PARTNER ? c->nodes[q->paired].id : 0,
            .bytes = q->role == MT_PLACE_SPARE
                         ? 0
                         : pl_piece_bytes(c, q->a, q->b, q->attention, q->eb, q->ee),
            .ms_per_token = piece_ms(c, q),
            .work_bytes = q->role != MT_PLACE_SPARE && q->attention ? pl_work(c, q->a, q->b) : 0,
        };
        if (a->bytes > out->largest_shard) out->largest_shard = a->bytes;
        if (a->bytes + a->work_bytes > out->largest_need)
            out->largest_need = a->bytes + a->work_bytes;
        if (q->role == MT_PLACE_SPARE) out->n_spares++;
        if (!same_shard(&c->nodes[q->node].current, q)) out->moves++;
    }
    out->n_assign = w->n;

    /* pipelines: runs of one index; cell groups: runs of one first layer */
    int32_t i = 0;
    while (i < w->n && w->v[i].role != MT_PLACE_SPARE) {
        int32_t j = i, pipe = w->v[i].pipeline;
        while (j < w->n && w->v[j].role != MT_PLACE_SPARE && w->v[j].pipeline == pipe) j++;
        mt_place_pipeline *pp = &out->pipelines[out->n_pipelines++];
        pp->index = pipe;
        pp->n_nodes = j - i;
        double sum = 0;
        int32_t n_units = 0;
        if (cell) {
            for (int32_t g = i; g < j;) {
                int32_t h = g;
                double att = 0, exp_max = 0;
                while (h < j && w->v[h].a == w->v[g].a) {
                    const pl_piece *q = &w->v[h];
                    if (q->attention)
                        att = (double)pl_attn(c, q->a, q->b) / pl_speed_bpm(c, q->node);
                    double e = piece_ms(c, q) - (q->attention ? att : 0);
                    if (e > exp_max) exp_max = e;
                    h++;
                }
                double t = att + exp_max;
                if (h - g > 1) t += pl_moe(c, w->v[g].a, w->v[g].b) * c->p->partner_call_ms;
                for (int32_t il = w->v[g].a; il < w->v[g].b; il++) out->coverage[il]++;
                if (t > pp->slowest_ms) pp->slowest_ms = t;
                sum += t;
                n_units++;
                pp->latency_ms += t;
                g = h;
            }
        } else {
            for (int32_t il = 0; il < L; il++) layer_max[il] = 0;
            for (int32_t g = i; g < j; g++) {
                const pl_piece *q = &w->v[g];
                double t = piece_ms(c, q);
                if (t > pp->slowest_ms) pp->slowest_ms = t;
                sum += t;
                n_units++;
                for (int32_t il = q->a; il < q->b; il++) {
                    if (!out->moe_layer[il]) continue;
                    double tl = (double)c->U * (q->ee - q->eb) / X *
                                (double)c->m->expert_bytes[il] / pl_speed_bpm(c, q->node);
                    if (tl > layer_max[il]) layer_max[il] = tl;
                    for (int32_t e = q->eb; e < q->ee; e++) out->coverage[(size_t)il * X + e]++;
                }
            }
            for (int32_t il = 0; il < L; il++) pp->latency_ms += layer_max[il];
        }
        pp->n_groups = n_units;
        pp->average_ms = n_units ? sum / n_units : 0;
        i = j;
    }
    free(layer_max);

    /* coverage */
    out->min_replicas = -1;
    for (int32_t il = 0; il < L; il++) {
        if (cell) {
            if (out->min_replicas < 0 || out->coverage[il] < out->min_replicas)
                out->min_replicas = out->coverage[il];
        } else if (out->moe_layer[il]) {
            for (int32_t e = 0; e < X; e++) {
                int32_t k = out->coverage[(size_t)il * X + e];
                if (out->min_replicas < 0 || k < out->min_replicas) out->min_replicas = k;
            }
        }
    }
    if (out->min_replicas < 0) out->min_replicas = 0;
    out->complete = out->min_replicas >= 1;

    /* reasons */
    if (count < c->p->replicas) explain(c, count, out->reason, sizeof out->reason);
    int32_t S = c->p->spares, able = 0;
    for (int32_t k = 0; k < out->n_assign; k++)
        if (out->assign[k].role == MT_PLACE_SPARE) {
            const mt_place_node *x = &c->nodes[w->v[k].node];
            able += x->capacity >= out->largest_need;
        }
    char b1[32], b2[32];
    if (out->n_spares < S)
        append(out->warning, sizeof out->warning,
               "only %d of %d spares: the %s need every other node", out->n_spares, S,
               cell ? "pipelines" : "replicas");
    else if (able < S && count > 0 && out->largest_need == out->largest_shard)
        append(out->warning, sizeof out->warning,
               "only %d of %d spares can take over the largest shard (%s): add a larger node", able,
               S, pl_fmt_bytes(out->largest_shard, b1, sizeof b1));
    else if (able < S && count > 0)
        append(out->warning, sizeof out->warning,
               "only %d of %d spares can take over the largest shard (%s + %s working memory):"
               " add a larger node",
               able, S, pl_fmt_bytes(largest_need(out)->bytes, b1, sizeof b1),
               pl_fmt_bytes(largest_need(out)->work_bytes, b2, sizeof b2));
    return 0;
}

int mt_place_plan_make(const mt_place_model *m, const mt_place_node *nodes, int32_t n_nodes,
                       const mt_place_params *p, mt_place_plan *out, mt_error *err) {
    memset(out, 0, sizeof *out);
    if (check_inputs(m, nodes, n_nodes, p, err)) return -1;
    pl_ctx c;
    pl_pieces w = {0}, w2 = {0};
    bool *used = calloc((size_t)n_nodes + 1, sizeof *used);
    bool *used2 = calloc((size_t)n_nodes + 1, sizeof *used2);
    int rc = -1;
    if (ctx_init(&c, m, nodes, n_nodes, p) || !used || !used2) {
        mt_error_set(err, "out of memory");
        goto done;
    }
    bool has_prev = false;
    for (int32_t i = 0; i < n_nodes && !has_prev; i++) {
        mt_place_role r = nodes[i].current.role;
        has_prev = p->mode == MT_PLACE_CELL ? r == MT_PLACE_STAGE || r == MT_PLACE_PARTNER
                                            : r == MT_PLACE_EXPERTS;
    }
    int32_t count = -1;
    bool replanned = true;
    if (has_prev) {
        int32_t n_kept = 0;
        count = plan_keeping(&c, &w, used, &n_kept);
        replanned = n_kept == 0;
        if (count >= 0 && count < p->replicas) { /* would a fresh plan do better? */
            int32_t fresh = plan_from_scratch(&c, &w2, used2);
            if (fresh > count) {
                pl_pieces t = w;
                w = w2;
                w2 = t;
                bool *u = used;
                used = used2;
                used2 = u;
                count = fresh;
                replanned = true;
            } else if (fresh < 0) {
                count = -1;
            }
        }
    } else {
        count = plan_from_scratch(&c, &w, used);
    }
    if (count < 0) {
        mt_error_set(err, "out of memory");
        goto done;
    }
    if (finish(&c, &w, used, count, replanned, out, err)) {
        mt_place_plan_free(out);
        goto done;
    }
    rc = count < p->replicas ? MT_PLACE_SHORT : 0;
done:
    pl_pieces_free(&w);
    pl_pieces_free(&w2);
    free(used);
    free(used2);
    ctx_free(&c);
    return rc;
}

void mt_place_plan_free(mt_place_plan *plan) {
    if (!plan) return;
    free(plan->moe_layer);
    free(plan->assign);
    free(plan->pipelines);
    free(plan->coverage);
    memset(plan, 0, sizeof *plan);
}

const mt_place_assign *mt_place_plan_find(const mt_place_plan *plan, int64_t id) {
    for (int32_t i = 0; i < plan->n_assign; i++)
        if (plan->assign[i].node == id) return &plan->assign[i];
    return NULL;
}

void mt_place_set_current(mt_place_node *nodes, int32_t n_nodes, const mt_place_plan *plan) {
    for (int32_t i = 0; i < n_nodes; i++) {
        const mt_place_assign *a = mt_place_plan_find(plan, nodes[i].id);
        if (a)
            nodes[i].current = *a;
        else
            memset(&nodes[i].current, 0, sizeof nodes[i].current);
    }
}

int mt_place_shard_spec(const mt_place_model *m, const mt_place_assign *a, int32_t *ids,
                        mt_shard_spec *out, mt_error *err) {
    memset(out, 0, sizeof *out);
    if (a->role != MT_PLACE_STAGE && a->role != MT_PLACE_PARTNER && a->role != MT_PLACE_EXPERTS)
        return mt_error_set(err, "node %lld: a %s holds no shard", (long long)a->node,
                            mt_place_role_name(a->role));
    if (a->layer_begin < 0 || a->layer_end > m->n_layer || a->layer_begin >= a->layer_end ||
        a->expert_begin < 0 || a->expert_end > m->n_expert || a->expert_begin > a->expert_end)
        return mt_error_set(err,
                            "node %lld: layers [%d, %d) x experts [%d, %d) lie outside the model"
                            " (%d layers, %d experts)",
                            (long long)a->node, a->layer_begin, a->layer_end, a->expert_begin,
                            a->expert_end, m->n_layer, m->n_expert);
    for (int32_t e = a->expert_begin; e < a->expert_end; e++) ids[e - a->expert_begin] = e;
    out->layer_begin = a->layer_begin;
    out->layer_end = a->layer_end;
    out->attention = a->attention;
    out->head = false;
    out->experts = ids;
    out->n_experts = a->expert_end - a->expert_begin;
    return 0;
}
