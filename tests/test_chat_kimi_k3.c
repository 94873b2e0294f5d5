/* test_chat_kimi_k3.c - the Kimi K3 chat family of src/model/chat_format.c: its
 * detection in a GGUF's tokenizer.chat_template (before Kimi K2 and
 * ChatML), the text of conversations, their token ids (template markers are
 * control tokens, message text is plain text), and where generation stops:
 * at <|end_of_msg|>, both when the vocabulary's EOS points at it (as in
 * files from llama.cpp's conversion/kimi_k3.py) and when it does not (then
 * only the chat family's end token stops it, in serve and in the shell).
 *
 * The expected texts were not written from the C code: they are the output
 * of llama.cpp's models/templates/Kimi-K3.jinja rendered with
 * add_generation_prompt=true and no other variables, by Python's jinja2
 * 3.1.6 (sandboxed environment, trim_blocks and lstrip_blocks, as
 * transformers' apply_chat_template) and by @huggingface/jinja 0.5.11; the
 * two gave the same bytes for every conversation below.
 *
 * The real Kimi K2 and K3 template files are detected in test_api, and
 * rendered against jinja2 in test_chat_templates.sh. */
#include "../src/model/vocab_internal.h"
#include "check.h"
#include "moontail/chat_format.h"
#include "moontail/generate.h"
#include "moontail/gguf.h"

/* ---- expected texts (rendered by Jinja, see above) ----------------------------------------- */

/* The template's default thinking_effort ("max") message, first in every prompt. */
#define EFFORT                                                                                     \
    "<|open|>message role=\"system\" type=\"thinking-effort\"<|sep|>`thinking_effort` guides on "  \
    "how much to think in your thinking channel (not including the response channel), supported "  \
    "values include `low`, `medium`, `high`, and `max`.\nNow the system is invoked with "          \
    "`thinking_effort=max`.<|close|>message<|sep|><|end_of_msg|>"

typedef struct conv {
    const char *name;
    mt_chat_message m[4];
    int n;
    const char *want;
} conv;

