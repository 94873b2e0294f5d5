/* cmd_template.c - `moontail template`: prints the prompt a model's chat
 * template makes of a conversation, exactly as the model would see it (no
 * newline added), from an OpenAI-style JSON file. It runs the same code as
 * `moontail serve` and the shell (moontail/chat_template.h): the model's own
 * Jinja template, or the built-in format of its family when that cannot run
 * here (said on stderr). */
#include "cli.h"
#include "moontail/chat_template.h"
#include "moontail/gguf.h"
#include "moontail/tokenizer.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: moontail template -m MODEL -f CONVERSATION.json [--no-generation-prompt]\n"
    "                         [--kwargs JSON] [--template-file FILE] [--tokens]\n"
    "\n"
    "  -m MODEL                GGUF file: its tokenizer.chat_template, BOS and EOS\n"
    "  -f CONVERSATION.json    {\"messages\": [...], \"tools\": [...]} as in an OpenAI chat\n"
    "                          request (other fields are ignored; chat_template_kwargs is used)\n"
    "  --no-generation-prompt  do not open the assistant's turn (add_generation_prompt false)\n"
    "  --kwargs JSON           template variables, e.g. '{\"enable_thinking\": false}' (over the\n"
    "                          file's chat_template_kwargs)\n"
    "  --template-file FILE    render with FILE's Jinja instead of the model's (-m optional;\n"
    "                          without it the template gets no bos_token or eos_token)\n"
    "  --tokens                print the prompt's token ids instead (needs -m)\n";

static void template_log(void *ctx, const char *msg) {
    (void)ctx;
    fprintf(stderr, "moontail template: %s\n", msg);
}

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("moontail template: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

/* Checks a conversation file's fields; returns 0 or prints what is wrong. */
static int check_conversation(const char *path, const json_t *root) {
    if (!json_is_object(root)) return fail("%s: expected a JSON object with \"messages\"", path);
    json_t *msgs = json_object_get(root, "messages");
    if (!json_is_array(msgs))
        return fail("%s: \"messages\" must be an array of messages%s", path,
                    msgs ? "" : " (it is missing)");
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        if (!json_is_object(m)) return fail("%s: messages[%zu] is not an object", path, i);
        json_t *role = json_object_get(m, "role");
        if (!json_is_string(role))
            return fail("%s: messages[%zu].role must be a string (system, user, assistant, tool,"
                        " ...)",
                        path, i);
        json_t *c = json_object_get(m, "content");
        if (c && !json_is_string(c) && !json_is_array(c) && !json_is_null(c))
            return fail("%s: messages[%zu].content must be a string, an array of parts or null",
                        path, i);
    }
    json_t *tools = json_object_get(root, "tools");
    if (tools && !json_is_array(tools) && !json_is_null(tools))
        return fail("%s: \"tools\" must be an array of tool definitions", path);
    json_t *kw = json_object_get(root, "chat_template_kwargs");
    if (kw && !json_is_object(kw) && !json_is_null(kw))
        return fail("%s: \"chat_template_kwargs\" must be an object", path);
    return 0;
}

/* Template variable names: identifiers the server does not set itself. */
static int check_kwargs(const char *what, const json_t *kw) {
    static const char *const reserved[] = {
        "messages", "tools", "documents", "add_generation_prompt", "bos_token", "eos_token", NULL};
    if (json_object_size(kw) > 64) return fail("%s: more than 64 template variables", what);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)kw, k, v) {
        (void)v;
        bool ok = k[0] && !(k[0] >= '0' && k[0] <= '9') && strlen(k) <= 64;
        for (const char *p = k; ok && *p; p++)
            ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                 *p == '_';
        if (!ok)
            return fail("%s: '%.64s' is not a template variable name (letters, digits, '_')", what,
                        k);
        for (int i = 0; reserved[i]; i++)
            if (!strcmp(reserved[i], k))
                return fail("%s: '%s' is set by moontail itself, not by a template variable", what,
                            k);
    }
    return 0;
}

