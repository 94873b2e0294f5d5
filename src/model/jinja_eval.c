/* jinja_eval.c - runs a parsed template (jinja.h): expressions, statements,
 * scopes, macros, and the parse and render entry points.
 *
 * Scopes follow jinja2's: the context's variables, then the template's top
 * level (where `set` outside loops and macros writes), a new scope for each
 * iteration of a for loop (a `set` inside does not outlive the iteration;
 * namespace() objects are how a loop hands values out), and one per macro
 * call whose parent is the scope the macro was defined in, read when the
 * macro runs. `if` makes no scope. */
#include "jinja_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- scopes ------------------------------------------------------------------------------- */

static jscope *scope_new(jrender *r, jscope *parent) {
    jscope *s = jr_alloc(r, sizeof *s);
    s->parent = parent;
    return s;
}

static void scope_set(jrender *r, jscope *s, const char *name, jv v) {
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->names[i], name)) {
            s->vals[i] = v;
            return;
        }
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 8;
        const char **nn = jr_alloc(r, cap * sizeof *nn);
        jv *nv = jr_alloc(r, cap * sizeof *nv);
        if (s->n) {
            memcpy(nn, s->names, s->n * sizeof *nn);
            memcpy(nv, s->vals, s->n * sizeof *nv);
        }
        s->names = nn, s->vals = nv, s->cap = cap;
    }
    s->names[s->n] = name;
    s->vals[s->n++] = v;
}

static bool scope_get(const jscope *s, const char *name, jv *out) {
    for (; s; s = s->parent)
        for (size_t i = s->n; i-- > 0;)
            if (!strcmp(s->names[i], name)) {
                *out = s->vals[i];
                return true;
            }
    return false;
}

static jv lookup(jrender *r, jscope *s, const char *name) {
    jv v;
    if (scope_get(s, name, &v)) return v;
    if (jinja_global(&r->fail, name, &v)) return v;
    size_t n = strlen(name) + 20;
    char *h = jr_alloc(r, n);
    snprintf(h, n, "'%s' is undefined", name);
    return jv_undef(h);
}

/* ---- output ------------------------------------------------------------------------------- */

static void emit(jrender *r, const jstr *s) {
    if (r->out->len + s->len > r->opt->max_output)
        jr_raise(r, JINJA_ERR_LIMIT, "the template's output passed %zu bytes (the limit)",
                 r->opt->max_output);
    jout_put_str(&r->fail, r->out, s);
}

/* ---- expressions -------------------------------------------------------------------------- */

/* Evaluated call arguments; small calls keep them in the struct (no allocation). */
typedef struct argv {
    jv *pos;
    size_t npos;
    const char **kwn;
    jv *kwv;
    size_t nkw;
    jv pos_buf[6], kwv_buf[6];
    const char *kwn_buf[6];
} argv_t;

/* Fills a (whose arrays may point into it: keep it in place). */
static void eval_args(jrender *r, jscope *s, const jargs *ar, size_t extra_kw, argv_t *a) {
    jlist *star = NULL;
    if (ar->star) {
        jv sv = jr_eval(r, s, ar->star);
        star = jv_iterate(r, sv);
    }
    jv dstar = {0};
    if (ar->dstar) {
        dstar = jr_eval(r, s, ar->dstar);
        if (dstar.kind != JV_DICT)
            jr_raise(r, JINJA_ERR_RUNTIME, "argument after ** must be a mapping, not %s",
                     jv_type_name(dstar));
    }
    size_t np = (size_t)ar->pos.n + (star ? star->n : 0);
    size_t nk = (size_t)ar->kwv.n + (ar->dstar ? dstar.u.d->n : 0) + extra_kw;
    a->npos = a->nkw = 0;
    a->pos = np < 6 ? a->pos_buf : jr_alloc(r, (np + 1) * sizeof *a->pos);
    a->kwn = nk < 6 ? a->kwn_buf : jr_alloc(r, (nk + 1) * sizeof *a->kwn);
    a->kwv = nk < 6 ? a->kwv_buf : jr_alloc(r, (nk + 1) * sizeof *a->kwv);
    for (int i = 0; i < ar->pos.n; i++) a->pos[a->npos++] = jr_eval(r, s, ar->pos.v[i]);
    for (size_t i = 0; star && i < star->n; i++) a->pos[a->npos++] = star->v[i];
    for (int i = 0; i < ar->kwv.n; i++) {
        a->kwn[a->nkw] = ar->kw[i];
        a->kwv[a->nkw++] = jr_eval(r, s, ar->kwv.v[i]);
    }
    for (size_t i = 0; ar->dstar && i < dstar.u.d->n; i++) {
        jv k = dstar.u.d->k[i];
        if (k.kind != JV_STR) jr_raise(r, JINJA_ERR_RUNTIME, "keywords must be strings");
        a->kwn[a->nkw] = k.u.s->p;
        a->kwv[a->nkw++] = dstar.u.d->v[i];
    }
}

