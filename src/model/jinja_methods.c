/* jinja_methods.c - the Python methods templates call on values (str: strip,
 * split, startswith, replace, format, ...; dict: get, items, keys, values;
 * list: index, count) and the global functions (range, namespace, dict,
 * raise_exception, strftime_now). Methods that change a list or dict are
 * refused as the immutable sandbox refuses them: the attribute is undefined
 * and calling it is an error. Case mapping knows ASCII, Latin-1, Latin
 * Extended-A, Greek and Cyrillic letters (Python knows all of Unicode). */
#include "jinja_internal.h"
#include "moontail/clock.h"
#include "moontail/compat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- case mapping ------------------------------------------------------------------------- */

static uint32_t upper_cp(uint32_t c) {
    if (c >= 'a' && c <= 'z') return c - 32;
    if (c < 0x80) return c;
    if ((c >= 0xe0 && c <= 0xfe && c != 0xf7)) return c - 32;
    if (c == 0xff) return 0x178;
    if (c == 0xb5) return 0x39c;
    if (c >= 0x100 && c <= 0x17f) {
        if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e)) return c & 1 ? c : c - 1;
        if (c == 0x131) return 'I';
        if (c == 0x17f) return 'S';
        if (c == 0x138 || c == 0x149 || c == 0x130) return c;
        return c & 1 ? c - 1 : c;
    }
    if (c >= 0x3b1 && c <= 0x3c9 && c != 0x3c2) return c - 32;
    if (c == 0x3c2) return 0x3a3;
    if (c >= 0x3ac && c <= 0x3af) return c == 0x3ac ? 0x386 : c - 37;
    if (c == 0x3cc) return 0x38c;
    if (c == 0x3cd || c == 0x3ce) return c - 63;
    if (c >= 0x430 && c <= 0x44f) return c - 32;
    if (c >= 0x450 && c <= 0x45f) return c - 80;
    return c;
}

uint32_t jpy_lower_cp(uint32_t c) {
    if (c >= 'A' && c <= 'Z') return c + 32;
    if (c < 0x80) return c;
    if (c >= 0xc0 && c <= 0xde && c != 0xd7) return c + 32;
    if (c == 0x178) return 0xff;
    if (c >= 0x100 && c <= 0x17f) {
        if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e)) return c & 1 ? c + 1 : c;
        if (c == 0x130 || c == 0x131 || c == 0x138 || c == 0x149 || c == 0x17f) return c;
        return c & 1 ? c : c + 1;
    }
    if (c >= 0x391 && c <= 0x3a9 && c != 0x3a2) return c + 32;
    if (c == 0x386) return 0x3ac;
    if (c >= 0x388 && c <= 0x38a) return c + 37;
    if (c == 0x38c) return 0x3cc;
    if (c == 0x38e || c == 0x38f) return c + 63;
    if (c >= 0x410 && c <= 0x42f) return c + 32;
    if (c >= 0x400 && c <= 0x40f) return c + 80;
    return c;
}

static bool is_cased(uint32_t c) {
    return upper_cp(c) != c || jpy_lower_cp(c) != c;
}

jstr *jpy_case(jrender *r, const jstr *s, jcase mode) {
    char *out = jr_alloc(r, s->len * 2 + 1);
    size_t o = 0;
    bool word_start = true, first = true;
    for (size_t i = 0; i < s->len;) {
        uint32_t c = jutf8_next(s->p, s->len, &i);
        bool up;
        switch (mode) {
        case JCASE_UPPER:
            up = true;
            break;
        case JCASE_LOWER:
            up = false;
            break;
        case JCASE_CAPITALIZE:
            up = first;
            break;
        default: /* str.title(): upper after an uncased character */
            up = word_start;
            break;
        }
        if (up && c == 0xdf && mode == JCASE_UPPER) {
            out[o++] = 'S';
            out[o++] = 'S';
        } else {
            o += jutf8_put(out + o, up ? upper_cp(c) : jpy_lower_cp(c));
        }
        word_start = !is_cased(c);
        first = false;
    }
    return js_derived(&r->fail, out, o, js_tainted(s));
}

/* ---- shared string helpers ---------------------------------------------------------------- */

static bool in_chars(const jstr *chars, uint32_t c) {
    for (size_t i = 0; i < chars->len;)
        if (jutf8_next(chars->p, chars->len, &i) == c) return true;
    return false;
}

jstr *jpy_strip(jrender *r, const jstr *s, const jstr *chars, int which) {
    size_t a = 0, b = s->len;
    if (which & 1) {
        while (a < b) {
            size_t i = a;
            uint32_t c = jutf8_next(s->p, s->len, &i);
            if (chars ? !in_chars(chars, c) : !jpy_isspace(c)) break;
            a = i;
        }
    }
    if (which & 2) {
        while (b > a) {
            size_t k = b - 1;
            while (k > a && ((unsigned char)s->p[k] & 0xc0) == 0x80) k--;
            size_t i = k;
            uint32_t c = jutf8_next(s->p, s->len, &i);
            if (chars ? !in_chars(chars, c) : !jpy_isspace(c)) break;
            b = k;
        }
    }
    return js_sub(&r->fail, s, a, b - a);
}

