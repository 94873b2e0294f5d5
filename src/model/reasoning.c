/* reasoning.c - splitting a thinking model's output into reasoning and answer
 * (moontail/reasoning.h).
 *
 * The splitter is a small state machine over the stream's bytes:
 *   start        the output may open a reasoning (Qwen3: `<think>` comes from the model), or
 *                go straight to the answer; whitespace before the opener is dropped
 *   think-start  the prompt opened the reasoning (R1, K3); a repeated opener is dropped
 *   think        reasoning, up to a closer
 *   after        K3: the response section's opener is dropped
 *   answer       the answer, up to its end (K3's response closer), after which
 *   done         everything is dropped
 * In each state it hands out the bytes that can no longer be the start of a marker. */
#include "moontail/reasoning.h"
#include "moontail/compat.h"
#include "text_match_internal.h"

#include <stdlib.h>
#include <string.h>

enum { S_START, S_THINK_START, S_THINK, S_AFTER, S_ANSWER, S_DONE };

#define CODE_BYTE '\xff'

/* ---- markers ------------------------------------------------------------------------------ */

int mt_reasoning_marker(mt_reasoning *r, const mt_vocab *v, const char *const *pieces,
                        char out[MT_REASONING_MARKER]) {
    size_t n = 0;
    out[0] = 0;
    for (; *pieces; pieces++) {
        const size_t len = strlen(*pieces);
        const int32_t id = mt_vocab_find(v, *pieces, len);
        if (id >= 0 && mt_vocab_is_control(v, id)) {
            int code = mt_reasoning_code(r, id);
            if (!code) {
                if (r->n_special == MT_REASONING_SPECIALS) return -1;
                r->special[r->n_special++] = id;
                code = r->n_special;
            }
            if (n + 3 > MT_REASONING_MARKER) return -1;
            out[n++] = CODE_BYTE;
            out[n++] = (char)code;
        } else {
            if (n + len + 1 > MT_REASONING_MARKER) return -1;
            memcpy(out + n, *pieces, len);
            n += len;
        }
        out[n] = 0;
    }
    return 0;
}

int mt_reasoning_code(const mt_reasoning *r, int32_t id) {
    for (int i = 0; i < r->n_special; i++)
        if (r->special[i] == id) return i + 1;
    return 0;
}

