/* jinja_value.c - the values of the Jinja interpreter (jinja_internal.h):
 * the arena they live in, strings that remember which bytes came from data,
 * lists and dicts, and str()/repr() as Python writes them. */
#include "jinja_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- arena -------------------------------------------------------------------------------- */

struct ja_chunk {
    ja_chunk *next;
    size_t size, used;
    max_align_t data[];
};

#define JA_CHUNK (64 * 1024)

void *ja_alloc(jarena *a, size_t n, bool *over) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    ja_chunk *c = a->head;
    if (!c || c->size - c->used < n) {
        size_t size = n > JA_CHUNK / 4 ? n : JA_CHUNK;
        if (a->limit && a->used + size + sizeof *c > a->limit) {
            if (over) *over = true;
            return NULL;
        }
        c = malloc(sizeof *c + size);
        if (!c) return NULL;
        c->size = size;
        c->used = 0;
        a->used += size + sizeof *c;
        if (size == JA_CHUNK || !a->head) {
            c->next = a->head;
            a->head = c;
        } else { /* a big block: keep the current chunk on top for small ones */
            c->next = a->head->next;
            a->head->next = c;
        }
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    return p;
}

void ja_free_all(jarena *a) {
    for (ja_chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    a->head = NULL;
    a->used = 0;
}

_Noreturn void jfail_raise(jfail *f, jinja_err_kind kind, int line, int col, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    f->e->kind = kind;
    f->e->line = line;
    f->e->col = col;
    if (line > 0)
        mt_error_set(&f->e->err, "%s:%d:%d: %s", f->name ? f->name : "template", line, col, msg);
    else
        mt_error_set(&f->e->err, "%s: %s", f->name ? f->name : "template", msg);
    longjmp(f->jmp, 1);
}

void *jalloc(jfail *f, size_t n) {
    bool over = false;
    void *p = ja_alloc(f->arena, n, &over);
    if (!p) {
        if (over)
            jfail_raise(f, JINJA_ERR_LIMIT, 0, 0,
                        "the template used more than %zu MB of memory (the limit)",
                        f->arena->limit >> 20);
        jfail_raise(f, JINJA_ERR_MEMORY, 0, 0, "out of memory");
    }
    memset(p, 0, n);
    return p;
}

char *jstrdup(jfail *f, const char *s, size_t n) {
    char *p = jalloc(f, n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* ---- UTF-8 -------------------------------------------------------------------------------- */

bool jutf8_valid(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : c >= 0xc0 ? 1 : 0;
        if (!k || c > 0xf4 || n - i <= k) return false;
        uint32_t cp = c & (0x3f >> k);
        for (size_t j = 1; j <= k; j++) {
            if ((p[i + j] & 0xc0) != 0x80) return false;
            cp = cp << 6 | (p[i + j] & 0x3f);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += k + 1;
    }
    return true;
}

uint32_t jutf8_next(const char *s, size_t n, size_t *i) {
    const unsigned char *p = (const unsigned char *)s;
    unsigned c = p[*i];
    size_t k = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : c >= 0xc0 ? 1 : 0;
    if (*i + k >= n) k = n - *i - 1; /* only valid text gets here; stay in bounds anyway */
    uint32_t cp = k ? c & (0x3f >> k) : c;
    for (size_t j = 1; j <= k; j++) cp = cp << 6 | (p[*i + j] & 0x3f);
    *i += k + 1;
    return cp;
}

size_t jutf8_put(char *out, uint32_t cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3f));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Python's str.isspace() (also what re's \s matches in a str pattern). */
bool jpy_isspace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
           c == 0x202f || c == 0x205f || c == 0x3000;
}

/* ---- strings ------------------------------------------------------------------------------ */

static jstr *js_alloc(jfail *f, size_t len, size_t nspan) {
    jstr *s = jalloc(f, sizeof *s + len + 1);
    s->len = len;
    if (nspan) s->span = jalloc(f, nspan * sizeof *s->span);
    return s;
}

jstr *js_new(jfail *f, const char *p, size_t len, bool data) {
    jstr *s = js_alloc(f, len, data && len ? 1 : 0);
    if (len) memcpy(s->p, p, len);
    if (data && len) {
        s->nspan = 1;
        s->span[0] = (jinja_span){0, len};
    }
    return s;
}

jstr *js_cstr(jfail *f, const char *c) {
    return js_new(f, c, strlen(c), false);
}

