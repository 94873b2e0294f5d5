/* jinja_lex.c - template source -> tokens, as jinja2's lexer cuts them with
 * trim_blocks and lstrip_blocks on (Hugging Face's settings):
 *
 *   - line breaks (\r\n, \r, \n) become \n, and one final line break is dropped;
 *   - text, then {{ ... }} (an expression), {% ... %} (a statement), {# ... #}
 *     (a comment, dropped), {% raw %}...{% endraw %} (text as is);
 *   - a '-' inside an opening tag strips all whitespace before it, inside a
 *     closing tag all whitespace after it; a '+' turns off the two rules below;
 *   - trim_blocks: the first \n after a statement or comment tag is dropped;
 *   - lstrip_blocks: spaces and tabs between the start of a line and a
 *     statement or comment tag are dropped;
 *   - inside tags: names, strings with Python's escapes, integers (0x, 0o,
 *     0b, _ separators), floats, operators; a closing tag only counts where
 *     brackets are balanced. */
#include "jinja_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct lexer {
    jfail *f;
    const char *s; /* normalized source */
    size_t n, pos;
    jtok *toks;
    size_t nt, cap;
    bool line_starting;
    size_t w_off; /* where(): the last offset asked, and its line and column */
    int w_line, w_col;
} lexer;

/* 1-based line and column (in characters) of byte offset off. Tokens come in
 * order, so each call scans on from the last one. */
static void where(lexer *L, size_t off, int *line, int *col) {
    if (off < L->w_off || L->w_line == 0) L->w_off = 0, L->w_line = 1, L->w_col = 1;
    for (size_t i = L->w_off; i < off && i < L->n; i++) {
        if (L->s[i] == '\n')
            L->w_line++, L->w_col = 1;
        else if (((unsigned char)L->s[i] & 0xc0) != 0x80)
            L->w_col++;
    }
    L->w_off = off;
    *line = L->w_line;
    *col = L->w_col;
}

_Noreturn static void lex_error(lexer *L, size_t off, const char *msg) {
    int line, col;
    where(L, off, &line, &col);
    jfail_raise(L->f, JINJA_ERR_SYNTAX, line, col, "%s", msg);
}

static jtok *push(lexer *L, jtok_type type, size_t off) {
    if (L->nt == L->cap) {
        size_t cap = L->cap ? 2 * L->cap : 256;
        jtok *t = jalloc(L->f, cap * sizeof *t);
        if (L->nt) memcpy(t, L->toks, L->nt * sizeof *t);
        L->toks = t;
        L->cap = cap;
    }
    jtok *t = &L->toks[L->nt++];
    memset(t, 0, sizeof *t);
    t->type = (uint8_t)type;
    where(L, off, &t->line, &t->col);
    return t;
}

/* Python's str.isspace at s[i]; *w gets the character's byte length. */
static bool space_at(const lexer *L, size_t i, size_t *w) {
    size_t j = i;
    uint32_t c = jutf8_next(L->s, L->n, &j);
    *w = j - i;
    return jpy_isspace(c);
}

static size_t skip_space(const lexer *L, size_t i) {
    size_t w;
    while (i < L->n && space_at(L, i, &w)) i += w;
    return i;
}

/* The length of text[0..n) without its trailing whitespace (Python's rstrip()). */
static size_t rstrip_len(const char *t, size_t n) {
    while (n) {
        size_t k = n - 1;
        while (k && ((unsigned char)t[k] & 0xc0) == 0x80) k--;
        size_t i = k;
        if (!jpy_isspace(jutf8_next(t, n, &i))) break;
        n = k;
    }
    return n;
}

static bool all_space(const char *t, size_t n) {
    if (!n) return false;
    for (size_t i = 0; i < n;)
        if (!jpy_isspace(jutf8_next(t, n, &i))) return false;
    return true;
}

/* Text before a tag, with the tag's whitespace control applied. */
static void emit_text(lexer *L, size_t start, size_t end, char sign, bool lstrip_ok) {
    const char *t = L->s + start;
    size_t n = end - start;
    if (sign == '-') {
        n = rstrip_len(t, n);
    } else if (sign != '+' && lstrip_ok) {
        size_t l_pos = n;
        while (l_pos && t[l_pos - 1] != '\n') l_pos--;
        if ((l_pos > 0 || L->line_starting) && all_space(t + l_pos, n - l_pos)) n = l_pos;
    }
    if (!n) return;
    jtok *k = push(L, TK_TEXT, start);
    k->p = t;
    k->len = n;
}

