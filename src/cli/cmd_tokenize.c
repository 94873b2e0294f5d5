/* cmd_tokenize.c - `moontail tokenize`: prints the token ids of a text the
 * way the model would see it (BOS as the metadata asks, special tokens
 * parsed like llama.cpp does for a raw prompt). */
#include "cli.h"
#include "model_source.h"
#include "moontail/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: moontail tokenize [-m MODEL] (-p TEXT | -f FILE) [--json] [--no-bos] [--no-special]\n"
    "\n"
    "  -m MODEL      GGUF file whose vocabulary to use (default: the built-in model);\n"
    "                any part of a split model\n"
    "  -p TEXT       text to tokenize\n"
    "  -f FILE       read the text from FILE (bytes as they are)\n"
    "  --json        print {\"tokens\": [...]}\n"
    "  --no-bos      do not add BOS/EOS even if the vocabulary asks for them\n"
    "  --no-special  treat control-token text such as <|im_end|> as plain text\n";

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *file = NULL;
    bool json = false, no_bos = false, no_special = false;
    const cli_opt opts[] = {
        {"-m", CLI_STRING, &model, 0, 0},      {"-p", CLI_STRING, &text, 0, 0},
        {"-f", CLI_STRING, &file, 0, 0},       {"--json", CLI_FLAG, &json, 0, 0},
        {"--no-bos", CLI_FLAG, &no_bos, 0, 0}, {"--no-special", CLI_FLAG, &no_special, 0, 0},
        {NULL, CLI_FLAG, NULL, 0, 0},
    };
    int prc = cli_parse("tokenize", argc, argv, opts, usage);
    if (prc) return prc > 0 ? 0 : 2;
    const bool add_special = !no_bos, parse_special = !no_special;
    if (!!text == !!file) {
        fprintf(stderr, "moontail tokenize: give exactly one of -p TEXT or -f FILE\n");
        return 2;
    }
    size_t len = 0;
    char *buf = NULL;
    if (file) {
        if (!(buf = cli_read_file(file, &len))) return 1;
        text = buf;
    } else {
        len = strlen(text);
    }
    mt_error err = {{0}};
    gguf_file *f = NULL;
    mt_model *m = NULL;
    mt_vocab *v = NULL;
    int32_t *ids = NULL;
    int64_t n = -1;
    if (model) {
        /* the model's own checks too (a vocabulary-only file has no tensors to check) */
        f = gguf_open(model, &err);
        if (f && f->n_tensors > 0 && mt_model_check_file(f, &err)) {
            gguf_close(f);
            f = NULL;
        }
    } else if ((m = cli_open_model(NULL, &err)))
        f = m->gguf;
    if (f && (v = mt_vocab_load(f, &err)))
        n = mt_tokenize(v, text, len, add_special, parse_special, &ids, &err);
    if (n >= 0) {
        if (json) {
            json_t *a = json_array();
            for (int64_t i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
            json_t *root = json_pack("{s:o}", "tokens", a);
            char *s = json_dumps(root, JSON_COMPACT);
            puts(s ? s : "{}");
            free(s);
            json_decref(root);
        } else {
            for (int64_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
            putchar('\n');
        }
    } else {
        fprintf(stderr, "moontail tokenize: %s\n", err.msg);
    }
    free(ids);
    free(buf);
    mt_vocab_free(v);
    if (m)
        mt_model_free(m);
    else
        gguf_close(f);
    return n >= 0 ? 0 : 1;
}