jstr *jpy_replace(jrender *r, const jstr *s, const jstr *old, const jstr *rep, int64_t count) {
    jout o = {0};
    int64_t done = 0;
    if (old->len == 0) {
        /* Python inserts rep before every character and at the end */
        for (size_t i = 0; i <= s->len;) {
            if (count < 0 || done < count) {
                jout_put_str(&r->fail, &o, rep);
                done++;
            }
            if (i == s->len) break;
            size_t st = i;
            jutf8_next(s->p, s->len, &i);
            jout_put_str(&r->fail, &o, js_sub(&r->fail, s, st, i - st));
        }
    } else {
        size_t i = 0;
        while (i < s->len) {
            const char *hit = count >= 0 && done >= count
                                  ? NULL
                                  : mt_memmem(s->p + i, s->len - i, old->p, old->len);
            if (!hit) break;
            size_t at = (size_t)(hit - s->p);
            jout_put_str(&r->fail, &o, js_sub(&r->fail, s, i, at - i));
            jout_put_str(&r->fail, &o, rep);
            i = at + old->len;
            done++;
            if (o.len > r->opt->max_output * 4)
                jr_raise(r, JINJA_ERR_LIMIT, "replace() made a string past the output limit");
        }
        jout_put_str(&r->fail, &o, js_sub(&r->fail, s, i, s->len - i));
    }
    jstr *res = jout_to_str(&r->fail, &o);
    /* text made from data is data, whatever replaced what */
    bool data = js_tainted(s) || js_tainted(rep);
    return js_derived(&r->fail, res->p, res->len, data);
}

static bool is_linebreak(uint32_t c) {
    return c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d ||
           c == 0x1e || c == 0x85 || c == 0x2028 || c == 0x2029;
}

jlist *jpy_splitlines(jrender *r, const jstr *s) {
    jlb out = {0};
    size_t start = 0;
    for (size_t i = 0; i < s->len;) {
        size_t at = i;
        uint32_t c = jutf8_next(s->p, s->len, &i);
        if (!is_linebreak(c)) continue;
        jlb_push(&r->fail, &out, jv_str(js_sub(&r->fail, s, start, at - start)));
        if (c == '\r' && i < s->len && s->p[i] == '\n') i++;
        start = i;
    }
    if (start < s->len)
        jlb_push(&r->fail, &out, jv_str(js_sub(&r->fail, s, start, s->len - start)));
    return jlb_done(&r->fail, &out);
}

jstr *jpy_html_escape(jrender *r, const jstr *s) {
    jout o = {0};
    for (size_t i = 0; i < s->len; i++) {
        const char *e = NULL;
        switch (s->p[i]) {
        case '&':
            e = "&amp;";
            break;
        case '<':
            e = "&lt;";
            break;
        case '>':
            e = "&gt;";
            break;
        case '\'':
            e = "&#39;";
            break;
        case '"':
            e = "&#34;";
            break;
        }
        if (e)
            jout_put(&r->fail, &o, e, strlen(e), false);
        else
            jout_put(&r->fail, &o, s->p + i, 1, false);
    }
    jstr *res = jout_to_str(&r->fail, &o);
    return js_derived(&r->fail, res->p, res->len, js_tainted(s));
}

/* ---- method lookup ------------------------------------------------------------------------ */

static const char *const STR_METHODS[] = {
    "strip",        "lstrip",      "rstrip",       "split",        "rsplit",    "splitlines",
    "startswith",   "endswith",    "replace",      "upper",        "lower",     "title",
    "capitalize",   "find",        "rfind",        "index",        "rindex",    "count",
    "join",         "format",      "isdigit",      "isalpha",      "isalnum",   "isspace",
    "isupper",      "islower",     "removeprefix", "removesuffix", "partition", "rpartition",
    "casefold",     "zfill",       "ljust",        "rjust",        "center",    "isnumeric",
    "isdecimal",    "istitle",     "swapcase",     "expandtabs",   "encode",    "format_map",
    "isidentifier", "isprintable", "isascii",      "translate",    "maketrans", NULL};
static const char *const DICT_METHODS[] = {"get", "items", "keys", "values", "copy", NULL};
static const char *const DICT_MUTATORS[] = {"pop",    "popitem", "setdefault",
                                            "update", "clear",   NULL};
static const char *const LIST_METHODS[] = {"index", "count", "copy", NULL};
static const char *const LIST_MUTATORS[] = {"append",  "extend", "insert", "pop", "remove",
                                            "reverse", "sort",   "clear",  NULL};

static bool listed(const char *const *names, const char *n) {
    for (; *names; names++)
        if (!strcmp(*names, n)) return true;
    return false;
}

