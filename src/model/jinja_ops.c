/* jinja_ops.c - Python's operators on Jinja values: truthiness, ==, ordering,
 * arithmetic (ints are 64-bit here: overflow is an error, not a big int),
 * `in`, len(), iteration, and attribute and item access with the sandbox's
 * rules (jinja2's SandboxedEnvironment.getattr/getitem): a dict's methods
 * come before its keys for `d.name`, keys before methods for `d['name']`,
 * and a missing key or index is undefined rather than an error. */
#include "jinja_internal.h"
#include "moontail/compat.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void jr_step(jrender *r) {
    if (++r->steps > r->opt->max_steps)
        jr_raise(r, JINJA_ERR_LIMIT,
                 "the template ran more than %lld loop iterations and calls (the limit)",
                 (long long)r->opt->max_steps);
}

/* The undefined value's error, as jinja2's UndefinedError words it. */
_Noreturn static void undefined_error(jrender *r, jv u) {
    if (u.flags & JVF_UNSAFE) jr_raise(r, JINJA_ERR_RUNTIME, "%s", u.u.hint);
    jr_raise(r, JINJA_ERR_RUNTIME, "%s", u.u.hint ? u.u.hint : "a value is undefined");
}

/* ---- truthiness and equality -------------------------------------------------------------- */

bool jv_truthy(jv v) {
    switch ((jv_kind)v.kind) {
    case JV_UNDEF:
    case JV_NONE:
        return false;
    case JV_BOOL:
        return v.u.b;
    case JV_INT:
        return v.u.i != 0;
    case JV_FLOAT:
        return v.u.f != 0;
    case JV_STR:
        return v.u.s->len != 0;
    case JV_LIST:
        return (v.flags & JVF_ITER) || v.u.l->n != 0;
    case JV_DICT:
        return v.u.d->n != 0;
    default:
        return true;
    }
}

static int cmp_depth(jrender *r, jv a, jv b, int depth, const char *opname);

/* -1, 0, 1 for orderable values; raises a TypeError otherwise. */
static int cmp_depth(jrender *r, jv a, jv b, int depth, const char *opname) {
    if (depth > 500) jr_raise(r, JINJA_ERR_LIMIT, "values nested more than 500 deep");
    if (a.kind == JV_UNDEF) undefined_error(r, a);
    if (b.kind == JV_UNDEF) undefined_error(r, b);
    if (jv_is_num(a) && jv_is_num(b)) {
        if (jv_is_intlike(a) && jv_is_intlike(b))
            return (jv_ival(a) > jv_ival(b)) - (jv_ival(a) < jv_ival(b));
        double x = jv_fval(a), y = jv_fval(b);
        if (isnan(x) || isnan(y)) return 2; /* every comparison with NaN is false */
        return (x > y) - (x < y);
    }
    if (a.kind == JV_STR && b.kind == JV_STR) {
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        int c = memcmp(a.u.s->p, b.u.s->p, n); /* UTF-8 byte order is code point order */
        if (c) return c < 0 ? -1 : 1;
        return (a.u.s->len > b.u.s->len) - (a.u.s->len < b.u.s->len);
    }
    if (a.kind == JV_LIST && b.kind == JV_LIST && (a.flags & JVF_TUPLE) == (b.flags & JVF_TUPLE)) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (jv_equal_depth(r, a.u.l->v[i], b.u.l->v[i], depth + 1)) continue;
            return cmp_depth(r, a.u.l->v[i], b.u.l->v[i], depth + 1, opname);
        }
        return (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
    }
    jr_raise(r, JINJA_ERR_RUNTIME, "'%s' not supported between instances of '%s' and '%s'", opname,
             jv_type_name(a), jv_type_name(b));
}