static const conv CONVS[] = {
    {"system + user",
     {{MT_CHAT_ROLE_SYSTEM, "Be brief.", 9, NULL, 0}, {MT_CHAT_ROLE_USER, "Hi", 2, NULL, 0}},
     2,
     EFFORT "<|open|>message role=\"system\"<|sep|>Be brief.<|close|>message<|sep|><|end_of_msg|>"
            "<|open|>message role=\"user\"<|sep|>Hi<|close|>message<|sep|><|end_of_msg|>"
            "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>"},
    /* test_api.c's conversation: message text is kept as is (spaces, newline, marker text) */
    {"multi-turn",
     {{MT_CHAT_ROLE_SYSTEM, "Be brief.", 9, NULL, 0},
      {MT_CHAT_ROLE_USER, " Hi <|im_end|>\n", 15, NULL, 0},
      {MT_CHAT_ROLE_ASSISTANT, "Hello.", 6, NULL, 0},
      {MT_CHAT_ROLE_USER, "Bye", 3, NULL, 0}},
     4,
     EFFORT "<|open|>message role=\"system\"<|sep|>Be brief.<|close|>message<|sep|><|end_of_msg|>"
            "<|open|>message role=\"user\"<|sep|> Hi <|im_end|>\n<|close|>message<|sep|>"
            "<|end_of_msg|>"
            "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|><|close|>think<|sep|>"
            "<|open|>response<|sep|>Hello.<|close|>response<|sep|><|close|>message<|sep|>"
            "<|end_of_msg|>"
            "<|open|>message role=\"user\"<|sep|>Bye<|close|>message<|sep|><|end_of_msg|>"
            "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>"},
    /* no system message: none is added (unlike Kimi K2) */
    {"no system",
     {{MT_CHAT_ROLE_USER, "Say hi", 6, NULL, 0}},
     1,
     EFFORT "<|open|>message role=\"user\"<|sep|>Say hi<|close|>message<|sep|><|end_of_msg|>"
            "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>"},
    {"no messages",
     {{0}},
     0,
     EFFORT "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>"},
    /* an assistant message without content (OpenAI's content null; empty text gives the same) */
    {"empty assistant",
     {{MT_CHAT_ROLE_USER, "a", 1, NULL, 0},
      {MT_CHAT_ROLE_ASSISTANT, "", 0, NULL, 0},
      {MT_CHAT_ROLE_USER, "b", 1, NULL, 0}},
     3,
     EFFORT "<|open|>message role=\"user\"<|sep|>a<|close|>message<|sep|><|end_of_msg|>"
            "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|><|close|>think<|sep|>"
            "<|open|>response<|sep|><|close|>response<|sep|><|close|>message<|sep|>"
            "<|end_of_msg|>"
            "<|open|>message role=\"user\"<|sep|>b<|close|>message<|sep|><|end_of_msg|>"
            "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>"},
    /* system messages stay where they are and are not trimmed; the terminator typed in a
       message is text */
    {"system after user",
     {{MT_CHAT_ROLE_USER, "a", 1, NULL, 0},
      {MT_CHAT_ROLE_SYSTEM, "  s  ", 5, NULL, 0},
      {MT_CHAT_ROLE_SYSTEM, "t", 1, NULL, 0},
      {MT_CHAT_ROLE_USER, "<|end_of_msg|>", 14, NULL, 0}},
     4,
     EFFORT "<|open|>message role=\"user\"<|sep|>a<|close|>message<|sep|><|end_of_msg|>"
            "<|open|>message role=\"system\"<|sep|>  s  <|close|>message<|sep|><|end_of_msg|>"
            "<|open|>message role=\"system\"<|sep|>t<|close|>message<|sep|><|end_of_msg|>"
            "<|open|>message role=\"user\"<|sep|><|end_of_msg|><|close|>message<|sep|>"
            "<|end_of_msg|>"
            "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>"},
    /* the last message is the assistant's: a new assistant message is still opened */
    {"ends with assistant",
     {{MT_CHAT_ROLE_USER, "a", 1, NULL, 0}, {MT_CHAT_ROLE_ASSISTANT, "b", 1, NULL, 0}},
     2,
     EFFORT "<|open|>message role=\"user\"<|sep|>a<|close|>message<|sep|><|end_of_msg|>"
            "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|><|close|>think<|sep|>"
            "<|open|>response<|sep|>b<|close|>response<|sep|><|close|>message<|sep|>"
            "<|end_of_msg|>"
            "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>"},
};

/* ---- detection ----------------------------------------------------------------------------- */

/* Pieces shaped like the real templates (Kimi K3 builds its tags in macros, so only the
 * bare markers appear in it). */
static const char K3_TMPL[] =
    "{%- macro open_tag(tag) -%}{{- '<|open|>' + tag -}}{{- '<|sep|>' -}}{%- endmacro -%}"
    "{%- macro close_tag(tag) -%}{{- '<|close|>' + tag + '<|sep|>' -}}{%- endmacro -%}"
    "{%- for message in messages -%}{{- open_tag('message') -}}{{- message.content -}}"
    "{{- close_tag('message') -}}{{- '<|end_of_msg|>' -}}{%- endfor -%}";
static const char K2_TMPL[] =
    "{%- for message in messages -%}{%- if message['role'] == 'user' -%}"
    "<|im_user|>user<|im_middle|>{%- endif -%}{{ message['content'] }}<|im_end|>{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}";

