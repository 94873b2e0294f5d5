/* jinja_filters.c - jinja2's filters and tests, as jinja2 3.1 defines them,
 * with transformers' tojson (ensure_ascii=False by default, indent,
 * separators, sort_keys). Filters that jinja2 has and chat templates do not
 * use are known by name (so a template naming them parses) and refused as
 * unsupported when they run. A string result counts as data when the string
 * it came from did (join keeps each piece's origin). */
#include "jinja_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    F_ABS = 1,
    F_ATTR,
    F_BATCH,
    F_CENTER,
    F_CAPITALIZE,
    F_COUNT,
    F_DEFAULT,
    F_DICTSORT,
    F_ESCAPE,
    F_FIRST,
    F_FLOAT,
    F_FORCEESCAPE,
    F_INDENT,
    F_INT,
    F_ITEMS,
    F_JOIN,
    F_LAST,
    F_LENGTH,
    F_LIST,
    F_LOWER,
    F_MAP,
    F_MAX,
    F_MIN,
    F_REJECT,
    F_REJECTATTR,
    F_REPLACE,
    F_REVERSE,
    F_ROUND,
    F_SAFE,
    F_SELECT,
    F_SELECTATTR,
    F_SORT,
    F_STRING,
    F_SUM,
    F_TITLE,
    F_TOJSON,
    F_TRIM,
    F_UNIQUE,
    F_UPPER,
    F_WORDCOUNT,
};

static const struct {
    const char *name;
    int id;
} FILTERS[] = {
    {"abs", F_ABS},
    {"attr", F_ATTR},
    {"batch", F_BATCH},
    {"center", F_CENTER},
    {"capitalize", F_CAPITALIZE},
    {"count", F_COUNT},
    {"d", F_DEFAULT},
    {"default", F_DEFAULT},
    {"dictsort", F_DICTSORT},
    {"e", F_ESCAPE},
    {"escape", F_ESCAPE},
    {"first", F_FIRST},
    {"float", F_FLOAT},
    {"forceescape", F_FORCEESCAPE},
    {"indent", F_INDENT},
    {"int", F_INT},
    {"items", F_ITEMS},
    {"join", F_JOIN},
    {"last", F_LAST},
    {"length", F_LENGTH},
    {"list", F_LIST},
    {"lower", F_LOWER},
    {"map", F_MAP},
    {"max", F_MAX},
    {"min", F_MIN},
    {"reject", F_REJECT},
    {"rejectattr", F_REJECTATTR},
    {"replace", F_REPLACE},
    {"reverse", F_REVERSE},
    {"round", F_ROUND},
    {"safe", F_SAFE},
    {"select", F_SELECT},
    {"selectattr", F_SELECTATTR},
    {"sort", F_SORT},
    {"string", F_STRING},
    {"sum", F_SUM},
    {"title", F_TITLE},
    {"tojson", F_TOJSON},
    {"trim", F_TRIM},
    {"unique", F_UNIQUE},
    {"upper", F_UPPER},
    {"wordcount", F_WORDCOUNT},
};

/* jinja2's other filters: a template may name them; running one is unsupported. */
static const char *const OTHER_FILTERS[] = {
    "filesizeformat", "format",    "groupby", "pprint",   "random",  "slice", "striptags",
    "truncate",       "urlencode", "urlize",  "wordwrap", "xmlattr", NULL};

int jinja_filter_id(const char *name) {
    for (size_t i = 0; i < sizeof FILTERS / sizeof *FILTERS; i++)
        if (!strcmp(FILTERS[i].name, name)) return FILTERS[i].id;
    for (int i = 0; OTHER_FILTERS[i]; i++)
        if (!strcmp(OTHER_FILTERS[i], name)) return -1;
    return 0;
}

/* ---- arguments ---------------------------------------------------------------------------- */

/* Binds positional and keyword arguments to params[0..n) (after the filter's
 * subject). out[i].kind is 0xff where not given. */
#define NOT_GIVEN 0xff

static void bind(jrender *r, const char *what, const char *const *params, int n, jv *pos,
                 size_t npos, const char **kwn, jv *kwv, size_t nkw, jv *out) {
    for (int i = 0; i < n; i++) out[i].kind = NOT_GIVEN;
    if (npos > (size_t)n)
        jr_raise(r, JINJA_ERR_RUNTIME, "%s takes at most %d argument(s), %zu given", what, n, npos);
    for (size_t i = 0; i < npos; i++) out[i] = pos[i];
    for (size_t k = 0; k < nkw; k++) {
        int i = 0;
        while (i < n && strcmp(params[i], kwn[k])) i++;
        if (i == n)
            jr_raise(r, JINJA_ERR_RUNTIME, "%s got an unexpected keyword argument '%s'", what,
                     kwn[k]);
        if (out[i].kind != NOT_GIVEN)
            jr_raise(r, JINJA_ERR_RUNTIME, "%s got multiple values for argument '%s'", what,
                     kwn[k]);
        out[i] = kwv[k];
    }
}

static bool given(jv v) {
    return v.kind != NOT_GIVEN;
}
static jv or_default(jv v, jv d) {
    return given(v) ? v : d;
}

_Noreturn static void undefined_error(jrender *r, jv u) {
    jr_raise(r, JINJA_ERR_RUNTIME, "%s", u.u.hint ? u.u.hint : "a value is undefined");
}

static jstr *need_str_arg(jrender *r, jv v, const char *what) {
    if (v.kind == JV_STR) return v.u.s;
    if (v.kind == JV_UNDEF) undefined_error(r, v);
    jr_raise(r, JINJA_ERR_RUNTIME, "%s must be a string, not '%s'", what, jv_type_name(v));
}

static jv str_result(jstr *s, jv from) {
    (void)from;
    return jv_str(s);
}

/* ---- attribute paths (selectattr, map, sort, ...) ------------------------------------------- */

/* jinja2's make_attrgetter: "a.b.0" looked up with getitem, part by part; a
 * default (when given and not None) replaces an undefined part and the lookup
 * goes on from it. */