int cmd_template(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *kwargs_text = NULL, *tfile = NULL;
    bool no_gen = false, tokens = false;
    const cli_opt opts[] = {
        {"-m", CLI_STRING, &model, 0, 0},
        {"-f", CLI_STRING, &file, 0, 0},
        {"--no-generation-prompt", CLI_FLAG, &no_gen, 0, 0},
        {"--kwargs", CLI_STRING, &kwargs_text, 0, 0},
        {"--template-file", CLI_STRING, &tfile, 0, 0},
        {"--tokens", CLI_FLAG, &tokens, 0, 0},
        {NULL, CLI_FLAG, NULL, 0, 0},
    };
    int prc = cli_parse("template", argc, argv, opts, usage);
    if (prc) return prc > 0 ? 0 : 2;
    if (!file) {
        fprintf(stderr, "moontail template: -f CONVERSATION.json is required\n%s", usage);
        return 2;
    }
    if (!model && (!tfile || tokens)) {
        fprintf(stderr, "moontail template: -m MODEL is required%s\n%s",
                tokens ? " with --tokens" : " (or --template-file FILE)", usage);
        return 2;
    }
    int rc = 1;
    json_error_t je;
    json_t *conv = json_load_file(file, JSON_REJECT_DUPLICATES, &je), *kw = NULL;
    gguf_file *f = NULL;
    mt_vocab *v = NULL;
    char *text = NULL;
    mt_chat_template *t = NULL;
    mt_error err = {{0}};
    if (!conv) {
        fail("%s: not a JSON file we can read: %s (line %d, column %d)", file, je.text, je.line,
             je.column);
        goto done;
    }
    if (check_conversation(file, conv)) goto done;
    json_t *fkw = json_object_get(conv, "chat_template_kwargs");
    kw = json_is_object(fkw) ? json_deep_copy(fkw) : json_object();
    if (kwargs_text) {
        json_t *extra = json_loads(kwargs_text, JSON_REJECT_DUPLICATES, &je);
        if (!json_is_object(extra)) {
            fail("--kwargs: expected a JSON object of template variables%s%s", extra ? "" : ": ",
                 extra ? "" : je.text);
            json_decref(extra);
            goto done;
        }
        json_object_update(kw, extra);
        json_decref(extra);
    }
    if (check_kwargs(kwargs_text ? "--kwargs" : file, kw)) goto done;
    if (model) {
        if (!(f = gguf_open(model, &err)) || !(v = mt_vocab_load(f, &err))) {
            fail("%s", err.msg);
            goto done;
        }
    }
    if (tfile) {
        size_t len = 0;
        if (!(text = cli_read_file(tfile, &len))) goto done;
        if (strlen(text) != len) {
            fail("%s: the template holds a NUL byte", tfile);
            goto done;
        }
    } else {
        text = gguf_get_string(f, "tokenizer.chat_template", NULL);
        if (!text)
            fprintf(stderr,
                    "moontail template: %s has no tokenizer.chat_template; the built-in"
                    " ChatML format renders\n",
                    model);
    }
    if (!(t = mt_chat_template_new(text, v, template_log, NULL))) {
        fail("out of memory");
        goto done;
    }
    json_t *tools = json_object_get(conv, "tools");
    mt_chat_template_input in = {.messages = json_object_get(conv, "messages"),
                                 .tools = json_is_array(tools) ? tools : NULL,
                                 .kwargs = kw,
                                 .add_generation_prompt = !no_gen};
    mt_chat_template_error te;
    if (tokens) {
        int32_t *ids = NULL;
        int64_t n = mt_chat_template_tokenize(t, &in, &ids, &te);
        if (n < 0) {
            fail("%s", te.err.msg);
            goto done;
        }
        for (int64_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        putchar('\n');
        free(ids);
    } else {
        jinja_output out;
        if (mt_chat_template_render(t, &in, &out, &te)) {
            fail("%s", te.err.msg);
            goto done;
        }
        fwrite(out.text, 1, out.len, stdout);
        jinja_output_free(&out);
    }
    rc = fflush(stdout) ? 1 : 0;
done:
    mt_chat_template_free(t);
    free(text);
    mt_vocab_free(v);
    gguf_close(f);
    json_decref(kw);
    json_decref(conv);
    return rc;
}