bool jr_method_lookup(jrender *r, jv self, const char *name, jv *out) {
    bool safe = false, unsafe = false;
    switch ((jv_kind)self.kind) {
    case JV_STR:
        safe = listed(STR_METHODS, name);
        break;
    case JV_DICT:
        safe = listed(DICT_METHODS, name);
        unsafe = listed(DICT_MUTATORS, name);
        break;
    case JV_LIST:
        if (self.flags & (JVF_ITER | JVF_VIEW)) return false;
        safe = listed(LIST_METHODS, name) && !(self.flags & JVF_TUPLE && !strcmp(name, "copy"));
        unsafe = !(self.flags & JVF_TUPLE) && listed(LIST_MUTATORS, name);
        break;
    default:
        return false;
    }
    if (unsafe) {
        size_t n = strlen(name) + 80;
        char *h = jr_alloc(r, n);
        snprintf(h, n, "access to attribute '%s' of '%s' object is unsafe (the sandbox)", name,
                 jv_type_name(self));
        jv u = jv_undef(h);
        u.flags = JVF_UNSAFE;
        *out = u;
        return true;
    }
    if (!safe) return false;
    jfunc *fn = jr_alloc(r, sizeof *fn);
    fn->id = FN_METHOD;
    fn->name = name;
    fn->self = self;
    jv v = {.kind = JV_FUNC};
    v.u.fn = fn;
    *out = v;
    return true;
}

/* ---- method calls ------------------------------------------------------------------------- */

_Noreturn static void arg_error(jrender *r, const char *what) {
    jr_raise(r, JINJA_ERR_RUNTIME, "%s", what);
}

static jstr *str_arg(jrender *r, jv v, const char *method) {
    if (v.kind == JV_STR) return v.u.s;
    jr_raise(r, JINJA_ERR_RUNTIME, "%s: expected a string argument, not '%s'", method,
             jv_type_name(v));
}

static int64_t int_arg(jrender *r, jv v, const char *method) {
    if (v.kind == JV_INT) return v.u.i;
    if (v.kind == JV_BOOL) return v.u.b;
    jr_raise(r, JINJA_ERR_RUNTIME, "%s: expected an integer argument, not '%s'", method,
             jv_type_name(v));
}

/* str.split / str.rsplit */
static jv split(jrender *r, const jstr *s, jv sepv, int64_t maxsplit, bool right) {
    jlb out = {0};
    if (sepv.kind == JV_NONE || sepv.kind == JV_UNDEF) {
        /* runs of whitespace; leading and trailing whitespace dropped */
        size_t n = s->len;
        size_t *starts = jr_alloc(r, (n + 2) * sizeof *starts);
        size_t *ends = jr_alloc(r, (n + 2) * sizeof *ends);
        size_t nw = 0;
        bool in = false;
        for (size_t i = 0; i < n;) {
            size_t at = i;
            uint32_t c = jutf8_next(s->p, n, &i);
            bool sp = jpy_isspace(c);
            if (!sp && !in) starts[nw] = at, in = true;
            if (sp && in) ends[nw++] = at, in = false;
        }
        if (in) ends[nw++] = n;
        if (maxsplit < 0 || (size_t)maxsplit >= nw) {
            for (size_t k = 0; k < nw; k++)
                jlb_push(&r->fail, &out,
                         jv_str(js_sub(&r->fail, s, starts[k], ends[k] - starts[k])));
        } else if (!right) {
            for (size_t k = 0; k < (size_t)maxsplit; k++)
                jlb_push(&r->fail, &out,
                         jv_str(js_sub(&r->fail, s, starts[k], ends[k] - starts[k])));
            /* the rest: from the next word to the end of the string */
            jlb_push(&r->fail, &out,
                     jv_str(js_sub(&r->fail, s, starts[maxsplit], n - starts[maxsplit])));
        } else {
            /* the rest: from the start of the string to the last word left */
            size_t first = nw - (size_t)maxsplit;
            jlb_push(&r->fail, &out, jv_str(js_sub(&r->fail, s, 0, ends[first - 1])));
            for (size_t k = first; k < nw; k++)
                jlb_push(&r->fail, &out,
                         jv_str(js_sub(&r->fail, s, starts[k], ends[k] - starts[k])));
        }
        return jv_list(jlb_done(&r->fail, &out), false);
    }
    const jstr *sep = str_arg(r, sepv, "split");
    if (!sep->len) arg_error(r, "split: empty separator");
    if (!right) {
        size_t i = 0;
        int64_t done = 0;
        for (;;) {
            const char *hit = maxsplit >= 0 && done >= maxsplit
                                  ? NULL
                                  : mt_memmem(s->p + i, s->len - i, sep->p, sep->len);
            if (!hit) break;
            size_t at = (size_t)(hit - s->p);
            jlb_push(&r->fail, &out, jv_str(js_sub(&r->fail, s, i, at - i)));
            i = at + sep->len;
            done++;
        }
        jlb_push(&r->fail, &out, jv_str(js_sub(&r->fail, s, i, s->len - i)));
        return jv_list(jlb_done(&r->fail, &out), false);
    }
    /* rsplit: from the right, then reversed */
    jlb rev = {0};
    size_t end = s->len;
    int64_t done = 0;
    while (maxsplit < 0 || done < maxsplit) {
        size_t found = (size_t)-1;
        if (end >= sep->len)
            for (size_t k = end - sep->len + 1; k-- > 0;)
                if (!memcmp(s->p + k, sep->p, sep->len)) {
                    found = k;
                    break;
                }
        if (found == (size_t)-1) break;
        jlb_push(&r->fail, &rev,
                 jv_str(js_sub(&r->fail, s, found + sep->len, end - found - sep->len)));
        end = found;
        done++;
    }
    jlb_push(&r->fail, &out, jv_str(js_sub(&r->fail, s, 0, end)));
    for (size_t k = rev.n; k-- > 0;) jlb_push(&r->fail, &out, rev.v[k]);
    return jv_list(jlb_done(&r->fail, &out), false);
}

