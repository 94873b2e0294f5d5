/* jinja_equal.c - equality and iteration of Jinja values as Python has
 * them (== across int, bool and float; lists, tuples and dicts compared
 * deeply; iterating a dict gives its keys, a string its characters), which
 * the operators (jinja_ops.c) and the methods (jinja_methods.c) both use. */
#include "jinja_internal.h"

#include <string.h>

bool jv_equal_depth(jrender *r, jv a, jv b, int depth) {
    if (depth > 500) jr_raise(r, JINJA_ERR_LIMIT, "values nested more than 500 deep");
    if (jv_is_num(a) && jv_is_num(b)) {
        if (jv_is_intlike(a) && jv_is_intlike(b)) return jv_ival(a) == jv_ival(b);
        return jv_fval(a) == jv_fval(b);
    }
    if (a.kind != b.kind) return false;
    switch ((jv_kind)a.kind) {
    case JV_UNDEF:
    case JV_NONE:
        return true;
    case JV_STR:
        return a.u.s->len == b.u.s->len && memcmp(a.u.s->p, b.u.s->p, a.u.s->len) == 0;
    case JV_LIST:
        if ((a.flags | b.flags) & JVF_ITER) return a.u.l == b.u.l;
        if ((a.flags & JVF_TUPLE) != (b.flags & JVF_TUPLE) || a.u.l->n != b.u.l->n) return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!jv_equal_depth(r, a.u.l->v[i], b.u.l->v[i], depth + 1)) return false;
        return true;
    case JV_DICT:
        if (a.u.d->n != b.u.d->n) return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jv other;
            if (!jd_get(b.u.d, a.u.d->k[i], &other)) return false;
            if (!jv_equal_depth(r, a.u.d->v[i], other, depth + 1)) return false;
        }
        return true;
    case JV_NS:
        return a.u.d == b.u.d;
    case JV_MACRO:
        return a.u.m == b.u.m;
    case JV_FUNC:
        return a.u.fn == b.u.fn;
    case JV_LOOP:
        return a.u.loop == b.u.loop;
    default:
        return false;
    }
}

bool jv_equal(jrender *r, jv a, jv b) {
    return jv_equal_depth(r, a, b, 0);
}

jlist *jv_iterate(jrender *r, jv v) {
    switch ((jv_kind)v.kind) {
    case JV_LIST:
        return v.u.l;
    case JV_DICT: {
        jlist *l = jl_new(&r->fail, v.u.d->n);
        for (size_t i = 0; i < v.u.d->n; i++) l->v[i] = v.u.d->k[i];
        return l;
    }
    case JV_STR: {
        const jstr *s = v.u.s;
        jlist *l = jl_new(&r->fail, js_ncp(s));
        size_t k = 0;
        for (size_t i = 0; i < s->len;) {
            size_t start = i;
            jutf8_next(s->p, s->len, &i);
            l->v[k++] = jv_str(js_sub(&r->fail, s, start, i - start));
        }
        return l;
    }
    case JV_UNDEF:
        return jl_new(&r->fail, 0);
    default:
        jr_raise(r, JINJA_ERR_RUNTIME, "'%s' object is not iterable", jv_type_name(v));
    }
}
