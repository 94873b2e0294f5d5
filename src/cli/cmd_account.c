/* cmd_account.c - `moontail account new NAME` and `moontail account show`:
 * accounts on a registry (their token is what nodes and requesters use). */
#include "cli.h"
#include "moontail/http.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: moontail account new NAME --registry URL [-o TOKENFILE] [--admin-token-file F]\n"
    "       moontail account show --registry URL --token-file FILE [--json]\n"
    "\n"
    "new:  creates an account and writes its token to TOKENFILE (mode 0600; default:\n"
    "      print it). Nodes and requesters of the account use that token.\n"
    "show: the account's nodes and credits (token-layers served and used).\n";

int cmd_account(int argc, char **argv) {
    if (argc < 2 || (strcmp(argv[1], "new") != 0 && strcmp(argv[1], "show") != 0)) {
        if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
            fputs(usage, stdout);
            return 0;
        }
        fputs(usage, stderr);
        return 2;
    }
    bool is_new = strcmp(argv[1], "new") == 0;
    const char *name = NULL;
    int k = 2;
    if (is_new) {
        if (argc < 3 || argv[2][0] == '-') {
            fprintf(stderr, "moontail account new: give the account's NAME\n");
            return 2;
        }
        name = argv[2];
        k = 3;
    }
    const char *registry = NULL, *out = NULL, *admin_file = NULL, *token = NULL, *token_file = NULL;
    bool json = false;
    const cli_opt opts[] = {{"--registry", CLI_STRING, &registry, 0, 0},
                            {"-o", CLI_STRING, &out, 0, 0},
                            {"--admin-token-file", CLI_STRING, &admin_file, 0, 0},
                            {"--token", CLI_STRING, &token, 0, 0},
                            {"--token-file", CLI_STRING, &token_file, 0, 0},
                            {"--json", CLI_FLAG, &json, 0, 0},
                            {NULL, CLI_FLAG, NULL, 0, 0}};
    int prc = cli_parse("account", argc - k + 1, argv + k - 1, opts, usage);
    if (prc) return prc > 0 ? 0 : 2;
    if (!registry) {
        fprintf(stderr, "moontail account: --registry URL is required\n");
        return 2;
    }
    char url[600];
    mt_error err = {{0}};
    json_t *res = NULL;
    if (!is_new) {
        char *tok = cli_token("account", token, token_file);
        if (!tok) return 2;
        snprintf(url, sizeof url, "%s/v1/accounts/me", registry);
        int st = mt_http_json("GET", url, tok, NULL, 10000, &res, &err);
        free(tok);
        if (st != 200) {
            fprintf(stderr, "moontail account: %s\n", err.msg);
            json_decref(res);
            return 1;
        }
        if (json) {
            json_dumpf(res, stdout, JSON_INDENT(2));
            putchar('\n');
        } else {
            json_t *c = json_object_get(res, "credits");
            printf("account %lld: %zu node(s); served %lld token-layers and %lld expert rows;"
                   " used %lld tokens; balance %.0f token-layers; %s\n",
                   json_integer_value(json_object_get(res, "account_id")),
                   json_array_size(json_object_get(res, "nodes")),
                   json_integer_value(json_object_get(c, "served_token_layers")),
                   json_integer_value(json_object_get(c, "served_expert_rows")),
                   json_integer_value(json_object_get(c, "used_tokens")),
                   json_real_value(json_object_get(c, "balance")),
                   json_is_true(json_object_get(c, "volunteered")) ? "has volunteered"
                                                                   : "has not volunteered yet");
        }
        json_decref(res);
        return 0;
    }
    char *admin = admin_file ? cli_secret_file("account new", "--admin-token-file", admin_file,
                                               CLI_ADMIN_TOKEN)
                             : NULL;
    if (admin_file && !admin) return 2;
    snprintf(url, sizeof url, "%s/v1/accounts", registry);
    json_t *body = json_pack("{s:s}", "name", name);
    int st = mt_http_json("POST", url, admin, body, 10000, &res, &err);
    json_decref(body);
    free(admin);
    const char *tok = json_string_value(json_object_get(res, "token"));
    if (st == 403 && admin_file) { /* which token was wrong, and where it came from */
        fprintf(stderr,
                "moontail account new: the admin token in %s (--admin-token-file) is not this"
                " registry's: %s\n",
                admin_file, err.msg);
        json_decref(res);
        return 1;
    }
    if (st == 401 && !admin_file) {
        fprintf(stderr,
                "moontail account new: %s\n  this registry opens accounts for its operator only:"
                " give its admin token with --admin-token-file FILE\n",
                err.msg);
        json_decref(res);
        return 1;
    }
    if (st != 201 || !tok) {
        fprintf(stderr, "moontail account: %s\n", err.msg[0] ? err.msg : "no token in the answer");
        json_decref(res);
        return 1;
    }
    int rc = 0;
    if (out) {
        int fd = open(out, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0 || dprintf(fd, "%s\n", tok) < 0) {
            fprintf(stderr, "moontail account: %s: %s\n", out, strerror(errno));
            rc = 1;
        } else {
            fprintf(stderr, "moontail account: account '%s' (id %lld); token in %s\n", name,
                    json_integer_value(json_object_get(res, "account_id")), out);
        }
        if (fd >= 0) close(fd);
    } else {
        printf("%s\n", tok);
    }
    json_decref(res);
    return rc;
}