int jv_compare(jrender *r, jv a, jv b, jop op) {
    const char *name = op == OP_LT ? "<" : op == OP_LE ? "<=" : op == OP_GT ? ">" : ">=";
    int c = cmp_depth(r, a, b, 0, name);
    if (c == 2) return 0;
    switch (op) {
    case OP_LT:
        return c < 0;
    case OP_LE:
        return c <= 0;
    case OP_GT:
        return c > 0;
    default:
        return c >= 0;
    }
}

/* ---- arithmetic --------------------------------------------------------------------------- */

_Noreturn static void bad_operands(jrender *r, const char *op, jv a, jv b) {
    if (a.kind == JV_UNDEF) undefined_error(r, a);
    if (b.kind == JV_UNDEF) undefined_error(r, b);
    jr_raise(r, JINJA_ERR_RUNTIME, "unsupported operand type(s) for %s: '%s' and '%s'", op,
             jv_type_name(a), jv_type_name(b));
}

_Noreturn static void overflow(jrender *r) {
    jr_raise(r, JINJA_ERR_UNSUPPORTED,
             "an integer result beyond 64 bits (Python's big integers are not supported)");
}

static jv repeat(jrender *r, jv seq, int64_t times) {
    if (times < 0) times = 0;
    if (seq.kind == JV_STR) {
        const jstr *s = seq.u.s;
        if (s->len && (uint64_t)times > (r->opt->max_output * 4) / s->len)
            jr_raise(r, JINJA_ERR_LIMIT, "a string repeated past the output limit");
        jstr *out = js_new(&r->fail, "", 0, false);
        jout o = {0};
        for (int64_t i = 0; i < times; i++) jout_put_str(&r->fail, &o, s);
        out = jout_to_str(&r->fail, &o);
        return jv_str(out);
    }
    const jlist *l = seq.u.l;
    if (l->n && (uint64_t)times > (uint64_t)r->opt->max_steps / l->n)
        jr_raise(r, JINJA_ERR_LIMIT, "a list repeated past the step limit");
    jlist *out = jl_new(&r->fail, l->n * (size_t)times);
    for (int64_t i = 0; i < times; i++)
        if (l->n) memcpy(out->v + (size_t)i * l->n, l->v, l->n * sizeof *l->v);
    return jv_list(out, seq.flags & JVF_TUPLE);
}

