/* chat_template.c - a model's chat template (chat_template.h): the GGUF's Jinja
 * text through jinja.h with transformers' variables, the C families of
 * chat_format.c when that cannot run, and tokenizing with data spans. */
#include "moontail/chat_template.h"
#include "moontail/compat.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mt_chat_template {
    jinja_template *jinja; /* NULL: the C family renders */
    mt_chat_format family;
    bool family_known;
    const mt_vocab *vocab;
    char *bos_text, *eos_text; /* the vocabulary's BOS/EOS as text, or NULL */
    int32_t end_token;
    char describe[160];
    mt_chat_template_log_fn log;
    void *log_ctx;
    atomic_bool fallback_logged;
};

static void say(mt_chat_template *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(mt_chat_template *t, const char *fmt, ...) {
    if (!t->log) return;
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    t->log(t->log_ctx, msg);
}

/* The text of a special token (as llama.cpp hands it to templates), or NULL. */
static char *token_text(const mt_vocab *v, int32_t id) {
    if (!v || id < 0) return NULL;
    char buf[256];
    int64_t n = mt_token_to_bytes(v, id, true, buf, sizeof buf);
    if (n <= 0 || (size_t)n >= sizeof buf) return NULL;
    return mt_strndup(buf, (size_t)n);
}

mt_chat_template *mt_chat_template_new(const char *text, const mt_vocab *vocab,
                                       mt_chat_template_log_fn log, void *log_ctx) {
    mt_chat_template *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->vocab = vocab;
    t->log = log;
    t->log_ctx = log_ctx;
    t->family = mt_chat_detect(text, &t->family_known);
    if (vocab) {
        t->bos_text = token_text(vocab, mt_vocab_bos(vocab));
        t->eos_text = token_text(vocab, mt_vocab_eos(vocab));
    }
    const char *fam = mt_chat_format_name(t->family);
    if (!text) {
        snprintf(t->describe, sizeof t->describe, "%s (the model has no chat template)", fam);
    } else {
        jinja_error e;
        t->jinja = jinja_parse(text, strlen(text), "tokenizer.chat_template", &e);
        if (t->jinja) {
            snprintf(t->describe, sizeof t->describe, "the model's own (Jinja)");
        } else {
            snprintf(t->describe, sizeof t->describe,
                     "%s (built in; the model's Jinja template"
                     " cannot run here)",
                     fam);
            say(t,
                "the model's chat template cannot run here (%s); chat uses the built-in %s"
                " format%s",
                e.err.msg, fam, t->family_known ? "" : " (the template is of no family known)");
        }
    }
    if (vocab) {
        t->end_token = mt_chat_end_token(t->family, vocab);
        /* a template of no known family: <|im_end|> only ends a turn if it writes it */
        if (t->jinja && !t->family_known && !strstr(text, "<|im_end|>")) t->end_token = -1;
    } else {
        t->end_token = -1;
    }
    return t;
}

void mt_chat_template_free(mt_chat_template *t) {
    if (!t) return;
    jinja_free(t->jinja);
    free(t->bos_text);
    free(t->eos_text);
    free(t);
}

const char *mt_chat_template_describe(const mt_chat_template *t) {
    return t->describe;
}
mt_chat_format mt_chat_template_family(const mt_chat_template *t) {
    return t->family;
}
bool mt_chat_template_is_jinja(const mt_chat_template *t) {
    return t->jinja != NULL;
}
int32_t mt_chat_template_end_token(const mt_chat_template *t) {
    return t->end_token;
}

/* ---- messages ----------------------------------------------------------------------------- */

static const char *role_name(mt_chat_role r) {
    return r == MT_CHAT_ROLE_SYSTEM ? "system" : r == MT_CHAT_ROLE_USER ? "user" : "assistant";
}

json_t *mt_chat_template_messages_json(const mt_chat_message *msgs, int n, const json_t *sent) {
    static const char *const extra[] = {"tool_calls", "tool_call_id", "name", NULL};
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++) {
        json_t *m = json_object();
        json_t *c = json_stringn(msgs[i].text ? msgs[i].text : "", msgs[i].len);
        if (!m || !c || json_object_set_new(m, "role", json_string(role_name(msgs[i].role))) ||
            json_object_set_new(m, "content", c) || json_array_append_new(a, m)) {
            json_decref(a);
            return NULL;
        }
        if (msgs[i].reasoning &&
            json_object_set_new(m, "reasoning_content",
                                json_stringn(msgs[i].reasoning, msgs[i].reasoning_len))) {
            json_decref(a);
            return NULL;
        }
        const json_t *orig = json_array_get(sent, (size_t)i);
        for (int k = 0; orig && extra[k]; k++) {
            json_t *v = json_object_get(orig, extra[k]);
            if (v) json_object_set(m, extra[k], v);
        }
    }
    return a;
}

