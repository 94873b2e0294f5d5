/* cli_args.c - argument parsing helpers shared by the subcommands. Every
 * value is checked; messages name the option and what was expected. */
#include "cli.h"
#include "moontail/hwinfo.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool cli_int(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "moontail: %s expects a whole number in [%lld, %lld], got '%s'%s\n", opt,
                (long long)lo, (long long)hi, s, cli_config_where(s));
        return false;
    }
    *out = v;
    return true;
}

bool cli_float(const char *opt, const char *s, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !isfinite(v)) {
        fprintf(stderr, "moontail: %s expects a number, got '%s'%s\n", opt, s, cli_config_where(s));
        return false;
    }
    *out = v;
    return true;
}

const char *cli_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "moontail: option %s needs a value%s\n", argv[*i],
                cli_config_where(argv[*i]));
        return NULL;
    }
    return argv[++*i];
}

int cli_parse(const char *cmd, int argc, char **argv, const cli_opt *opts, const char *usage) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return 1;
        }
        const cli_opt *o = opts;
        if (a[0] != '-' || !a[1]) { /* not an option: the positional argument, if one is taken */
            while (o->name && o->kind != CLI_POSITIONAL) o++;
            if (o->name && !*(const char **)o->dst) {
                *(const char **)o->dst = a;
                continue;
            }
            if (o->name) {
                fprintf(stderr,
                        "moontail %s: give %s once ('%s' is a second); quote text that"
                        " has spaces\n",
                        cmd, o->name, a);
                return -1;
            }
            o = opts;
        }
        while (o->name && (o->kind == CLI_POSITIONAL || strcmp(o->name, a) != 0)) o++;
        if (!o->name) {
            fprintf(stderr, "moontail %s: unknown option '%s'%s; see 'moontail %s --help'\n", cmd,
                    a, cli_config_where(a), cmd);
            return -1;
        }
        if (o->kind == CLI_FLAG) {
            *(bool *)o->dst = true;
            continue;
        }
        const char *v = cli_value(argc, argv, &i);
        if (!v) return -1;
        if (o->kind == CLI_STRING) {
            *(const char **)o->dst = v;
        } else if (o->kind == CLI_LIST) {
            cli_list *l = o->dst;
            if (l->n >= l->cap) {
                fprintf(stderr, "moontail %s: at most %d %s options; '%s' is one more\n", cmd,
                        l->cap, a, v);
                return -1;
            }
            l->v[l->n++] = v;
        } else if (o->kind == CLI_INT && !cli_int(a, v, o->lo, o->hi, (int64_t *)o->dst))
            return -1;
        else if (o->kind == CLI_FLOAT && !cli_float(a, v, (float *)o->dst))
            return -1;
    }
    return 0;
}

int cli_take_all(int *argc, char **argv, const char *name, const char **out) {
    int n = 0, k = 1;
    for (int i = 1; i < *argc; i++) {
        if (strcmp(argv[i], name) != 0) {
            argv[k++] = argv[i];
            continue;
        }
        const char *v = cli_value(*argc, argv, &i);
        if (!v) return -1;
        out[n++] = v;
    }
    *argc = k;
    return n;
}

bool cli_misbehave(const char *cmd, const char *spec, double *rate) {
    static const char kind[] = "corrupt-output";
    size_t k = strlen(kind);
    float r = 1;
    bool ok = strncmp(spec, kind, k) == 0 && (spec[k] == 0 || spec[k] == ':');
    if (ok && spec[k] == ':') {
        char *end;
        errno = 0;
        r = strtof(spec + k + 1, &end);
        ok = errno == 0 && end != spec + k + 1 && *end == 0 && r > 0 && r <= 1;
    }
    if (!ok) {
        fprintf(stderr,
                "moontail %s: --misbehave expects corrupt-output[:RATE] with RATE in (0, 1], got"
                " '%s' (it is for testing spot-checks only)\n",
                cmd, spec);
        return false;
    }
    *rate = r;
    return true;
}

bool cli_spot_check(const char *cmd, float value, double *rate) {
    if (!(value >= 0 && value <= 1)) {
        fprintf(stderr,
                "moontail %s: --spot-check expects a fraction in [0, 1] (0 turns checks off, 1"
                " checks every stage of every request), got %g\n",
                cmd, (double)value);
        return false;
    }
    *rate = value;
    return true;
}

mt_http_limits cli_http_limits(const int64_t v[5]) {
    return (mt_http_limits){.max_conns = (int)v[0],
                            .max_conns_per_addr = (int)v[1],
                            .max_inflight_per_key = (int)v[2],
                            .header_timeout_s = (int)v[3],
                            .body_timeout_s = (int)v[4]};
}

bool cli_kv_type(const char *cmd, const char *name, mt_kv_type *t) {
    mt_error err = {{0}};
    *t = MT_KV_DEFAULT;
    if (name && mt_kv_type_parse(name, t, &err)) {
        fprintf(stderr, "moontail %s: --kv-type: %s\n", cmd, err.msg);
        return false;
    }
    return true;
}

uint64_t cli_memory_offered(int64_t memory_mb) {
    if (memory_mb > 0) return (uint64_t)memory_mb * 1000000;
    mt_hwinfo hw;
    mt_hwinfo_detect(NULL, &hw);
    return hw.ram_available > 0 ? (uint64_t)hw.ram_available / 10 * 7 : 0;
}
