/* jinja_parse.c - tokens -> syntax tree, with jinja2's grammar: operator
 * precedence (lowest first: `x if c else y`, or, and, not, comparisons and
 * in, + -, ~, * / // %, **, unary - +, then postfix . [] () and filters |
 * and tests `is`), tuples without parentheses where jinja2 allows them, and
 * the statements if/elif/else, for/else (with a filter and loop controls),
 * set (also block set and namespace attributes), macro, call, filter, with,
 * generation. Tags jinja2 knows that need files or are not implemented
 * (include, import, extends, block, recursive loops, ...) are refused here
 * with their line and column. */
#include "jinja_internal.h"

#include <stdio.h>
#include <string.h>

#define MAX_NEST 200 /* expression and statement nesting */

typedef struct parser {
    jfail *f;
    jtok *t;
    size_t n, i;
    int depth;
    int loops; /* for loops around the current statement (break/continue) */
} parser;

static jtok *cur(parser *P) {
    return &P->t[P->i];
}
static jtok *peek(parser *P, size_t k) {
    return &P->t[P->i + k < P->n ? P->i + k : P->n - 1];
}
static jtok *next(parser *P) {
    jtok *t = cur(P);
    if (P->i + 1 < P->n) P->i++;
    return t;
}

static const char *describe(const jtok *t) {
    switch ((jtok_type)t->type) {
    case TK_EOF:
        return "end of template";
    case TK_TEXT:
        return "template text";
    case TK_VAR_BEGIN:
        return "'{{'";
    case TK_VAR_END:
        return "end of print statement ('}}')";
    case TK_BLOCK_BEGIN:
        return "'{%'";
    case TK_BLOCK_END:
        return "end of statement block ('%}')";
    case TK_NAME:
    case TK_OP:
        return t->p;
    case TK_STRING:
        return "a string";
    case TK_INT:
        return "an integer";
    case TK_FLOAT:
        return "a float";
    }
    return "?";
}