static jv attr_path(jrender *r, jv item, const jstr *path, jv dflt) {
    bool use_default = given(dflt) && dflt.kind != JV_NONE;
    size_t start = 0;
    for (size_t i = 0; i <= path->len; i++) {
        if (i < path->len && path->p[i] != '.') continue;
        const char *part = path->p + start;
        size_t n = i - start;
        bool digits = n > 0;
        for (size_t k = 0; k < n; k++) digits &= part[k] >= '0' && part[k] <= '9';
        jv key;
        if (digits && n < 18) {
            char buf[20];
            memcpy(buf, part, n);
            buf[n] = 0;
            key = jv_int(strtoll(buf, NULL, 10));
        } else {
            key = jv_str(js_new(&r->fail, part, n, false));
        }
        item = jv_getitem(r, item, key);
        if (use_default && item.kind == JV_UNDEF) item = dflt;
        start = i + 1;
    }
    return item;
}

/* jinja2's make_multi_attrgetter (sort): "age,name" gives a list of keys. */
static jv multi_attr(jrender *r, jv item, const jstr *attrs) {
    if (!memchr(attrs->p, ',', attrs->len)) return attr_path(r, item, attrs, (jv){.kind = 0xff});
    jlb keys = {0};
    size_t start = 0;
    for (size_t i = 0; i <= attrs->len; i++) {
        if (i < attrs->len && attrs->p[i] != ',') continue;
        jstr *one = js_new(&r->fail, attrs->p + start, i - start, false);
        jlb_push(&r->fail, &keys, attr_path(r, item, one, (jv){.kind = 0xff}));
        start = i + 1;
    }
    return jv_list(jlb_done(&r->fail, &keys), false);
}

/* ---- sorting ------------------------------------------------------------------------------ */

typedef struct sort_item {
    jv key, value;
    size_t index;
} sort_item;

/* x before y? Python's sorted() is stable and only asks "<". */
static bool sort_less(jrender *r, const sort_item *x, const sort_item *y, bool reverse) {
    return reverse ? jv_compare(r, y->key, x->key, OP_LT) : jv_compare(r, x->key, y->key, OP_LT);
}

/* A stable merge sort in arena memory (a comparison may raise, so no qsort). */
static void sort_items(jrender *r, sort_item *items, size_t n, bool reverse) {
    sort_item *tmp = jr_alloc(r, (n + 1) * sizeof *tmp);
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                tmp[k++] = sort_less(r, &items[j], &items[i], reverse) ? items[j++] : items[i++];
            while (i < mid) tmp[k++] = items[i++];
            while (j < hi) tmp[k++] = items[j++];
        }
        memcpy(items, tmp, n * sizeof *items);
    }
}

/* The key for case-insensitive comparisons (jinja2's ignore_case: lower() of strings). */
static jv fold(jrender *r, jv v, bool case_sensitive) {
    if (case_sensitive || v.kind != JV_STR) return v;
    return jv_str(jpy_case(r, v.u.s, JCASE_LOWER));
}

/* ---- tests -------------------------------------------------------------------------------- */

enum {
    T_BOOLEAN = 1,
    T_CALLABLE,
    T_DEFINED,
    T_DIVISIBLEBY,
    T_EQ,
    T_ESCAPED,
    T_EVEN,
    T_FALSE,
    T_FILTER,
    T_FLOAT,
    T_GE,
    T_GT,
    T_IN,
    T_INTEGER,
    T_ITERABLE,
    T_LE,
    T_LOWER,
    T_LT,
    T_MAPPING,
    T_NE,
    T_NONE,
    T_NUMBER,
    T_ODD,
    T_SAMEAS,
    T_SEQUENCE,
    T_STRING,
    T_TEST,
    T_TRUE,
    T_UNDEFINED,
    T_UPPER,
};

static const struct {
    const char *name;
    int id;
} TESTS[] = {
    {"boolean", T_BOOLEAN},
    {"callable", T_CALLABLE},
    {"defined", T_DEFINED},
    {"divisibleby", T_DIVISIBLEBY},
    {"eq", T_EQ},
    {"equalto", T_EQ},
    {"==", T_EQ},
    {"escaped", T_ESCAPED},
    {"even", T_EVEN},
    {"false", T_FALSE},
    {"filter", T_FILTER},
    {"float", T_FLOAT},
    {"ge", T_GE},
    {">=", T_GE},
    {"gt", T_GT},
    {"greaterthan", T_GT},
    {">", T_GT},
    {"in", T_IN},
    {"integer", T_INTEGER},
    {"iterable", T_ITERABLE},
    {"le", T_LE},
    {"<=", T_LE},
    {"lower", T_LOWER},
    {"lt", T_LT},
    {"lessthan", T_LT},
    {"<", T_LT},
    {"mapping", T_MAPPING},
    {"ne", T_NE},
    {"!=", T_NE},
    {"none", T_NONE},
    {"number", T_NUMBER},
    {"odd", T_ODD},
    {"sameas", T_SAMEAS},
    {"sequence", T_SEQUENCE},
    {"string", T_STRING},
    {"test", T_TEST},
    {"true", T_TRUE},
    {"undefined", T_UNDEFINED},
    {"upper", T_UPPER},
};

int jinja_test_id(const char *name) {
    for (size_t i = 0; i < sizeof TESTS / sizeof *TESTS; i++)
        if (!strcmp(TESTS[i].name, name)) return TESTS[i].id;
    return 0;
}

static int test_by_name(const char *name) {
    return jinja_test_id(name);
}

