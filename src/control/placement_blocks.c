/* placement_blocks.c - the building blocks both placement modes share
 * (placement_internal.h): role, mode and objective names, the working pieces, nodes
 * sorted by speed, the expert water-fill, the snake draft and balancing of
 * node lists, building replicas, filling a lost shard from free nodes, and
 * cutting what is missing into rectangles of layers x experts. */
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

static const char *const objective_names[] = {"throughput", "latency", "balanced"};

const char *mt_place_objective_name(mt_place_objective o) {
    return (unsigned)o < 3 ? objective_names[o] : "?";
}

int mt_place_objective_parse(const char *s, mt_place_objective *out) {
    for (int i = 0; s && i < 3; i++)
        if (strcmp(s, objective_names[i]) == 0) {
            *out = (mt_place_objective)i;
            return 0;
        }
    return -1;
}

mt_place_params mt_place_default_params(mt_place_mode mode) {
    mt_place_params p = {
        .mode = mode,
        .replicas = 2,
        .spares = mode == MT_PLACE_CELL ? 1 : 0,
        .max_group = 8,
        .bytes_per_ms = 1e7,
        .partner_call_ms = 0.25,
        .objective = MT_PLACE_THROUGHPUT,
        .hop_ms = 0.5,
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

void pl_sort_largest(const pl_ctx *c, int32_t *v, int32_t n) {
    sort_nodes(c, v, n, cmp_largest);
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
    /* The greedy below hands out the X - sum smallest values j / speed[i]
     * (j = n[i] + 1 .. max[i]; ties to lower i). Rounds of a bulk start first:
     * over the members S still below their maximum and not ahead of the
     * level t = (left + their n) / (their speed), every value up to t is
     * among those the greedy picks (at most `left` values are <= t), so each
     * takes floor(t * speed) - 1 at once (one less for rounding); the greedy
     * then hands out the few left over, exactly as it would have. */
    int64_t left = X - sum;
    for (int round = 0; k <= PL_MAX_GROUP && round < 8 && left > 2 * (int64_t)k; round++) {
        bool in[PL_MAX_GROUP];
        double t = 0;
        for (int32_t i = 0; i < k; i++) in[i] = n[i] < max[i];
        for (bool again = true; again;) {
            double num = (double)left, den = 0;
            for (int32_t i = 0; i < k; i++)
                if (in[i]) num += n[i], den += speed[i];
            if (den <= 0) break;
            t = num / den;
            again = false;
            for (int32_t i = 0; i < k; i++)
                if (in[i] && n[i] > t * speed[i]) in[i] = false, again = true;
        }
        int64_t gave = 0;
        for (int32_t i = 0; i < k; i++) {
            if (!in[i]) continue;
            double want = floor(t * speed[i]) - 1;
            if (want > max[i]) want = max[i];
            if (want > n[i]) gave += (int64_t)want - n[i], n[i] = (int32_t)want;
        }
        left -= gave;
        if (gave == 0) break;
    }
    /* one expert at a time to whoever would finish it soonest */
    for (int64_t r = left; r > 0; r--) {
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
    /* as many copies as the nodes allow, from `want` down (to build_min when set) */
    for (int32_t r = r_max; r >= (c->build_min > 0 ? c->build_min : 1) && made == 0; r--) {
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
