/* cli_daemon.c - helpers the long-running commands share: where they find an
 * account token (--token-file FILE, then the MOONTAIL_TOKEN environment
 * variable, then --token TOKEN, last since a token on the command line is
 * visible to other users in `ps`) and how they read a secret from a file. */
#include "cli.h"
#include "moontail/compat.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *cli_secret_file(const char *cmd, const char *option, const char *path, const char *what) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "moontail %s: %s %s: cannot open it (%s); it should hold %s\n", cmd, option,
                path, strerror(errno), what);
        return NULL;
    }
    /* the secret is the first line */
    char *t = NULL;
    size_t cap = 0;
    errno = 0;
    ssize_t n = mt_getline(&t, &cap, f);
    int why = ferror(f) || !t ? (errno ? errno : EIO) : 0;
    fclose(f);
    if (why) {
        fprintf(stderr, "moontail %s: %s %s: cannot read it (%s); it should hold %s\n", cmd, option,
                path, strerror(why), what);
        free(t);
        return NULL;
    }
    if (n < 0) t[0] = 0; /* an empty file */
    t[strcspn(t, "\r\n")] = 0;
    if (!t[0]) {
        fprintf(stderr, "moontail %s: %s %s is empty; it should hold %s\n", cmd, option, path,
                what);
        free(t);
        return NULL;
    }
    return t;
}

char *cli_token(const char *cmd, const char *token, const char *token_file) {
    if (token_file)
        return cli_secret_file(cmd, "--token-file", token_file,
                               "the account token ('moontail account new' writes one)");
    const char *env = getenv("MOONTAIL_TOKEN");
    if (env && env[0]) return strdup(env);
    if (token) return strdup(token);
    fprintf(stderr,
            "moontail %s: no account token: give --token-file FILE (or set MOONTAIL_TOKEN);"
            " create an account with 'moontail account new NAME --registry URL'\n",
            cmd);
    return NULL;
}