/* A filter or test this interpreter lacks (0), or that jinja2 lacks too. */
static void check_known(jrender *r, const jnode *e, const char *what) {
    if (e->id == JINJA_ID_UNKNOWN)
        jr_raise(r, JINJA_ERR_RUNTIME, "no %s named '%s' found", what, e->name);
    if (!e->id) jr_raise(r, JINJA_ERR_UNSUPPORTED, "the %s '%s' is not supported", what, e->name);
}

static jv eval_filter(jrender *r, jscope *s, const jnode *e, jv subject) {
    jv v = subject;
    if (e->a) v = e->a->kind == E_FILTER ? eval_filter(r, s, e->a, subject) : jr_eval(r, s, e->a);
    argv_t a;
    eval_args(r, s, e->args, 0, &a);
    r->line = e->line, r->col = e->col;
    check_known(r, e, "filter");
    return jr_filter(r, e->id, e->name, v, a.pos, a.npos, a.kwn, a.kwv, a.nkw);
}

/* A filter chain from a filter block or block set, applied to v (the chain's
 * innermost subject is NULL). */
static jv apply_filter_chain(jrender *r, jscope *s, const jnode *chain, jv v) {
    if (!chain) return v;
    jv inner = chain->a ? apply_filter_chain(r, s, chain->a, v) : v;
    argv_t a;
    eval_args(r, s, chain->args, 0, &a);
    r->line = chain->line, r->col = chain->col;
    check_known(r, chain, "filter");
    return jr_filter(r, chain->id, chain->name, inner, a.pos, a.npos, a.kwn, a.kwv, a.nkw);
}

