/* fuzz_jinja.c - libFuzzer target for the Jinja interpreter (moontail/jinja.h):
 * the tokenizer.chat_template text of a GGUF file, which comes with a model
 * and is not MoonTail's own. Input: the template source. It is parsed, and
 * when it parses, rendered twice with a small fixed conversation (messages
 * with data text, tools, a kwarg) under tight limits. Checks beyond the
 * sanitizers: a refusal has a kind and a message; an output stays within the
 * output limit, its data ranges are sorted, inside it and not adjacent; the
 * two renders give the same bytes and ranges (no state kept between them). */
#include "fuzz_target.h"
#include "moontail/jinja.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static json_t *ctx;

static void check_output(const jinja_output *o, size_t max) {
    if (o->len > max || !o->text || o->text[o->len] != 0) abort();
    for (size_t i = 0; i < o->n_data; i++) {
        const jinja_span *s = &o->data[i];
        if (!s->len || s->off > o->len || s->len > o->len - s->off) abort();
        if (i && s->off <= o->data[i - 1].off + o->data[i - 1].len) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!ctx) {
        ctx = json_loads(
            "{\"messages\": [{\"role\": \"system\", \"content\": \"Be <|im_end|> brief\"},"
            " {\"role\": \"user\", \"content\": \"héllo {{ x }}\", \"name\": \"u\"},"
            " {\"role\": \"assistant\", \"content\": \"\", \"reasoning_content\": \"r\","
            " \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\":"
            " {\"name\": \"f\", \"arguments\": {\"a\": [1, 2.5, null, true]}}}]},"
            " {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"42\"}],"
            " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\","
            " \"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\":"
            " \"array\"}}}}}], \"enable_thinking\": false}",
            0, NULL);
        if (!ctx) abort();
    }
    jinja_error e;
    jinja_template *t = jinja_parse((const char *)data, size, "fuzz", &e);
    if (!t) {
        if (e.kind == JINJA_OK || !e.err.msg[0]) abort(); /* a refusal says why */
        return 0;
    }
    jinja_var vars[8];
    int n = 0;
    const char *k;
    json_t *v;
    json_object_foreach(ctx, k, v) vars[n++] =
        (jinja_var){k, v, strcmp(k, "enable_thinking") != 0, NULL};
    json_t *agp = json_true(), *bos = json_string("<s>");
    vars[n++] = (jinja_var){"add_generation_prompt", agp, false, NULL};
    vars[n++] = (jinja_var){"bos_token", bos, false, NULL};
    jinja_options opt = {.max_output = 1 << 16,
                         .max_memory = 32 << 20,
                         .max_steps = 100000,
                         .max_depth = 40,
                         .now = 1767225600};
    jinja_output a, b;
    jinja_error ea, eb;
    int ra = jinja_render(t, vars, n, &opt, &a, &ea);
    int rb = jinja_render(t, vars, n, &opt, &b, &eb);
    if (ra != rb) abort();
    if (ra == 0) {
        check_output(&a, opt.max_output);
        if (a.len != b.len || memcmp(a.text, b.text, a.len) || a.n_data != b.n_data ||
            (a.n_data && memcmp(a.data, b.data, a.n_data * sizeof *a.data)))
            abort();
        jinja_output_free(&a);
        jinja_output_free(&b);
    } else if (ea.kind == JINJA_OK || !ea.err.msg[0] || ea.kind != eb.kind) {
        abort();
    }
    json_decref(agp);
    json_decref(bos);
    jinja_free(t);
    return 0;
}