static bool at(const lexer *L, size_t i, const char *lit) {
    size_t k = strlen(lit);
    return i + k <= L->n && memcmp(L->s + i, lit, k) == 0;
}

/* After a closing tag's marker: '-' eats all whitespace, a plain statement or
 * comment end eats one \n (trim_blocks). Returns the new position. */
static size_t after_end(lexer *L, size_t i, char sign, bool trim) {
    size_t j = i;
    if (sign == '-')
        j = skip_space(L, i);
    else if (sign != '+' && trim && j < L->n && L->s[j] == '\n')
        j++;
    L->line_starting = j > 0 && L->s[j - 1] == '\n';
    return j;
}

/* ---- inside a tag ------------------------------------------------------------------------- */

static bool is_digit(char c) {
    return c >= '0' && c <= '9';
}
static bool is_name_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

/* digits with single '_' between them: (\d+_)*\d+ ; returns the end or i when none */
static size_t digits(const lexer *L, size_t i) {
    size_t j = i;
    if (j >= L->n || !is_digit(L->s[j])) return i;
    while (j < L->n) {
        if (is_digit(L->s[j])) {
            j++;
        } else if (L->s[j] == '_' && j + 1 < L->n && is_digit(L->s[j + 1])) {
            j++;
        } else {
            break;
        }
    }
    return j;
}

/* A float as jinja2's float_re: digits then .digits and/or an exponent. */
static size_t float_end(const lexer *L, size_t i) {
    if (i > 0 && L->s[i - 1] == '.') return i;
    size_t j = digits(L, i);
    if (j == i) return i;
    size_t frac = j;
    if (j < L->n && L->s[j] == '.') {
        size_t k = digits(L, j + 1);
        if (k > j + 1) frac = k;
    }
    size_t e = frac;
    if (e < L->n && (L->s[e] == 'e' || L->s[e] == 'E')) {
        size_t k = e + 1;
        if (k < L->n && (L->s[k] == '+' || L->s[k] == '-')) k++;
        size_t d = digits(L, k);
        if (d > k) return d;
    }
    return frac > j ? frac : i;
}

static void lex_number(lexer *L, size_t *pos) {
    size_t i = *pos, fe = float_end(L, i);
    char buf[80];
    if (fe > i) {
        size_t k = 0;
        for (size_t j = i; j < fe && k < sizeof buf - 1; j++)
            if (L->s[j] != '_') buf[k++] = L->s[j];
        buf[k] = 0;
        jtok *t = push(L, TK_FLOAT, i);
        t->f = strtod(buf, NULL);
        *pos = fe;
        return;
    }
    int base = 10;
    size_t j = i;
    if (L->s[i] == '0' && i + 1 < L->n && strchr("xXoObB", L->s[i + 1])) {
        char b = (char)(L->s[i + 1] | 0x20);
        base = b == 'x' ? 16 : b == 'o' ? 8 : 2;
        j = i + 2;
    }
    uint64_t v = 0;
    bool any = false, overflow = false;
    size_t start = j;
    for (; j < L->n; j++) {
        char c = L->s[j];
        if (c == '_' && j > start && j + 1 < L->n && L->s[j + 1] != '_') continue;
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : 99;
        if (d >= base) break;
        if (base == 10 && !any && d == 0 && j + 1 < L->n && is_digit(L->s[j + 1])) {
            /* "01": jinja2 reads 0 then 1; the parser then refuses it */
            any = true;
            j++;
            break;
        }
        if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base) overflow = true;
        v = v * (uint64_t)base + (uint64_t)d;
        any = true;
    }
    if (!any) lex_error(L, i, "invalid number");
    if (overflow || v > INT64_MAX)
        jfail_raise(L->f, JINJA_ERR_UNSUPPORTED, 0, 0,
                    "an integer literal beyond 64 bits is not supported");
    jtok *t = push(L, TK_INT, i);
    t->i = (int64_t)v;
    *pos = j;
}

static int hexval(char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* A string literal with Python's escapes (jinja2 decodes them with
 * "unicode-escape"). */