static jv eval_inner(jrender *r, jscope *s, const jnode *e) {
    switch ((jnode_kind)e->kind) {
    case E_CONST:
        return e->value;
    case E_NAME:
        return lookup(r, s, e->name);
    case E_LIST:
    case E_TUPLE: {
        jlist *l = jl_new(&r->fail, (size_t)e->list.n);
        for (int i = 0; i < e->list.n; i++) l->v[i] = jr_eval(r, s, e->list.v[i]);
        return jv_list(l, e->kind == E_TUPLE);
    }
    case E_DICT: {
        jdict *d = jd_new(&r->fail, (size_t)e->list.n / 2);
        for (int i = 0; i + 1 < e->list.n; i += 2) {
            jv k = jr_eval(r, s, e->list.v[i]);
            jv v = jr_eval(r, s, e->list.v[i + 1]);
            if (!jv_hashable(k))
                jr_raise(r, JINJA_ERR_RUNTIME, "unhashable type: '%s'", jv_type_name(k));
            jd_set(&r->fail, d, k, v);
        }
        return jv_dict(d);
    }
    case E_ATTR: {
        jv obj = jr_eval(r, s, e->a);
        r->line = e->line, r->col = e->col;
        return jv_getattr(r, obj, e->name);
    }
    case E_ITEM: {
        jv obj = jr_eval(r, s, e->a);
        jv key = jr_eval(r, s, e->b);
        r->line = e->line, r->col = e->col;
        return jv_getitem(r, obj, key);
    }
    case E_SLICE: {
        jv obj = jr_eval(r, s, e->a);
        jv a = e->b ? jr_eval(r, s, e->b) : jv_none();
        jv b = e->c ? jr_eval(r, s, e->c) : jv_none();
        jv c = e->d ? jr_eval(r, s, e->d) : jv_none();
        r->line = e->line, r->col = e->col;
        if (e->op && (obj.kind != JV_LIST && obj.kind != JV_STR)) /* see parse_postfix */
            return jv_undef("a slice of a constant that is no sequence");
        return jv_slice(r, obj, a, b, c);
    }
    case E_CALL: {
        jv fn = jr_eval(r, s, e->a);
        argv_t a;
        eval_args(r, s, e->args, 0, &a);
        r->line = e->line, r->col = e->col;
        return jr_call(r, fn, a.pos, a.npos, a.kwn, a.kwv, a.nkw);
    }
    case E_FILTER:
        return eval_filter(r, s, e, jv_undef(NULL));
    case E_TEST: {
        jv v = jr_eval(r, s, e->a);
        argv_t a;
        eval_args(r, s, e->args, 0, &a);
        r->line = e->line, r->col = e->col;
        check_known(r, e, "test");
        if (a.nkw) jr_raise(r, JINJA_ERR_UNSUPPORTED, "keyword arguments to a test");
        return jv_bool(jr_test(r, e->id, e->name, v, a.pos, a.npos));
    }
    case E_NOT:
        return jv_bool(!jv_truthy(jr_eval(r, s, e->a)));
    case E_NEG:
    case E_POS: {
        jv v = jr_eval(r, s, e->a);
        r->line = e->line, r->col = e->col;
        return jv_neg(r, v, e->kind == E_NEG);
    }
    case E_BINOP: {
        jv a = jr_eval(r, s, e->a);
        jv b = jr_eval(r, s, e->b);
        r->line = e->line, r->col = e->col;
        return jv_binop(r, (jop)e->op, a, b);
    }
    case E_AND: {
        jv a = jr_eval(r, s, e->a);
        return jv_truthy(a) ? jr_eval(r, s, e->b) : a;
    }
    case E_OR: {
        jv a = jr_eval(r, s, e->a);
        return jv_truthy(a) ? a : jr_eval(r, s, e->b);
    }
    case E_COMPARE: {
        jv left = jr_eval(r, s, e->list.v[0]);
        for (int i = 1; i < e->list.n; i++) {
            jv right = jr_eval(r, s, e->list.v[i]);
            r->line = e->line, r->col = e->col;
            jop op = (jop)e->ops[i - 1];
            bool ok;
            switch (op) {
            case OP_EQ:
                ok = jv_equal(r, left, right);
                break;
            case OP_NE:
                ok = !jv_equal(r, left, right);
                break;
            case OP_IN:
                ok = jv_contains(r, right, left);
                break;
            case OP_NOTIN:
                ok = !jv_contains(r, right, left);
                break;
            default:
                ok = jv_compare(r, left, right, op);
            }
            if (!ok) return jv_bool(false);
            left = right;
        }
        return jv_bool(true);
    }
    case E_COND:
        if (jv_truthy(jr_eval(r, s, e->a))) return jr_eval(r, s, e->b);
        if (e->c) return jr_eval(r, s, e->c);
        return jv_undef("the inline if-expression evaluated to false and has no else section");
    default:
        jr_raise(r, JINJA_ERR_UNSUPPORTED, "this expression cannot be evaluated");
    }
}

