/* jinja_oracle_check.c - helper of tests/test_chat_templates.sh (not a test
 * itself): renders every case of a JSON-lines file with MoonTail's Jinja
 * interpreter and compares with what Python's jinja2 rendered
 * (tests/lib/jinja_oracle.py wrote the file).
 *
 * A case: {"template": PATH, "name": LABEL, "context": {...}, "data": [names],
 *          "now": EPOCH, "expect": TEXT} or {..., "error": MESSAGE}
 * The variables named in "data" are marked as data (the request's text).
 * A case matches when the output is byte for byte the same, or when both
 * failed. Prints a line per template (cases, matched) and the first
 * mismatches with the place they differ; exits 1 on any mismatch. */
#include "moontail/jinja.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tmpl_entry {
    char *path;
    jinja_template *t;
    jinja_error err;
    int cases, matched, errors_both;
} tmpl_entry;

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[n] = 0;
    *len = (size_t)n;
    return buf;
}

static void show_diff(const char *want, size_t wl, const char *got, size_t gl) {
    size_t i = 0;
    while (i < wl && i < gl && want[i] == got[i]) i++;
    size_t from = i > 60 ? i - 60 : 0;
    fprintf(stderr, "    first difference at byte %zu (want %zu bytes, got %zu)\n", i, wl, gl);
    fprintf(stderr, "    want: ...%.*s|%.*s\n", (int)(i - from), want + from,
            (int)(wl - i > 80 ? 80 : wl - i), want + i);
    fprintf(stderr, "    got:  ...%.*s|%.*s\n", (int)(i - from), got + from,
            (int)(gl - i > 80 ? 80 : gl - i), got + i);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: jinja_oracle_check CASES.jsonl\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    if (!f) {
        perror(argv[1]);
        return 2;
    }
    tmpl_entry *tm = NULL;
    int ntm = 0, tmcap = 0, shown = 0, total = 0, failed = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
        json_error_t je;
        json_t *c = json_loadb(line, (size_t)n, 0, &je);
        if (!c) {
            fprintf(stderr, "%s: bad case line: %s\n", argv[1], je.text);
            return 2;
        }
        const char *path = json_string_value(json_object_get(c, "template"));
        const char *label = json_string_value(json_object_get(c, "name"));
        int k = 0;
        while (k < ntm && strcmp(tm[k].path, path)) k++;
        if (k == ntm) {
            if (ntm == tmcap) {
                tmcap = tmcap ? 2 * tmcap : 64;
                tm = realloc(tm, (size_t)tmcap * sizeof *tm);
                if (!tm) return 2;
            }
            memset(&tm[k], 0, sizeof tm[k]);
            tm[k].path = strdup(path);
            size_t len;
            char *src = read_file(path, &len);
            if (!src) {
                fprintf(stderr, "cannot read %s\n", path);
                return 2;
            }
            const char *base = strrchr(path, '/');
            tm[k].t = jinja_parse(src, len, base ? base + 1 : path, &tm[k].err);
            free(src);
            if (!tm[k].t) fprintf(stderr, "%s: does not parse: %s\n", path, tm[k].err.err.msg);
            ntm++;
        }
        tmpl_entry *e = &tm[k];
        e->cases++;
        total++;
        json_t *ctx = json_object_get(c, "context"), *data = json_object_get(c, "data");
        jinja_var vars[64];
        int nv = 0;
        const char *key;
        json_t *val;
        json_object_foreach(ctx, key, val) {
            if (nv == 64) break;
            bool is_data = false;
            size_t i;
            json_t *d;
            json_array_foreach(data, i, d) is_data |= !strcmp(json_string_value(d), key);
            vars[nv++] = (jinja_var){key, val, is_data, NULL};
        }
        jinja_options opt = {.now = (time_t)json_integer_value(json_object_get(c, "now"))};
        jinja_output out = {0};
        jinja_error err = {0};
        int rc = e->t ? jinja_render(e->t, vars, nv, &opt, &out, &err) : -1;
        json_t *expect = json_object_get(c, "expect");
        const char *want_err = json_string_value(json_object_get(c, "error"));
        const char *want_kind = json_string_value(json_object_get(c, "error_kind"));
        bool ok;
        if (want_err) {
            /* the same kind of error; raise_exception's message word for word */
            jinja_err_kind want_k = !strcmp(want_kind, "raised")   ? JINJA_ERR_RAISED
                                    : !strcmp(want_kind, "syntax") ? JINJA_ERR_SYNTAX
                                    : !strcmp(want_kind, "limit")  ? JINJA_ERR_LIMIT
                                                                   : JINJA_ERR_RUNTIME;
            jinja_err_kind got = e->t ? err.kind : e->err.kind;
            ok = rc != 0 && got == want_k;
            if (ok && want_k == JINJA_ERR_RAISED) {
                const char *msg = strchr(want_err, ':') + 2;
                ok = strstr(err.err.msg, msg) != NULL;
            }
        } else
            ok = rc == 0 && out.len == json_string_length(expect) &&
                 memcmp(out.text, json_string_value(expect), out.len) == 0;
        if (ok) {
            e->matched++;
            if (want_err) e->errors_both++;
        } else {
            failed++;
            if (shown++ < 12) {
                fprintf(stderr, "MISMATCH %s case %s\n", path, label ? label : "?");
                if (want_err && rc)
                    fprintf(stderr, "    jinja2 failed (%s) and so did we, differently: %s\n",
                            want_err, e->t ? err.err.msg : e->err.err.msg);
                else if (want_err)
                    fprintf(stderr, "    jinja2 failed (%s) but we rendered %zu bytes\n", want_err,
                            out.len);
                else if (rc)
                    fprintf(stderr, "    jinja2 rendered %zu bytes but we failed: %s\n",
                            json_string_length(expect), e->t ? err.err.msg : e->err.err.msg);
                else
                    show_diff(json_string_value(expect), json_string_length(expect), out.text,
                              out.len);
            }
        }
        jinja_output_free(&out);
        json_decref(c);
    }
    free(line);
    fclose(f);
    int errors_both = 0;
    for (int k = 0; k < ntm; k++) {
        const char *base = strrchr(tm[k].path, '/');
        errors_both += tm[k].errors_both;
        if (tm[k].cases > 1) /* a real template with its conversations */
            printf("%-52s %4d conversations, %4d identical (%d of them errors in both)\n",
                   base ? base + 1 : tm[k].path, tm[k].cases, tm[k].matched, tm[k].errors_both);
        jinja_free(tm[k].t);
        free(tm[k].path);
    }
    free(tm);
    printf("total: %d cases of %d templates, %d mismatched, %d errors in both\n", total, ntm,
           failed, errors_both);
    return failed ? 1 : 0;
}