static int64_t floordiv_i(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

static double py_fmod(double a, double b) {
    double m = fmod(a, b);
    if (m != 0 && ((m < 0) != (b < 0)))
        m += b;
    else if (m == 0)
        m = copysign(0.0, b);
    return m;
}

jv jv_binop(jrender *r, jop op, jv a, jv b) {
    static const char *const names[] = {"", "+", "-", "*", "/", "//", "%", "**", "~"};
    if (op == OP_CONCAT) {
        jstr *x = jv_to_str(r, a), *y = jv_to_str(r, b);
        return jv_str(js_cat(&r->fail, x, y));
    }
    const char *name = names[op];
    if (jv_is_num(a) && jv_is_num(b)) {
        bool ints = jv_is_intlike(a) && jv_is_intlike(b);
        int64_t x = ints ? jv_ival(a) : 0, y = ints ? jv_ival(b) : 0, z;
        double fx = jv_fval(a), fy = jv_fval(b);
        switch (op) {
        case OP_ADD:
            if (ints) {
                if (__builtin_add_overflow(x, y, &z)) overflow(r);
                return jv_int(z);
            }
            return jv_float(fx + fy);
        case OP_SUB:
            if (ints) {
                if (__builtin_sub_overflow(x, y, &z)) overflow(r);
                return jv_int(z);
            }
            return jv_float(fx - fy);
        case OP_MUL:
            if (ints) {
                if (__builtin_mul_overflow(x, y, &z)) overflow(r);
                return jv_int(z);
            }
            return jv_float(fx * fy);
        case OP_DIV:
            if (fy == 0) jr_raise(r, JINJA_ERR_RUNTIME, "division by zero");
            return jv_float(fx / fy);
        case OP_FLOORDIV:
            if (ints) {
                if (y == 0) jr_raise(r, JINJA_ERR_RUNTIME, "integer division or modulo by zero");
                if (x == INT64_MIN && y == -1) overflow(r);
                return jv_int(floordiv_i(x, y));
            }
            if (fy == 0) jr_raise(r, JINJA_ERR_RUNTIME, "float floor division by zero");
            return jv_float(floor(fx / fy));
        case OP_MOD:
            if (ints) {
                if (y == 0) jr_raise(r, JINJA_ERR_RUNTIME, "integer division or modulo by zero");
                if (y == -1) return jv_int(0);
                int64_t m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) m += y;
                return jv_int(m);
            }
            if (fy == 0) jr_raise(r, JINJA_ERR_RUNTIME, "float modulo");
            return jv_float(py_fmod(fx, fy));
        case OP_POW:
            if (ints && y >= 0) {
                int64_t acc = 1, base = x;
                for (int64_t e = y; e; e >>= 1) {
                    if (e & 1 && __builtin_mul_overflow(acc, base, &acc)) overflow(r);
                    if (e > 1 && __builtin_mul_overflow(base, base, &base)) overflow(r);
                }
                return jv_int(acc);
            }
            if (fx == 0 && fy < 0)
                jr_raise(r, JINJA_ERR_RUNTIME, "0.0 cannot be raised to a negative power");
            if (fx < 0 && fy != floor(fy))
                jr_raise(r, JINJA_ERR_UNSUPPORTED, "complex numbers are not supported");
            return jv_float(pow(fx, fy));
        default:
            break;
        }
    }
    if (op == OP_ADD && a.kind == JV_STR && b.kind == JV_STR) {
        if (!((a.flags | b.flags) & JVF_MARKUP)) return jv_str(js_cat(&r->fail, a.u.s, b.u.s));
        /* markupsafe: Markup + str escapes the plain side */
        jstr *x = a.flags & JVF_MARKUP ? a.u.s : jpy_html_escape(r, a.u.s);
        jstr *y = b.flags & JVF_MARKUP ? b.u.s : jpy_html_escape(r, b.u.s);
        jv v = jv_str(js_cat(&r->fail, x, y));
        v.flags |= JVF_MARKUP;
        return v;
    }
    if (op == OP_ADD && a.kind == JV_LIST && b.kind == JV_LIST &&
        !((a.flags | b.flags) & (JVF_ITER | JVF_VIEW)) &&
        (a.flags & JVF_TUPLE) == (b.flags & JVF_TUPLE)) {
        jlist *l = jl_new(&r->fail, a.u.l->n + b.u.l->n);
        if (a.u.l->n) memcpy(l->v, a.u.l->v, a.u.l->n * sizeof *l->v);
        if (b.u.l->n) memcpy(l->v + a.u.l->n, b.u.l->v, b.u.l->n * sizeof *l->v);
        return jv_list(l, a.flags & JVF_TUPLE);
    }
    if (op == OP_MUL && (a.kind == JV_STR || a.kind == JV_LIST) && jv_is_intlike(b))
        return repeat(r, a, jv_ival(b));
    if (op == OP_MUL && (b.kind == JV_STR || b.kind == JV_LIST) && jv_is_intlike(a))
        return repeat(r, b, jv_ival(a));
    if (op == OP_MOD && a.kind == JV_STR) return jpy_percent(r, a.u.s, b);
    bad_operands(r, name, a, b);
}

jv jv_neg(jrender *r, jv a, bool neg) {
    if (a.kind == JV_INT || a.kind == JV_BOOL) {
        int64_t x = jv_ival(a);
        if (neg && x == INT64_MIN) overflow(r);
        return jv_int(neg ? -x : x);
    }
    if (a.kind == JV_FLOAT) return jv_float(neg ? -a.u.f : a.u.f);
    if (a.kind == JV_UNDEF) undefined_error(r, a);
    jr_raise(r, JINJA_ERR_RUNTIME, "bad operand type for unary %c: '%s'", neg ? '-' : '+',
             jv_type_name(a));
}