jv jr_eval(jrender *r, jscope *s, const jnode *e) {
    int line = r->line, col = r->col;
    r->line = e->line, r->col = e->col;
    if (++r->depth > r->opt->max_depth * 4 + 400)
        jr_raise(r, JINJA_ERR_LIMIT, "expressions nested too deep");
    jv v = eval_inner(r, s, e);
    r->depth--;
    r->line = line, r->col = col;
    return v;
}

/* ---- assignment --------------------------------------------------------------------------- */

static void assign(jrender *r, jscope *s, const jnode *target, jv v) {
    if (target->kind == E_NAME) {
        scope_set(r, s, target->name, v);
        return;
    }
    if (target->kind == E_ATTR) {
        jv ns = lookup(r, s, target->a->name);
        if (ns.kind != JV_NS)
            jr_raise(r, JINJA_ERR_RUNTIME, "cannot assign attribute on non-namespace object");
        jd_set(&r->fail, ns.u.d, jv_str(js_cstr(&r->fail, target->name)), v);
        return;
    }
    /* a tuple of targets: unpack */
    jlist *items = jv_iterate(r, v);
    if (items->n != (size_t)target->list.n)
        jr_raise(r, JINJA_ERR_RUNTIME, "%s values to unpack (expected %d, got %zu)",
                 items->n > (size_t)target->list.n ? "too many" : "not enough", target->list.n,
                 items->n);
    for (int i = 0; i < target->list.n; i++) assign(r, s, target->list.v[i], items->v[i]);
}

/* ---- statements --------------------------------------------------------------------------- */

typedef enum exres { EX_OK, EX_BREAK, EX_CONTINUE } exres;

static exres exec_list(jrender *r, jscope *s, jnodes body);

/* Runs body into a fresh output and returns that text. */
static jstr *capture(jrender *r, jscope *s, jnodes body) {
    jout *saved = r->out;
    jout o = {0};
    r->out = &o;
    exec_list(r, s, body);
    r->out = saved;
    return jout_to_str(&r->fail, &o);
}

static jv call_macro(jrender *r, jmacro *m, jv *pos, size_t npos, const char **kwn, jv *kwv,
                     size_t nkw) {
    const jnode *def = m->def;
    const char *mname = def->name ? def->name : "caller";
    jr_step(r);
    if (r->depth > r->opt->max_depth * 4 + 400 || ++r->calls > r->opt->max_depth)
        jr_raise(r, JINJA_ERR_LIMIT, "macros called more than %d deep (the limit)",
                 r->opt->max_depth);
    jscope *ms = scope_new(r, m->closure);
    const jargs *params = def->args;
    size_t np = params ? (size_t)params->kwv.n : 0;
    bool *bound = jr_alloc(r, np + 1);
    if (npos > np && !def->uses_varargs)
        jr_raise(r, JINJA_ERR_RUNTIME, "macro '%s' takes not more than %zu argument(s)", mname, np);
    for (size_t i = 0; i < npos && i < np; i++) {
        scope_set(r, ms, params->kw[i], pos[i]);
        bound[i] = true;
    }
    jdict *kwargs = def->uses_kwargs ? jd_new(&r->fail, 0) : NULL;
    jv caller = m->has_caller ? m->caller : jv_undef("'caller' is undefined");
    bool has_caller = m->has_caller;
    for (size_t k = 0; k < nkw; k++) {
        size_t i = 0;
        while (i < np && strcmp(params->kw[i], kwn[k])) i++;
        if (i < np) {
            if (bound[i])
                jr_raise(r, JINJA_ERR_RUNTIME, "macro '%s' got multiple values for argument '%s'",
                         mname, kwn[k]);
            scope_set(r, ms, params->kw[i], kwv[k]);
            bound[i] = true;
        } else if (!strcmp(kwn[k], "caller") && def->uses_caller) {
            caller = kwv[k];
            has_caller = true;
        } else if (kwargs) {
            jd_set(&r->fail, kwargs, jv_str(js_cstr(&r->fail, kwn[k])), kwv[k]);
        } else {
            jr_raise(r, JINJA_ERR_RUNTIME, "macro '%s' takes no keyword argument '%s'", mname,
                     kwn[k]);
        }
    }
    for (size_t i = 0; i < np; i++) {
        if (bound[i]) continue;
        if (params->kwv.v[i]) {
            scope_set(r, ms, params->kw[i], jr_eval(r, ms, params->kwv.v[i]));
        } else {
            size_t n = strlen(params->kw[i]) + 40;
            char *h = jr_alloc(r, n);
            snprintf(h, n, "'%s' is undefined", params->kw[i]);
            scope_set(r, ms, params->kw[i], jv_undef(h));
        }
    }
    if (def->uses_varargs) {
        size_t extra = npos > np ? npos - np : 0;
        jlist *l = jl_new(&r->fail, extra);
        for (size_t i = 0; i < extra; i++) l->v[i] = pos[np + i];
        scope_set(r, ms, "varargs", jv_list(l, true));
    }
    if (kwargs) scope_set(r, ms, "kwargs", jv_dict(kwargs));
    if (def->uses_caller) scope_set(r, ms, "caller", caller);
    (void)has_caller;
    jstr *out = capture(r, ms, def->list);
    r->calls--;
    return jv_str(out);
}

