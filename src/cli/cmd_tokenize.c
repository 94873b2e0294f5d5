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
    "  -m MODEL      GGUF file whose vocabulary to use (default: the built-in model)\n"
    "  -p TEXT       text to tokenize\n"
    "  -f FILE       read the text from FILE (bytes as they are)\n"
    "  --json        print {\"tokens\": [...]}\n"
    "  --no-bos      do not add BOS/EOS even if the vocabulary asks for them\n"
    "  --no-special  treat control-token text such as <|im_end|> as plain text\n";

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *file = NULL;
    bool json = false, add_special = true, parse_special = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return 0;
        } else if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--no-bos")) add_special = false;
        else if (!strcmp(a, "--no-special")) parse_special = false;
        else if (!strcmp(a, "-m")) { if (!(model = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "-p")) { if (!(text = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "-f")) { if (!(file = cli_value(argc, argv, &i))) return 2; }
        else {
            fprintf(stderr, "moontail tokenize: unknown option '%s'; see 'moontail tokenize --help'\n", a);
            return 2;
        }
    }
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
    if (model) f = gguf_open(model, &err);
    else if ((m = cli_open_model(NULL, &err))) f = m->gguf;
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
    if (m) mt_model_free(m);
    else gguf_close(f);
    return n >= 0 ? 0 : 1;
}