jstr *js_derived(jfail *f, const char *p, size_t len, bool tainted) {
    return js_new(f, p, len, tainted);
}

jstr *js_cat(jfail *f, const jstr *a, const jstr *b) {
    if (!b->len) return (jstr *)a;
    if (!a->len) return (jstr *)b;
    jstr *s = js_alloc(f, a->len + b->len, a->nspan + b->nspan);
    memcpy(s->p, a->p, a->len);
    memcpy(s->p + a->len, b->p, b->len);
    for (size_t i = 0; i < a->nspan; i++) s->span[s->nspan++] = a->span[i];
    for (size_t i = 0; i < b->nspan; i++) {
        jinja_span sp = {b->span[i].off + a->len, b->span[i].len};
        if (s->nspan && s->span[s->nspan - 1].off + s->span[s->nspan - 1].len == sp.off)
            s->span[s->nspan - 1].len += sp.len;
        else
            s->span[s->nspan++] = sp;
    }
    return s;
}

jstr *js_sub(jfail *f, const jstr *s, size_t off, size_t len) {
    if (off == 0 && len == s->len) return (jstr *)s;
    size_t n = 0;
    for (size_t i = 0; i < s->nspan; i++)
        if (s->span[i].off < off + len && s->span[i].off + s->span[i].len > off) n++;
    jstr *r = js_alloc(f, len, n);
    memcpy(r->p, s->p + off, len);
    for (size_t i = 0; i < s->nspan; i++) {
        size_t a = s->span[i].off, b = a + s->span[i].len;
        if (a < off + len && b > off) {
            a = a < off ? off : a;
            b = b > off + len ? off + len : b;
            r->span[r->nspan++] = (jinja_span){a - off, b - a};
        }
    }
    return r;
}

size_t js_ncp(const jstr *s) {
    size_t n = 0;
    for (size_t i = 0; i < s->len; i++) n += ((unsigned char)s->p[i] & 0xc0) != 0x80;
    return n;
}

size_t js_cp_off(const jstr *s, size_t cp) {
    size_t i = 0;
    while (i < s->len && cp) {
        i++;
        while (i < s->len && ((unsigned char)s->p[i] & 0xc0) == 0x80) i++;
        cp--;
    }
    return i;
}

/* ---- output buffers ----------------------------------------------------------------------- */

static void jout_grow(jfail *f, jout *o, size_t more) {
    if (o->len + more + 1 <= o->cap) return;
    size_t cap = o->cap ? o->cap : 256;
    while (cap < o->len + more + 1) cap *= 2;
    char *p = jalloc(f, cap);
    if (o->len) memcpy(p, o->p, o->len);
    o->p = p;
    o->cap = cap;
}

static void jout_span(jfail *f, jout *o, size_t off, size_t len) {
    if (!len) return;
    if (o->nspan && o->span[o->nspan - 1].off + o->span[o->nspan - 1].len == off) {
        o->span[o->nspan - 1].len += len;
        return;
    }
    if (o->nspan == o->spancap) {
        size_t cap = o->spancap ? 2 * o->spancap : 8;
        jinja_span *s = jalloc(f, cap * sizeof *s);
        if (o->nspan) memcpy(s, o->span, o->nspan * sizeof *s);
        o->span = s;
        o->spancap = cap;
    }
    o->span[o->nspan++] = (jinja_span){off, len};
}

void jout_put(jfail *f, jout *o, const char *p, size_t n, bool data) {
    if (!n) return;
    jout_grow(f, o, n);
    memcpy(o->p + o->len, p, n);
    if (data) jout_span(f, o, o->len, n);
    o->len += n;
    o->p[o->len] = 0;
}

void jout_put_str(jfail *f, jout *o, const jstr *s) {
    if (!s->len) return;
    size_t base = o->len;
    jout_put(f, o, s->p, s->len, false);
    for (size_t i = 0; i < s->nspan; i++) jout_span(f, o, base + s->span[i].off, s->span[i].len);
}

jstr *jout_to_str(jfail *f, const jout *o) {
    jstr *s = js_alloc(f, o->len, o->nspan);
    if (o->len) memcpy(s->p, o->p, o->len);
    if (o->nspan) memcpy(s->span, o->span, o->nspan * sizeof *s->span);
    s->nspan = o->nspan;
    return s;
}

/* ---- lists and dicts ---------------------------------------------------------------------- */