_Noreturn static void fail_at(parser *P, const jtok *t, jinja_err_kind kind, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
_Noreturn static void fail_at(parser *P, const jtok *t, jinja_err_kind kind, const char *fmt, ...) {
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    jfail_raise(P->f, kind, t->line, t->col, "%s", msg);
}

static bool is_op(const jtok *t, const char *op) {
    return t->type == TK_OP && strcmp(t->p, op) == 0;
}
static bool is_name(const jtok *t, const char *name) {
    return t->type == TK_NAME && strcmp(t->p, name) == 0;
}

static void expect_op(parser *P, const char *op) {
    if (!is_op(cur(P), op))
        fail_at(P, cur(P), JINJA_ERR_SYNTAX, "expected '%s', got %s", op, describe(cur(P)));
    next(P);
}

static jtok *expect_type(parser *P, jtok_type type, const char *what) {
    if (cur(P)->type != type)
        fail_at(P, cur(P), JINJA_ERR_SYNTAX, "expected %s, got %s", what, describe(cur(P)));
    return next(P);
}

static jnode *node(parser *P, jnode_kind kind, const jtok *at) {
    jnode *n = jalloc(P->f, sizeof *n);
    n->kind = (uint8_t)kind;
    n->line = at->line;
    n->col = at->col;
    return n;
}

typedef struct nodevec {
    jnode **v;
    int n, cap;
} nodevec;

static void nv_push(parser *P, nodevec *v, jnode *x) {
    if (v->n == v->cap) {
        int cap = v->cap ? 2 * v->cap : 8;
        jnode **p = jalloc(P->f, (size_t)cap * sizeof *p);
        if (v->n) memcpy(p, v->v, (size_t)v->n * sizeof *p);
        v->v = p;
        v->cap = cap;
    }
    v->v[v->n++] = x;
}

static jnodes nv_done(nodevec *v) {
    return (jnodes){v->v, v->n};
}

static void enter(parser *P, const jtok *t) {
    if (++P->depth > MAX_NEST)
        fail_at(P, t, JINJA_ERR_LIMIT, "the template nests more than %d expressions or blocks",
                MAX_NEST);
}

/* ---- expressions -------------------------------------------------------------------------- */

static jnode *parse_expression(parser *P, bool with_condexpr);
static jnode *parse_tuple(parser *P, bool simplified, bool with_condexpr, const char *extra_end,
                          bool explicit_parens);
static jnode *parse_unary(parser *P, bool with_filter);
static jnode *parse_primary(parser *P);
static jnode *parse_postfix(parser *P, jnode *n);

static jargs *parse_call_args(parser *P) {
    jtok *open = cur(P);
    enter(P, open);
    expect_op(P, "(");
    jargs *a = jalloc(P->f, sizeof *a);
    nodevec pos = {0}, kwv = {0};
    const char **kw = NULL;
    int nkw = 0, kwcap = 0;
    bool need_comma = false;
    while (!is_op(cur(P), ")")) {
        if (need_comma) {
            expect_op(P, ",");
            if (is_op(cur(P), ")")) break;
        }
        if (is_op(cur(P), "*")) {
            if (a->star || a->dstar)
                fail_at(P, open, JINJA_ERR_SYNTAX, "invalid syntax for function call expression");
            next(P);
            a->star = parse_expression(P, true);
        } else if (is_op(cur(P), "**")) {
            if (a->dstar)
                fail_at(P, open, JINJA_ERR_SYNTAX, "invalid syntax for function call expression");
            next(P);
            a->dstar = parse_expression(P, true);
        } else if (cur(P)->type == TK_NAME && is_op(peek(P, 1), "=")) {
            if (a->dstar)
                fail_at(P, open, JINJA_ERR_SYNTAX, "invalid syntax for function call expression");
            const char *key = next(P)->p;
            next(P);
            if (nkw == kwcap) {
                kwcap = kwcap ? 2 * kwcap : 4;
                const char **k = jalloc(P->f, (size_t)kwcap * sizeof *k);
                if (nkw) memcpy(k, kw, (size_t)nkw * sizeof *k);
                kw = k;
            }
            kw[nkw++] = key;
            nv_push(P, &kwv, parse_expression(P, true));
        } else {
            if (a->star || a->dstar || nkw)
                fail_at(P, open, JINJA_ERR_SYNTAX, "invalid syntax for function call expression");
            nv_push(P, &pos, parse_expression(P, true));
        }
        need_comma = true;
    }
    expect_op(P, ")");
    a->pos = nv_done(&pos);
    a->kw = kw;
    a->kwv = nv_done(&kwv);
    P->depth--;
    return a;
}

/* A dotted name after '|' or 'is'. */
static const char *dotted_name(parser *P) {
    jtok *t = expect_type(P, TK_NAME, "a name");
    const char *name = t->p;
    while (is_op(cur(P), ".")) {
        next(P);
        jtok *u = expect_type(P, TK_NAME, "a name");
        size_t a = strlen(name), b = strlen(u->p);
        char *s = jalloc(P->f, a + b + 2);
        memcpy(s, name, a);
        s[a] = '.';
        memcpy(s + a + 1, u->p, b + 1);
        name = s;
    }
    return name;
}

static jnode *parse_filter(parser *P, jnode *subject, bool start_inline) {
    while (is_op(cur(P), "|") || start_inline) {
        if (!start_inline) next(P);
        jtok *at = cur(P);
        const char *name = dotted_name(P);
        jnode *f = node(P, E_FILTER, at);
        f->a = subject;
        f->name = name;
        int id = jinja_filter_id(name);
        f->id = (uint16_t)(id < 0 ? 0 : id == 0 ? JINJA_ID_UNKNOWN : id); /* see check_names */
        f->args = is_op(cur(P), "(") ? parse_call_args(P) : jalloc(P->f, sizeof(jargs));
        subject = f;
        start_inline = false;
    }
    return subject;
}

static jnode *parse_test(parser *P, jnode *subject) {
    jtok *at = next(P); /* is */
    bool negated = false;
    if (is_name(cur(P), "not")) {
        next(P);
        negated = true;
    }
    jtok *nt = cur(P);
    const char *name = dotted_name(P);
    jnode *t = node(P, E_TEST, at);
    t->a = subject;
    t->name = name;
    int id = jinja_test_id(name);
    (void)nt;
    t->id = (uint16_t)(id == 0 ? JINJA_ID_UNKNOWN : id);
    jtok *c = cur(P);
    if (is_op(c, "(")) {
        t->args = parse_call_args(P);
    } else if ((c->type == TK_NAME || c->type == TK_STRING || c->type == TK_INT ||
                c->type == TK_FLOAT || is_op(c, "(") || is_op(c, "[") || is_op(c, "{")) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is")) fail_at(P, c, JINJA_ERR_SYNTAX, "you cannot chain tests with 'is'");
        t->args = jalloc(P->f, sizeof(jargs));
        jnode **one = jalloc(P->f, sizeof *one);
        one[0] = parse_postfix(P, parse_primary(P));
        t->args->pos = (jnodes){one, 1};
    } else {
        t->args = jalloc(P->f, sizeof(jargs));
    }
    if (!negated) return t;
    jnode *n = node(P, E_NOT, at);
    n->a = t;
    return n;
}

static jnode *parse_subscribed(parser *P) {
    jtok *at = cur(P);
    jnode *start = NULL;
    if (is_op(cur(P), ":")) {
        next(P);
    } else {
        jnode *e = parse_expression(P, true);
        if (!is_op(cur(P), ":")) return e;
        next(P);
        start = e;
    }
    jnode *s = node(P, E_SLICE, at);
    s->b = start;
    if (!is_op(cur(P), ":") && !is_op(cur(P), "]") && !is_op(cur(P), ","))
        s->c = parse_expression(P, true);
    if (is_op(cur(P), ":")) {
        next(P);
        if (!is_op(cur(P), "]") && !is_op(cur(P), ",")) s->d = parse_expression(P, true);
    }
    return s;
}

/* Whether jinja2's optimizer folds e to a constant while compiling. */
static bool is_const(const jnode *e, int depth) {
    if (!e) return true;
    if (depth > 50) return false;
    switch ((jnode_kind)e->kind) {
    case E_CONST:
        return true;
    case E_LIST:
    case E_TUPLE:
    case E_DICT:
    case E_COMPARE:
        for (int i = 0; i < e->list.n; i++)
            if (!is_const(e->list.v[i], depth + 1)) return false;
        return true;
    case E_NOT:
    case E_NEG:
    case E_POS:
        return is_const(e->a, depth + 1);
    case E_BINOP:
    case E_AND:
    case E_OR:
    case E_ITEM:
        return is_const(e->a, depth + 1) && is_const(e->b, depth + 1);
    case E_SLICE:
    case E_COND:
        return is_const(e->a, depth + 1) && is_const(e->b, depth + 1) &&
               is_const(e->c, depth + 1) && is_const(e->d, depth + 1);
    case E_FILTER:
    case E_TEST:
        /* filters that need the context are never folded */
        if (e->kind == E_FILTER && e->name &&
            (!strcmp(e->name, "map") || !strcmp(e->name, "select") || !strcmp(e->name, "reject") ||
             !strcmp(e->name, "selectattr") || !strcmp(e->name, "rejectattr")))
            return false;
        if (!e->a || e->args->star || e->args->dstar) return false;
        for (int i = 0; i < e->args->pos.n; i++)
            if (!is_const(e->args->pos.v[i], depth + 1)) return false;
        for (int i = 0; i < e->args->kwv.n; i++)
            if (!is_const(e->args->kwv.v[i], depth + 1)) return false;
        return is_const(e->a, depth + 1);
    default:
        return false;
    }
}

/* jinja2 evaluates a {{ }} whose whole expression is constant while compiling,
 * and there a slice goes through the sandbox's getitem (a failure is
 * undefined); anywhere else a slice is Python's own [a:b] (a failure is an
 * error). Marks the slices of such an expression. */
static void mark_const_slices(jnode *e, int depth) {
    if (!e || depth > 50) return;
    if (e->kind == E_SLICE) e->op = 1;
    mark_const_slices(e->a, depth + 1);
    mark_const_slices(e->b, depth + 1);
    mark_const_slices(e->c, depth + 1);
    mark_const_slices(e->d, depth + 1);
    for (int i = 0; i < e->list.n; i++) mark_const_slices(e->list.v[i], depth + 1);
    if (e->args && e->kind < S_TEXT)
        for (int i = 0; i < e->args->pos.n; i++) mark_const_slices(e->args->pos.v[i], depth + 1);
}

static jnode *parse_postfix(parser *P, jnode *n) {
    for (;;) {
        jtok *t = cur(P);
        if (is_op(t, ".")) {
            next(P);
            jtok *a = next(P);
            if (a->type == TK_NAME) {
                jnode *g = node(P, E_ATTR, t);
                g->a = n;
                g->name = a->p;
                n = g;
            } else if (a->type == TK_INT) {
                jnode *k = node(P, E_CONST, a);
                k->value = jv_int(a->i);
                jnode *g = node(P, E_ITEM, t);
                g->a = n;
                g->b = k;
                n = g;
            } else {
                fail_at(P, a, JINJA_ERR_SYNTAX, "expected a name or number after '.'");
            }
        } else if (is_op(t, "[")) {
            enter(P, t);
            next(P);
            nodevec args = {0};
            while (!is_op(cur(P), "]")) {
                if (args.n) expect_op(P, ",");
                nv_push(P, &args, parse_subscribed(P));
            }
            expect_op(P, "]");
            if (args.n == 0) fail_at(P, t, JINJA_ERR_SYNTAX, "expected a subscript expression");
            jnode *key;
            if (args.n == 1) {
                key = args.v[0];
            } else {
                for (int i = 0; i < args.n; i++)
                    if (args.v[i]->kind == E_SLICE)
                        fail_at(P, t, JINJA_ERR_UNSUPPORTED,
                                "a slice in a subscript of several parts (x[a, b:c]) is not"
                                " supported");
                key = node(P, E_TUPLE, t);
                key->list = nv_done(&args);
            }
            if (key->kind == E_SLICE) {
                key->a = n;
                n = key;
            } else {
                jnode *g = node(P, E_ITEM, t);
                g->a = n;
                g->b = key;
                n = g;
            }
            P->depth--;
        } else if (is_op(t, "(")) {
            jnode *c = node(P, E_CALL, t);
            c->a = n;
            c->args = parse_call_args(P);
            n = c;
        } else {
            return n;
        }
    }
}

static jnode *parse_filter_expr(parser *P, jnode *n) {
    for (;;) {
        jtok *t = cur(P);
        if (is_op(t, "|")) {
            n = parse_filter(P, n, false);
        } else if (is_name(t, "is")) {
            n = parse_test(P, n);
        } else if (is_op(t, "(")) {
            jnode *c = node(P, E_CALL, t);
            c->a = n;
            c->args = parse_call_args(P);
            n = c;
        } else {
            return n;
        }
    }
}

static jnode *parse_primary(parser *P) {
    jtok *t = cur(P);
    jnode *n;
    bool nested = is_op(t, "(") || is_op(t, "[") || is_op(t, "{");
    if (nested) enter(P, t);
    if (t->type == TK_NAME) {
        next(P);
        if (!strcmp(t->p, "true") || !strcmp(t->p, "True") || !strcmp(t->p, "false") ||
            !strcmp(t->p, "False")) {
            n = node(P, E_CONST, t);
            n->value = jv_bool(t->p[0] == 't' || t->p[0] == 'T');
        } else if (!strcmp(t->p, "none") || !strcmp(t->p, "None")) {
            n = node(P, E_CONST, t);
            n->value = jv_none();
        } else {
            n = node(P, E_NAME, t);
            n->name = t->p;
        }
    } else if (t->type == TK_STRING) {
        next(P);
        jstr *s = js_new(P->f, t->p, t->len, false);
        while (cur(P)->type == TK_STRING) {
            jtok *u = next(P);
            s = js_cat(P->f, s, js_new(P->f, u->p, u->len, false));
        }
        n = node(P, E_CONST, t);
        n->value = jv_str(s);
    } else if (t->type == TK_INT || t->type == TK_FLOAT) {
        next(P);
        n = node(P, E_CONST, t);
        n->value = t->type == TK_INT ? jv_int(t->i) : jv_float(t->f);
    } else if (is_op(t, "(")) {
        next(P);
        n = parse_tuple(P, false, true, NULL, true);
        expect_op(P, ")");
    } else if (is_op(t, "[")) {
        next(P);
        nodevec items = {0};
        while (!is_op(cur(P), "]")) {
            if (items.n) expect_op(P, ",");
            if (is_op(cur(P), "]")) break;
            nv_push(P, &items, parse_expression(P, true));
        }
        expect_op(P, "]");
        n = node(P, E_LIST, t);
        n->list = nv_done(&items);
    } else if (is_op(t, "{")) {
        next(P);
        nodevec items = {0};
        while (!is_op(cur(P), "}")) {
            if (items.n) expect_op(P, ",");
            if (is_op(cur(P), "}")) break;
            nv_push(P, &items, parse_expression(P, true));
            expect_op(P, ":");
            nv_push(P, &items, parse_expression(P, true));
        }
        expect_op(P, "}");
        n = node(P, E_DICT, t);
        n->list = nv_done(&items);
    } else {
        fail_at(P, t, JINJA_ERR_SYNTAX, "unexpected %s", describe(t));
    }
    if (nested) P->depth--;
    return n;
}

static jnode *parse_unary(parser *P, bool with_filter) {
    jtok *t = cur(P);
    jnode *n;
    if (is_op(t, "-") || is_op(t, "+")) {
        enter(P, t);
        next(P);
        n = node(P, is_op(t, "-") ? E_NEG : E_POS, t);
        n->a = parse_unary(P, false);
        P->depth--;
    } else {
        n = parse_primary(P);
    }
    n = parse_postfix(P, n);
    if (with_filter) n = parse_filter_expr(P, n);
    return n;
}

static jnode *binop(parser *P, const jtok *at, jop op, jnode *a, jnode *b) {
    jnode *n = node(P, E_BINOP, at);
    n->op = (uint8_t)op;
    n->a = a;
    n->b = b;
    return n;
}

static jnode *parse_pow(parser *P) {
    jnode *left = parse_unary(P, true);
    while (is_op(cur(P), "**")) {
        jtok *t = next(P);
        left = binop(P, t, OP_POW, left, parse_unary(P, true));
    }
    return left;
}

static jnode *parse_math2(parser *P) {
    jnode *left = parse_pow(P);
    for (;;) {
        jtok *t = cur(P);
        jop op = is_op(t, "*")    ? OP_MUL
                 : is_op(t, "/")  ? OP_DIV
                 : is_op(t, "//") ? OP_FLOORDIV
                 : is_op(t, "%")  ? OP_MOD
                                  : 0;
        if (!op) return left;
        next(P);
        left = binop(P, t, op, left, parse_pow(P));
    }
}

static jnode *parse_concat(parser *P) {
    jnode *left = parse_math2(P);
    while (is_op(cur(P), "~")) {
        jtok *t = next(P);
        left = binop(P, t, OP_CONCAT, left, parse_math2(P));
    }
    return left;
}

static jnode *parse_math1(parser *P) {
    jnode *left = parse_concat(P);
    for (;;) {
        jtok *t = cur(P);
        jop op = is_op(t, "+") ? OP_ADD : is_op(t, "-") ? OP_SUB : 0;
        if (!op) return left;
        next(P);
        left = binop(P, t, op, left, parse_concat(P));
    }
}

static jnode *parse_compare(parser *P) {
    jtok *at = cur(P);
    jnode *first = parse_math1(P);
    nodevec operands = {0};
    uint8_t ops[64];
    int nops = 0;
    for (;;) {
        jtok *t = cur(P);
        jop op = is_op(t, "==")   ? OP_EQ
                 : is_op(t, "!=") ? OP_NE
                 : is_op(t, "<")  ? OP_LT
                 : is_op(t, "<=") ? OP_LE
                 : is_op(t, ">")  ? OP_GT
                 : is_op(t, ">=") ? OP_GE
                                  : 0;
        if (op) {
            next(P);
        } else if (is_name(t, "in")) {
            next(P);
            op = OP_IN;
        } else if (is_name(t, "not") && is_name(peek(P, 1), "in")) {
            next(P);
            next(P);
            op = OP_NOTIN;
        } else {
            break;
        }
        if (nops == 64) fail_at(P, t, JINJA_ERR_LIMIT, "more than 64 chained comparisons");
        if (!operands.n) nv_push(P, &operands, first);
        ops[nops++] = (uint8_t)op;
        nv_push(P, &operands, parse_math1(P));
    }
    if (!nops) return first;
    jnode *n = node(P, E_COMPARE, at);
    n->list = nv_done(&operands);
    n->ops = jalloc(P->f, (size_t)nops);
    memcpy(n->ops, ops, (size_t)nops);
    return n;
}

static jnode *parse_not(parser *P) {
    if (is_name(cur(P), "not")) {
        jtok *t = next(P);
        enter(P, t);
        jnode *n = node(P, E_NOT, t);
        n->a = parse_not(P);
        P->depth--;
        return n;
    }
    return parse_compare(P);
}

static jnode *parse_and(parser *P) {
    jnode *left = parse_not(P);
    while (is_name(cur(P), "and")) {
        jtok *t = next(P);
        jnode *n = node(P, E_AND, t);
        n->a = left;
        n->b = parse_not(P);
        left = n;
    }
    return left;
}

static jnode *parse_or(parser *P) {
    jnode *left = parse_and(P);
    while (is_name(cur(P), "or")) {
        jtok *t = next(P);
        jnode *n = node(P, E_OR, t);
        n->a = left;
        n->b = parse_and(P);
        left = n;
    }
    return left;
}

static jnode *parse_condexpr(parser *P) {
    jtok *at = cur(P);
    jnode *e = parse_or(P);
    while (is_name(cur(P), "if")) {
        next(P);
        jnode *c = node(P, E_COND, at);
        c->b = e;
        c->a = parse_or(P);
        if (is_name(cur(P), "else")) {
            enter(P, next(P));
            c->c = parse_condexpr(P);
            P->depth--;
        }
        e = c;
    }
    return e;
}

static jnode *parse_expression(parser *P, bool with_condexpr) {
    return with_condexpr ? parse_condexpr(P) : parse_or(P);
}

static bool tuple_end(parser *P, const char *extra_end) {
    jtok *t = cur(P);
    if (t->type == TK_VAR_END || t->type == TK_BLOCK_END || is_op(t, ")")) return true;
    return extra_end && is_name(t, extra_end);
}

static jnode *parse_tuple(parser *P, bool simplified, bool with_condexpr, const char *extra_end,
                          bool explicit_parens) {
    jtok *at = cur(P);
    nodevec args = {0};
    bool is_tuple = false;
    for (;;) {
        if (args.n) expect_op(P, ",");
        if (tuple_end(P, extra_end)) break;
        nv_push(P, &args, simplified ? parse_primary(P) : parse_expression(P, with_condexpr));
        if (is_op(cur(P), ","))
            is_tuple = true;
        else
            break;
    }
    if (!is_tuple) {
        if (args.n) return args.v[0];
        if (!explicit_parens)
            fail_at(P, cur(P), JINJA_ERR_SYNTAX, "expected an expression, got %s",
                    describe(cur(P)));
    }
    jnode *n = node(P, E_TUPLE, at);
    n->list = nv_done(&args);
    return n;
}

/* ---- statements --------------------------------------------------------------------------- */

static jnodes subparse(parser *P, const char *const *end_tags);

/* Skips an optional ':' and the block end, then the body up to one of
 * end_tags (left as the current token). */
static jnodes parse_body(parser *P, const char *const *end_tags, const jtok *open) {
    if (is_op(cur(P), ":")) next(P);
    expect_type(P, TK_BLOCK_END, "end of statement block ('%}')");
    jnodes body = subparse(P, end_tags);
    if (cur(P)->type == TK_EOF)
        fail_at(P, open, JINJA_ERR_SYNTAX,
                "unexpected end of template: this '%s' block is never closed ('%s' expected)",
                open->p, end_tags[0]);
    return body;
}

static void drop_end_tag(parser *P) {
    next(P);
}

static void check_target(parser *P, jnode *t, bool allow_tuple) {
    if (t->kind == E_NAME) {
        if (!strcmp(t->name, "true") || !strcmp(t->name, "false") || !strcmp(t->name, "none"))
            fail_at(P, peek(P, 0), JINJA_ERR_SYNTAX, "cannot assign to '%s'", t->name);
        return;
    }
    if (allow_tuple && t->kind == E_TUPLE) {
        for (int i = 0; i < t->list.n; i++) check_target(P, t->list.v[i], true);
        return;
    }
    jfail_raise(P->f, JINJA_ERR_SYNTAX, t->line, t->col, "cannot assign to this expression");
}

static jnode *parse_assign_target(parser *P, const char *extra_end, bool with_ns) {
    jtok *t = cur(P);
    if (with_ns && t->type == TK_NAME && is_op(peek(P, 1), ".")) {
        next(P);
        next(P);
        jtok *attr = expect_type(P, TK_NAME, "an attribute name");
        jnode *base = node(P, E_NAME, t);
        base->name = t->p;
        jnode *n = node(P, E_ATTR, t);
        n->a = base;
        n->name = attr->p;
        return n;
    }
    jnode *n = parse_tuple(P, true, true, extra_end, false);
    check_target(P, n, true);
    return n;
}

/* (a, b=default, ...) of a macro or call block */
static jargs *parse_signature(parser *P) {
    expect_op(P, "(");
    jargs *a = jalloc(P->f, sizeof *a);
    const char **names = NULL;
    nodevec defs = {0};
    int n = 0, cap = 0;
    bool any_default = false;
    while (!is_op(cur(P), ")")) {
        if (n) expect_op(P, ",");
        jtok *t = expect_type(P, TK_NAME, "a parameter name");
        if (n == cap) {
            cap = cap ? 2 * cap : 4;
            const char **k = jalloc(P->f, (size_t)cap * sizeof *k);
            if (n) memcpy(k, names, (size_t)n * sizeof *k);
            names = k;
        }
        names[n++] = t->p;
        jnode *def = NULL;
        if (is_op(cur(P), "=")) {
            next(P);
            def = parse_expression(P, true);
            any_default = true;
        } else if (any_default) {
            fail_at(P, t, JINJA_ERR_SYNTAX, "non-default argument follows default argument");
        }
        nv_push(P, &defs, def);
    }
    expect_op(P, ")");
    a->kw = names;
    a->kwv = nv_done(&defs);
    return a;
}

static void mark_names(const jnode *n, jnode *m, int depth);

static void mark_list(jnodes l, jnode *m, int depth) {
    for (int i = 0; i < l.n; i++) mark_names(l.v[i], m, depth);
}

/* Whether a macro body names varargs, kwargs or caller (jinja2 decides by that
 * whether the macro takes extra arguments or a caller). */
static void mark_names(const jnode *n, jnode *m, int depth) {
    if (!n || depth > MAX_NEST * 2) return;
    if (n->kind == E_NAME) {
        if (!strcmp(n->name, "varargs")) m->uses_varargs = true;
        if (!strcmp(n->name, "kwargs")) m->uses_kwargs = true;
        if (!strcmp(n->name, "caller")) m->uses_caller = true;
    }
    mark_names(n->a, m, depth + 1);
    mark_names(n->b, m, depth + 1);
    mark_names(n->c, m, depth + 1);
    mark_names(n->d, m, depth + 1);
    mark_list(n->list, m, depth + 1);
    mark_list(n->orelse, m, depth + 1);
    if (n->args) {
        mark_list(n->args->pos, m, depth + 1);
        mark_list(n->args->kwv, m, depth + 1);
        mark_names(n->args->star, m, depth + 1);
        mark_names(n->args->dstar, m, depth + 1);
    }
}

/* Whether statements define a macro or call block anywhere inside. */
static bool has_closures(jnodes l, int depth) {
    for (int i = 0; i < l.n; i++) {
        const jnode *s = l.v[i];
        if (s->kind == S_MACRO || s->kind == S_CALLBLOCK || depth > MAX_NEST) return true;
        if (has_closures(s->list, depth + 1) || has_closures(s->orelse, depth + 1)) return true;
    }
    return false;
}

static jnode *parse_statement(parser *P) {
    jtok *t = cur(P);
    if (t->type != TK_NAME) fail_at(P, t, JINJA_ERR_SYNTAX, "tag name expected");
    enter(P, t);
    jnode *n = NULL;
    const char *tag = t->p;
    if (!strcmp(tag, "if")) {
        next(P);
        n = node(P, S_IF, t);
        jnode *cur_if = n;
        static const char *const ends[] = {"endif", "elif", "else", NULL};
        static const char *const end_only[] = {"endif", NULL};
        for (;;) {
            cur_if->a = parse_tuple(P, false, false, NULL, false);
            cur_if->list = parse_body(P, ends, t);
            jtok *e = next(P);
            if (is_name(e, "elif")) {
                jnode *el = node(P, S_IF, e);
                jnode **one = jalloc(P->f, sizeof *one);
                one[0] = el;
                cur_if->orelse = (jnodes){one, 1};
                cur_if = el;
                continue;
            }
            if (is_name(e, "else")) {
                cur_if->orelse = parse_body(P, end_only, t);
                drop_end_tag(P);
            }
            break;
        }
    } else if (!strcmp(tag, "for")) {
        next(P);
        n = node(P, S_FOR, t);
        n->a = parse_assign_target(P, "in", false);
        if (!is_name(cur(P), "in"))
            fail_at(P, cur(P), JINJA_ERR_SYNTAX, "expected 'in', got %s", describe(cur(P)));
        next(P);
        n->b = parse_tuple(P, false, false, "recursive", false);
        if (is_name(cur(P), "if")) {
            next(P);
            n->c = parse_expression(P, true);
        }
        if (is_name(cur(P), "recursive"))
            fail_at(P, cur(P), JINJA_ERR_UNSUPPORTED, "recursive for loops are not supported");
        static const char *const ends[] = {"endfor", "else", NULL};
        static const char *const end_only[] = {"endfor", NULL};
        P->loops++;
        n->list = parse_body(P, ends, t);
        P->loops--;
        n->closures = has_closures(n->list, 0);
        if (is_name(next(P), "else")) {
            n->orelse = parse_body(P, end_only, t);
            drop_end_tag(P);
        }
    } else if (!strcmp(tag, "set")) {
        next(P);
        jnode *target = parse_assign_target(P, NULL, true);
        if (is_op(cur(P), "=")) {
            next(P);
            n = node(P, S_SET, t);
            n->a = target;
            n->b = parse_tuple(P, false, true, NULL, false);
        } else {
            n = node(P, S_SETBLOCK, t);
            n->a = target;
            if (target->kind == E_TUPLE)
                fail_at(P, t, JINJA_ERR_SYNTAX, "a block set takes one name, not a tuple");
            n->c = parse_filter(P, NULL, false);
            static const char *const ends[] = {"endset", NULL};
            n->list = parse_body(P, ends, t);
            drop_end_tag(P);
        }
    } else if (!strcmp(tag, "macro")) {
        next(P);
        n = node(P, S_MACRO, t);
        n->name = expect_type(P, TK_NAME, "a macro name")->p;
        n->args = parse_signature(P);
        static const char *const ends[] = {"endmacro", NULL};
        int loops = P->loops;
        P->loops = 0;
        n->list = parse_body(P, ends, t);
        P->loops = loops;
        drop_end_tag(P);
        mark_list(n->list, n, 0);
        for (int i = 0; i < n->args->kwv.n; i++) mark_names(n->args->kwv.v[i], n, 0);
    } else if (!strcmp(tag, "call")) {
        next(P);
        n = node(P, S_CALLBLOCK, t);
        n->args = is_op(cur(P), "(") ? parse_signature(P) : jalloc(P->f, sizeof(jargs));
        n->a = parse_expression(P, true);
        if (n->a->kind != E_CALL) fail_at(P, t, JINJA_ERR_SYNTAX, "expected a call");
        static const char *const ends[] = {"endcall", NULL};
        int loops = P->loops;
        P->loops = 0;
        n->list = parse_body(P, ends, t);
        P->loops = loops;
        drop_end_tag(P);
        mark_list(n->list, n, 0);
    } else if (!strcmp(tag, "filter")) {
        next(P);
        n = node(P, S_FILTERBLOCK, t);
        n->c = parse_filter(P, NULL, true);
        static const char *const ends[] = {"endfilter", NULL};
        n->list = parse_body(P, ends, t);
        drop_end_tag(P);
    } else if (!strcmp(tag, "with")) {
        next(P);
        n = node(P, S_WITH, t);
        nodevec targets = {0}, values = {0};
        while (cur(P)->type != TK_BLOCK_END) {
            if (targets.n) expect_op(P, ",");
            jnode *tg = parse_assign_target(P, NULL, false);
            nv_push(P, &targets, tg);
            expect_op(P, "=");
            nv_push(P, &values, parse_expression(P, true));
        }
        n->a = NULL;
        n->orelse = nv_done(&values);
        jnode *tl = node(P, E_TUPLE, t);
        tl->list = nv_done(&targets);
        n->b = tl;
        static const char *const ends[] = {"endwith", NULL};
        n->list = parse_body(P, ends, t);
        drop_end_tag(P);
    } else if (!strcmp(tag, "generation")) {
        /* transformers' AssistantTracker marks the assistant's text; it renders as is */
        next(P);
        n = node(P, S_BLOCK, t);
        static const char *const ends[] = {"endgeneration", NULL};
        n->list = parse_body(P, ends, t);
        drop_end_tag(P);
    } else if (!strcmp(tag, "break") || !strcmp(tag, "continue")) {
        next(P);
        if (!P->loops) fail_at(P, t, JINJA_ERR_SYNTAX, "'%s' outside of a for loop", tag);
        n = node(P, tag[0] == 'b' ? S_BREAK : S_CONTINUE, t);
    } else if (!strcmp(tag, "include") || !strcmp(tag, "import") || !strcmp(tag, "from") ||
               !strcmp(tag, "extends") || !strcmp(tag, "block") || !strcmp(tag, "autoescape") ||
               !strcmp(tag, "print") || !strcmp(tag, "do") || !strcmp(tag, "trans")) {
        if (!strcmp(tag, "do") || !strcmp(tag, "trans"))
            fail_at(P, t, JINJA_ERR_SYNTAX,
                    "encountered unknown tag '%s' (jinja2 needs an extension for it, which"
                    " chat templates do not get)",
                    tag);
        fail_at(P, t, JINJA_ERR_UNSUPPORTED, "the '%s' tag is not supported%s", tag,
                strcmp(tag, "include") && strcmp(tag, "import") && strcmp(tag, "from") &&
                        strcmp(tag, "extends")
                    ? ""
                    : " (templates are sandboxed: no other files)");
    } else {
        fail_at(P, t, JINJA_ERR_SYNTAX, "encountered unknown tag '%s'", tag);
    }
    P->depth--;
    return n;
}

static jnodes subparse(parser *P, const char *const *end_tags) {
    nodevec body = {0};
    for (;;) {
        jtok *t = cur(P);
        if (t->type == TK_EOF) break;
        if (t->type == TK_TEXT) {
            next(P);
            jnode *n = node(P, S_TEXT, t);
            n->value = jv_str(js_new(P->f, t->p, t->len, false));
            nv_push(P, &body, n);
        } else if (t->type == TK_VAR_BEGIN) {
            next(P);
            jnode *n = node(P, S_PRINT, t);
            n->a = parse_tuple(P, false, true, NULL, false);
            if (is_const(n->a, 0)) mark_const_slices(n->a, 0);
            expect_type(P, TK_VAR_END, "end of print statement ('}}')");
            nv_push(P, &body, n);
        } else if (t->type == TK_BLOCK_BEGIN) {
            next(P);
            if (end_tags)
                for (int i = 0; end_tags[i]; i++)
                    if (is_name(cur(P), end_tags[i])) return nv_done(&body);
            jtok *tag = cur(P);
            if (tag->type == TK_NAME &&
                (!strncmp(tag->p, "end", 3) || !strcmp(tag->p, "else") || !strcmp(tag->p, "elif")))
                fail_at(P, tag, JINJA_ERR_SYNTAX, "unexpected '%s'%s", tag->p,
                        end_tags ? "" : " (no block is open)");
            nv_push(P, &body, parse_statement(P));
            expect_type(P, TK_BLOCK_END, "end of statement block ('%}')");
        } else {
            fail_at(P, t, JINJA_ERR_SYNTAX, "unexpected %s", describe(t));
        }
    }
    return nv_done(&body);
}

/* An unknown filter or test is an error when the template compiles, except
 * inside an if statement or an inline if, where jinja2 lets it fail only when
 * it runs (its "soft" frames; a for loop, macro, call, filter, with or block
 * set inside starts a frame that is not soft again). */
static void check_names(parser *P, const jnode *n, bool soft, int depth);

static void check_list(parser *P, jnodes l, bool soft, int depth) {
    for (int i = 0; i < l.n; i++) check_names(P, l.v[i], soft, depth + 1);
}

static void check_args(parser *P, const jargs *a, bool soft, int depth) {
    if (!a) return;
    check_list(P, a->pos, soft, depth);
    check_list(P, a->kwv, soft, depth);
    check_names(P, a->star, soft, depth + 1);
    check_names(P, a->dstar, soft, depth + 1);
}

static void check_names(parser *P, const jnode *n, bool soft, int depth) {
    if (!n || depth > 4 * MAX_NEST) return;
    /* a constant expression (not a bare slice) folds while compiling: see mark_const_slices */
    if (n->kind < S_TEXT && n->kind != E_SLICE && n->kind != E_CONST && is_const(n, 0))
        mark_const_slices((jnode *)n, 0);
    if ((n->kind == E_FILTER || n->kind == E_TEST) && n->id == JINJA_ID_UNKNOWN && !soft)
        jfail_raise(P->f, JINJA_ERR_SYNTAX, n->line, n->col, "no %s named '%s'",
                    n->kind == E_FILTER ? "filter" : "test", n->name);
    switch ((jnode_kind)n->kind) {
    case S_IF:
    case E_COND:
        soft = true;
        break;
    case S_FOR: /* the iterable in the outer frame, the rest in the loop's */
        check_names(P, n->b, soft, depth + 1);
        check_names(P, n->a, false, depth + 1);
        check_names(P, n->c, false, depth + 1);
        check_list(P, n->list, false, depth);
        check_list(P, n->orelse, false, depth);
        return;
    case S_MACRO:
    case S_SETBLOCK:
    case S_FILTERBLOCK:
        soft = false;
        break;
    case S_CALLBLOCK:
        check_names(P, n->a, soft, depth + 1);
        check_args(P, n->args, false, depth);
        check_list(P, n->list, false, depth);
        return;
    case S_WITH:
        check_list(P, n->orelse, soft, depth);
        check_names(P, n->b, false, depth + 1);
        check_list(P, n->list, false, depth);
        return;
    default:
        break;
    }
    check_names(P, n->a, soft, depth + 1);
    check_names(P, n->b, soft, depth + 1);
    check_names(P, n->c, soft, depth + 1);
    check_names(P, n->d, soft, depth + 1);
    check_list(P, n->list, soft, depth);
    check_list(P, n->orelse, soft, depth);
    check_args(P, n->args, soft, depth);
}

jnode *jinja_parse_tokens(jfail *f, jtok *toks, size_t n) {
    parser P = {.f = f, .t = toks, .n = n};
    jnode *root = node(&P, S_BLOCK, &toks[0]);
    root->list = subparse(&P, NULL);
    check_names(&P, root, false, 0);
    return root;
}
