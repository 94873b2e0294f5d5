/* cmd_plan.c - `moontail plan`: commands about shard plans. `plan check`
 * proves that the shards a manifest lists are the whole model: each one a
 * verified shard of this model, every tensor slice held exactly `replicas`
 * times with the model's bytes (see mt_plan_check in moontail/shard.h). */
#include "cli.h"
#include "cli_shard_io.h"
#include "moontail/shard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: moontail plan check MODEL MANIFEST [--hash-cache PATH] [--rehash] [-t N]\n"
    "\n"
    "  check   verify that the shards MANIFEST lists (paths relative to the manifest)\n"
    "          are shards of MODEL whose hashes match, and that together they hold every\n"
    "          tensor (and every expert of each routed expert tensor) exactly 'replicas'\n"
    "          times. Prints one line per problem and a summary; exits 0 only when all\n"
    "          is well, 1 when problems were found. The model's hashes come from the\n"
    "          hash cache when it has them (as for split: --hash-cache PATH, default\n"
    "          ~/.cache/moontail/hashes.sqlite, 'none' for no cache; --rehash reads\n"
    "          the model again); the shards are always read and hashed. -t N: threads\n"
    "          (default every core).\n";

int cmd_plan(int argc, char **argv) {
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(usage, stdout);
        return 0;
    }
    if (argc < 2 || strcmp(argv[1], "check") != 0) {
        fprintf(stderr, "moontail plan: %s%s%s; see 'moontail plan --help'\n",
                argc < 2 ? "give a subcommand (check)" : "unknown subcommand '",
                argc < 2 ? "" : argv[1], argc < 2 ? "" : "'");
        return 2;
    }
    if (argc >= 3 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"))) {
        fputs(usage, stdout);
        return 0;
    }
    if (argc < 4 || argv[2][0] == '-' || argv[3][0] == '-') {
        fprintf(stderr,
                "moontail plan check: expects MODEL MANIFEST; see 'moontail plan --help'\n");
        return 2;
    }
    const char *hash_cache = NULL;
    bool rehash = false;
    int64_t threads = 0;
    const cli_opt opts[] = {
        {"--hash-cache", CLI_STRING, &hash_cache, 0, 0},
        {"--rehash", CLI_FLAG, &rehash, 0, 0},
        {"-t", CLI_INT, &threads, 1, 1024},
        {NULL, CLI_FLAG, NULL, 0, 0},
    };
    int prc = cli_parse("plan check", argc - 3, argv + 3, opts, usage);
    if (prc) return prc > 0 ? 0 : 2;
    mt_error err = {{0}};
    char *report = NULL;
    cli_shard_io sio;
    cli_shard_io_open(&sio, "plan check", hash_cache, rehash, (int)threads);
    int rc = mt_plan_check_io(argv[2], argv[3], &report, &sio.io, &err);
    cli_shard_io_close(&sio);
    if (rc < 0) {
        fprintf(stderr, "moontail plan check: %s\n", err.msg);
        return 1;
    }
    fputs(report ? report : "", rc == 0 ? stdout : stderr);
    free(report);
    return rc == 0 ? 0 : 1;
}
