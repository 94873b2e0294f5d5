/* jinja_internal.h - what the parts of the Jinja interpreter (jinja.h) share:
 * the arena, values, the syntax tree, and the render state.
 *
 *   jinja_lex.c      template source -> tokens (whitespace control, trim/lstrip)
 *   jinja_parse.c    tokens -> syntax tree
 *   jinja_value.c    the arena, strings with data spans, lists, dicts, str()/repr()
 *   jinja_ops.c      Python's operators: arithmetic, comparison, truthiness, indexing
 *   jinja_eval.c     expressions and statements, scopes, macros, the render entry
 *   jinja_filters.c  filters and tests
 *   jinja_methods.c  str/dict/list methods and the global functions
 *   jinja_json.c     JSON in (the context) and out (tojson)
 *
 * Errors are raised with longjmp to the parse or render entry; every
 * allocation lives in an arena freed there, so nothing leaks on the way. */
#ifndef MOONTAIL_JINJA_INTERNAL_H
#define MOONTAIL_JINJA_INTERNAL_H

#include "moontail/jinja.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- arena -------------------------------------------------------------------------------- */

typedef struct ja_chunk ja_chunk;

typedef struct jarena {
    ja_chunk *head;
    size_t used;  /* bytes handed out + chunk overhead */
    size_t limit; /* 0: none */
} jarena;

/* NULL when out of memory or over the limit (*over set for the latter). */
void *ja_alloc(jarena *a, size_t n, bool *over);
void ja_free_all(jarena *a);

/* The state errors jump back to: a parse or a render. */
typedef struct jfail {
    jmp_buf jmp;
    jinja_error *e;
    const char *name; /* the template's name for messages */
    jarena *arena;
} jfail;