static void test_detect(void) {
    bool known = false;
    CHECK(mt_chat_detect(K3_TMPL, &known) == MT_CHAT_KIMI_K3 && known, "Kimi K3 detected");
    CHECK(mt_chat_detect(K2_TMPL, &known) == MT_CHAT_KIMI_K2 && known,
          "Kimi K2 still detected as K2");
    char both[sizeof K3_TMPL + sizeof K2_TMPL];
    snprintf(both, sizeof both, "%s%s", K2_TMPL, K3_TMPL);
    CHECK(mt_chat_detect(both, &known) == MT_CHAT_KIMI_K3 && known,
          "K3 markers win over K2's and ChatML's");
    CHECK(mt_chat_detect("{{ '<|open|>' }}{{ '<|im_start|>' }}", &known) == MT_CHAT_CHATML && known,
          "<|open|> alone is not Kimi K3");
    CHECK(mt_chat_detect("{{ message.content }}<|end_of_msg|>", &known) == MT_CHAT_CHATML && !known,
          "<|end_of_msg|> alone is not Kimi K3");
    CHECK(strcmp(mt_chat_format_name(MT_CHAT_KIMI_K3), "kimi-k3") == 0, "name: %s",
          mt_chat_format_name(MT_CHAT_KIMI_K3));

    /* the real Kimi K2 and K3 template files: test_api checks their detection */
}

/* ---- rendering ----------------------------------------------------------------------------- */

static void test_render(void) {
    for (size_t i = 0; i < sizeof CONVS / sizeof CONVS[0]; i++) {
        const conv *c = &CONVS[i];
        size_t len = 0;
        char *got = mt_chat_render(MT_CHAT_KIMI_K3, c->m, c->n, &len);
        CHECK(got && len == strlen(c->want) && strcmp(got, c->want) == 0, "%s renders\n%s\nnot\n%s",
              c->name, got ? got : "(null)", c->want);
        free(got);
    }
}

/* ---- a Kimi-K3-like vocabulary ------------------------------------------------------------- */

/* 256 byte tokens, then these (K3 shares K2's [EOS]/[EOT]; the tag markers and the turn
 * terminator are control tokens). */
enum { T_EOS = 256, T_EOT, T_OPEN, T_CLOSE, T_SEP, T_EOM, N_TOK };
static const char *const SPECIALS[] = {"[EOS]",     "[EOT]",   "<|open|>",
                                       "<|close|>", "<|sep|>", "<|end_of_msg|>"};

/* Writes the vocabulary and K3_TMPL as its chat template, with eos_token_id = eos, and loads
 * it back; *tmpl gets the template as read from the file. */
static mt_vocab *k3_vocab(int32_t eos, char **tmpl) {
    gguf_writer *w = gguf_writer_new();
    mt_vocab_write_bytes_with(w, "default", false, SPECIALS, N_TOK - T_EOS);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
    gguf_writer_set_string(w, "tokenizer.chat_template", K3_TMPL);
    const char *path = check_tmp(".gguf");
    mt_error err = {{0}};
    mt_vocab *v = NULL;
    gguf_file *f = NULL;
    if (gguf_writer_write(w, path, &err) == 0 && (f = gguf_open(path, &err))) {
        v = mt_vocab_load(f, &err);
        *tmpl = gguf_get_string(f, "tokenizer.chat_template", NULL);
        gguf_close(f);
    }
    unlink(path);
    gguf_writer_free(w);
    CHECK(v, "K3 vocabulary (eos %d): %s", eos, err.msg);
    return v;
}