/* str.format with {} {0} {name} fields and {{ }}; no conversions or format specs. */
static jv format(jrender *r, const jstr *s, jv *pos, size_t npos, const char **kwn, jv *kwv,
                 size_t nkw) {
    jout o = {0};
    size_t auto_i = 0;
    bool tainted = js_tainted(s);
    for (size_t i = 0; i < s->len;) {
        char c = s->p[i];
        if (c == '{' && i + 1 < s->len && s->p[i + 1] == '{') {
            jout_put(&r->fail, &o, "{", 1, false);
            i += 2;
        } else if (c == '}' && i + 1 < s->len && s->p[i + 1] == '}') {
            jout_put(&r->fail, &o, "}", 1, false);
            i += 2;
        } else if (c == '}') {
            arg_error(r, "Single '}' encountered in format string");
        } else if (c == '{') {
            size_t j = i + 1;
            while (j < s->len && s->p[j] != '}') j++;
            if (j >= s->len) arg_error(r, "Single '{' encountered in format string");
            const char *f = s->p + i + 1;
            size_t fl = j - i - 1;
            if (memchr(f, ':', fl) || memchr(f, '!', fl) || memchr(f, '.', fl) ||
                memchr(f, '[', fl) || memchr(f, '{', fl))
                jr_raise(r, JINJA_ERR_UNSUPPORTED,
                         "str.format with conversions, format specs or attribute fields");
            jv v;
            if (fl == 0) {
                if (auto_i >= npos)
                    arg_error(r, "Replacement index out of range for positional args");
                v = pos[auto_i++];
            } else if (f[0] >= '0' && f[0] <= '9') {
                size_t k = (size_t)strtoul(f, NULL, 10);
                if (k >= npos) arg_error(r, "Replacement index out of range for positional args");
                v = pos[k];
            } else {
                size_t k = 0;
                while (k < nkw && (strlen(kwn[k]) != fl || memcmp(kwn[k], f, fl))) k++;
                if (k == nkw) arg_error(r, "str.format: a named field was not given");
                v = kwv[k];
            }
            jout_put_str(&r->fail, &o, jv_to_str(r, v));
            i = j + 1;
        } else {
            size_t j = i;
            while (j < s->len && s->p[j] != '{' && s->p[j] != '}') j++;
            jout_put_str(&r->fail, &o, js_sub(&r->fail, s, i, j - i));
            i = j;
        }
    }
    jstr *res = jout_to_str(&r->fail, &o);
    if (tainted && !js_tainted(res)) res = js_derived(&r->fail, res->p, res->len, true);
    return jv_str(res);
}

static bool starts_or_ends(jrender *r, const jstr *s, jv arg, bool ends, const char *m) {
    if (arg.kind == JV_LIST && (arg.flags & JVF_TUPLE)) {
        for (size_t i = 0; i < arg.u.l->n; i++)
            if (starts_or_ends(r, s, arg.u.l->v[i], ends, m)) return true;
        return false;
    }
    const jstr *p = str_arg(r, arg, m);
    if (p->len > s->len) return false;
    return !memcmp(ends ? s->p + s->len - p->len : s->p, p->p, p->len);
}

/* The character index of byte offset off. */
static int64_t cp_index(const jstr *s, size_t off) {
    int64_t n = 0;
    for (size_t i = 0; i < off; i++) n += ((unsigned char)s->p[i] & 0xc0) != 0x80;
    return n;
}

static bool all_chars(const jstr *s, bool (*pred)(uint32_t)) {
    if (!s->len) return false;
    for (size_t i = 0; i < s->len;)
        if (!pred(jutf8_next(s->p, s->len, &i))) return false;
    return true;
}
static bool p_digit(uint32_t c) {
    return c >= '0' && c <= '9';
}
static bool p_alpha(uint32_t c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= 0x80 && is_cased(c));
}
static bool p_alnum(uint32_t c) {
    return p_alpha(c) || p_digit(c);
}