/* ---- containers --------------------------------------------------------------------------- */

bool jv_hashable(jv v) {
    if (v.kind == JV_DICT || v.kind == JV_NS) return false;
    if (v.kind == JV_LIST) {
        if (!(v.flags & JVF_TUPLE)) return false;
        for (size_t i = 0; i < v.u.l->n; i++)
            if (!jv_hashable(v.u.l->v[i])) return false;
    }
    return true;
}

bool jv_contains(jrender *r, jv c, jv item) {
    switch ((jv_kind)c.kind) {
    case JV_STR:
        if (item.kind != JV_STR) {
            if (item.kind == JV_UNDEF) undefined_error(r, item);
            jr_raise(r, JINJA_ERR_RUNTIME, "'in <string>' requires string as left operand, not %s",
                     jv_type_name(item));
        }
        if (!item.u.s->len) return true;
        return mt_memmem(c.u.s->p, c.u.s->len, item.u.s->p, item.u.s->len) != NULL;
    case JV_LIST:
        for (size_t i = 0; i < c.u.l->n; i++)
            if (jv_equal(r, c.u.l->v[i], item)) return true;
        return false;
    case JV_DICT:
        if (!jv_hashable(item))
            jr_raise(r, JINJA_ERR_RUNTIME, "unhashable type: '%s'", jv_type_name(item));
        return jd_get(c.u.d, item, NULL);
    case JV_UNDEF:
        return false; /* jinja2's Undefined iterates as empty */
    default:
        jr_raise(r, JINJA_ERR_RUNTIME, "argument of type '%s' is not iterable", jv_type_name(c));
    }
}

size_t jv_len(jrender *r, jv v) {
    switch ((jv_kind)v.kind) {
    case JV_STR:
        return js_ncp(v.u.s);
    case JV_LIST:
        if (v.flags & JVF_ITER)
            jr_raise(r, JINJA_ERR_RUNTIME, "object of type 'generator' has no len()");
        return v.u.l->n;
    case JV_DICT:
        return v.u.d->n;
    case JV_UNDEF:
        return 0;
    default:
        jr_raise(r, JINJA_ERR_RUNTIME, "object of type '%s' has no len()", jv_type_name(v));
    }
}

/* ---- attributes and items ----------------------------------------------------------------- */

static const char *type_repr(jv v) {
    switch ((jv_kind)v.kind) {
    case JV_NONE:
        return "None";
    case JV_DICT:
        return "dict object";
    case JV_LIST:
        return v.flags & JVF_TUPLE ? "tuple object" : "list object";
    case JV_STR:
        return "str object";
    case JV_INT:
        return "int object";
    case JV_FLOAT:
        return "float object";
    case JV_BOOL:
        return "bool object";
    case JV_NS:
        return "Namespace object";
    default:
        return "object";
    }
}

static jv missing_attr(jrender *r, jv obj, const char *name) {
    char *h = jr_alloc(r, 200);
    snprintf(h, 200, "'%s' has no attribute '%.100s'", type_repr(obj), name);
    return jv_undef(h);
}

