/* main.c - the `moontail` command: dispatches to one subcommand per file. */
#include "cli.h"
#include "moontail/clock.h"
#include "moontail/proc.h"

#include <stdio.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

static const char usage[] =
    "usage: moontail <command> [options]\n"
    "       moontail           (no command: a chat with the model in the terminal)\n"
    "\n"
    "commands:\n"
    "  run       generate text from a prompt (default: a built-in synthetic model)\n"
    "  tokenize  print the token ids of a text\n"
    "  template  print the prompt a model's chat template makes of a conversation\n"
    "  eval      evaluate a token sequence and print the top logits at each position\n"
    "  bench     prefill and decode tokens/s, weight bytes per token, memory bandwidth\n"
    "  mkmodel   write a deterministic synthetic GGUF model\n"
    "  split     cut a model into shards (one, or a whole cell/swarm plan)\n"
    "  plan      check that a plan's shards hold the whole model ('plan check')\n"
    "  keygen    create a node identity (secret key file) and print its public key\n"
    "  cert      issue a certificate for a key with an authority's key, or show one\n"
    "  node      serve a shard to requesters over the network\n"
    "  prompt    generate text through a route of nodes (like run, layers remote)\n"
    "  check     check that pipeline and expert-server runs give the local logits\n"
    "  registry  run the control plane of a cell or swarm (placement, routes, credits)\n"
    "  account   create an account on a registry, or show its credits\n"
    "  status    what a registry's cell or swarm looks like now\n"
    "  cell      cell operator tools ('cell earnings')\n"
    "  pause     pause a node now, resume it, or give it pause windows\n"
    "  demo      a whole cell on this machine: registry + nodes, a prompt, where it ran\n"
    "  setup     first run: this machine's identity, an account, and volunteering\n"
    "  serve     an OpenAI-compatible HTTP API (local model or a registry's cell)\n"
    "  batch     a JSONL file of API requests run many at once, resumable\n"
    "  shell     a chat with the model in the terminal (what 'moontail' alone runs)\n"
    "\n"
    "'moontail <command> --help' describes each command's options. Any command takes\n"
    "--config FILE: a file of its long options, one 'key = value' per line, and, for a\n"
    "registry served over https://, --registry-pin sha256//... (the fingerprint the\n"
    "registry prints at start; `setup` keeps it) or --ca-file FILE (a CA-signed one).\n";

int main(int argc, char **argv) {
    mt_proc_args_utf8(&argc, &argv);
    mt_clock_init();
#ifdef __GLIBC__
    /* A forward pass allocates scratch buffers of a few MB per layer and
     * frees them again. By default glibc returns such blocks to the kernel
     * (mmap, or trimming the heap), so every layer pays page faults to get
     * them back: ~5% of a prompt. Keep freed memory in the process instead;
     * the peak scratch of one pass stays mapped. */
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(usage, stdout);
        return 0;
    }
    if (cli_expand_config(&argc, &argv) || cli_registry_trust(&argc, argv)) return 2;
#ifdef _WIN32
    if (argc < 2 || argv[1][0] == '-') { /* no command: what there is */
        fputs(usage, stderr);
        return 2;
    }
#else
    /* no command (perhaps options): a chat in the terminal */
    if (argc < 2 || argv[1][0] == '-') return cmd_shell(argc, argv);
#endif
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } cmds[] = {
        {"run", cmd_run},           {"tokenize", cmd_tokenize}, {"eval", cmd_eval},
        {"bench", cmd_bench},       {"mkmodel", cmd_mkmodel},   {"split", cmd_split},
        {"plan", cmd_plan},         {"keygen", cmd_keygen},     {"node", cmd_node},
        {"prompt", cmd_prompt},     {"check", cmd_check},       {"cert", cmd_cert},
        {"status", cmd_status},     {"pause", cmd_pause},       {"setup", cmd_setup},
        {"template", cmd_template},
#ifndef _WIN32 /* the Windows build is a node's: no registry, API server or terminal chat */
        {"registry", cmd_registry}, {"account", cmd_account},   {"cell", cmd_cell},
        {"demo", cmd_demo},         {"serve", cmd_serve},       {"shell", cmd_shell},
        {"batch", cmd_batch},
#endif
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (strcmp(argv[1], cmds[i].name) == 0) return cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "moontail: unknown command '%s'; try 'moontail --help'\n", argv[1]);
    return 2;
}