jv jr_call(jrender *r, jv fn, jv *pos, size_t npos, const char **kwn, jv *kwv, size_t nkw) {
    switch ((jv_kind)fn.kind) {
    case JV_MACRO:
        return call_macro(r, fn.u.m, pos, npos, kwn, kwv, nkw);
    case JV_FUNC:
        jr_step(r);
        if (fn.u.fn->id == FN_METHOD) return jr_method_call(r, fn.u.fn, pos, npos, kwn, kwv, nkw);
        return jr_global_call(r, fn.u.fn, pos, npos, kwn, kwv, nkw);
    case JV_UNDEF:
        jr_raise(r, JINJA_ERR_RUNTIME, "%s", fn.u.hint ? fn.u.hint : "calling an undefined value");
    default:
        jr_raise(r, JINJA_ERR_RUNTIME, "'%s' object is not callable", jv_type_name(fn));
    }
}

static exres exec_for(jrender *r, jscope *s, const jnode *n) {
    jv it = jr_eval(r, s, n->b);
    r->line = n->line, r->col = n->col;
    jlist *items = jv_iterate(r, it);
    if (n->c) { /* {% for x in xs if cond %}: the loop sees only the items that pass */
        jlb kept = {0};
        for (size_t i = 0; i < items->n; i++) {
            jr_step(r);
            jscope *fs = scope_new(r, s);
            assign(r, fs, n->a, items->v[i]);
            if (jv_truthy(jr_eval(r, fs, n->c))) jlb_push(&r->fail, &kept, items->v[i]);
        }
        items = jlb_done(&r->fail, &kept);
    }
    if (items->n == 0) return exec_list(r, s, n->orelse) == EX_OK ? EX_OK : EX_OK;
    jloop *loop = jr_alloc(r, sizeof *loop);
    loop->items = items;
    jv lv = {.kind = JV_LOOP};
    lv.u.loop = loop;
    /* each iteration starts from an empty scope; the same one serves again unless a macro
     * or call block defined in the body could keep it (n->closures) */
    jscope *ls = NULL;
    for (size_t i = 0; i < items->n; i++) {
        jr_step(r);
        loop->index0 = i;
        if (!ls || n->closures)
            ls = scope_new(r, s);
        else
            ls->n = 0;
        scope_set(r, ls, "loop", lv);
        assign(r, ls, n->a, items->v[i]);
        if (exec_list(r, ls, n->list) == EX_BREAK) break;
    }
    return EX_OK;
}