static jv str_method(jrender *r, const char *m, const jstr *s, jv *pos, size_t npos,
                     const char **kwn, jv *kwv, size_t nkw) {
    bool tainted = js_tainted(s);
    if (!strcmp(m, "format")) return format(r, s, pos, npos, kwn, kwv, nkw);
    if (nkw && strcmp(m, "split") && strcmp(m, "rsplit"))
        jr_raise(r, JINJA_ERR_RUNTIME, "str.%s() takes no keyword arguments", m);
    jv a0 = npos > 0 ? pos[0] : jv_undef(NULL), a1 = npos > 1 ? pos[1] : jv_undef(NULL);
    if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
        const jstr *chars = npos && a0.kind != JV_NONE ? str_arg(r, a0, m) : NULL;
        return jv_str(jpy_strip(r, s, chars, m[0] == 'l' ? 1 : m[0] == 'r' ? 2 : 3));
    }
    if (!strcmp(m, "split") || !strcmp(m, "rsplit")) {
        jv sep = a0;
        int64_t maxsplit = npos > 1 ? int_arg(r, a1, m) : -1;
        for (size_t k = 0; k < nkw; k++) {
            if (!strcmp(kwn[k], "sep"))
                sep = kwv[k];
            else if (!strcmp(kwn[k], "maxsplit"))
                maxsplit = int_arg(r, kwv[k], m);
            else
                jr_raise(r, JINJA_ERR_RUNTIME, "str.%s() got an unexpected keyword argument '%s'",
                         m, kwn[k]);
        }
        return split(r, s, sep, maxsplit, m[0] == 'r');
    }
    if (!strcmp(m, "splitlines")) return jv_list(jpy_splitlines(r, s), false);
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
        if (npos != 1) jr_raise(r, JINJA_ERR_UNSUPPORTED, "str.%s with start/end", m);
        return jv_bool(starts_or_ends(r, s, a0, m[0] == 'e', m));
    }
    if (!strcmp(m, "replace")) {
        if (npos < 2) arg_error(r, "replace expected at least 2 arguments");
        return jv_str(jpy_replace(r, s, str_arg(r, a0, m), str_arg(r, a1, m),
                                  npos > 2 ? int_arg(r, pos[2], m) : -1));
    }
    if (!strcmp(m, "upper") || !strcmp(m, "lower") || !strcmp(m, "casefold"))
        return jv_str(jpy_case(r, s, m[0] == 'u' ? JCASE_UPPER : JCASE_LOWER));
    if (!strcmp(m, "title")) return jv_str(jpy_case(r, s, JCASE_TITLE));
    if (!strcmp(m, "capitalize")) return jv_str(jpy_case(r, s, JCASE_CAPITALIZE));
    if (!strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "index") || !strcmp(m, "rindex") ||
        !strcmp(m, "count")) {
        if (npos != 1) jr_raise(r, JINJA_ERR_UNSUPPORTED, "str.%s with start/end", m);
        const jstr *sub = str_arg(r, a0, m);
        if (m[0] == 'c') {
            if (!sub->len) return jv_int((int64_t)js_ncp(s) + 1);
            int64_t n = 0;
            for (size_t i = 0; i + sub->len <= s->len;) {
                const char *hit = mt_memmem(s->p + i, s->len - i, sub->p, sub->len);
                if (!hit) break;
                n++;
                i = (size_t)(hit - s->p) + sub->len;
            }
            return jv_int(n);
        }
        int64_t at = -1;
        if (m[0] == 'r') {
            if (sub->len <= s->len)
                for (size_t k = s->len - sub->len + 1; k-- > 0;)
                    if (!memcmp(s->p + k, sub->p, sub->len)) {
                        at = cp_index(s, k);
                        break;
                    }
        } else {
            const char *hit = sub->len ? mt_memmem(s->p, s->len, sub->p, sub->len) : s->p;
            if (hit) at = cp_index(s, (size_t)(hit - s->p));
        }
        if (at < 0 && (!strcmp(m, "index") || !strcmp(m, "rindex")))
            arg_error(r, "substring not found");
        return jv_int(at);
    }
    if (!strcmp(m, "join")) {
        jlist *items = jv_iterate(r, a0);
        jout o = {0};
        for (size_t i = 0; i < items->n; i++) {
            if (i) jout_put_str(&r->fail, &o, s);
            if (items->v[i].kind != JV_STR)
                jr_raise(r, JINJA_ERR_RUNTIME, "sequence item %zu: expected str instance, %s found",
                         i, jv_type_name(items->v[i]));
            jout_put_str(&r->fail, &o, items->v[i].u.s);
        }
        return jv_str(jout_to_str(&r->fail, &o));
    }
    if (!strcmp(m, "isdigit") || !strcmp(m, "isnumeric") || !strcmp(m, "isdecimal"))
        return jv_bool(all_chars(s, p_digit));
    if (!strcmp(m, "isalpha")) return jv_bool(all_chars(s, p_alpha));
    if (!strcmp(m, "isalnum")) return jv_bool(all_chars(s, p_alnum));
    if (!strcmp(m, "isspace")) return jv_bool(all_chars(s, jpy_isspace));
    if (!strcmp(m, "isupper") || !strcmp(m, "islower")) {
        bool any = false, ok = true;
        for (size_t i = 0; i < s->len;) {
            uint32_t c = jutf8_next(s->p, s->len, &i);
            if (!is_cased(c)) continue;
            any = true;
            if (m[2] == 'u' ? upper_cp(c) != c : jpy_lower_cp(c) != c) ok = false;
        }
        return jv_bool(any && ok);
    }
    if (!strcmp(m, "removeprefix") || !strcmp(m, "removesuffix")) {
        const jstr *p = str_arg(r, a0, m);
        bool suffix = m[6] == 's';
        if (p->len <= s->len && !memcmp(suffix ? s->p + s->len - p->len : s->p, p->p, p->len))
            return jv_str(js_sub(&r->fail, s, suffix ? 0 : p->len, s->len - p->len));
        return jv_str((jstr *)s);
    }
    if (!strcmp(m, "partition") || !strcmp(m, "rpartition")) {
        const jstr *sep = str_arg(r, a0, m);
        if (!sep->len) arg_error(r, "empty separator");
        jv parts = split(r, s, a0, 1, m[0] == 'r');
        jlist *t = jl_new(&r->fail, 3);
        if (parts.u.l->n == 2) {
            t->v[0] = parts.u.l->v[0];
            t->v[1] = jv_str((jstr *)sep);
            t->v[2] = parts.u.l->v[1];
        } else {
            jv empty = jv_str(js_new(&r->fail, "", 0, false));
            t->v[0] = m[0] == 'r' ? empty : jv_str((jstr *)s);
            t->v[1] = empty;
            t->v[2] = m[0] == 'r' ? jv_str((jstr *)s) : empty;
        }
        return jv_list(t, true);
    }
    if (!strcmp(m, "zfill") || !strcmp(m, "ljust") || !strcmp(m, "rjust") || !strcmp(m, "center")) {
        int64_t width = int_arg(r, a0, m);
        const char *fill = " ";
        size_t fl = 1;
        if (npos > 1) {
            const jstr *f = str_arg(r, a1, m);
            if (js_ncp(f) != 1)
                arg_error(r, "The fill character must be exactly one character long");
            fill = f->p, fl = f->len;
        }
        int64_t n = (int64_t)js_ncp(s);
        if (width > 100000) jr_raise(r, JINJA_ERR_LIMIT, "str.%s to a width over 100000", m);
        if (width <= n) return jv_str((jstr *)s);
        int64_t pad = width - n, left;
        if (m[0] == 'z') {
            jout o = {0};
            size_t skip = s->len && (s->p[0] == '-' || s->p[0] == '+');
            if (skip) jout_put(&r->fail, &o, s->p, 1, false);
            for (int64_t i = 0; i < pad; i++) jout_put(&r->fail, &o, "0", 1, false);
            jout_put_str(&r->fail, &o, js_sub(&r->fail, s, skip, s->len - skip));
            return jv_str(jout_to_str(&r->fail, &o));
        }
        left = m[0] == 'l' ? 0 : m[0] == 'r' ? pad : pad / 2 + (pad & width & 1);
        jout o = {0};
        for (int64_t i = 0; i < left; i++) jout_put(&r->fail, &o, fill, fl, false);
        jout_put_str(&r->fail, &o, s);
        for (int64_t i = left; i < pad; i++) jout_put(&r->fail, &o, fill, fl, false);
        return jv_str(jout_to_str(&r->fail, &o));
    }
    (void)tainted;
    jr_raise(r, JINJA_ERR_UNSUPPORTED, "the string method '%s' is not supported", m);
}