bool jr_test(jrender *r, int id, const char *name, jv v, jv *pos, size_t npos) {
    jv a = npos ? pos[0] : jv_undef(NULL);
    int want = 0;
    switch (id) {
    case T_DIVISIBLEBY:
    case T_EQ:
    case T_GE:
    case T_GT:
    case T_IN:
    case T_LE:
    case T_LT:
    case T_NE:
    case T_SAMEAS:
        want = 1;
        break;
    default:
        break;
    }
    if (npos != (size_t)want)
        jr_raise(r, JINJA_ERR_RUNTIME, "the test '%s' takes %d argument(s), %zu given", name, want,
                 npos);
    switch (id) {
    case T_BOOLEAN:
        return v.kind == JV_BOOL;
    case T_CALLABLE: /* jinja2's Undefined has __call__ (it raises) */
        return v.kind == JV_MACRO || v.kind == JV_FUNC || v.kind == JV_UNDEF;
    case T_DEFINED:
        return v.kind != JV_UNDEF;
    case T_UNDEFINED:
        return v.kind == JV_UNDEF;
    case T_DIVISIBLEBY: {
        jv m = jv_binop(r, OP_MOD, v, a);
        return !jv_truthy(m) && m.kind != JV_UNDEF;
    }
    case T_EQ:
        return jv_equal(r, v, a);
    case T_NE:
        return !jv_equal(r, v, a);
    case T_GE:
        return jv_compare(r, v, a, OP_GE);
    case T_GT:
        return jv_compare(r, v, a, OP_GT);
    case T_LE:
        return jv_compare(r, v, a, OP_LE);
    case T_LT:
        return jv_compare(r, v, a, OP_LT);
    case T_IN:
        return jv_contains(r, a, v);
    case T_ESCAPED:
        return v.kind == JV_STR && (v.flags & JVF_MARKUP);
    case T_EVEN:
    case T_ODD: {
        if (v.kind != JV_INT && v.kind != JV_BOOL) {
            if (v.kind == JV_UNDEF) undefined_error(r, v);
            if (v.kind != JV_FLOAT)
                jr_raise(r, JINJA_ERR_RUNTIME, "unsupported operand type(s) for %%: '%s' and 'int'",
                         jv_type_name(v));
            double m = fmod(v.u.f, 2);
            if (m < 0) m += 2;
            return id == T_EVEN ? m == 0 : m == 1;
        }
        int64_t x = v.kind == JV_INT ? v.u.i : v.u.b;
        return id == T_EVEN ? x % 2 == 0 : x % 2 != 0;
    }
    case T_FALSE:
        return v.kind == JV_BOOL && !v.u.b;
    case T_TRUE:
        return v.kind == JV_BOOL && v.u.b;
    case T_FILTER:
        return v.kind == JV_STR && jinja_filter_id(v.u.s->p) > 0;
    case T_TEST:
        return v.kind == JV_STR && test_by_name(v.u.s->p) > 0;
    case T_FLOAT:
        return v.kind == JV_FLOAT;
    case T_INTEGER:
        return v.kind == JV_INT;
    case T_NUMBER:
        return v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL;
    case T_ITERABLE:
        return v.kind == JV_STR || v.kind == JV_LIST || v.kind == JV_DICT || v.kind == JV_UNDEF;
    case T_SEQUENCE:
        return v.kind == JV_STR || (v.kind == JV_LIST && !(v.flags & (JVF_ITER | JVF_VIEW))) ||
               v.kind == JV_DICT || v.kind == JV_UNDEF;
    case T_MAPPING:
        return v.kind == JV_DICT;
    case T_STRING:
        return v.kind == JV_STR;
    case T_NONE:
        return v.kind == JV_NONE;
    case T_SAMEAS:
        if (v.kind != a.kind) return false;
        switch ((jv_kind)v.kind) {
        case JV_NONE:
        case JV_UNDEF:
            return true;
        case JV_BOOL:
            return v.u.b == a.u.b;
        case JV_INT:
            return v.u.i == a.u.i && v.u.i >= -5 && v.u.i <= 256; /* CPython's small ints */
        case JV_STR:
            return v.u.s == a.u.s;
        case JV_LIST:
            return v.u.l == a.u.l;
        case JV_DICT:
        case JV_NS:
            return v.u.d == a.u.d;
        default:
            return false;
        }
    case T_LOWER:
    case T_UPPER: {
        jstr *s = jv_to_str(r, v);
        jstr *c = jpy_case(r, s, id == T_LOWER ? JCASE_LOWER : JCASE_UPPER);
        jstr *o = jpy_case(r, s, id == T_LOWER ? JCASE_UPPER : JCASE_LOWER);
        /* Python: cased characters exist and all are of the asked case */
        return c->len == s->len && memcmp(c->p, s->p, s->len) == 0 &&
               !(o->len == s->len && memcmp(o->p, s->p, s->len) == 0);
    }
    }
    jr_raise(r, JINJA_ERR_UNSUPPORTED, "the test '%s' is not supported", name);
}

/* ---- the filters -------------------------------------------------------------------------- */

static jv to_int(jrender *r, jv v, jv dflt, int base) {
    (void)r;
    switch ((jv_kind)v.kind) {
    case JV_INT:
        return v;
    case JV_BOOL:
        return jv_int(v.u.b);
    case JV_FLOAT:
        if (isfinite(v.u.f) && fabs(v.u.f) < 9.2e18) return jv_int((int64_t)v.u.f);
        return dflt;
    case JV_STR: {
        /* Python's int(s, base), then int(float(s)) */
        const jstr *s = v.u.s;
        char buf[128];
        size_t k = 0;
        size_t i = 0, n = s->len;
        while (i < n && (s->p[i] == ' ' || (s->p[i] >= '\t' && s->p[i] <= '\r'))) i++;
        while (n > i && (s->p[n - 1] == ' ' || (s->p[n - 1] >= '\t' && s->p[n - 1] <= '\r'))) n--;
        for (size_t j = i; j < n && k < sizeof buf - 1; j++) {
            bool between = j > i && j + 1 < n && s->p[j - 1] != '_' && s->p[j + 1] != '_';
            if (s->p[j] == '_' && between) continue; /* Python: 1_000 */
            buf[k++] = s->p[j];
        }
        buf[k] = 0;
        if (!k || n - i >= sizeof buf) return dflt;
        char *end;
        long long x = strtoll(buf, &end, base);
        if (*end == 0 && end != buf) return jv_int(x);
        if (strpbrk(buf, "xX(")) return dflt; /* strtod would read hex and nan(...) */
        double d = strtod(buf, &end);
        if (*end == 0 && end != buf && isfinite(d) && fabs(d) < 9.2e18) return jv_int((int64_t)d);
        return dflt;
    }
    default:
        return dflt;
    }
}