static void lex_string(lexer *L, size_t *pos) {
    size_t i = *pos;
    char q = L->s[i];
    size_t j = i + 1;
    while (j < L->n && L->s[j] != q) j += L->s[j] == '\\' ? 2 : 1;
    if (j >= L->n) lex_error(L, i, "unterminated string");
    char *out = jalloc(L->f, j - i + 1);
    size_t o = 0;
    for (size_t k = i + 1; k < j;) {
        char c = L->s[k];
        if (c != '\\') {
            out[o++] = c;
            k++;
            continue;
        }
        char e = L->s[k + 1];
        k += 2;
        uint32_t cp = 0;
        int want = 0;
        switch (e) {
        case '\n':
            continue; /* a line continuation */
        case '\\':
        case '\'':
        case '"':
            out[o++] = e;
            continue;
        case 'a':
            out[o++] = '\a';
            continue;
        case 'b':
            out[o++] = '\b';
            continue;
        case 'f':
            out[o++] = '\f';
            continue;
        case 'n':
            out[o++] = '\n';
            continue;
        case 'r':
            out[o++] = '\r';
            continue;
        case 't':
            out[o++] = '\t';
            continue;
        case 'v':
            out[o++] = '\v';
            continue;
        case 'x':
            want = 2;
            break;
        case 'u':
            want = 4;
            break;
        case 'U':
            want = 8;
            break;
        case 'N':
            jfail_raise(L->f, JINJA_ERR_UNSUPPORTED, 0, 0,
                        "named escapes (\\N{...}) in strings are not supported");
        default:
            if (e >= '0' && e <= '7') {
                cp = (uint32_t)(e - '0');
                for (int d = 0; d < 2 && k < j && L->s[k] >= '0' && L->s[k] <= '7'; d++)
                    cp = cp * 8 + (uint32_t)(L->s[k++] - '0');
                o += jutf8_put(out + o, cp);
            } else {
                out[o++] = '\\'; /* an unknown escape stays as it is */
                k--;
            }
            continue;
        }
        for (int d = 0; d < want; d++) {
            int h = k < j ? hexval(L->s[k]) : -1;
            if (h < 0) lex_error(L, k, "truncated \\x, \\u or \\U escape in a string");
            cp = cp << 4 | (uint32_t)h;
            k++;
        }
        if (cp > 0x10ffff) lex_error(L, k, "illegal Unicode character in a string escape");
        if (cp >= 0xd800 && cp <= 0xdfff)
            jfail_raise(L->f, JINJA_ERR_UNSUPPORTED, 0, 0,
                        "a surrogate code point (\\u%04x) in a string is not supported", cp);
        o += jutf8_put(out + o, cp);
    }
    out[o] = 0;
    jtok *t = push(L, TK_STRING, i);
    t->p = out;
    t->len = o;
    *pos = j + 1;
}

static const char *const OPS2[] = {"//", "**", "==", "!=", ">=", "<=", NULL};
static const char OPS1[] = "+-/*%~[](){}|,.:;=<>";

/* The tokens of one {{ }} or {% %} tag; *pos is just after the opener. */
static void lex_tag(lexer *L, size_t *pos, bool block, size_t open_off) {
    char stack[256];
    int depth = 0;
    size_t i = *pos;
    for (;;) {
        if (i >= L->n)
            lex_error(L, open_off,
                      block ? "unexpected end of template: a {% tag is not closed with %}"
                            : "unexpected end of template: a {{ tag is not closed with }}");
        if (depth == 0) {
            char sign = 0;
            size_t k = i;
            if (L->s[k] == '-' || (block && L->s[k] == '+')) sign = L->s[k++];
            if (at(L, k, block ? "%}" : "}}")) {
                push(L, block ? TK_BLOCK_END : TK_VAR_END, i);
                *pos = after_end(L, k + 2, sign, block);
                return;
            }
        }
        size_t w;
        char c = L->s[i];
        if (space_at(L, i, &w)) {
            i += w;
        } else if (is_digit(c)) {
            lex_number(L, &i);
        } else if (is_name_start(c)) {
            size_t j = i;
            while (j < L->n && (is_name_start(L->s[j]) || is_digit(L->s[j]))) j++;
            jtok *t = push(L, TK_NAME, i);
            t->p = jstrdup(L->f, L->s + i, j - i);
            t->len = j - i;
            i = j;
        } else if (c == '\'' || c == '"') {
            lex_string(L, &i);
        } else {
            const char *op = NULL;
            for (int k = 0; OPS2[k]; k++)
                if (at(L, i, OPS2[k])) op = OPS2[k];
            char one[2] = {c, 0};
            if (!op && c && strchr(OPS1, c)) op = one;
            if (!op) {
                char msg[64];
                snprintf(msg, sizeof msg, "unexpected character '%c' in a tag",
                         (unsigned char)c < 0x80 && c >= 0x20 ? c : '?');
                lex_error(L, i, msg);
            }
            if (strchr("([{", op[0]) && !op[1]) {
                if (depth == (int)sizeof stack)
                    jfail_raise(L->f, JINJA_ERR_LIMIT, 0, 0, "brackets nested too deep");
                stack[depth++] = op[0] == '(' ? ')' : op[0] == '[' ? ']' : '}';
            } else if (strchr(")]}", op[0]) && !op[1]) {
                if (depth == 0 || stack[depth - 1] != op[0]) {
                    char msg[64];
                    snprintf(msg, sizeof msg, "unexpected '%c'", op[0]);
                    lex_error(L, i, msg);
                }
                depth--;
            }
            jtok *t = push(L, TK_OP, i);
            t->p = jstrdup(L->f, op, strlen(op));
            t->len = strlen(op);
            i += t->len;
        }
    }
}

