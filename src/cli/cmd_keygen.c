/* cmd_keygen.c - `moontail keygen`: creates a node identity (an Ed25519 key
 * pair) in a new secret key file with mode 0600 and prints its public key, the
 * line other nodes put in their authorized-keys files (keys.h). */
#include "cli.h"
#include "moontail/keys.h"

#include <stdio.h>

static const char usage[] =
    "usage: moontail keygen -o FILE\n"
    "\n"
    "Creates a new node identity and prints its public key (64 hex digits).\n"
    "\n"
    "  -o FILE   where to write the secret key (mode 0600; an existing file is never\n"
    "            overwritten). Keep it private; share only the printed public key, e.g.\n"
    "            as a line '<public key> NAME' in the other nodes' authorized-keys file.\n";

int cmd_keygen(int argc, char **argv) {
    const char *out = NULL;
    const cli_opt opts[] = {
        {"-o", CLI_STRING, &out, 0, 0},
        {NULL, CLI_FLAG, NULL, 0, 0},
    };
    int prc = cli_parse("keygen", argc, argv, opts, usage);
    if (prc) return prc > 0 ? 0 : 2;
    if (!out) {
        fprintf(stderr, "moontail keygen: -o FILE is required (where to write the secret key)\n");
        return 2;
    }
    mt_error err = {{0}};
    mt_keys k;
    if (mt_keys_generate(&k, &err) || mt_keys_save(&k, out, &err)) {
        fprintf(stderr, "moontail keygen: %s\n", err.msg);
        mt_keys_wipe(&k);
        return 1;
    }
    char hex[MT_KEYS_HEX_SIZE];
    mt_keys_pk_to_hex(k.pk, hex);
    mt_keys_wipe(&k);
    printf("%s\n", hex);
    return 0;
}
