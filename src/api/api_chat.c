/* api_chat.c - chat templates of the common model families (api_chat.h),
 * rendered in C instead of running the GGUF's Jinja template.
 *
 * A conversation becomes a list of segments: the template's own text (its
 * special tokens parsed) and the messages' text (plain). Rendering joins
 * them; tokenizing tokenizes each run of one kind and joins the ids. Both
 * come from the one list, so what the logs show is what the model sees. */
#include "api_chat.h"

#include <stdlib.h>
#include <string.h>

/* UTF-8 of the DeepSeek markers: ｜ is U+FF5C, ▁ is U+2581. */
#define DS_BAR  "\xef\xbd\x9c"
#define DS_SP   "\xe2\x96\x81"
#define DS_USER "<" DS_BAR "User" DS_BAR ">"
#define DS_ASST "<" DS_BAR "Assistant" DS_BAR ">"
#define DS_EOS  "<" DS_BAR "end" DS_SP "of" DS_SP "sentence" DS_BAR ">"

/* Kimi K2's template adds this system message when the conversation has none. */
#define KIMI_DEFAULT_SYSTEM "You are Kimi, an AI assistant created by Moonshot AI."

/* Kimi K3 writes XTML tags: a tag opens as <|open|>name attr="value"...<|sep|> and closes as
 * <|close|>name<|sep|>; every message ends with <|end_of_msg|>. Its template's defaults
 * (thinking on, thinking_effort "max") add a system message of type thinking-effort before
 * the conversation, wrap each past assistant message in an empty think section and a
 * response section, and open the new assistant message with its think section. */
#define K3_EOM        "<|end_of_msg|>"
#define K3_MSG_END    "<|close|>message<|sep|>" K3_EOM
#define K3_SYSTEM     "<|open|>message role=\"system\"<|sep|>"
#define K3_USER       "<|open|>message role=\"user\"<|sep|>"
#define K3_ASSISTANT  "<|open|>message role=\"assistant\"<|sep|>"
#define K3_THINK_OPEN "<|open|>think<|sep|>"
#define K3_EFFORT                                                                                  \
    "<|open|>message role=\"system\" type=\"thinking-effort\"<|sep|>"                              \
    "`thinking_effort` guides on how much to think in your thinking channel (not including the"    \
    " response channel), supported values include `low`, `medium`, `high`, and `max`.\n"           \
    "Now the system is invoked with `thinking_effort=max`." K3_MSG_END

/* ---- detection ---------------------------------------------------------------------------- */

api_chat_format api_chat_detect(const char *tmpl, bool *known) {
    *known = true;
    if (tmpl) {
        /* Kimi K3's tag markers (llama.cpp's test: all three), before any other family */
        if (strstr(tmpl, "<|open|>") && strstr(tmpl, "<|close|>") && strstr(tmpl, K3_EOM))
            return API_CHAT_KIMI_K3;
        /* Kimi K2's markers next: its template also holds <|im_end|> */
        if (strstr(tmpl, "<|im_middle|>")) return API_CHAT_KIMI_K2;
        if (strstr(tmpl, "<|im_start|>")) return API_CHAT_CHATML;
        if (strstr(tmpl, "<|start_header_id|>")) return API_CHAT_LLAMA3;
        if (strstr(tmpl, DS_USER)) return API_CHAT_DEEPSEEK3;
    }
    *known = false;
    return API_CHAT_CHATML;
}

const char *api_chat_format_name(api_chat_format f) {
    switch (f) {
    case API_CHAT_CHATML:
        return "chatml";
    case API_CHAT_LLAMA3:
        return "llama3";
    case API_CHAT_DEEPSEEK3:
        return "deepseek3";
    case API_CHAT_KIMI_K2:
        return "kimi-k2";
    case API_CHAT_KIMI_K3:
        return "kimi-k3";
    }
    return "?";
}