static exres exec_stmt(jrender *r, jscope *s, const jnode *n) {
    r->line = n->line, r->col = n->col;
    switch ((jnode_kind)n->kind) {
    case S_TEXT:
        emit(r, n->value.u.s);
        return EX_OK;
    case S_PRINT: {
        jv v = jr_eval(r, s, n->a);
        emit(r, jv_to_str(r, v));
        return EX_OK;
    }
    case S_IF:
        return exec_list(r, s, jv_truthy(jr_eval(r, s, n->a)) ? n->list : n->orelse);
    case S_FOR:
        return exec_for(r, s, n);
    case S_SET:
        assign(r, s, n->a, jr_eval(r, s, n->b));
        return EX_OK;
    case S_SETBLOCK: {
        jv v = jv_str(capture(r, s, n->list));
        assign(r, s, n->a, apply_filter_chain(r, s, n->c, v));
        return EX_OK;
    }
    case S_FILTERBLOCK: {
        jv v = jv_str(capture(r, s, n->list));
        emit(r, jv_to_str(r, apply_filter_chain(r, s, n->c, v)));
        return EX_OK;
    }
    case S_MACRO: {
        jmacro *m = jr_alloc(r, sizeof *m);
        m->def = n;
        m->closure = s;
        jv v = {.kind = JV_MACRO};
        v.u.m = m;
        scope_set(r, s, n->name, v);
        return EX_OK;
    }
    case S_CALLBLOCK: {
        jmacro *c = jr_alloc(r, sizeof *c);
        c->def = n;
        c->closure = s;
        jv caller = {.kind = JV_MACRO};
        caller.u.m = c;
        const jnode *call = n->a;
        jv fn = jr_eval(r, s, call->a);
        argv_t a;
        eval_args(r, s, call->args, 1, &a);
        a.kwn[a.nkw] = "caller";
        a.kwv[a.nkw++] = caller;
        r->line = n->line, r->col = n->col;
        jv out = jr_call(r, fn, a.pos, a.npos, a.kwn, a.kwv, a.nkw);
        emit(r, jv_to_str(r, out));
        return EX_OK;
    }
    case S_WITH: {
        jscope *ws = scope_new(r, s);
        const jnode *targets = n->b;
        for (int i = 0; i < targets->list.n; i++)
            assign(r, ws, targets->list.v[i], jr_eval(r, s, n->orelse.v[i]));
        return exec_list(r, ws, n->list);
    }
    case S_BREAK:
        return EX_BREAK;
    case S_CONTINUE:
        return EX_CONTINUE;
    case S_BLOCK:
        return exec_list(r, s, n->list);
    default:
        jr_raise(r, JINJA_ERR_UNSUPPORTED, "this statement cannot be run");
    }
}

static exres exec_list(jrender *r, jscope *s, jnodes body) {
    for (int i = 0; i < body.n; i++) {
        exres x = exec_stmt(r, s, body.v[i]);
        if (x != EX_OK) return x;
    }
    return EX_OK;
}

/* ---- entry points ------------------------------------------------------------------------- */

/* Parse and render state lives on the heap: a longjmp back to the entry must
 * not find it in registers. */
typedef struct parse_state {
    jfail fail;
    jinja_template *t;
} parse_state;

/* The parse itself, where errors land (a function of its own: no local of
 * the caller lives across the longjmp). */
static bool parse_guarded(parse_state *ps, const char *src, size_t len) {
    if (setjmp(ps->fail.jmp)) return false;
    if (memchr(src, 0, len))
        jfail_raise(&ps->fail, JINJA_ERR_SYNTAX, 0, 0, "the template holds a NUL byte");
    if (!jutf8_valid(src, len))
        jfail_raise(&ps->fail, JINJA_ERR_SYNTAX, 0, 0, "the template is not valid UTF-8");
    size_t ntok;
    jtok *toks = jinja_lex(&ps->fail, src, len, &ntok);
    ps->t->root = jinja_parse_tokens(&ps->fail, toks, ntok);
    return true;
}