static jv view(jrender *r, const jdict *d, int what) {
    jlist *l = jl_new(&r->fail, d->n);
    for (size_t i = 0; i < d->n; i++) {
        if (what == 0) {
            jlist *pair = jl_new(&r->fail, 2);
            pair->v[0] = d->k[i];
            pair->v[1] = d->v[i];
            l->v[i] = jv_list(pair, true);
        } else {
            l->v[i] = what == 1 ? d->k[i] : d->v[i];
        }
    }
    jv v = jv_list(l, false);
    v.flags |= JVF_VIEW;
    return v;
}

jv jr_method_call(jrender *r, const jfunc *fn, jv *pos, size_t npos, const char **kwn, jv *kwv,
                  size_t nkw) {
    jv self = fn->self;
    const char *m = fn->name;
    if (self.kind == JV_STR) return str_method(r, m, self.u.s, pos, npos, kwn, kwv, nkw);
    if (nkw) jr_raise(r, JINJA_ERR_RUNTIME, "%s() takes no keyword arguments", m);
    if (self.kind == JV_DICT) {
        if (!strcmp(m, "get")) {
            if (npos < 1 || npos > 2)
                jr_raise(r, JINJA_ERR_RUNTIME, "get expected 1 or 2 arguments, got %zu", npos);
            jv v;
            if (jd_get(self.u.d, pos[0], &v)) return v;
            return npos > 1 ? pos[1] : jv_none();
        }
        if (npos) jr_raise(r, JINJA_ERR_RUNTIME, "%s() takes no arguments", m);
        if (!strcmp(m, "items")) return view(r, self.u.d, 0);
        if (!strcmp(m, "keys")) return view(r, self.u.d, 1);
        if (!strcmp(m, "values")) return view(r, self.u.d, 2);
        if (!strcmp(m, "copy")) {
            jdict *d = jd_new(&r->fail, self.u.d->n);
            for (size_t i = 0; i < self.u.d->n; i++)
                jd_set(&r->fail, d, self.u.d->k[i], self.u.d->v[i]);
            return jv_dict(d);
        }
    } else if (self.kind == JV_LIST) {
        if (!strcmp(m, "copy")) {
            jlist *l = jl_new(&r->fail, self.u.l->n);
            if (l->n) memcpy(l->v, self.u.l->v, l->n * sizeof *l->v);
            return jv_list(l, false);
        }
        if (npos != 1) jr_raise(r, JINJA_ERR_UNSUPPORTED, "list.%s with start/end", m);
        int64_t n = 0;
        for (size_t i = 0; i < self.u.l->n; i++) {
            if (!jv_equal(r, self.u.l->v[i], pos[0])) continue;
            if (m[0] == 'i') return jv_int((int64_t)i);
            n++;
        }
        if (m[0] == 'i') jr_raise(r, JINJA_ERR_RUNTIME, "list.index(x): x not in list");
        return jv_int(n);
    }
    jr_raise(r, JINJA_ERR_UNSUPPORTED, "the method '%s' is not supported", m);
}

