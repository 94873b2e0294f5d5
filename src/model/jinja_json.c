/* jinja_json.c - JSON into template values (the rendering context), and
 * template values out as JSON: transformers' tojson filter, which is
 * Python's json.dumps(x, ensure_ascii=False, indent=None, separators=None,
 * sort_keys=False) with the caller's overrides. Floats print as Python's
 * repr, NaN and infinities as NaN / Infinity, keys that are numbers, booleans
 * or None as their JSON text, and anything else (undefined, generators,
 * namespaces) is an error, as json.dumps raises TypeError. */
#include "jinja_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAX_JSON_DEPTH 512

static bool listed(const char *const *keys, const char *k) {
    for (; keys && *keys; keys++)
        if (!strcmp(*keys, k)) return true;
    return false;
}

jv jv_from_json(jrender *r, const json_t *j, bool data, const char *const *plain_keys, int depth) {
    if (depth > MAX_JSON_DEPTH)
        jr_raise(r, JINJA_ERR_LIMIT, "the context nests more than %d levels", MAX_JSON_DEPTH);
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        jdict *d = jd_new(&r->fail, json_object_size(j));
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)j, k, v) {
            jv key = jv_str(js_new(&r->fail, k, strlen(k), data));
            d->k[d->n] = key;
            bool plain = json_is_string(v) && listed(plain_keys, k);
            d->v[d->n++] = jv_from_json(r, v, data && !plain, plain_keys, depth + 1);
        }
        return jv_dict(d);
    }
    case JSON_ARRAY: {
        jlist *l = jl_new(&r->fail, json_array_size(j));
        for (size_t i = 0; i < l->n; i++)
            l->v[i] = jv_from_json(r, json_array_get(j, i), data, plain_keys, depth + 1);
        return jv_list(l, false);
    }
    case JSON_STRING:
        return jv_str(js_new(&r->fail, json_string_value(j), json_string_length(j), data));
    case JSON_INTEGER:
        return jv_int((int64_t)json_integer_value(j));
    case JSON_REAL:
        return jv_float(json_real_value(j));
    case JSON_TRUE:
        return jv_bool(true);
    case JSON_FALSE:
        return jv_bool(false);
    case JSON_NULL:
        return jv_none();
    }
    return jv_none();
}

/* ---- tojson ------------------------------------------------------------------------------- */

typedef struct jw {
    jrender *r;
    jout o;
    const jjson_opts *opt;
    bool tainted;
} jw;

static void put(jw *w, const char *s, size_t n) {
    jout_put(&w->r->fail, &w->o, s, n, false);
}
static void puts_(jw *w, const char *s) {
    put(w, s, strlen(s));
}

static void put_string(jw *w, const jstr *s) {
    if (js_tainted(s)) w->tainted = true;
    put(w, "\"", 1);
    size_t run = 0; /* start of a run of bytes copied as they are */
    for (size_t i = 0; i < s->len;) {
        size_t at = i;
        uint32_t c = jutf8_next(s->p, s->len, &i);
        char esc[16];
        const char *e = NULL;
        size_t en = 0;
        switch (c) {
        case '"':
            e = "\\\"";
            break;
        case '\\':
            e = "\\\\";
            break;
        case '\n':
            e = "\\n";
            break;
        case '\r':
            e = "\\r";
            break;
        case '\t':
            e = "\\t";
            break;
        case '\b':
            e = "\\b";
            break;
        case '\f':
            e = "\\f";
            break;
        default:
            if (c < 0x20 || (c > 0x7e && w->opt->ensure_ascii)) {
                if (c >= 0x10000) {
                    uint32_t v = c - 0x10000;
                    en = (size_t)snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xd800 + (v >> 10),
                                          0xdc00 + (v & 0x3ff));
                } else {
                    en = (size_t)snprintf(esc, sizeof esc, "\\u%04x", c);
                }
                e = esc;
            }
        }
        if (!e) continue;
        put(w, s->p + run, at - run);
        put(w, e, en ? en : strlen(e));
        run = i;
    }
    put(w, s->p + run, s->len - run);
    put(w, "\"", 1);
}

static void put_float(jw *w, double d) {
    char buf[64];
    if (isnan(d))
        puts_(w, "NaN");
    else if (isinf(d))
        puts_(w, d < 0 ? "-Infinity" : "Infinity");
    else {
        jpy_float_repr(d, buf, sizeof buf);
        puts_(w, buf);
    }
}