jinja_template *jinja_parse(const char *src, size_t len, const char *name, jinja_error *e) {
    jinja_error scratch;
    if (!e) e = &scratch;
    memset(e, 0, sizeof *e);
    jinja_template *t = calloc(1, sizeof *t);
    parse_state *ps = calloc(1, sizeof *ps);
    if (!t || !ps || !(t->name = strdup(name ? name : "template"))) {
        e->kind = JINJA_ERR_MEMORY;
        mt_error_set(&e->err, "out of memory parsing a template");
        if (t) free(t->name);
        free(t);
        free(ps);
        return NULL;
    }
    t->arena.limit = 256u << 20;
    ps->t = t;
    ps->fail.e = e;
    ps->fail.name = t->name;
    ps->fail.arena = &t->arena;
    bool ok = parse_guarded(ps, src, len);
    free(ps);
    if (ok) return t;
    ja_free_all(&t->arena);
    free(t->name);
    free(t);
    return NULL;
}

void jinja_free(jinja_template *t) {
    if (!t) return;
    ja_free_all(&t->arena);
    free(t->name);
    free(t);
}

typedef struct render_state {
    jrender r;
    jarena arena;
    jinja_options opt;
    jout out;
} render_state;

/* The render itself, where errors land (see parse_guarded). */
static bool render_guarded(render_state *st, const jinja_template *t, const jinja_var *vars, int n,
                           jinja_output *out) {
    jrender *r = &st->r;
    if (setjmp(r->fail.jmp)) return false;
    r->globals = scope_new(r, NULL);
    for (int i = 0; i < n; i++)
        scope_set(r, r->globals, vars[i].name,
                  jv_from_json(r, vars[i].value, vars[i].data, vars[i].plain_keys, 0));
    r->root = scope_new(r, r->globals);
    r->out = &st->out;
    exec_list(r, r->root, t->root->list);
    out->text = malloc(st->out.len + 1);
    out->data = malloc((st->out.nspan + 1) * sizeof *out->data);
    if (!out->text || !out->data)
        jfail_raise(&r->fail, JINJA_ERR_MEMORY, 0, 0, "out of memory for the rendered text");
    if (st->out.len) memcpy(out->text, st->out.p, st->out.len);
    out->text[st->out.len] = 0;
    out->len = st->out.len;
    if (st->out.nspan) memcpy(out->data, st->out.span, st->out.nspan * sizeof *out->data);
    out->n_data = st->out.nspan;
    return true;
}

int jinja_render(const jinja_template *t, const jinja_var *vars, int n, const jinja_options *opt,
                 jinja_output *out, jinja_error *e) {
    jinja_error scratch;
    if (!e) e = &scratch;
    memset(e, 0, sizeof *e);
    memset(out, 0, sizeof *out);
    render_state *st = calloc(1, sizeof *st);
    if (!st) {
        e->kind = JINJA_ERR_MEMORY;
        mt_error_set(&e->err, "out of memory rendering a template");
        return -1;
    }
    if (opt) st->opt = *opt;
    if (!st->opt.max_output) st->opt.max_output = 4u << 20;
    if (!st->opt.max_memory) st->opt.max_memory = 256u << 20;
    if (!st->opt.max_steps) st->opt.max_steps = 10000000;
    if (!st->opt.max_depth) st->opt.max_depth = 200;
    st->arena.limit = st->opt.max_memory;
    st->r.fail.e = e;
    st->r.fail.name = t->name;
    st->r.fail.arena = &st->arena;
    st->r.opt = &st->opt;
    bool ok = render_guarded(st, t, vars, n, out);
    ja_free_all(&st->arena);
    free(st);
    if (ok) return 0;
    free(out->text);
    free(out->data);
    memset(out, 0, sizeof *out);
    return -1;
}

void jinja_output_free(jinja_output *out) {
    if (!out) return;
    free(out->text);
    free(out->data);
    memset(out, 0, sizeof *out);
}