jlist *jl_new(jfail *f, size_t n) {
    jlist *l = jalloc(f, sizeof *l);
    l->n = n;
    if (n) l->v = jalloc(f, n * sizeof *l->v);
    return l;
}

void jlb_push(jfail *f, jlb *b, jv v) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 8;
        jv *p = jalloc(f, cap * sizeof *p);
        if (b->n) memcpy(p, b->v, b->n * sizeof *p);
        b->v = p;
        b->cap = cap;
    }
    b->v[b->n++] = v;
}

jlist *jlb_done(jfail *f, jlb *b) {
    jlist *l = jalloc(f, sizeof *l);
    l->n = b->n;
    l->v = b->v;
    return l;
}

jdict *jd_new(jfail *f, size_t cap) {
    jdict *d = jalloc(f, sizeof *d);
    if (cap) {
        d->k = jalloc(f, cap * sizeof *d->k);
        d->v = jalloc(f, cap * sizeof *d->v);
        d->cap = cap;
    }
    return d;
}

/* Python's hash equality for keys: 1, 1.0 and True are one key. */
static bool key_eq(jv a, jv b) {
    if (a.kind == JV_STR && b.kind == JV_STR)
        return a.u.s->len == b.u.s->len && memcmp(a.u.s->p, b.u.s->p, a.u.s->len) == 0;
    bool an = a.kind == JV_INT || a.kind == JV_BOOL || a.kind == JV_FLOAT;
    bool bn = b.kind == JV_INT || b.kind == JV_BOOL || b.kind == JV_FLOAT;
    if (an && bn) {
        double x = a.kind == JV_FLOAT ? a.u.f : a.kind == JV_INT ? (double)a.u.i : a.u.b;
        double y = b.kind == JV_FLOAT ? b.u.f : b.kind == JV_INT ? (double)b.u.i : b.u.b;
        if (a.kind != JV_FLOAT && b.kind != JV_FLOAT) {
            int64_t i = a.kind == JV_INT ? a.u.i : a.u.b, j = b.kind == JV_INT ? b.u.i : b.u.b;
            return i == j;
        }
        return x == y;
    }
    if (a.kind == JV_NONE && b.kind == JV_NONE) return true;
    if (a.kind == JV_LIST && b.kind == JV_LIST && (a.flags & JVF_TUPLE) && (b.flags & JVF_TUPLE)) {
        if (a.u.l->n != b.u.l->n) return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!key_eq(a.u.l->v[i], b.u.l->v[i])) return false;
        return true;
    }
    return false;
}

bool jd_get(const jdict *d, jv k, jv *out) {
    for (size_t i = 0; i < d->n; i++)
        if (key_eq(d->k[i], k)) {
            if (out) *out = d->v[i];
            return true;
        }
    return false;
}

bool jd_get_cstr(const jdict *d, const char *k, jv *out) {
    size_t n = strlen(k);
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].kind == JV_STR && d->k[i].u.s->len == n && memcmp(d->k[i].u.s->p, k, n) == 0) {
            if (out) *out = d->v[i];
            return true;
        }
    return false;
}

void jd_set(jfail *f, jdict *d, jv k, jv v) {
    for (size_t i = 0; i < d->n; i++)
        if (key_eq(d->k[i], k)) {
            d->v[i] = v;
            return;
        }
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 8;
        jv *nk = jalloc(f, cap * sizeof *nk), *nv = jalloc(f, cap * sizeof *nv);
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof *nk);
            memcpy(nv, d->v, d->n * sizeof *nv);
        }
        d->k = nk, d->v = nv, d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n++] = v;
}

/* ---- Python's repr() and str() ------------------------------------------------------------ */