static void newline(jw *w, int level) {
    if (w->opt->indent < 0) return;
    put(w, "\n", 1);
    for (int i = 0; i < level; i++) {
        if (w->opt->indent_str)
            puts_(w, w->opt->indent_str);
        else
            for (int k = 0; k < w->opt->indent; k++) put(w, " ", 1);
    }
}

_Noreturn static void not_serializable(jrender *r, jv v) {
    const char *t = v.kind == JV_LIST && (v.flags & JVF_ITER)   ? "generator"
                    : v.kind == JV_LIST && (v.flags & JVF_VIEW) ? "dict_items"
                                                                : jv_type_name(v);
    jr_raise(r, JINJA_ERR_RUNTIME, "Object of type %s is not JSON serializable", t);
}

/* A dict key as JSON text (json.dumps converts numbers, booleans and None). */
static void put_key(jw *w, jv k) {
    char buf[64];
    switch ((jv_kind)k.kind) {
    case JV_STR:
        put_string(w, k.u.s);
        return;
    case JV_INT:
        snprintf(buf, sizeof buf, "\"%lld\"", (long long)k.u.i);
        puts_(w, buf);
        return;
    case JV_BOOL:
        puts_(w, k.u.b ? "\"true\"" : "\"false\"");
        return;
    case JV_NONE:
        puts_(w, "\"null\"");
        return;
    case JV_FLOAT:
        put(w, "\"", 1);
        put_float(w, k.u.f);
        put(w, "\"", 1);
        return;
    default:
        jr_raise(w->r, JINJA_ERR_RUNTIME, "keys must be str, int, float, bool or None, not %s",
                 jv_type_name(k));
    }
}

static void put_value(jw *w, jv v, int level);

static void put_dict(jw *w, const jdict *d, int level) {
    if (!d->n) {
        puts_(w, "{}");
        return;
    }
    size_t *order = jr_alloc(w->r, d->n * sizeof *order);
    for (size_t i = 0; i < d->n; i++) order[i] = i;
    if (w->opt->sort_keys) /* insertion sort by key (stable; mixed key types raise) */
        for (size_t i = 1; i < d->n; i++)
            for (size_t j = i; j > 0 && jv_compare(w->r, d->k[order[j]], d->k[order[j - 1]], OP_LT);
                 j--) {
                size_t t = order[j];
                order[j] = order[j - 1];
                order[j - 1] = t;
            }
    put(w, "{", 1);
    for (size_t i = 0; i < d->n; i++) {
        if (i) puts_(w, w->opt->item_sep);
        newline(w, level + 1);
        put_key(w, d->k[order[i]]);
        puts_(w, w->opt->key_sep);
        put_value(w, d->v[order[i]], level + 1);
    }
    newline(w, level);
    put(w, "}", 1);
}

static void put_value(jw *w, jv v, int level) {
    if (level > MAX_JSON_DEPTH)
        jr_raise(w->r, JINJA_ERR_LIMIT, "a value nested too deep for tojson");
    char buf[64];
    switch ((jv_kind)v.kind) {
    case JV_NONE:
        puts_(w, "null");
        return;
    case JV_BOOL:
        puts_(w, v.u.b ? "true" : "false");
        return;
    case JV_INT:
        snprintf(buf, sizeof buf, "%lld", (long long)v.u.i);
        puts_(w, buf);
        return;
    case JV_FLOAT:
        put_float(w, v.u.f);
        return;
    case JV_STR:
        put_string(w, v.u.s);
        return;
    case JV_LIST:
        if (v.flags & (JVF_ITER | JVF_VIEW)) not_serializable(w->r, v);
        if (!v.u.l->n) {
            puts_(w, "[]");
            return;
        }
        put(w, "[", 1);
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) puts_(w, w->opt->item_sep);
            newline(w, level + 1);
            put_value(w, v.u.l->v[i], level + 1);
        }
        newline(w, level);
        put(w, "]", 1);
        return;
    case JV_DICT:
        put_dict(w, v.u.d, level);
        return;
    default:
        not_serializable(w->r, v);
    }
}

jstr *jv_tojson(jrender *r, jv v, const jjson_opts *o) {
    jw w = {.r = r, .opt = o};
    put_value(&w, v, 0);
    jstr *s = jout_to_str(&r->fail, &w.o);
    return w.tainted ? js_derived(&r->fail, s->p, s->len, true) : s;
}