static bool is_ws(char c) {
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

bool mt_reasoning_prompt_opens(const mt_reasoning *r, const mt_vocab *v, const int32_t *ids,
                               int64_t n) {
    const size_t olen = strlen(r->open);
    if (!olen || n <= 0) return false;
    /* the stream of the prompt's last tokens (an opener and its whitespace fit in 64) */
    const int64_t from = n > 64 ? n - 64 : 0;
    size_t len = 0, cap = 256;
    char *buf = malloc(cap);
    bool opens = false;
    for (int64_t i = from; buf && i < n; i++) {
        const int code = mt_reasoning_code(r, ids[i]);
        int64_t k = code ? 2 : mt_token_to_bytes(v, ids[i], false, NULL, 0);
        if (k < 0) k = 0;
        if (len + (size_t)k > cap) {
            cap = 2 * (len + (size_t)k);
            char *b = realloc(buf, cap);
            if (!b) {
                free(buf);
                return false;
            }
            buf = b;
        }
        if (code) {
            buf[len] = CODE_BYTE;
            buf[len + 1] = (char)code;
        } else if (k > 0) {
            mt_token_to_bytes(v, ids[i], false, buf + len, (size_t)k);
        }
        len += (size_t)k;
    }
    if (!buf) return false;
    const char *last = NULL;
    for (const char *p = buf; (p = mt_memmem(p, len - (size_t)(p - buf), r->open, olen)); p++)
        last = p;
    if (last) {
        opens = true;
        for (const char *p = last + olen; p < buf + len; p++)
            if (!is_ws(*p)) opens = false;
    }
    free(buf);
    return opens;
}

/* ---- the splitter ------------------------------------------------------------------------- */

void mt_reasoning_split_init(mt_reasoning_split *s, const mt_reasoning *r) {
    memset(s, 0, sizeof *s);
    s->r = r;
    s->state = r->starts_thinking ? S_THINK_START : S_START;
}

void mt_reasoning_split_free(mt_reasoning_split *s) {
    free(s->buf);
    memset(s, 0, sizeof *s);
}

static bool starts_with(const char *p, size_t n, const char *m) {
    const size_t ml = strlen(m);
    return ml && n >= ml && memcmp(p, m, ml) == 0;
}

/* p[0..n) is the beginning of m, too short to tell yet. */
static bool is_prefix(const char *p, size_t n, const char *m) {
    const size_t ml = strlen(m);
    return ml && n < ml && (n == 0 || memcmp(p, m, n) == 0);
}

/* The alternative markers that end one part, as the list text_match takes ("" ones never
 * match). */
typedef struct marker_list {
    const char *s[MT_REASONING_ALTS];
} marker_list;

static marker_list markers(const char (*ms)[MT_REASONING_MARKER]) {
    marker_list l;
    for (int i = 0; i < MT_REASONING_ALTS; i++) l.s[i] = ms[i];
    return l;
}

/* Hands out p[0..n) without its marker codes (control tokens have no text). */
static int emit(bool reasoning, const char *p, size_t n, mt_reasoning_split_out out, void *ctx) {
    size_t i = 0;
    while (i < n) {
        const char *c = memchr(p + i, CODE_BYTE, n - i);
        const size_t run = c ? (size_t)(c - (p + i)) : n - i;
        if (run && out(ctx, reasoning, p + i, run)) return -1;
        i += run + (c ? 2 : 0);
    }
    return 0;
}

static void consume(mt_reasoning_split *s, size_t k) {
    if (k > s->len) k = s->len;
    if (k == 0) return;
    memmove(s->buf, s->buf + k, s->len - k);
    s->len -= k;
}

/* Hands out what is decided (everything when final). */
static int process(mt_reasoning_split *s, bool final, mt_reasoning_split_out out, void *ctx) {
    const mt_reasoning *r = s->r;
    for (;;) {
        const char *b = s->buf;
        const size_t n = s->len;
        switch (s->state) {
        case S_START:
        case S_THINK_START: {
            const bool start = s->state == S_START;
            size_t ws = 0;
            while (ws < n && is_ws(b[ws])) ws++;
            if (starts_with(b + ws, n - ws, r->open)) {
                consume(s, ws + strlen(r->open));
                s->state = S_THINK;
                continue;
            }
            if (start && starts_with(b + ws, n - ws, r->answer_open)) {
                consume(s, ws + strlen(r->answer_open));
                s->state = S_ANSWER;
                continue;
            }
            const bool undecided = ws == n || is_prefix(b + ws, n - ws, r->open) ||
                                   (start && is_prefix(b + ws, n - ws, r->answer_open));
            if (undecided && !final) return 0;
            s->state = start ? S_ANSWER : S_THINK;
            continue;
        }
        case S_THINK: {
            const marker_list close = markers(r->close);
            int which = 0;
            const long at = mt_text_match_first(b, n, close.s, MT_REASONING_ALTS, &which);
            if (at >= 0) {
                if (emit(true, b, (size_t)at, out, ctx)) return -1;
                consume(s, (size_t)at + strlen(r->close[which]));
                s->state = r->close_answers[which] ? S_ANSWER : S_AFTER;
                continue;
            }
            const size_t upto =
                n - (final ? 0 : mt_text_match_tail(b, n, close.s, MT_REASONING_ALTS));
            if (emit(true, b, upto, out, ctx)) return -1;
            consume(s, upto);
            return 0;
        }
        case S_AFTER:
            if (starts_with(b, n, r->answer_open)) {
                consume(s, strlen(r->answer_open));
            } else if (is_prefix(b, n, r->answer_open) && !final) {
                return 0;
            }
            s->state = S_ANSWER;
            continue;
        case S_ANSWER: {
            const marker_list end = markers(r->answer_end);
            const long at = mt_text_match_first(b, n, end.s, MT_REASONING_ALTS, NULL);
            if (at >= 0) {
                if (emit(false, b, (size_t)at, out, ctx)) return -1;
                consume(s, n);
                s->state = S_DONE;
                return 0;
            }
            const size_t upto =
                n - (final ? 0 : mt_text_match_tail(b, n, end.s, MT_REASONING_ALTS));
            if (emit(false, b, upto, out, ctx)) return -1;
            consume(s, upto);
            return 0;
        }
        default: /* S_DONE */
            consume(s, n);
            return 0;
        }
    }
}

int mt_reasoning_split_push(mt_reasoning_split *s, const char *p, size_t n,
                            mt_reasoning_split_out out, void *ctx) {
    if (s->len + n > s->cap) {
        size_t cap = 2 * (s->len + n) + 64;
        char *b = realloc(s->buf, cap);
        if (!b) return -2;
        s->buf = b, s->cap = cap;
    }
    if (n) memcpy(s->buf + s->len, p, n);
    s->len += n;
    return process(s, false, out, ctx);
}

int mt_reasoning_split_finish(mt_reasoning_split *s, mt_reasoning_split_out out, void *ctx) {
    return process(s, true, out, ctx);
}