static jv loop_attr(jrender *r, jloop *l, const char *name) {
    size_t n = l->items->n, i = l->index0;
    if (!strcmp(name, "index")) return jv_int((int64_t)i + 1);
    if (!strcmp(name, "index0")) return jv_int((int64_t)i);
    if (!strcmp(name, "revindex")) return jv_int((int64_t)(n - i));
    if (!strcmp(name, "revindex0")) return jv_int((int64_t)(n - i - 1));
    if (!strcmp(name, "first")) return jv_bool(i == 0);
    if (!strcmp(name, "last")) return jv_bool(i + 1 == n);
    if (!strcmp(name, "length")) return jv_int((int64_t)n);
    if (!strcmp(name, "depth")) return jv_int(l->depth0 + 1);
    if (!strcmp(name, "depth0")) return jv_int(l->depth0);
    if (!strcmp(name, "previtem"))
        return i > 0 ? l->items->v[i - 1] : jv_undef("there is no previous item");
    if (!strcmp(name, "nextitem"))
        return i + 1 < n ? l->items->v[i + 1] : jv_undef("there is no next item");
    if (!strcmp(name, "cycle") || !strcmp(name, "changed")) {
        jfunc *fn = jr_alloc(r, sizeof *fn);
        fn->id = name[1] == 'y' ? FN_LOOP_CYCLE : FN_LOOP_CHANGED;
        fn->name = name[1] == 'y' ? "loop.cycle" : "loop.changed";
        fn->self.kind = JV_LOOP;
        fn->self.u.loop = l;
        jv v = {.kind = JV_FUNC};
        v.u.fn = fn;
        return v;
    }
    char *h = jr_alloc(r, 160);
    snprintf(h, 160, "'LoopContext object' has no attribute '%.100s'", name);
    return jv_undef(h);
}

jv jv_getattr(jrender *r, jv obj, const char *name) {
    if (obj.kind == JV_UNDEF) undefined_error(r, obj);
    if (obj.kind == JV_NS) {
        jv v;
        if (jd_get_cstr(obj.u.d, name, &v)) return v;
        return missing_attr(r, obj, name);
    }
    if (obj.kind == JV_LOOP) return loop_attr(r, obj.u.loop, name);
    jv m;
    if (jr_method_lookup(r, obj, name, &m)) return m;
    if (obj.kind == JV_DICT) {
        jv v;
        if (jd_get_cstr(obj.u.d, name, &v)) return v;
    }
    return missing_attr(r, obj, name);
}

jv jv_getitem(jrender *r, jv obj, jv key) {
    if (obj.kind == JV_UNDEF) undefined_error(r, obj);
    if (obj.kind == JV_DICT) {
        jv v;
        if (jd_get(obj.u.d, key, &v)) return v;
    } else if ((obj.kind == JV_LIST || obj.kind == JV_STR) && jv_is_intlike(key) &&
               !(obj.flags & (JVF_ITER | JVF_VIEW))) {
        int64_t i = jv_ival(key);
        size_t n = obj.kind == JV_LIST ? obj.u.l->n : js_ncp(obj.u.s);
        if (i < 0) i += (int64_t)n;
        if (i >= 0 && (size_t)i < n) {
            if (obj.kind == JV_LIST) return obj.u.l->v[i];
            size_t a = js_cp_off(obj.u.s, (size_t)i), b = a;
            jutf8_next(obj.u.s->p, obj.u.s->len, &b);
            return jv_str(js_sub(&r->fail, obj.u.s, a, b - a));
        }
        char *h = jr_alloc(r, 120);
        snprintf(h, 120, "'%s' has no element %lld", type_repr(obj), (long long)jv_ival(key));
        return jv_undef(h);
    }
    if (key.kind == JV_STR) {
        /* a failed lookup by a string falls back to the attribute */
        if (obj.kind == JV_NS || obj.kind == JV_LOOP) return jv_getattr(r, obj, key.u.s->p);
        jv m;
        if (obj.kind != JV_UNDEF && jr_method_lookup(r, obj, key.u.s->p, &m)) return m;
        return missing_attr(r, obj, key.u.s->p);
    }
    char *h = jr_alloc(r, 120);
    jstr *ks = jv_repr(r, key);
    snprintf(h, 120, "'%s' has no element %.60s", type_repr(obj), ks->p);
    return jv_undef(h);
}