int32_t api_chat_end_token(api_chat_format f, const mt_vocab *v) {
    const char *t = f == API_CHAT_LLAMA3      ? "<|eot_id|>"
                    : f == API_CHAT_DEEPSEEK3 ? DS_EOS
                    : f == API_CHAT_KIMI_K3   ? K3_EOM
                                              : "<|im_end|>";
    return mt_vocab_find(v, t, strlen(t));
}

/* ---- segments ----------------------------------------------------------------------------- */

typedef struct segment {
    const char *p;
    size_t len;
    bool special; /* template text: its special tokens are parsed */
} segment;

typedef struct seglist {
    segment *s;
    int n, cap;
    bool oom;
} seglist;

static void add(seglist *l, const char *p, size_t len, bool special) {
    if (l->oom || len == 0) return;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 32;
        segment *s = realloc(l->s, (size_t)cap * sizeof *s);
        if (!s) {
            l->oom = true;
            return;
        }
        l->s = s, l->cap = cap;
    }
    l->s[l->n++] = (segment){p, len, special};
}

static void tmpl(seglist *l, const char *t) {
    add(l, t, strlen(t), true);
}

static void text(seglist *l, const api_chat_message *m) {
    add(l, m->text, m->len, false);
}

static const char *role_name(api_chat_role r) {
    return r == API_ROLE_SYSTEM ? "system" : r == API_ROLE_USER ? "user" : "assistant";
}