static jv to_float(jrender *r, jv v, jv dflt) {
    (void)r;
    switch ((jv_kind)v.kind) {
    case JV_FLOAT:
        return v;
    case JV_INT:
        return jv_float((double)v.u.i);
    case JV_BOOL:
        return jv_float(v.u.b);
    case JV_STR: {
        const jstr *s = v.u.s;
        char buf[128];
        size_t k = 0;
        for (size_t j = 0; j < s->len && k < sizeof buf - 1; j++)
            if (s->p[j] != '_') buf[k++] = s->p[j];
        buf[k] = 0;
        char *end;
        if (strpbrk(buf, "xX(")) return dflt;
        double d = strtod(buf, &end);
        while (*end == ' ' || (*end >= '\t' && *end <= '\r')) end++;
        if (end != buf && *end == 0 && k < sizeof buf - 1) return jv_float(d);
        return dflt;
    }
    default:
        return dflt;
    }
}

static jv iter_list(jlist *l) {
    jv v = jv_list(l, false);
    v.flags |= JVF_ITER;
    return v;
}

static bool select_one(jrender *r, jv item, const char *what, jv *args, size_t nargs,
                       bool has_test) {
    if (!has_test) return jv_truthy(item);
    jv tname = args[0];
    if (tname.kind != JV_STR)
        jr_raise(r, JINJA_ERR_RUNTIME, "%s: the test name must be a string", what);
    int tid = test_by_name(tname.u.s->p);
    if (!tid) jr_raise(r, JINJA_ERR_RUNTIME, "no test named '%s'", tname.u.s->p);
    return jr_test(r, tid, tname.u.s->p, item, args + 1, nargs - 1);
}

static jv filter_join(jrender *r, jv v, jv *pos, size_t npos, const char **kwn, jv *kwv,
                      size_t nkw) {
    static const char *const P[] = {"d", "attribute"};
    jv a[2];
    bind(r, "join", P, 2, pos, npos, kwn, kwv, nkw, a);
    jlist *items = jv_iterate(r, v);
    jstr *sep = given(a[0]) ? jv_to_str(r, a[0]) : js_new(&r->fail, "", 0, false);
    jout o = {0};
    for (size_t i = 0; i < items->n; i++) {
        if (i) jout_put_str(&r->fail, &o, sep);
        jv item = items->v[i];
        if (given(a[1]) && a[1].kind == JV_STR) item = attr_path(r, item, a[1].u.s, jv_undef(NULL));
        jout_put_str(&r->fail, &o, jv_to_str(r, item));
    }
    return jv_str(jout_to_str(&r->fail, &o));
}

static jv filter_tojson(jrender *r, jv v, jv *pos, size_t npos, const char **kwn, jv *kwv,
                        size_t nkw) {
    static const char *const P[] = {"ensure_ascii", "indent", "separators", "sort_keys"};
    jv a[4];
    bind(r, "tojson", P, 4, pos, npos, kwn, kwv, nkw, a);
    jjson_opts o = {.ensure_ascii = given(a[0]) && jv_truthy(a[0]),
                    .sort_keys = given(a[3]) && jv_truthy(a[3]),
                    .indent = -1};
    if (given(a[1]) && a[1].kind != JV_NONE) {
        if (a[1].kind == JV_INT || a[1].kind == JV_BOOL)
            o.indent = a[1].kind == JV_INT ? (a[1].u.i < 0    ? 0
                                              : a[1].u.i > 64 ? 64
                                                              : (int)a[1].u.i)
                                           : a[1].u.b;
        else if (a[1].kind == JV_STR)
            o.indent_str = a[1].u.s->p, o.indent = 0;
        else
            jr_raise(r, JINJA_ERR_UNSUPPORTED, "tojson: an indent of type '%s'",
                     jv_type_name(a[1]));
    }
    o.item_sep = o.indent >= 0 ? "," : ", ";
    o.key_sep = ": ";
    if (given(a[2]) && a[2].kind != JV_NONE) {
        if (a[2].kind != JV_LIST || a[2].u.l->n != 2 || a[2].u.l->v[0].kind != JV_STR ||
            a[2].u.l->v[1].kind != JV_STR)
            jr_raise(r, JINJA_ERR_RUNTIME, "tojson: separators must be a pair of strings");
        o.item_sep = a[2].u.l->v[0].u.s->p;
        o.key_sep = a[2].u.l->v[1].u.s->p;
    }
    return jv_str(jv_tojson(r, v, &o));
}