static void test_tokens(const mt_vocab *v) {
    /* markers are control tokens; <|end_of_msg|> typed in a message is text */
    const conv *c = &CONVS[5]; /* "system after user": 6 messages' terminators, one typed */
    int32_t *ids = NULL;
    int64_t n = mt_chat_tokenize(MT_CHAT_KIMI_K3, v, c->m, c->n, &ids, NULL);
    int cnt[N_TOK] = {0};
    for (int64_t i = 0; i < n; i++)
        if (ids[i] >= T_EOS && ids[i] < N_TOK) cnt[ids[i]]++;
    /* effort + 4 messages + the opened assistant message (think) */
    CHECK(n > 0 && cnt[T_EOM] == 5 && cnt[T_OPEN] == 7 && cnt[T_CLOSE] == 5 && cnt[T_SEP] == 12,
          "K3 tokens: %lld ids, %d <|end_of_msg|> (want 5), %d <|open|> (want 7), %d <|close|>"
          " (want 5), %d <|sep|> (want 12)",
          (long long)n, cnt[T_EOM], cnt[T_OPEN], cnt[T_CLOSE], cnt[T_SEP]);
    free(ids);
    /* with no marker text in the messages: the same ids as tokenizing the rendered text */
    c = &CONVS[0];
    size_t len = 0;
    char *text = mt_chat_render(MT_CHAT_KIMI_K3, c->m, c->n, &len);
    int32_t *a = NULL, *b = NULL;
    int64_t na = mt_chat_tokenize(MT_CHAT_KIMI_K3, v, c->m, c->n, &a, NULL);
    int64_t nb = text ? mt_tokenize(v, text, len, true, true, &b, NULL) : -1;
    CHECK(na == nb && na > 0 && memcmp(a, b, (size_t)na * sizeof *a) == 0,
          "K3 chat tokens equal tokenizing the rendered text (%lld vs %lld)", (long long)na,
          (long long)nb);
    CHECK(na > 7 && a[na - 7] == T_OPEN && memcmp(text + len - 5 - 7, "think", 5) == 0 &&
              a[na - 1] == T_SEP,
          "the prompt ends by opening the think section");
    free(text);
    free(a);
    free(b);
}

/* ---- where generation stops ---------------------------------------------------------------- */

/* A backend whose model "generates" script[] whatever the input (test_api.c's fake, reduced). */
typedef struct fake {
    mt_gen_backend b;
    const int32_t *script;
    int n_script;
} fake;
typedef struct fake_slot {
    fake *f;
    int step;
} fake_slot;

static void *fake_open(mt_gen_backend *b, int index, mt_error *err) {
    (void)index, (void)err;
    fake_slot *s = calloc(1, sizeof *s);
    if (s) s->f = b->impl;
    return s;
}
static void fake_close(mt_gen_backend *b, void *slot) {
    (void)b;
    free(slot);
}
static int fake_begin(void *slot, int32_t n_ctx, mt_error *err) {
    (void)n_ctx, (void)err;
    ((fake_slot *)slot)->step = 0;
    return 0;
}
static int fake_eval(void *slot, const int32_t *ids, int32_t n, float *logits, mt_error *err) {
    (void)ids, (void)n, (void)err;
    fake_slot *s = slot;
    for (int i = 0; i < s->f->b.n_vocab; i++) logits[i] = 0;
    logits[s->f->script[s->step < s->f->n_script ? s->step : s->f->n_script - 1]] = 10;
    s->step++;
    return 0;
}
static void fake_end(void *slot, int64_t evaluated) {
    (void)slot, (void)evaluated;
}

typedef struct got {
    char text[256];
    size_t len;
    mt_gen_result r;
} got;

static int got_text(void *ctx, const char *s, size_t n) {
    got *g = ctx;
    if (g->len + n < sizeof g->text) memcpy(g->text + g->len, s, n), g->len += n;
    return 0;
}

/* Runs a chat the way serve and the shell do (the prompt from mt_chat_tokenize, end_token
 * from mt_chat_end_token, the generation loop) on a model that answers "Hi" then
 * script_end then "zz". */
static void run_chat(const mt_vocab *v, mt_chat_format f, int32_t end_token, got *g) {
    static int32_t script[8];
    script[0] = 'H', script[1] = 'i', script[2] = T_EOM, script[3] = 'z', script[4] = 'z';
    fake fk = {.b = {.kind = "fake",
                     .n_vocab = N_TOK,
                     .max_ctx = 4096,
                     .slot_open = fake_open,
                     .slot_close = fake_close,
                     .begin = fake_begin,
                     .eval = fake_eval,
                     .end = fake_end},
               .script = script,
               .n_script = 5};
    fk.b.impl = &fk;
    memset(g, 0, sizeof *g);
    int32_t *prompt = NULL;
    int64_t np = mt_chat_tokenize(f, v, CONVS[2].m, CONVS[2].n, &prompt, NULL);
    mt_gen_params p = {.prompt = prompt,
                       .n_prompt = (int32_t)np,
                       .max_tokens = 5,
                       .sp = mt_sampler_default_params(),
                       .end_token = end_token};
    p.sp.temp = 0;
    mt_gen_sink sink = {.text = got_text, .ctx = g};
    void *slot = fk.b.slot_open(&fk.b, 0, NULL);
    CHECK(np > 0 && slot, "chat prompt tokenized");
    if (np > 0 && slot) {
        mt_generate(&fk.b, slot, v, &p, &sink, &g->r);
        if (g->r.begun) fk.b.end(slot, g->r.evaluated);
    }
    fk.b.slot_close(&fk.b, slot);
    free(prompt);
}