/* Python's slice.indices() for a sequence of n items. */
static void slice_indices(jrender *r, jv start, jv stop, jv step, int64_t n, int64_t *a, int64_t *b,
                          int64_t *s) {
    jv parts[3] = {start, stop, step};
    for (int i = 0; i < 3; i++)
        if (parts[i].kind != JV_NONE && parts[i].kind != JV_UNDEF && !jv_is_intlike(parts[i]))
            jr_raise(r, JINJA_ERR_RUNTIME, "slice indices must be integers or None, not '%s'",
                     jv_type_name(parts[i]));
    *s = step.kind == JV_NONE || step.kind == JV_UNDEF ? 1 : jv_ival(step);
    if (*s == 0) jr_raise(r, JINJA_ERR_RUNTIME, "slice step cannot be zero");
    if (*s == INT64_MIN) *s = -INT64_MAX;
    bool neg = *s < 0;
    int64_t lo = neg ? -1 : 0, hi = neg ? n - 1 : n;
    if (start.kind == JV_NONE || start.kind == JV_UNDEF) {
        *a = neg ? hi : lo;
    } else {
        int64_t x = jv_ival(start);
        if (x < 0) {
            x = x < -n ? lo : x + n;
            if (x < lo) x = lo;
        } else if (x > hi) {
            x = hi;
        }
        *a = x;
    }
    if (stop.kind == JV_NONE || stop.kind == JV_UNDEF) {
        *b = neg ? lo : hi;
    } else {
        int64_t x = jv_ival(stop);
        if (x < 0) {
            x = x < -n ? lo : x + n;
            if (x < lo) x = lo;
        } else if (x > hi) {
            x = hi;
        }
        *b = x;
    }
}

jv jv_slice(jrender *r, jv obj, jv start, jv stop, jv step) {
    if (obj.kind == JV_UNDEF) undefined_error(r, obj);
    /* jinja2 slices with Python's own [a:b] (not the sandbox's getitem): errors stand */
    if ((obj.kind != JV_LIST && obj.kind != JV_STR) || (obj.flags & (JVF_ITER | JVF_VIEW)))
        jr_raise(r, JINJA_ERR_RUNTIME, "'%s' object is not subscriptable",
                 obj.flags & JVF_ITER ? "generator" : jv_type_name(obj));
    int64_t n = (int64_t)(obj.kind == JV_LIST ? obj.u.l->n : js_ncp(obj.u.s));
    int64_t a, b, s;
    slice_indices(r, start, stop, step, n, &a, &b, &s);
    if (obj.kind == JV_LIST) {
        int64_t count =
            s > 0 ? (b > a ? (b - a - 1) / s + 1 : 0) : (a > b ? (a - b - 1) / -s + 1 : 0);
        if (s == 1 && a == 0 && b == n) return obj; /* lists are immutable: l[:] is l */
        jlist *l = jl_new(&r->fail, (size_t)count);
        for (int64_t k = 0, i = a; k < count; k++, i += s) l->v[k] = obj.u.l->v[i];
        return jv_list(l, obj.flags & JVF_TUPLE);
    }
    const jstr *str = obj.u.s;
    if (s == 1) {
        if (b <= a) return jv_str(js_new(&r->fail, "", 0, false));
        size_t x = js_cp_off(str, (size_t)a), y = js_cp_off(str, (size_t)b);
        return jv_str(js_sub(&r->fail, str, x, y - x));
    }
    /* other steps: character by character, data if any of the string was */
    size_t *offs = jr_alloc(r, ((size_t)n + 1) * sizeof *offs);
    size_t k = 0;
    for (size_t i = 0; i < str->len;) {
        offs[k++] = i;
        jutf8_next(str->p, str->len, &i);
    }
    offs[k] = str->len;
    jout o = {0};
    for (int64_t i = a; s > 0 ? i < b : i > b; i += s)
        jout_put(&r->fail, &o, str->p + offs[i], offs[i + 1] - offs[i], false);
    jstr *res = jout_to_str(&r->fail, &o);
    return jv_str(js_tainted(str) ? js_derived(&r->fail, res->p, res->len, true) : res);
}