/* Llama 3 trims each message ({{ message['content'] | trim }}). */
static void text_trimmed(seglist *l, const api_chat_message *m) {
    const char *p = m->text;
    size_t n = m->len;
    while (n && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')) p++, n--;
    while (n && (p[n - 1] == ' ' || p[n - 1] == '\n' || p[n - 1] == '\t' || p[n - 1] == '\r')) n--;
    add(l, p, n, false);
}

static void build(api_chat_format f, const api_chat_message *msgs, int n, seglist *l) {
    switch (f) {
    case API_CHAT_CHATML:
        for (int i = 0; i < n; i++) {
            tmpl(l, "<|im_start|>");
            tmpl(l, role_name(msgs[i].role));
            tmpl(l, "\n");
            text(l, &msgs[i]);
            tmpl(l, "<|im_end|>\n");
        }
        tmpl(l, "<|im_start|>assistant\n");
        break;
    case API_CHAT_LLAMA3:
        for (int i = 0; i < n; i++) {
            tmpl(l, "<|start_header_id|>");
            tmpl(l, role_name(msgs[i].role));
            tmpl(l, "<|end_header_id|>\n\n");
            text_trimmed(l, &msgs[i]);
            tmpl(l, "<|eot_id|>");
        }
        tmpl(l, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case API_CHAT_DEEPSEEK3: {
        /* every system message first, joined by a blank line */
        bool first = true;
        for (int i = 0; i < n; i++) {
            if (msgs[i].role != API_ROLE_SYSTEM) continue;
            if (!first) tmpl(l, "\n\n");
            text(l, &msgs[i]);
            first = false;
        }
        for (int i = 0; i < n; i++) {
            if (msgs[i].role == API_ROLE_USER) {
                tmpl(l, DS_USER);
                text(l, &msgs[i]);
            } else if (msgs[i].role == API_ROLE_ASSISTANT) {
                tmpl(l, DS_ASST);
                text(l, &msgs[i]);
                tmpl(l, DS_EOS);
            }
        }
        tmpl(l, DS_ASST);
        break;
    }
    case API_CHAT_KIMI_K2:
        if (n == 0 || msgs[0].role != API_ROLE_SYSTEM)
            tmpl(l, "<|im_system|>system<|im_middle|>" KIMI_DEFAULT_SYSTEM "<|im_end|>");
        for (int i = 0; i < n; i++) {
            tmpl(l, msgs[i].role == API_ROLE_SYSTEM ? "<|im_system|>system<|im_middle|>"
                    : msgs[i].role == API_ROLE_USER ? "<|im_user|>user<|im_middle|>"
                                                    : "<|im_assistant|>assistant<|im_middle|>");
            text(l, &msgs[i]);
            tmpl(l, "<|im_end|>");
        }
        tmpl(l, "<|im_assistant|>assistant<|im_middle|>");
        break;
    case API_CHAT_KIMI_K3:
        /* no default system message; message text is not trimmed */
        tmpl(l, K3_EFFORT);
        for (int i = 0; i < n; i++) {
            if (msgs[i].role == API_ROLE_ASSISTANT) {
                tmpl(l, K3_ASSISTANT K3_THINK_OPEN "<|close|>think<|sep|><|open|>response<|sep|>");
                text(l, &msgs[i]);
                tmpl(l, "<|close|>response<|sep|>" K3_MSG_END);
            } else {
                tmpl(l, msgs[i].role == API_ROLE_SYSTEM ? K3_SYSTEM : K3_USER);
                text(l, &msgs[i]);
                tmpl(l, K3_MSG_END);
            }
        }
        tmpl(l, K3_ASSISTANT K3_THINK_OPEN);
        break;
    }
}

/* ---- rendering and tokenizing ------------------------------------------------------------- */

char *api_chat_render(api_chat_format f, const api_chat_message *msgs, int n, size_t *len) {
    seglist l = {0};
    build(f, msgs, n, &l);
    size_t total = 0;
    for (int i = 0; i < l.n; i++) total += l.s[i].len;
    char *out = l.oom ? NULL : malloc(total + 1);
    if (out) {
        size_t k = 0;
        for (int i = 0; i < l.n; i++) {
            memcpy(out + k, l.s[i].p, l.s[i].len);
            k += l.s[i].len;
        }
        out[k] = 0;
        if (len) *len = k;
    }
    free(l.s);
    return out;
}

int64_t api_chat_tokenize(api_chat_format f, const mt_vocab *v, const api_chat_message *msgs, int n,
                          int32_t **out, mt_error *err) {
    seglist l = {0};
    build(f, msgs, n, &l);
    int32_t *ids = NULL;
    int64_t n_ids = 0, cap = 0, rc = -1;
    char *run = NULL;
    if (l.oom) {
        mt_error_set(err, "out of memory rendering the chat template");
        goto done;
    }
    const int32_t bos = mt_vocab_bos(v);
    cap = 64;
    if (!(ids = malloc((size_t)cap * sizeof *ids))) {
        mt_error_set(err, "out of memory");
        goto done;
    }
    if (mt_vocab_add_bos(v) && bos >= 0) ids[n_ids++] = bos;
    /* join each run of segments of one kind, then tokenize the run */
    for (int i = 0; i < l.n;) {
        int j = i;
        size_t run_len = 0;
        while (j < l.n && l.s[j].special == l.s[i].special) run_len += l.s[j++].len;
        char *r = realloc(run, run_len + 1);
        if (!r) {
            mt_error_set(err, "out of memory");
            goto done;
        }
        run = r;
        size_t k = 0;
        for (int t = i; t < j; t++) {
            memcpy(run + k, l.s[t].p, l.s[t].len);
            k += l.s[t].len;
        }
        run[k] = 0;
        int32_t *part = NULL;
        int64_t np = mt_tokenize(v, run, run_len, false, l.s[i].special, &part, err);
        if (np < 0) goto done;
        if (n_ids + np > cap) {
            int64_t nc = 2 * (n_ids + np);
            int32_t *t = realloc(ids, (size_t)nc * sizeof *t);
            if (!t) {
                free(part);
                mt_error_set(err, "out of memory");
                goto done;
            }
            ids = t, cap = nc;
        }
        memcpy(ids + n_ids, part, (size_t)np * sizeof *part);
        n_ids += np;
        free(part);
        i = j;
    }
    *out = ids;
    ids = NULL;
    rc = n_ids;
done:
    free(ids);
    free(run);
    free(l.s);
    return rc;
}