/* The C family's messages from JSON ones (the fallback): roles system,
 * developer, user, assistant; text content or text parts. */
static int family_messages(const json_t *arr, mt_chat_message **out, char ***owned, int *n,
                           mt_error *err) {
    size_t cnt = json_array_size(arr);
    *out = calloc(cnt + 1, sizeof **out);
    *owned = calloc(cnt + 1, sizeof **owned);
    *n = 0;
    if (!*out || !*owned) return mt_error_set(err, "out of memory");
    for (size_t i = 0; i < cnt; i++) {
        json_t *m = json_array_get(arr, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *c = json_object_get(m, "content");
        mt_chat_message *x = &(*out)[i];
        if (!role) return mt_error_set(err, "messages[%zu] has no role", i);
        if (!strcmp(role, "system") || !strcmp(role, "developer"))
            x->role = MT_CHAT_ROLE_SYSTEM;
        else if (!strcmp(role, "user"))
            x->role = MT_CHAT_ROLE_USER;
        else if (!strcmp(role, "assistant"))
            x->role = MT_CHAT_ROLE_ASSISTANT;
        else
            return mt_error_set(err, "messages[%zu]: the built-in %s format has no role '%.40s'", i,
                                "chat", role);
        if (json_is_string(c)) {
            x->text = json_string_value(c);
            x->len = json_string_length(c);
        } else if (json_is_array(c)) {
            size_t k, total = 0;
            json_t *part;
            json_array_foreach(c, k, part) total +=
                json_string_length(json_object_get(part, "text")) + 1;
            char *j = malloc(total + 1);
            if (!j) return mt_error_set(err, "out of memory");
            size_t o = 0;
            json_array_foreach(c, k, part) {
                json_t *tx = json_object_get(part, "text");
                if (!json_is_string(tx)) continue;
                if (o) j[o++] = '\n';
                memcpy(j + o, json_string_value(tx), json_string_length(tx));
                o += json_string_length(tx);
            }
            j[o] = 0;
            (*owned)[i] = j;
            x->text = j;
            x->len = o;
        } else {
            x->text = "";
            x->len = 0;
        }
        json_t *rc = json_object_get(m, "reasoning_content");
        if (x->role == MT_CHAT_ROLE_ASSISTANT && json_is_string(rc)) {
            x->reasoning = json_string_value(rc);
            x->reasoning_len = json_string_length(rc);
        }
        (*n)++;
    }
    return 0;
}

static void free_family(mt_chat_message *m, char **owned, int n) {
    for (int i = 0; owned && i < n; i++) free(owned[i]);
    free(owned);
    free(m);
}

/* ---- rendering ---------------------------------------------------------------------------- */

/* Renders with Jinja: 0, -1 (refused or failed), or 1 when the template uses
 * something this interpreter lacks (the caller falls back). */
static int render_jinja(mt_chat_template *t, const mt_chat_template_input *in, jinja_output *out,
                        mt_chat_template_error *e) {
    jinja_var vars[80];
    int n = 0;
    json_t *agp = json_boolean(in->add_generation_prompt);
    json_t *bos = t->bos_text ? json_string(t->bos_text) : NULL;
    json_t *eos = t->eos_text ? json_string(t->eos_text) : NULL;
    /* a message's role is one of a few words (the server checks them) that templates glue
     * into special tokens ('<|' + role + '|>'): template text, unlike everything else the
     * request brings */
    static const char *const plain_keys[] = {"role", NULL};
    vars[n++] = (jinja_var){"messages", in->messages, true, plain_keys};
    vars[n++] = (jinja_var){"tools", in->tools ? in->tools : json_null(), true, NULL};
    vars[n++] = (jinja_var){"documents", json_null(), false, NULL};
    vars[n++] = (jinja_var){"add_generation_prompt", agp, false, NULL};
    if (bos) vars[n++] = (jinja_var){"bos_token", bos, false, NULL};
    if (eos) vars[n++] = (jinja_var){"eos_token", eos, false, NULL};
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)in->kwargs, k, v) {
        if (n == (int)(sizeof vars / sizeof *vars)) break;
        vars[n++] = (jinja_var){k, v, true, NULL};
    }
    jinja_error je;
    int rc = jinja_render(t->jinja, vars, n, NULL, out, &je);
    json_decref(agp);
    json_decref(bos);
    json_decref(eos);
    if (rc == 0) return 0;
    if (je.kind == JINJA_ERR_UNSUPPORTED) {
        if (!atomic_exchange(&t->fallback_logged, true))
            say(t,
                "the model's chat template uses something this server cannot run (%s); such"
                " conversations use the built-in %s format (logged once)",
                je.err.msg, mt_chat_format_name(t->family));
        return 1;
    }
    e->refused = je.kind != JINJA_ERR_MEMORY;
    if (je.kind == JINJA_ERR_RAISED)
        mt_error_set(&e->err, "the model's chat template refused the conversation: %s", je.err.msg);
    else
        mt_error_set(&e->err, "the model's chat template failed on this conversation: %s",
                     je.err.msg);
    return -1;
}