/* ---- the template text -------------------------------------------------------------------- */

/* {%[-+]? raw [-]?%} at i: the end of the opener, or 0. */
static size_t raw_begin(const lexer *L, size_t i, char *sign, char *end_sign) {
    size_t k = i + 2;
    *sign = 0;
    if (k < L->n && (L->s[k] == '-' || L->s[k] == '+')) *sign = L->s[k++];
    k = skip_space(L, k);
    if (!at(L, k, "raw")) return 0;
    k = skip_space(L, k + 3);
    *end_sign = 0;
    if (at(L, k, "-%}")) {
        *end_sign = '-';
        return k + 3;
    }
    if (at(L, k, "%}")) return k + 2;
    return 0;
}

static void lex_raw(lexer *L, size_t *pos, size_t open_off) {
    for (size_t i = *pos; i + 1 < L->n; i++) {
        if (!at(L, i, "{%")) continue;
        size_t k = i + 2;
        char sign = 0;
        if (k < L->n && (L->s[k] == '-' || L->s[k] == '+')) sign = L->s[k++];
        k = skip_space(L, k);
        if (!at(L, k, "endraw")) continue;
        k = skip_space(L, k + 6);
        char esign = 0;
        if (k < L->n && (L->s[k] == '-' || L->s[k] == '+')) esign = L->s[k++];
        if (!at(L, k, "%}")) continue;
        emit_text(L, *pos, i, sign, true);
        *pos = after_end(L, k + 2, esign, true);
        return;
    }
    lex_error(L, open_off, "missing end of raw directive ({% endraw %})");
}

jtok *jinja_lex(jfail *f, const char *src, size_t len, size_t *ntok) {
    lexer L = {.f = f, .line_starting = true};
    char *s = jalloc(f, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n && s[n - 1] == '\n') n--; /* keep_trailing_newline is off */
    s[n] = 0;
    L.s = s;
    L.n = n;
    size_t pos = 0;
    while (pos < n) {
        /* the next tag opener */
        size_t i = pos;
        const char *hit = NULL;
        for (; i + 1 < n; i++) {
            if (s[i] != '{') continue;
            if (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#') {
                hit = s + i;
                break;
            }
        }
        if (!hit) {
            jtok *t = push(&L, TK_TEXT, pos);
            t->p = s + pos;
            t->len = n - pos;
            break;
        }
        char kind = s[i + 1];
        char sign = i + 2 < n && (s[i + 2] == '-' || s[i + 2] == '+') ? s[i + 2] : 0;
        size_t after = i + 2 + (sign ? 1 : 0);
        char rsign, rend;
        size_t rb = kind == '%' ? raw_begin(&L, i, &rsign, &rend) : 0;
        if (rb) {
            emit_text(&L, pos, i, rsign, true);
            pos = after_end(&L, rb, rend, false);
            lex_raw(&L, &pos, i);
            continue;
        }
        emit_text(&L, pos, i, sign, kind != '{');
        if (kind == '#') {
            size_t j = after;
            for (; j + 1 < n; j++)
                if (s[j] == '#' && s[j + 1] == '}') break;
            if (j + 1 >= n) lex_error(&L, i, "missing end of comment tag (#})");
            char esign = j > after && (s[j - 1] == '-' || s[j - 1] == '+') ? s[j - 1] : 0;
            pos = after_end(&L, j + 2, esign, true);
            continue;
        }
        push(&L, kind == '%' ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, i);
        pos = after;
        lex_tag(&L, &pos, kind == '%', i);
    }
    push(&L, TK_EOF, n);
    *ntok = L.nt;
    return L.toks;
}
