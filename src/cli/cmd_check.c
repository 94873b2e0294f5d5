/* cmd_check.c - `moontail check`: a self-test of the distributed paths on
 * one machine. Runs a short prompt on the whole model in this process,
 * through a local two-stage pipeline and through a local expert server
 * (nodes on 127.0.0.1, see selfcheck.h) and reports whether the logits are
 * identical. Exit status 0 only if every case is bit-identical. */
#include "cli.h"
#include "model_source.h"
#include "moontail/selfcheck.h"
#include "moontail/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: moontail check [-m MODEL] [-p PROMPT] [-t N]\n"
    "\n"
    "Runs PROMPT on the whole model, through a local two-stage pipeline and\n"
    "through a local expert server (MoE models), and checks that every logit is\n"
    "bit-identical. Exit status 0 only if they all are.\n"
    "\n"
    "  -m MODEL   GGUF model (default: the built-in synthetic model)\n"
    "  -p PROMPT  prompt text (default: a short English sentence)\n"
    "  -t N       threads (default: all CPUs)\n";

static const char default_prompt[] = "The quick brown fox jumps over the lazy dog.";

static const char *status_word(mt_selfcheck_status s) {
    switch (s) {
    case MT_SELFCHECK_IDENTICAL:
        return "identical";
    case MT_SELFCHECK_DIFFERENT:
        return "DIFFERENT";
    case MT_SELFCHECK_FAILED:
        return "FAILED";
    case MT_SELFCHECK_SKIPPED:
        return "skipped";
    }
    return "?";
}

int cmd_check(int argc, char **argv) {
    const char *model_path = NULL, *prompt = default_prompt;
    int64_t threads = 0;
    const cli_opt opts[] = {{"-m", CLI_STRING, &model_path, 0, 0},
                            {"-p", CLI_STRING, &prompt, 0, 0},
                            {"-t", CLI_INT, &threads, 1, 1024},
                            {NULL, CLI_FLAG, NULL, 0, 0}};
    int prc = cli_parse("check", argc, argv, opts, usage);
    if (prc) return prc > 0 ? 0 : 2;

    mt_error err = {{0}};
    mt_vocab *vocab = NULL;
    int32_t *ids = NULL;
    int64_t n = -1;
    int rc = 1;
    mt_model *model = cli_open_model(model_path, &err);
    if (!model) {
        fprintf(stderr, "moontail check: %s\n", err.msg);
        return 1;
    }
    if (!(vocab = mt_vocab_load(model->gguf, &err)) ||
        (n = mt_tokenize(vocab, prompt, strlen(prompt), true, true, &ids, &err)) < 0) {
        fprintf(stderr, "moontail check: %s\n", err.msg);
        goto out;
    }
    if (n == 0) {
        fprintf(stderr, "moontail check: the prompt gives no tokens; pass a non-empty -p\n");
        goto out;
    }
    if (n > model->hp.n_ctx_train && model->hp.n_ctx_train > 0) {
        fprintf(stderr,
                "moontail check: the prompt has %lld tokens, more than the model's context"
                " (%d); pass a shorter -p\n",
                (long long)n, (int)model->hp.n_ctx_train);
        goto out;
    }
    printf("model: %s (%s, %d layers, %d experts); prompt: %lld tokens\n",
           model_path ? model_path : "built-in synthetic", model->hp.arch_name,
           (int)model->hp.n_layer, (int)model->hp.n_expert, (long long)n);
    fflush(stdout);

    mt_selfcheck_case cases[MT_SELFCHECK_CASES];
    if (mt_selfcheck_run(model, ids, (int32_t)n, (int)threads, NULL, cases, &err)) {
        fprintf(stderr, "moontail check: %s\n", err.msg);
        goto out;
    }
    bool all = true;
    for (int i = 0; i < MT_SELFCHECK_CASES; i++) {
        const mt_selfcheck_case *c = &cases[i];
        if (c->status == MT_SELFCHECK_IDENTICAL || c->status == MT_SELFCHECK_DIFFERENT)
            printf("%-48s max |diff| %-10g %s\n", c->name, c->max_diff, status_word(c->status));
        else
            printf("%-48s %s: %s\n", c->name, status_word(c->status), c->why);
        if (c->status == MT_SELFCHECK_DIFFERENT || c->status == MT_SELFCHECK_FAILED) all = false;
    }
    printf(all ? "all logits identical to the local run\n"
               : "NOT identical: the distributed paths differ from the local run\n");
    rc = all ? 0 : 1;

out:
    free(ids);
    mt_vocab_free(vocab);
    mt_model_free(model);
    return rc;
}