/* ---- printf-style formatting (str % value) ------------------------------------------------- */

jv jpy_percent(jrender *r, const jstr *fmt, jv args) {
    bool tuple = args.kind == JV_LIST && (args.flags & JVF_TUPLE);
    /* Python treats any non-tuple, non-str value with [] as a mapping: unused, no error */
    bool mapping =
        !tuple && (args.kind == JV_DICT || args.kind == JV_LIST || args.kind == JV_UNDEF);
    jv one[1] = {args};
    jv *argv = tuple ? args.u.l->v : one;
    size_t argn = tuple ? args.u.l->n : 1, next = 0;
    bool tainted = js_tainted(fmt) || jv_is_tainted(args, 0);
    jout o = {0};
    for (size_t i = 0; i < fmt->len;) {
        if (fmt->p[i] != '%') {
            size_t j = i;
            while (j < fmt->len && fmt->p[j] != '%') j++;
            jout_put(&r->fail, &o, fmt->p + i, j - i, false);
            i = j;
            continue;
        }
        size_t j = i + 1;
        if (j < fmt->len && fmt->p[j] == '(')
            jr_raise(r, JINJA_ERR_UNSUPPORTED, "%%(name) in str %% value formatting");
        char spec[32] = "%";
        size_t k = 1;
        while (j < fmt->len && strchr("-+ 0#", fmt->p[j]) && k < 8) spec[k++] = fmt->p[j++];
        while (j < fmt->len && fmt->p[j] >= '0' && fmt->p[j] <= '9' && k < 16)
            spec[k++] = fmt->p[j++];
        if (j < fmt->len && fmt->p[j] == '.') {
            spec[k++] = fmt->p[j++];
            while (j < fmt->len && fmt->p[j] >= '0' && fmt->p[j] <= '9' && k < 24)
                spec[k++] = fmt->p[j++];
        }
        if (j < fmt->len && fmt->p[j] == '*')
            jr_raise(r, JINJA_ERR_UNSUPPORTED, "'*' widths in str %% value formatting");
        if (j >= fmt->len) jr_raise(r, JINJA_ERR_RUNTIME, "incomplete format");
        char type = fmt->p[j++];
        i = j;
        if (type == '%') {
            jout_put(&r->fail, &o, "%", 1, false);
            continue;
        }
        if (next >= argn) jr_raise(r, JINJA_ERR_RUNTIME, "not enough arguments for format string");
        jv v = argv[next++];
        char buf[512];
        if (type == 's' || type == 'r' || type == 'a') {
            jstr *t = type == 's' ? jv_to_str(r, v) : jv_repr(r, v);
            if (k == 1) {
                jout_put_str(&r->fail, &o, t);
                continue;
            }
            spec[k++] = '.';
            spec[k++] = '*';
            spec[k++] = 's';
            spec[k] = 0;
            if (t->len > 400) jr_raise(r, JINJA_ERR_UNSUPPORTED, "a width with a long %%s value");
            snprintf(buf, sizeof buf, spec, (int)t->len, t->p);
            jout_put(&r->fail, &o, buf, strlen(buf), false);
            continue;
        }
        bool num = v.kind == JV_INT || v.kind == JV_BOOL || v.kind == JV_FLOAT;
        if (!num)
            jr_raise(r, JINJA_ERR_RUNTIME, "%%%c format: a real number is required, not %s", type,
                     jv_type_name(v));
        double d = v.kind == JV_FLOAT ? v.u.f : v.kind == JV_INT ? (double)v.u.i : v.u.b;
        if (strchr("diu", type)) {
            long long x = v.kind == JV_FLOAT ? (long long)d : v.kind == JV_INT ? v.u.i : v.u.b;
            spec[k++] = 'l', spec[k++] = 'l', spec[k++] = 'd', spec[k] = 0;
            snprintf(buf, sizeof buf, spec, x);
        } else if (strchr("eEfFgG", type)) {
            spec[k++] = type, spec[k] = 0;
            snprintf(buf, sizeof buf, spec, d);
        } else if (strchr("xXo", type) && v.kind != JV_FLOAT) {
            long long x = v.kind == JV_INT ? v.u.i : v.u.b;
            spec[k++] = 'l', spec[k++] = 'l', spec[k++] = type, spec[k] = 0;
            if (x < 0) jr_raise(r, JINJA_ERR_UNSUPPORTED, "%%%c of a negative number", type);
            snprintf(buf, sizeof buf, spec, (unsigned long long)x);
        } else {
            jr_raise(r, JINJA_ERR_UNSUPPORTED, "the %%%c conversion in str %% value formatting",
                     type);
        }
        jout_put(&r->fail, &o, buf, strlen(buf), false);
    }
    if (next < argn && !mapping)
        jr_raise(r, JINJA_ERR_RUNTIME, "not all arguments converted during string formatting");
    jstr *res = jout_to_str(&r->fail, &o);
    return jv_str(tainted ? js_derived(&r->fail, res->p, res->len, true) : res);
}