static jv filter_indent(jrender *r, jv v, jv *pos, size_t npos, const char **kwn, jv *kwv,
                        size_t nkw) {
    static const char *const P[] = {"width", "first", "blank"};
    jv a[3];
    bind(r, "indent", P, 3, pos, npos, kwn, kwv, nkw, a);
    if (v.kind == JV_UNDEF) undefined_error(r, v);
    if (v.kind != JV_STR) /* jinja2 does s += "\n" */
        jr_raise(r, JINJA_ERR_RUNTIME, "unsupported operand type(s) for +=: '%s' and 'str'",
                 jv_type_name(v));
    jstr *s = v.u.s;
    jstr *ind;
    if (!given(a[0])) {
        ind = js_cstr(&r->fail, "    ");
    } else if (a[0].kind == JV_STR) {
        ind = a[0].u.s;
    } else if (a[0].kind == JV_INT || a[0].kind == JV_BOOL) {
        int64_t w = a[0].kind == JV_INT ? a[0].u.i : a[0].u.b;
        if (w > 1000) jr_raise(r, JINJA_ERR_LIMIT, "indent: a width over 1000");
        char *sp = jr_alloc(r, (size_t)(w > 0 ? w : 0) + 1);
        memset(sp, ' ', (size_t)(w > 0 ? w : 0));
        ind = js_cstr(&r->fail, sp);
    } else {
        jr_raise(r, JINJA_ERR_RUNTIME, "indent: the width must be an integer or a string");
    }
    bool first = given(a[1]) && jv_truthy(a[1]), blank = given(a[2]) && jv_truthy(a[2]);
    s = js_cat(&r->fail, s, js_cstr(&r->fail, "\n"));
    jlist *lines = jpy_splitlines(r, s);
    jout o = {0};
    for (size_t i = 0; i < lines->n; i++) {
        const jstr *line = lines->v[i].u.s;
        if (i) {
            jout_put(&r->fail, &o, "\n", 1, false);
            if (blank || line->len) jout_put_str(&r->fail, &o, ind);
        }
        jout_put_str(&r->fail, &o, line);
    }
    jstr *res = jout_to_str(&r->fail, &o);
    if (first) res = js_cat(&r->fail, ind, res);
    return jv_str(res);
}

static jv filter_round(jrender *r, jv v, jv *pos, size_t npos, const char **kwn, jv *kwv,
                       size_t nkw) {
    static const char *const P[] = {"precision", "method"};
    jv a[2];
    bind(r, "round", P, 2, pos, npos, kwn, kwv, nkw, a);
    int64_t prec = given(a[0]) ? (a[0].kind == JV_INT ? a[0].u.i : 0) : 0;
    const char *method = given(a[1]) && a[1].kind == JV_STR ? a[1].u.s->p : "common";
    if (v.kind != JV_INT && v.kind != JV_FLOAT && v.kind != JV_BOOL) {
        if (v.kind == JV_UNDEF) undefined_error(r, v);
        jr_raise(r, JINJA_ERR_RUNTIME, "round: '%s' is not a number", jv_type_name(v));
    }
    double x = v.kind == JV_FLOAT ? v.u.f : v.kind == JV_INT ? (double)v.u.i : v.u.b;
    if (prec < -300 || prec > 300)
        jr_raise(r, JINJA_ERR_UNSUPPORTED, "round: precision %lld", (long long)prec);
    if (!strcmp(method, "common")) {
        if (v.kind != JV_FLOAT) { /* Python's round(int, n) is an int */
            if (prec >= 0) return jv_int(v.kind == JV_INT ? v.u.i : v.u.b);
            double p = pow(10, (double)-prec);
            return jv_int((int64_t)(rint(x / p) * p));
        }
        if (!isfinite(x)) return jv_float(x);
        if (prec >= 0) {
            char buf[400];
            snprintf(buf, sizeof buf, "%.*f", (int)prec, x); /* exact, ties to even */
            return jv_float(strtod(buf, NULL));
        }
        double p = pow(10, (double)-prec);
        return jv_float(rint(x / p) * p);
    }
    if (strcmp(method, "ceil") && strcmp(method, "floor"))
        jr_raise(r, JINJA_ERR_RUNTIME, "method must be common, ceil or floor");
    double p = pow(10, (double)prec);
    return jv_float((method[0] == 'c' ? ceil(x * p) : floor(x * p)) / p);
}

static jv minmax(jrender *r, jv v, bool want_max, jv *pos, size_t npos, const char **kwn, jv *kwv,
                 size_t nkw) {
    static const char *const P[] = {"case_sensitive", "attribute"};
    jv a[2];
    bind(r, want_max ? "max" : "min", P, 2, pos, npos, kwn, kwv, nkw, a);
    bool cs = given(a[0]) && jv_truthy(a[0]);
    jlist *items = jv_iterate(r, v);
    if (!items->n) return jv_undef("no aggregated item, sequence was empty");
    size_t best = 0;
    jv bestkey = {0};
    for (size_t i = 0; i < items->n; i++) {
        jv k = items->v[i];
        if (given(a[1]) && a[1].kind == JV_STR) k = attr_path(r, k, a[1].u.s, jv_undef(NULL));
        k = fold(r, k, cs);
        if (i == 0 || jv_compare(r, k, bestkey, want_max ? OP_GT : OP_LT)) {
            best = i;
            bestkey = k;
        }
    }
    return items->v[best];
}