void jpy_float_repr(double d, char *buf, size_t cap) {
    if (isnan(d)) {
        snprintf(buf, cap, "nan");
        return;
    }
    if (isinf(d)) {
        snprintf(buf, cap, d < 0 ? "-inf" : "inf");
        return;
    }
    if (d == 0) {
        snprintf(buf, cap, signbit(d) ? "-0.0" : "0.0");
        return;
    }
    /* the shortest digits that read back as d (the closest of that length, as Python's) */
    char tmp[40];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, d);
        if (strtod(tmp, NULL) == d) break;
    }
    char digits[24];
    size_t nd = 0;
    const char *q = tmp;
    bool neg = *q == '-';
    if (neg) q++;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9') digits[nd++] = *q;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    int exp10 = atoi(q + 1);
    int decpt = exp10 + 1; /* value = 0.digits * 10^decpt */
    char out[64];
    size_t o = 0;
    if (neg) out[o++] = '-';
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = 0; i < -decpt; i++) out[o++] = '0';
            memcpy(out + o, digits, nd);
            o += nd;
        } else if ((size_t)decpt >= nd) {
            memcpy(out + o, digits, nd);
            o += nd;
            for (size_t i = nd; i < (size_t)decpt; i++) out[o++] = '0';
            out[o++] = '.';
            out[o++] = '0';
        } else {
            memcpy(out + o, digits, (size_t)decpt);
            o += (size_t)decpt;
            out[o++] = '.';
            memcpy(out + o, digits + decpt, nd - (size_t)decpt);
            o += nd - (size_t)decpt;
        }
        out[o] = 0;
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            memcpy(out + o, digits + 1, nd - 1);
            o += nd - 1;
        }
        int e = decpt - 1;
        o +=
            (size_t)snprintf(out + o, sizeof out - o, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
    snprintf(buf, cap, "%s", out);
}

const char *jv_type_name(jv v) {
    switch ((jv_kind)v.kind) {
    case JV_UNDEF:
        return "Undefined";
    case JV_NONE:
        return "NoneType";
    case JV_BOOL:
        return "bool";
    case JV_INT:
        return "int";
    case JV_FLOAT:
        return "float";
    case JV_STR:
        return "str";
    case JV_LIST:
        return v.flags & JVF_TUPLE ? "tuple" : "list";
    case JV_DICT:
        return "dict";
    case JV_NS:
        return "Namespace";
    case JV_MACRO:
        return "Macro";
    case JV_FUNC:
        return "function";
    case JV_LOOP:
        return "LoopContext";
    }
    return "object";
}

bool jv_is_tainted(jv v, int depth) {
    if (depth > 1000) return true;
    switch ((jv_kind)v.kind) {
    case JV_STR:
        return js_tainted(v.u.s);
    case JV_LIST:
        for (size_t i = 0; i < v.u.l->n; i++)
            if (jv_is_tainted(v.u.l->v[i], depth + 1)) return true;
        return false;
    case JV_DICT:
    case JV_NS:
        for (size_t i = 0; i < v.u.d->n; i++)
            if (jv_is_tainted(v.u.d->k[i], depth + 1) || jv_is_tainted(v.u.d->v[i], depth + 1))
                return true;
        return false;
    default:
        return false;
    }
}

/* Characters Python's str.isprintable() refuses, as far as this interpreter
 * knows them: controls, separators other than the space, format characters,
 * private use and noncharacters. (Unassigned code points print as is.) */
static bool py_printable(uint32_t c) {
    if (c < 0x20 || (c >= 0x7f && c <= 0xa0) || c == 0xad) return false;
    if (c == 0x1680 || (c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f) ||
        (c >= 0x205f && c <= 0x2064) || (c >= 0x2066 && c <= 0x206f) || c == 0x3000 ||
        c == 0xfeff || (c >= 0xfff9 && c <= 0xfffb) || (c >= 0x600 && c <= 0x605) || c == 0x61c ||
        c == 0x6dd || c == 0x70f || c == 0x180e)
        return false;
    if ((c >= 0xe000 && c <= 0xf8ff) || c >= 0xf0000 || (c >= 0xfdd0 && c <= 0xfdef) ||
        (c & 0xfffe) == 0xfffe || (c >= 0xe0000 && c <= 0xe007f))
        return false;
    return true;
}