/* ---- globals ------------------------------------------------------------------------------ */

static const struct {
    const char *name;
    jfunc_id id;
} GLOBALS[] = {
    {"range", FN_RANGE},
    {"namespace", FN_NAMESPACE},
    {"dict", FN_DICT},
    {"raise_exception", FN_RAISE},
    {"strftime_now", FN_STRFTIME},
    {"lipsum", FN_UNSUPPORTED_GLOBAL},
    {"cycler", FN_UNSUPPORTED_GLOBAL},
    {"joiner", FN_UNSUPPORTED_GLOBAL},
};

bool jinja_global(jfail *f, const char *name, jv *out) {
    for (size_t i = 0; i < sizeof GLOBALS / sizeof *GLOBALS; i++)
        if (!strcmp(GLOBALS[i].name, name)) {
            jfunc *fn = jalloc(f, sizeof *fn);
            fn->id = GLOBALS[i].id;
            fn->name = GLOBALS[i].name;
            jv v = {.kind = JV_FUNC};
            v.u.fn = fn;
            *out = v;
            return true;
        }
    return false;
}

#define MAX_RANGE 100000 /* jinja2's sandbox refuses larger ranges */

jv jr_global_call(jrender *r, const jfunc *fn, jv *pos, size_t npos, const char **kwn, jv *kwv,
                  size_t nkw) {
    switch (fn->id) {
    case FN_RANGE: {
        if (nkw) arg_error(r, "range() takes no keyword arguments");
        if (npos < 1 || npos > 3) arg_error(r, "range expected 1 to 3 arguments");
        int64_t a = 0, b, s = 1;
        if (npos == 1) {
            b = int_arg(r, pos[0], "range");
        } else {
            a = int_arg(r, pos[0], "range");
            b = int_arg(r, pos[1], "range");
            if (npos == 3) s = int_arg(r, pos[2], "range");
        }
        if (s == 0) arg_error(r, "range() arg 3 must not be zero");
        int64_t n = 0;
        if (s > 0 && b > a) n = (b - a - 1) / s + 1;
        if (s < 0 && b < a) n = (a - b - 1) / (-s) + 1;
        if (n > MAX_RANGE)
            jr_raise(r, JINJA_ERR_RUNTIME,
                     "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).",
                     MAX_RANGE);
        jlist *l = jl_new(&r->fail, (size_t)n);
        for (int64_t i = 0; i < n; i++) l->v[i] = jv_int(a + i * s);
        return jv_list(l, false);
    }
    case FN_NAMESPACE:
    case FN_DICT: {
        jdict *d = jd_new(&r->fail, nkw);
        if (npos > 1) arg_error(r, "namespace() and dict() take at most one positional argument");
        if (npos == 1) {
            if (pos[0].kind != JV_DICT)
                jr_raise(r, JINJA_ERR_UNSUPPORTED, "%s() from a '%s'", fn->name,
                         jv_type_name(pos[0]));
            for (size_t i = 0; i < pos[0].u.d->n; i++)
                jd_set(&r->fail, d, pos[0].u.d->k[i], pos[0].u.d->v[i]);
        }
        for (size_t i = 0; i < nkw; i++)
            jd_set(&r->fail, d, jv_str(js_cstr(&r->fail, kwn[i])), kwv[i]);
        jv v = {.kind = fn->id == FN_NAMESPACE ? JV_NS : JV_DICT};
        v.u.d = d;
        return v;
    }
    case FN_RAISE: {
        jstr *msg = npos ? jv_to_str(r, pos[0]) : js_cstr(&r->fail, "");
        jr_raise(r, JINJA_ERR_RAISED, "%.*s", (int)(msg->len > 300 ? 300 : msg->len), msg->p);
    }
    case FN_STRFTIME: {
        if (npos != 1 || pos[0].kind != JV_STR) arg_error(r, "strftime_now(format) takes a string");
        time_t now = r->opt->now ? r->opt->now : time(NULL);
        struct tm tm;
        mt_local_tm(now, &tm);
        char buf[512];
        size_t n = pos[0].u.s->len < 200 ? strftime(buf, sizeof buf, pos[0].u.s->p, &tm) : 0;
        return jv_str(js_new(&r->fail, buf, n, false));
    }
    case FN_LOOP_CYCLE: {
        if (!npos) arg_error(r, "no items for cycling given");
        return pos[fn->self.u.loop->index0 % npos];
    }
    case FN_LOOP_CHANGED: {
        jloop *l = fn->self.u.loop;
        jlist *vals = jl_new(&r->fail, npos);
        for (size_t i = 0; i < npos; i++) vals->v[i] = pos[i];
        jv now = jv_list(vals, false);
        if (l->changed_seen && jv_equal(r, l->last_changed, now)) return jv_bool(false);
        l->changed_seen = true;
        l->last_changed = now;
        return jv_bool(true);
    }
    default:
        jr_raise(r, JINJA_ERR_UNSUPPORTED, "the global '%s' is not supported", fn->name);
    }
}