jv jr_filter(jrender *r, int id, const char *name, jv v, jv *pos, size_t npos, const char **kwn,
             jv *kwv, size_t nkw) {
    jv a[4];
    switch (id) {
    case F_ABS:
        bind(r, name, NULL, 0, pos, npos, kwn, kwv, nkw, a);
        if (v.kind == JV_INT) {
            if (v.u.i == INT64_MIN) jr_raise(r, JINJA_ERR_UNSUPPORTED, "an integer beyond 64 bits");
            return jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
        }
        if (v.kind == JV_BOOL) return jv_int(v.u.b);
        if (v.kind == JV_FLOAT) return jv_float(fabs(v.u.f));
        if (v.kind == JV_UNDEF) undefined_error(r, v);
        jr_raise(r, JINJA_ERR_RUNTIME, "bad operand type for abs(): '%s'", jv_type_name(v));
    case F_ATTR: {
        static const char *const P[] = {"name"};
        bind(r, name, P, 1, pos, npos, kwn, kwv, nkw, a);
        if (!given(a[0])) jr_raise(r, JINJA_ERR_RUNTIME, "attr needs a name");
        const char *an = need_str_arg(r, a[0], "attr's name")->p;
        /* an attribute only: a dict's keys do not count */
        jv m;
        if (v.kind == JV_NS || v.kind == JV_LOOP) return jv_getattr(r, v, an);
        if (v.kind != JV_UNDEF && jr_method_lookup(r, v, an, &m)) return m;
        if (v.kind == JV_UNDEF)
            jr_raise(r, JINJA_ERR_RUNTIME, "%s", v.u.hint ? v.u.hint : "undefined");
        return jv_undef("no such attribute");
    }
    case F_BATCH: {
        static const char *const P[] = {"linecount", "fill_with"};
        bind(r, name, P, 2, pos, npos, kwn, kwv, nkw, a);
        if (!given(a[0]) || a[0].kind != JV_INT || a[0].u.i < 1)
            jr_raise(r, JINJA_ERR_RUNTIME, "batch: linecount must be a positive integer");
        jlist *items = jv_iterate(r, v);
        size_t per = (size_t)a[0].u.i;
        jlb out = {0};
        for (size_t i = 0; i < items->n; i += per) {
            size_t k = items->n - i < per ? items->n - i : per;
            bool fill = k < per && given(a[1]) && a[1].kind != JV_NONE;
            jlist *row = jl_new(&r->fail, fill ? per : k);
            memcpy(row->v, items->v + i, k * sizeof *row->v);
            for (size_t j = k; fill && j < per; j++) row->v[j] = a[1];
            jlb_push(&r->fail, &out, jv_list(row, false));
        }
        return iter_list(jlb_done(&r->fail, &out));
    }
    case F_CENTER: {
        static const char *const P[] = {"width"};
        bind(r, name, P, 1, pos, npos, kwn, kwv, nkw, a);
        jv w = or_default(a[0], jv_int(80));
        jv self = jv_str(jv_to_str(r, v));
        jv m;
        jr_method_lookup(r, self, "center", &m);
        return jr_method_call(r, m.u.fn, &w, 1, NULL, NULL, 0);
    }
    case F_CAPITALIZE:
    case F_LOWER:
    case F_UPPER:
    case F_TITLE: {
        bind(r, name, NULL, 0, pos, npos, kwn, kwv, nkw, a);
        jcase m = id == F_CAPITALIZE ? JCASE_CAPITALIZE
                  : id == F_LOWER    ? JCASE_LOWER
                  : id == F_UPPER    ? JCASE_UPPER
                                     : JCASE_TITLE;
        jstr *s = jv_to_str(r, v);
        if (id == F_TITLE) {
            /* jinja2's title: capitalize each run after -, whitespace, ( { [ < */
            jout o = {0};
            bool start = true;
            for (size_t i = 0; i < s->len;) {
                size_t st = i;
                uint32_t c = jutf8_next(s->p, s->len, &i);
                bool sep =
                    c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || jpy_isspace(c);
                jstr *ch = js_new(&r->fail, s->p + st, i - st, false);
                if (!sep) ch = jpy_case(r, ch, start ? JCASE_UPPER : JCASE_LOWER);
                jout_put_str(&r->fail, &o, ch);
                start = sep;
            }
            jstr *res = jout_to_str(&r->fail, &o);
            return jv_str(js_derived(&r->fail, res->p, res->len, js_tainted(s)));
        }
        return str_result(jpy_case(r, s, m), v);
    }
    case F_COUNT:
    case F_LENGTH:
        bind(r, name, NULL, 0, pos, npos, kwn, kwv, nkw, a);
        if (v.kind == JV_LIST && (v.flags & JVF_ITER))
            jr_raise(r, JINJA_ERR_RUNTIME, "object of type 'generator' has no len()");
        return jv_int((int64_t)jv_len(r, v));
    case F_DEFAULT: {
        static const char *const P[] = {"default_value", "boolean"};
        bind(r, name, P, 2, pos, npos, kwn, kwv, nkw, a);
        jv d = or_default(a[0], jv_str(js_new(&r->fail, "", 0, false)));
        bool boolean = given(a[1]) && jv_truthy(a[1]);
        if (v.kind == JV_UNDEF || (boolean && !jv_truthy(v))) return d;
        return v;
    }
    case F_DICTSORT: {
        static const char *const P[] = {"case_sensitive", "by", "reverse"};
        bind(r, name, P, 3, pos, npos, kwn, kwv, nkw, a);
        if (v.kind != JV_DICT) {
            if (v.kind == JV_UNDEF) undefined_error(r, v);
            jr_raise(r, JINJA_ERR_RUNTIME, "dictsort: '%s' object has no attribute 'items'",
                     jv_type_name(v));
        }
        bool cs = given(a[0]) && jv_truthy(a[0]);
        bool by_value = given(a[1]) && a[1].kind == JV_STR && !strcmp(a[1].u.s->p, "value");
        if (given(a[1]) && !by_value && !(a[1].kind == JV_STR && !strcmp(a[1].u.s->p, "key")))
            jr_raise(r, JINJA_ERR_RUNTIME, "You can only sort by either \"key\" or \"value\"");
        size_t n = v.u.d->n;
        sort_item *it = jr_alloc(r, (n + 1) * sizeof *it);
        for (size_t i = 0; i < n; i++) {
            jlist *pair = jl_new(&r->fail, 2);
            pair->v[0] = v.u.d->k[i];
            pair->v[1] = v.u.d->v[i];
            it[i] = (sort_item){fold(r, by_value ? v.u.d->v[i] : v.u.d->k[i], cs),
                                jv_list(pair, true), i};
        }
        sort_items(r, it, n, given(a[2]) && jv_truthy(a[2]));
        jlist *l = jl_new(&r->fail, n);
        for (size_t i = 0; i < n; i++) l->v[i] = it[i].value;
        return jv_list(l, false);
    }
    case F_ESCAPE:
    case F_FORCEESCAPE: {
        bind(r, name, NULL, 0, pos, npos, kwn, kwv, nkw, a);
        if (id == F_ESCAPE && v.kind == JV_STR && (v.flags & JVF_MARKUP)) return v;
        jv out = jv_str(jpy_html_escape(r, jv_to_str(r, v)));
        out.flags |= JVF_MARKUP;
        return out;
    }
    case F_FIRST:
    case F_LAST: {
        bind(r, name, NULL, 0, pos, npos, kwn, kwv, nkw, a);
        if (id == F_LAST && v.kind == JV_LIST && (v.flags & JVF_ITER))
            jr_raise(r, JINJA_ERR_RUNTIME, "'generator' object is not reversible");
        jlist *items = jv_iterate(r, v);
        if (!items->n)
            return jv_undef(id == F_FIRST ? "No first item, sequence was empty."
                                          : "No last item, sequence was empty.");
        return items->v[id == F_FIRST ? 0 : items->n - 1];
    }
    case F_FLOAT: {
        static const char *const P[] = {"default"};
        bind(r, name, P, 1, pos, npos, kwn, kwv, nkw, a);
        if (v.kind == JV_UNDEF) undefined_error(r, v); /* float(Undefined) raises */
        return to_float(r, v, or_default(a[0], jv_float(0)));
    }
    case F_INT: {
        static const char *const P[] = {"default", "base"};
        bind(r, name, P, 2, pos, npos, kwn, kwv, nkw, a);
        int base = given(a[1]) && a[1].kind == JV_INT ? (int)a[1].u.i : 10;
        if (base != 10 && base != 16 && base != 8 && base != 2)
            jr_raise(r, JINJA_ERR_UNSUPPORTED, "int: base %d", base);
        if (v.kind == JV_UNDEF) undefined_error(r, v);
        return to_int(r, v, or_default(a[0], jv_int(0)), base);
    }
    case F_INDENT:
        return filter_indent(r, v, pos, npos, kwn, kwv, nkw);
    case F_ITEMS: {
        bind(r, name, NULL, 0, pos, npos, kwn, kwv, nkw, a);
        if (v.kind == JV_UNDEF) return iter_list(jl_new(&r->fail, 0));
        if (v.kind != JV_DICT)
            jr_raise(r, JINJA_ERR_RUNTIME, "Can only get item pairs from a mapping.");
        jlist *l = jl_new(&r->fail, v.u.d->n);
        for (size_t i = 0; i < v.u.d->n; i++) {
            jlist *pair = jl_new(&r->fail, 2);
            pair->v[0] = v.u.d->k[i];
            pair->v[1] = v.u.d->v[i];
            l->v[i] = jv_list(pair, true);
        }
        return iter_list(l);
    }
    case F_JOIN:
        return filter_join(r, v, pos, npos, kwn, kwv, nkw);
    case F_LIST: {
        bind(r, name, NULL, 0, pos, npos, kwn, kwv, nkw, a);
        jlist *src = jv_iterate(r, v);
        jlist *l = jl_new(&r->fail, src->n);
        if (src->n) memcpy(l->v, src->v, src->n * sizeof *l->v);
        return jv_list(l, false);
    }
    case F_MAP: {
        if (!jv_truthy(v)) return iter_list(jl_new(&r->fail, 0)); /* jinja2: `if value:` */
        jlist *items = jv_iterate(r, v);
        jlist *out = jl_new(&r->fail, items->n);
        bool by_attr = false;
        jv attr = {0}, dflt = {.kind = NOT_GIVEN};
        for (size_t k = 0; k < nkw; k++) {
            if (!strcmp(kwn[k], "attribute")) {
                attr = kwv[k];
                by_attr = true;
            } else if (!strcmp(kwn[k], "default")) {
                dflt = kwv[k];
            } else if (npos == 0) {
                jr_raise(r, JINJA_ERR_RUNTIME, "map: unexpected keyword argument '%s'", kwn[k]);
            }
        }
        if (by_attr) {
            if (npos) jr_raise(r, JINJA_ERR_RUNTIME, "map: attribute and a filter name both");
            jstr *path = need_str_arg(r, attr, "map's attribute");
            for (size_t i = 0; i < items->n; i++) out->v[i] = attr_path(r, items->v[i], path, dflt);
            return iter_list(out);
        }
        if (!npos) jr_raise(r, JINJA_ERR_RUNTIME, "map requires a filter argument");
        jstr *fname = need_str_arg(r, pos[0], "map's filter name");
        int fid = jinja_filter_id(fname->p);
        if (fid == 0) jr_raise(r, JINJA_ERR_RUNTIME, "no filter named '%s'", fname->p);
        if (fid < 0)
            jr_raise(r, JINJA_ERR_UNSUPPORTED, "the filter '%s' is not supported", fname->p);
        for (size_t i = 0; i < items->n; i++)
            out->v[i] = jr_filter(r, fid, fname->p, items->v[i], pos + 1, npos - 1, kwn, kwv, nkw);
        return iter_list(out);
    }
    case F_MAX:
    case F_MIN:
        return minmax(r, v, id == F_MAX, pos, npos, kwn, kwv, nkw);
    case F_SELECT:
    case F_REJECT:
    case F_SELECTATTR:
    case F_REJECTATTR: {
        if (!jv_truthy(v)) return iter_list(jl_new(&r->fail, 0)); /* jinja2: `if value:` */
        if (nkw) jr_raise(r, JINJA_ERR_RUNTIME, "%s takes no keyword arguments", name);
        bool attr = id == F_SELECTATTR || id == F_REJECTATTR;
        bool keep = id == F_SELECT || id == F_SELECTATTR;
        if (attr && !npos) jr_raise(r, JINJA_ERR_RUNTIME, "Missing parameter for attribute name");
        jstr *path = attr ? need_str_arg(r, pos[0], "the attribute name") : NULL;
        jv *targs = attr ? pos + 1 : pos;
        size_t nt = attr ? npos - 1 : npos;
        jlist *items = jv_iterate(r, v);
        jlb out = {0};
        for (size_t i = 0; i < items->n; i++) {
            jv x = attr ? attr_path(r, items->v[i], path, (jv){.kind = NOT_GIVEN}) : items->v[i];
            if (select_one(r, x, name, targs, nt, nt > 0) == keep)
                jlb_push(&r->fail, &out, items->v[i]);
        }
        return iter_list(jlb_done(&r->fail, &out));
    }
    case F_REPLACE: {
        static const char *const P[] = {"old", "new", "count"};
        bind(r, name, P, 3, pos, npos, kwn, kwv, nkw, a);
        if (!given(a[0]) || !given(a[1]))
            jr_raise(r, JINJA_ERR_RUNTIME, "replace needs old and new");
        jstr *s = jv_to_str(r, v);
        jstr *old = jv_to_str(r, a[0]), *rep = jv_to_str(r, a[1]);
        int64_t count =
            given(a[2]) && a[2].kind != JV_NONE ? (a[2].kind == JV_INT ? a[2].u.i : -1) : -1;
        return jv_str(jpy_replace(r, s, old, rep, count));
    }
    case F_REVERSE: {
        bind(r, name, NULL, 0, pos, npos, kwn, kwv, nkw, a);
        if (v.kind == JV_STR) return jv_slice(r, v, jv_none(), jv_none(), jv_int(-1));
        if (v.kind == JV_LIST && (v.flags & JVF_ITER)) {
            jlist *l = jl_new(&r->fail, v.u.l->n); /* jinja2 lists a generator, then reverses */
            for (size_t i = 0; i < l->n; i++) l->v[i] = v.u.l->v[l->n - 1 - i];
            return jv_list(l, false);
        }
        jlist *items = jv_iterate(r, v);
        jlist *l = jl_new(&r->fail, items->n);
        for (size_t i = 0; i < l->n; i++) l->v[i] = items->v[l->n - 1 - i];
        return iter_list(l);
    }
    case F_ROUND:
        return filter_round(r, v, pos, npos, kwn, kwv, nkw);
    case F_SAFE: {
        bind(r, name, NULL, 0, pos, npos, kwn, kwv, nkw, a);
        jv out = jv_str(jv_to_str(r, v));
        out.flags |= JVF_MARKUP;
        return out;
    }
    case F_SORT: {
        static const char *const P[] = {"reverse", "case_sensitive", "attribute"};
        bind(r, name, P, 3, pos, npos, kwn, kwv, nkw, a);
        jlist *items = jv_iterate(r, v);
        bool cs = given(a[1]) && jv_truthy(a[1]);
        sort_item *it = jr_alloc(r, (items->n + 1) * sizeof *it);
        for (size_t i = 0; i < items->n; i++) {
            jv k = items->v[i];
            if (given(a[2]) && a[2].kind == JV_STR) k = multi_attr(r, k, a[2].u.s);
            if (k.kind == JV_LIST && !cs) /* each key of a multi-attribute sort folds */
                for (size_t j = 0; j < k.u.l->n; j++) k.u.l->v[j] = fold(r, k.u.l->v[j], cs);
            it[i] = (sort_item){fold(r, k, cs), items->v[i], i};
        }
        sort_items(r, it, items->n, given(a[0]) && jv_truthy(a[0]));
        jlist *l = jl_new(&r->fail, items->n);
        for (size_t i = 0; i < items->n; i++) l->v[i] = it[i].value;
        return jv_list(l, false);
    }
    case F_STRING:
        bind(r, name, NULL, 0, pos, npos, kwn, kwv, nkw, a);
        if (v.kind == JV_STR) return v;
        return jv_str(jv_to_str(r, v));
    case F_SUM: {
        static const char *const P[] = {"attribute", "start"};
        bind(r, name, P, 2, pos, npos, kwn, kwv, nkw, a);
        jlist *items = jv_iterate(r, v);
        jv acc = or_default(a[1], jv_int(0));
        for (size_t i = 0; i < items->n; i++) {
            jv x = items->v[i];
            if (given(a[0]) && a[0].kind == JV_STR) x = attr_path(r, x, a[0].u.s, jv_undef(NULL));
            acc = jv_binop(r, OP_ADD, acc, x);
        }
        return acc;
    }
    case F_TOJSON:
        return filter_tojson(r, v, pos, npos, kwn, kwv, nkw);
    case F_TRIM: {
        static const char *const P[] = {"chars"};
        bind(r, name, P, 1, pos, npos, kwn, kwv, nkw, a);
        jstr *chars =
            given(a[0]) && a[0].kind != JV_NONE ? need_str_arg(r, a[0], "trim's chars") : NULL;
        return jv_str(jpy_strip(r, jv_to_str(r, v), chars, 3));
    }
    case F_UNIQUE: {
        static const char *const P[] = {"case_sensitive", "attribute"};
        bind(r, name, P, 2, pos, npos, kwn, kwv, nkw, a);
        bool cs = given(a[0]) && jv_truthy(a[0]);
        jlist *items = jv_iterate(r, v);
        jlb seen = {0}, out = {0};
        for (size_t i = 0; i < items->n; i++) {
            jv k = items->v[i];
            if (given(a[1]) && a[1].kind == JV_STR) k = attr_path(r, k, a[1].u.s, jv_undef(NULL));
            k = fold(r, k, cs);
            if (!jv_hashable(k)) /* jinja2 keeps a set of the keys seen */
                jr_raise(r, JINJA_ERR_RUNTIME, "unhashable type: '%s'", jv_type_name(k));
            bool dup = false;
            for (size_t j = 0; j < seen.n && !dup; j++) dup = jv_equal(r, seen.v[j], k);
            if (dup) continue;
            jlb_push(&r->fail, &seen, k);
            jlb_push(&r->fail, &out, items->v[i]);
        }
        return iter_list(jlb_done(&r->fail, &out));
    }
    case F_WORDCOUNT: {
        bind(r, name, NULL, 0, pos, npos, kwn, kwv, nkw, a);
        jstr *s = jv_to_str(r, v);
        int64_t n = 0;
        bool in = false;
        for (size_t i = 0; i < s->len;) {
            uint32_t c = jutf8_next(s->p, s->len, &i);
            bool w = c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                     (c >= 'A' && c <= 'Z') || (c >= 0x80 && !jpy_isspace(c));
            if (w && !in) n++;
            in = w;
        }
        return jv_int(n);
    }
    }
    jr_raise(r, JINJA_ERR_UNSUPPORTED, "the filter '%s' is not supported", name);
}