static void test_stop(void) {
    char *tmpl = NULL;
    got g;
    /* eos_token_id = <|end_of_msg|>, as llama.cpp's conversion/kimi_k3.py writes it */
    mt_vocab *v = k3_vocab(T_EOM, &tmpl);
    if (v) {
        bool known = false;
        mt_chat_format f = mt_chat_detect(tmpl, &known);
        CHECK(f == MT_CHAT_KIMI_K3 && known, "the file's template is Kimi K3");
        CHECK(mt_vocab_eos(v) == T_EOM && mt_vocab_is_eog(v, T_EOM),
              "<|end_of_msg|> as EOS ends generation (eos %d)", mt_vocab_eos(v));
        CHECK(mt_vocab_is_eog(v, T_EOS) && mt_vocab_is_eog(v, T_EOT) &&
                  !mt_vocab_is_eog(v, T_OPEN) && !mt_vocab_is_eog(v, T_CLOSE) &&
                  !mt_vocab_is_eog(v, T_SEP),
              "[EOS] and [EOT] end generation (llama.cpp's list), the tag markers do not");
        CHECK(mt_chat_end_token(f, v) == T_EOM, "Kimi K3 turns end at <|end_of_msg|>");
        test_tokens(v);
        run_chat(v, f, mt_chat_end_token(f, v), &g);
        CHECK(g.len == 2 && memcmp(g.text, "Hi", 2) == 0 && g.r.finish == MT_GEN_END_TOKEN &&
                  g.r.completion_tokens == 3,
              "stops at <|end_of_msg|>: '%.*s' %s %d tokens", (int)g.len, g.text,
              mt_gen_finish_name(g.r.finish), g.r.completion_tokens);
        run_chat(v, f, -1, &g); /* moontail run's way: EOG alone */
        CHECK(g.len == 2 && g.r.finish == MT_GEN_END_TOKEN && g.r.completion_tokens == 3,
              "EOS <|end_of_msg|> stops without a chat end token: '%.*s' %d tokens", (int)g.len,
              g.text, g.r.completion_tokens);
    }
    mt_vocab_free(v);
    free(tmpl);

    /* eos_token_id = [EOS] (a file converted like kimi-linear): <|end_of_msg|> is not an
     * end-of-generation token by its text (llama.cpp's list lacks it), yet the chat stops
     * there because the family's end token is <|end_of_msg|> */
    tmpl = NULL;
    v = k3_vocab(T_EOS, &tmpl);
    if (v) {
        bool known = false;
        mt_chat_format f = mt_chat_detect(tmpl, &known);
        CHECK(!mt_vocab_is_eog(v, T_EOM) && mt_vocab_is_eog(v, T_EOS),
              "<|end_of_msg|> is not EOG by its text");
        CHECK(mt_chat_end_token(f, v) == T_EOM, "still the chat's end token");
        run_chat(v, f, mt_chat_end_token(f, v), &g);
        CHECK(g.len == 2 && memcmp(g.text, "Hi", 2) == 0 && g.r.finish == MT_GEN_END_TOKEN &&
                  g.r.completion_tokens == 3,
              "the chat stops at <|end_of_msg|>: '%.*s' %s %d tokens", (int)g.len, g.text,
              mt_gen_finish_name(g.r.finish), g.r.completion_tokens);
    }
    mt_vocab_free(v);
    free(tmpl);
}

int main(void) {
    test_detect();
    test_render();
    test_stop();
    return check_report("test_chat_kimi_k3");
}