_Noreturn void jfail_raise(jfail *f, jinja_err_kind kind, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
void *jalloc(jfail *f, size_t n);                 /* zeroed; raises on failure */
char *jstrdup(jfail *f, const char *s, size_t n); /* NUL-terminated copy */

/* ---- values ------------------------------------------------------------------------------- */

typedef enum jv_kind {
    JV_UNDEF,
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST, /* also tuples (flag JVF_TUPLE) */
    JV_DICT,
    JV_NS,    /* namespace(): the one mutable object */
    JV_MACRO, /* a macro or a call block's caller */
    JV_FUNC,  /* a global function or a bound method */
    JV_LOOP,  /* a for loop's `loop` */
} jv_kind;

enum {
    JVF_TUPLE = 1,  /* JV_LIST: a tuple */
    JVF_UNSAFE = 2, /* JV_UNDEF: a refused attribute (a mutating method); calling it errs */
    JVF_ITER = 4,   /* JV_LIST: a generator (map, select, ...): always true, no len(), no [i] */
    JVF_VIEW = 8,   /* JV_LIST: dict.items()/keys()/values(): no [i] */
    JVF_MARKUP = 16 /* JV_STR: markupsafe's Markup (|safe, |escape): + escapes the other side */
};

typedef struct jstr jstr;
typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jmacro jmacro;
typedef struct jfunc jfunc;
typedef struct jloop jloop;

typedef struct jv {
    uint8_t kind;
    uint8_t flags;
    union {
        bool b;
        int64_t i;
        double f;
        jstr *s;
        jlist *l;
        jdict *d; /* JV_DICT and JV_NS */
        jmacro *m;
        jfunc *fn;
        jloop *loop;
        const char *hint; /* JV_UNDEF: what was undefined, for messages (may be NULL) */
    } u;
} jv;

/* A string: UTF-8 bytes, and the ranges of them that came from data. */
typedef struct jstr {
    size_t len;
    size_t nspan;
    jinja_span *span; /* sorted, not adjacent, not empty */
    char p[];         /* len bytes + NUL */
} jstr;

struct jlist {
    size_t n;
    jv *v;
};

/* Insertion-ordered; keys are usually strings. Dicts are immutable once
 * built, except namespaces. */
struct jdict {
    size_t n, cap;
    jv *k, *v;
};

/* ---- syntax tree -------------------------------------------------------------------------- */

typedef enum jnode_kind {
    /* expressions */
    E_CONST,
    E_NAME,
    E_LIST,
    E_TUPLE,
    E_DICT,   /* list: k0, v0, k1, v1, ... */
    E_ATTR,   /* a.name */
    E_ITEM,   /* a[b] */
    E_SLICE,  /* a[b:c:d], any of b c d NULL */
    E_CALL,   /* a(args) */
    E_FILTER, /* a | name(args); a NULL in a filter block */
    E_TEST,   /* a is [not] name(args) */
    E_NOT,
    E_NEG,
    E_POS,
    E_BINOP, /* a op b: + - * / // % ** ~ */
    E_AND,
    E_OR,
    E_COMPARE, /* list: operands, ops: the operators between them */
    E_COND,    /* b if a else c (c may be NULL) */
    /* statements */
    S_TEXT,
    S_PRINT,
    S_IF,          /* a: condition, body, orelse */
    S_FOR,         /* a: target, b: iterable, c: filter condition, body, orelse */
    S_SET,         /* a: target, b: value */
    S_SETBLOCK,    /* a: target, c: filter (E_FILTER chain on NULL), body */
    S_MACRO,       /* name, params, body */
    S_CALLBLOCK,   /* a: the call, params: the caller's, body */
    S_FILTERBLOCK, /* c: filter chain, body */
    S_WITH,        /* targets in list, values in list2, body */
    S_BREAK,
    S_CONTINUE,
    S_BLOCK, /* a plain sequence (template root, generation block) */
} jnode_kind;

typedef enum jop {
    OP_ADD = 1,
    OP_SUB,
    OP_MUL,
    OP_DIV,
    OP_FLOORDIV,
    OP_MOD,
    OP_POW,
    OP_CONCAT,
    OP_EQ,
    OP_NE,
    OP_LT,
    OP_LE,
    OP_GT,
    OP_GE,
    OP_IN,
    OP_NOTIN,
} jop;

typedef struct jnode jnode;

/* E_FILTER / E_TEST id of a name jinja2 does not know either (an error when it runs) */
#define JINJA_ID_UNKNOWN 0xffff

typedef struct jnodes {
    jnode **v;
    int n;
} jnodes;

/* Call arguments, and macro parameters (kw = names, kwv = defaults or NULL). */
typedef struct jargs {
    jnodes pos;
    const char **kw;
    jnodes kwv;
    jnode *star, *dstar; /* *args, **kwargs */
} jargs;

struct jnode {
    uint8_t kind;
    uint8_t op;  /* E_BINOP: jop; E_TEST: negated */
    uint16_t id; /* E_FILTER, E_TEST: which one; E_NAME: the global it names, if any */
    int line, col;
    const char *name; /* E_NAME, E_ATTR, E_FILTER, E_TEST, S_MACRO */
    jnode *a, *b, *c, *d;
    jnodes list;   /* E_LIST/TUPLE/DICT/COMPARE items; statement bodies */
    jnodes orelse; /* S_IF, S_FOR else; S_WITH values */
    uint8_t *ops;  /* E_COMPARE */
    jargs *args;   /* E_CALL, E_FILTER, E_TEST args; S_MACRO, S_CALLBLOCK params */
    jv value;      /* E_CONST; S_TEXT (a string) */
    bool uses_varargs, uses_kwargs, uses_caller; /* S_MACRO, S_CALLBLOCK */
    bool closures; /* S_FOR: its body defines a macro or call block (which keeps its scope) */
};

struct jinja_template {
    jarena arena;
    jnode *root;
    char *name;
};

/* ---- lexer -------------------------------------------------------------------------------- */

typedef enum jtok_type {
    TK_EOF,
    TK_TEXT,
    TK_VAR_BEGIN,
    TK_VAR_END,
    TK_BLOCK_BEGIN,
    TK_BLOCK_END,
    TK_NAME,
    TK_STRING,
    TK_INT,
    TK_FLOAT,
    TK_OP,
} jtok_type;

typedef struct jtok {
    uint8_t type;
    int line, col;
    const char *p; /* TEXT, NAME, STRING (decoded), OP: the text; NUL-terminated */
    size_t len;
    int64_t i;
    double f;
} jtok;

/* The tokens of src (all in f's arena), ending with TK_EOF. */
jtok *jinja_lex(jfail *f, const char *src, size_t len, size_t *n);

/* ---- parser ------------------------------------------------------------------------------- */

jnode *jinja_parse_tokens(jfail *f, jtok *toks, size_t n);

/* ---- render state ------------------------------------------------------------------------- */

typedef struct jscope {
    struct jscope *parent;
    size_t n, cap;
    const char **names;
    jv *vals;
} jscope;

/* The output being written: bytes and the data spans among them. */
typedef struct jout {
    char *p;
    size_t len, cap;
    jinja_span *span;
    size_t nspan, spancap;
} jout;

typedef struct jrender {
    jfail fail;
    const jinja_options *opt;
    jscope *globals;  /* the context variables */
    jscope *root;     /* the template's top level */
    jout *out;        /* where text goes now (a macro body writes to its own) */
    size_t out_total; /* bytes written to all outputs, against max_output */
    int64_t steps;
    int depth;     /* jr_eval nesting */
    int calls;     /* macro call nesting */
    int line, col; /* the node being evaluated, for messages */
} jrender;

struct jmacro {
    const jnode *def; /* S_MACRO or S_CALLBLOCK */
    jscope *closure;
    jv caller; /* for a macro called from a call block */
    bool has_caller;
};

typedef enum jfunc_id {
    FN_RANGE = 1,
    FN_NAMESPACE,
    FN_DICT,
    FN_RAISE,
    FN_STRFTIME,
    FN_LOOP_CYCLE,
    FN_LOOP_CHANGED,
    FN_METHOD, /* a str/dict/list method: self + name */
    FN_UNSUPPORTED_GLOBAL,
} jfunc_id;

struct jfunc {
    jfunc_id id;
    const char *name;
    jv self;
};

struct jloop {
    jlist *items;
    size_t index0;
    int depth0;
    jv last_changed;
    bool changed_seen;
};

/* ---- value helpers (jinja_value.c) ---------------------------------------------------------- */

static inline jv jv_undef(const char *hint) {
    jv v = {.kind = JV_UNDEF};
    v.u.hint = hint;
    return v;
}
static inline jv jv_none(void) {
    return (jv){.kind = JV_NONE};
}
static inline jv jv_bool(bool b) {
    jv v = {.kind = JV_BOOL};
    v.u.b = b;
    return v;
}
static inline jv jv_int(int64_t i) {
    jv v = {.kind = JV_INT};
    v.u.i = i;
    return v;
}
static inline jv jv_float(double f) {
    jv v = {.kind = JV_FLOAT};
    v.u.f = f;
    return v;
}
static inline jv jv_str(jstr *s) {
    jv v = {.kind = JV_STR};
    v.u.s = s;
    return v;
}
static inline jv jv_list(jlist *l, bool tuple) {
    jv v = {.kind = JV_LIST, .flags = tuple ? JVF_TUPLE : 0};
    v.u.l = l;
    return v;
}
static inline jv jv_dict(jdict *d) {
    jv v = {.kind = JV_DICT};
    v.u.d = d;
    return v;
}

/* strings */
jstr *js_new(jfail *f, const char *p, size_t len, bool data);
jstr *js_cstr(jfail *f, const char *s); /* template text */
jstr *js_cat(jfail *f, const jstr *a, const jstr *b);
/* A string derived from src by some operation: data when any of src was. */
jstr *js_derived(jfail *f, const char *p, size_t len, bool tainted);
static inline bool js_tainted(const jstr *s) {
    return s->nspan > 0;
}
size_t js_ncp(const jstr *s);               /* code points */
size_t js_cp_off(const jstr *s, size_t cp); /* byte offset of code point cp (<= ncp) */
/* A piece [off, off+len) keeping the data spans that fall inside it. */
jstr *js_sub(jfail *f, const jstr *s, size_t off, size_t len);

/* string builder with spans */
void jout_put(jfail *f, jout *o, const char *p, size_t n, bool data);
void jout_put_str(jfail *f, jout *o, const jstr *s);
jstr *jout_to_str(jfail *f, const jout *o);

/* lists and dicts */
jlist *jl_new(jfail *f, size_t n);
void jd_set(jfail *f, jdict *d, jv k, jv v); /* adds or replaces */
jdict *jd_new(jfail *f, size_t cap);
bool jd_get(const jdict *d, jv k, jv *out);
bool jd_get_cstr(const jdict *d, const char *k, jv *out);

/* A list builder. */
typedef struct jlb {
    jv *v;
    size_t n, cap;
} jlb;
void jlb_push(jfail *f, jlb *b, jv v);
jlist *jlb_done(jfail *f, jlb *b);

/* UTF-8 and Python's str.isspace */
bool jutf8_valid(const char *p, size_t n);
uint32_t jutf8_next(const char *p, size_t n, size_t *i); /* decodes at *i, advances */
size_t jutf8_put(char *out, uint32_t cp);                /* 1-4 bytes */
bool jpy_isspace(uint32_t cp);

/* str() and repr() as Python prints them; the result is data when any
 * string inside v was. */
jstr *jv_to_str(jrender *r, jv v);
jstr *jv_repr(jrender *r, jv v);
void jpy_float_repr(double d, char *buf, size_t cap);
const char *jv_type_name(jv v); /* Python's type name: 'str', 'dict', ... */
bool jv_is_tainted(jv v, int depth);

/* Numbers as Python mixes them: bool and int are whole numbers, float the others. */
static inline bool jv_is_num(jv v) {
    return v.kind == JV_INT || v.kind == JV_BOOL || v.kind == JV_FLOAT;
}
static inline bool jv_is_intlike(jv v) {
    return v.kind == JV_INT || v.kind == JV_BOOL;
}
static inline int64_t jv_ival(jv v) {
    return v.kind == JV_INT ? v.u.i : v.u.b;
}
static inline double jv_fval(jv v) {
    return v.kind == JV_FLOAT ? v.u.f : v.kind == JV_INT ? (double)v.u.i : v.u.b;
}

/* ---- equality and iteration (jinja_equal.c) ---------------------------------------------- */

bool jv_equal(jrender *r, jv a, jv b);
/* == for values `depth` levels inside others (raises past 500 levels). */
bool jv_equal_depth(jrender *r, jv a, jv b, int depth);
/* The items of an iterable (dict keys, string characters); raises for others. */
jlist *jv_iterate(jrender *r, jv v);

/* ---- operators (jinja_ops.c) ---------------------------------------------------------------- */

bool jv_truthy(jv v);
int jv_compare(jrender *r, jv a, jv b, jop op); /* < <= > >=: 1/0, raises on unorderable types */
jv jv_binop(jrender *r, jop op, jv a, jv b);
jv jv_neg(jrender *r, jv a, bool neg);
bool jv_contains(jrender *r, jv container, jv item);
bool jv_hashable(jv v); /* a valid dict key: not a list, dict or namespace */
jv jv_getattr(jrender *r, jv obj, const char *name);
jv jv_getitem(jrender *r, jv obj, jv key);
jv jv_slice(jrender *r, jv obj, jv start, jv stop, jv step);
size_t jv_len(jrender *r, jv v); /* raises for values without a length */
_Noreturn void jr_raise(jrender *r, jinja_err_kind kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void *jr_alloc(jrender *r, size_t n);
void jr_step(jrender *r); /* counts one step against max_steps */

/* ---- evaluation (jinja_eval.c) -----------------------------------------------------------------
 */

jv jr_eval(jrender *r, jscope *s, const jnode *e);
/* Calls a callable value with evaluated arguments. */
jv jr_call(jrender *r, jv fn, jv *pos, size_t npos, const char **kwn, jv *kwv, size_t nkw);

/* ---- filters and tests (jinja_filters.c)
 * ---------------------------------------------------------- */

int jinja_filter_id(const char *name); /* 0: unknown; < 0: known to jinja2, not implemented */
int jinja_test_id(const char *name);   /* the same for tests */
jv jr_filter(jrender *r, int id, const char *name, jv v, jv *pos, size_t npos, const char **kwn,
             jv *kwv, size_t nkw);
bool jr_test(jrender *r, int id, const char *name, jv v, jv *pos, size_t npos);

/* ---- methods and globals (jinja_methods.c) ------------------------------------------------------
 */

/* The method `name` of v, or an undefined (JVF_UNSAFE for the mutating ones). */
bool jr_method_lookup(jrender *r, jv self, const char *name, jv *out);
jv jr_method_call(jrender *r, const jfunc *fn, jv *pos, size_t npos, const char **kwn, jv *kwv,
                  size_t nkw);
jv jr_global_call(jrender *r, const jfunc *fn, jv *pos, size_t npos, const char **kwn, jv *kwv,
                  size_t nkw);
/* The global of this name, if any. */
bool jinja_global(jfail *f, const char *name, jv *out);

/* Python's str methods that filters share (jinja_methods.c). which: 1 left, 2 right, 3 both. */
jstr *jpy_strip(jrender *r, const jstr *s, const jstr *chars, int which);
typedef enum jcase { JCASE_UPPER, JCASE_LOWER, JCASE_CAPITALIZE, JCASE_TITLE } jcase;
jstr *jpy_case(jrender *r, const jstr *s, jcase mode);
uint32_t jpy_lower_cp(uint32_t c);
jstr *jpy_replace(jrender *r, const jstr *s, const jstr *old, const jstr *rep, int64_t count);
jlist *jpy_splitlines(jrender *r, const jstr *s);
/* Python's str % value (%s %r %d %i %f %e %g %x %o %% with flags, width, precision). */
jv jpy_percent(jrender *r, const jstr *fmt, jv args);
/* HTML escaping as markupsafe does it (& < > ' "). */
jstr *jpy_html_escape(jrender *r, const jstr *s);

/* ---- JSON (jinja_json.c) --------------------------------------------------------------------- */

jv jv_from_json(jrender *r, const json_t *j, bool data, const char *const *plain_keys, int depth);
typedef struct jjson_opts {
    bool ensure_ascii, sort_keys;
    int indent;             /* -1: none */
    const char *indent_str; /* when the indent was given as a string */
    const char *item_sep, *key_sep;
} jjson_opts;
jstr *jv_tojson(jrender *r, jv v, const jjson_opts *o);

#endif