/* The C family's segments as an output with data spans. */
static int render_family(mt_chat_template *t, const mt_chat_template_input *in, jinja_output *out,
                         mt_chat_template_error *e) {
    mt_chat_message *m = NULL;
    char **owned = NULL;
    int n = 0;
    if (family_messages(in->messages, &m, &owned, &n, &e->err)) {
        e->refused = true;
        free_family(m, owned, n);
        return -1;
    }
    size_t len = 0;
    char *text = mt_chat_render_kw(t->family, m, n, in->kwargs, &len);
    free_family(m, owned, n);
    if (!text) {
        mt_error_set(&e->err, "out of memory rendering the chat template");
        return -1;
    }
    memset(out, 0, sizeof *out);
    out->text = text;
    out->len = len;
    out->data = NULL; /* the family's tokenizing keeps its own segments (mt_chat_tokenize) */
    return 0;
}

int mt_chat_template_render(mt_chat_template *t, const mt_chat_template_input *in,
                            jinja_output *out, mt_chat_template_error *e) {
    memset(e, 0, sizeof *e);
    if (!json_is_array(in->messages)) {
        e->refused = true;
        mt_error_set(&e->err, "'messages' must be an array");
        return -1;
    }
    if (t->jinja) {
        int rc = render_jinja(t, in, out, e);
        if (rc <= 0) return rc;
    }
    return render_family(t, in, out, e);
}

int64_t mt_chat_template_tokenize(mt_chat_template *t, const mt_chat_template_input *in,
                                  int32_t **ids, mt_chat_template_error *e) {
    memset(e, 0, sizeof *e);
    *ids = NULL;
    if (!t->vocab) return mt_error_set(&e->err, "no vocabulary to tokenize with");
    if (!json_is_array(in->messages)) {
        e->refused = true;
        return mt_error_set(&e->err, "'messages' must be an array");
    }
    jinja_output out = {0};
    int rc = t->jinja ? render_jinja(t, in, &out, e) : 1;
    if (rc < 0) return -1;
    if (rc > 0) { /* the C family, with its own segments */
        mt_chat_message *m = NULL;
        char **owned = NULL;
        int n = 0;
        if (family_messages(in->messages, &m, &owned, &n, &e->err)) {
            e->refused = true;
            free_family(m, owned, n);
            return -1;
        }
        int64_t k = mt_chat_tokenize_kw(t->family, t->vocab, m, n, in->kwargs, ids, &e->err);
        free_family(m, owned, n);
        return k;
    }
    mt_text_span *plain = malloc((out.n_data + 1) * sizeof *plain);
    if (!plain) {
        jinja_output_free(&out);
        return mt_error_set(&e->err, "out of memory");
    }
    for (size_t i = 0; i < out.n_data; i++)
        plain[i] = (mt_text_span){out.data[i].off, out.data[i].len};
    /* BOS as the vocabulary asks, unless the template wrote it (template text) */
    const int32_t bos = mt_vocab_bos(t->vocab);
    bool want_bos = mt_vocab_add_bos(t->vocab) && bos >= 0;
    if (want_bos && t->bos_text) {
        size_t bl = strlen(t->bos_text);
        bool wrote = out.len >= bl && !memcmp(out.text, t->bos_text, bl) &&
                     !(out.n_data && out.data[0].off < bl);
        if (wrote) want_bos = false;
    }
    int32_t *body = NULL;
    int64_t nb =
        mt_tokenize_spans(t->vocab, out.text, out.len, false, plain, out.n_data, &body, &e->err);
    free(plain);
    jinja_output_free(&out);
    if (nb < 0) return -1;
    int64_t total = nb + (want_bos ? 1 : 0);
    int32_t *all = malloc((size_t)(total ? total : 1) * sizeof *all);
    if (!all) {
        free(body);
        return mt_error_set(&e->err, "out of memory");
    }
    int64_t k = 0;
    if (want_bos) all[k++] = bos;
    if (nb) memcpy(all + k, body, (size_t)nb * sizeof *body);
    free(body);
    *ids = all;
    return total;
}