static void repr_str(jfail *f, jout *o, const jstr *s) {
    bool sq = memchr(s->p, '\'', s->len) != NULL, dq = memchr(s->p, '"', s->len) != NULL;
    char quote = sq && !dq ? '"' : '\'';
    jout_put(f, o, &quote, 1, false);
    for (size_t i = 0; i < s->len;) {
        size_t start = i;
        uint32_t c = jutf8_next(s->p, s->len, &i);
        char esc[16];
        if (c == '\\' || c == (uint32_t)quote) {
            esc[0] = '\\';
            esc[1] = (char)c;
            jout_put(f, o, esc, 2, false);
        } else if (c == '\n' || c == '\r' || c == '\t') {
            jout_put(f, o, c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\t", 2, false);
        } else if (!py_printable(c)) {
            int n = c < 0x100     ? snprintf(esc, sizeof esc, "\\x%02x", c)
                    : c < 0x10000 ? snprintf(esc, sizeof esc, "\\u%04x", c)
                                  : snprintf(esc, sizeof esc, "\\U%08x", c);
            jout_put(f, o, esc, (size_t)n, false);
        } else {
            jout_put(f, o, s->p + start, i - start, false);
        }
    }
    jout_put(f, o, &quote, 1, false);
}

static void repr_into(jrender *r, jout *o, jv v, int depth);

static void put_c(jrender *r, jout *o, const char *c) {
    jout_put(&r->fail, o, c, strlen(c), false);
}

static void repr_into(jrender *r, jout *o, jv v, int depth) {
    if (depth > 500) jr_raise(r, JINJA_ERR_LIMIT, "a value nested more than 500 deep");
    char buf[64];
    switch ((jv_kind)v.kind) {
    case JV_UNDEF:
        put_c(r, o, "Undefined");
        return;
    case JV_NONE:
        put_c(r, o, "None");
        return;
    case JV_BOOL:
        put_c(r, o, v.u.b ? "True" : "False");
        return;
    case JV_INT:
        snprintf(buf, sizeof buf, "%lld", (long long)v.u.i);
        put_c(r, o, buf);
        return;
    case JV_FLOAT:
        jpy_float_repr(v.u.f, buf, sizeof buf);
        put_c(r, o, buf);
        return;
    case JV_STR:
        if (v.flags & JVF_MARKUP) put_c(r, o, "Markup(");
        repr_str(&r->fail, o, v.u.s);
        if (v.flags & JVF_MARKUP) put_c(r, o, ")");
        return;
    case JV_LIST: {
        if (v.flags & JVF_ITER) {
            put_c(r, o, "<generator object>");
            return;
        }
        if (v.flags & JVF_VIEW) put_c(r, o, "dict_items(");
        bool tuple = v.flags & JVF_TUPLE;
        put_c(r, o, tuple ? "(" : "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) put_c(r, o, ", ");
            repr_into(r, o, v.u.l->v[i], depth + 1);
        }
        if (tuple && v.u.l->n == 1) put_c(r, o, ",");
        put_c(r, o, tuple ? ")" : "]");
        if (v.flags & JVF_VIEW) put_c(r, o, ")");
        return;
    }
    case JV_NS:
        put_c(r, o, "<Namespace ");
        /* fall through */
    case JV_DICT:
        put_c(r, o, "{");
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) put_c(r, o, ", ");
            repr_into(r, o, v.u.d->k[i], depth + 1);
            put_c(r, o, ": ");
            repr_into(r, o, v.u.d->v[i], depth + 1);
        }
        put_c(r, o, v.kind == JV_NS ? "}>" : "}");
        return;
    case JV_MACRO:
        snprintf(buf, sizeof buf, "<Macro '%.40s'>",
                 v.u.m->def->name ? v.u.m->def->name : "caller");
        put_c(r, o, buf);
        return;
    case JV_FUNC:
        snprintf(buf, sizeof buf, "<built-in function %.40s>", v.u.fn->name);
        put_c(r, o, buf);
        return;
    case JV_LOOP:
        snprintf(buf, sizeof buf, "<LoopContext %zu/%zu>", v.u.loop->index0 + 1,
                 v.u.loop->items->n);
        put_c(r, o, buf);
        return;
    }
}

jstr *jv_repr(jrender *r, jv v) {
    jout o = {0};
    repr_into(r, &o, v, 0);
    jstr *s = jout_to_str(&r->fail, &o);
    if (jv_is_tainted(v, 0) && s->len) {
        s->span = jalloc(&r->fail, sizeof *s->span);
        s->nspan = 1;
        s->span[0] = (jinja_span){0, s->len};
    }
    return s;
}

jstr *jv_to_str(jrender *r, jv v) {
    if (v.kind == JV_STR) return v.u.s;
    if (v.kind == JV_UNDEF) return js_new(&r->fail, "", 0, false);
    return jv_repr(r, v);
}

/* ---- errors and memory of a rendering ---------------------------------------------------- */

_Noreturn void jr_raise(jrender *r, jinja_err_kind kind, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    jfail_raise(&r->fail, kind, r->line, r->col, "%s", msg);
}

void *jr_alloc(jrender *r, size_t n) {
    return jalloc(&r->fail, n);
}
