/* chat_format.h - chat templates: turns a list of chat messages into the token
 * ids a model was trained to see, with the assistant's turn opened.
 *
 * GGUF files carry a Jinja template (tokenizer.chat_template), which
 * chat_template.h runs. These C renderings of the common families (recognised
 * by their marker tokens) are what a model gets when its template cannot run
 * here; a model without a template, or with one of no known family, gets
 * ChatML (the caller logs that).
 *
 * Families of models that think (Qwen3, DeepSeek R1 and V3.1, Kimi K2 Thinking, Kimi K3)
 * also place an assistant message's reasoning where their template does, honour the
 * template variables their templates read (chat_template_kwargs: enable_thinking,
 * thinking, thinking_effort), and say how to split the reply into reasoning and answer
 * (reasoning.h). */
#ifndef MOONTAIL_CHAT_FORMAT_H
#define MOONTAIL_CHAT_FORMAT_H

#include "moontail/error.h"
#include "moontail/reasoning.h"
#include "moontail/tokenizer.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum mt_chat_format {
    MT_CHAT_CHATML, /* <|im_start|>role\n...<|im_end|>\n (Qwen, many others) */
    MT_CHAT_LLAMA3, /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    MT_CHAT_DEEPSEEK3, /* system text, <｜User｜>...<｜Assistant｜>...<｜end▁of▁sentence｜> */
    MT_CHAT_KIMI_K2, /* <|im_user|>user<|im_middle|>...<|im_end|> */
    MT_CHAT_KIMI_K3, /* <|open|>message role="user"<|sep|>...<|close|>message<|sep|><|end_of_msg|>,
                         after a thinking-effort system message */
    MT_CHAT_QWEN3,   /* ChatML with <think> sections (Qwen3); enable_thinking */
    MT_CHAT_DEEPSEEK_R1,      /* DeepSeek V3's turns, the answer opened with <think>\n */
    MT_CHAT_DEEPSEEK_V31,     /* DeepSeek V3.1: <think></think> before answers; thinking */
    MT_CHAT_KIMI_K2_THINKING, /* Kimi K2 with <think> sections before answers */
} mt_chat_format;

typedef enum mt_chat_role {
    MT_CHAT_ROLE_SYSTEM,
    MT_CHAT_ROLE_USER,
    MT_CHAT_ROLE_ASSISTANT
} mt_chat_role;

typedef struct mt_chat_message {
    mt_chat_role role;
    const char *text; /* len bytes, UTF-8 */
    size_t len;
    const char *reasoning; /* an assistant's reasoning_content (reasoning_len bytes), or NULL */
    size_t reasoning_len;
} mt_chat_message;

/* The family of a template text (NULL: the model has none). *known is false
 * when the text was absent or of no known family (the result is then ChatML). */
mt_chat_format mt_chat_detect(const char *tmpl, bool *known);
const char *mt_chat_format_name(mt_chat_format f);

/* The conversation as text, as the model sees it (for logs and tests; BOS
 * is not included: the tokenizer adds it as the vocabulary asks). Returns a
 * NUL-terminated heap string (len bytes), or NULL when out of memory. */
char *mt_chat_render(mt_chat_format f, const mt_chat_message *msgs, int n, size_t *len);
/* The same with the request's chat_template_kwargs (an object the API checked, or NULL):
 * the variables a family's template reads; others are ignored. */
char *mt_chat_render_kw(mt_chat_format f, const mt_chat_message *msgs, int n, const json_t *kwargs,
                        size_t *len);

/* The conversation's token ids: BOS when the vocabulary asks for one, the
 * template's own text with its special tokens, the messages' text as plain
 * text (so "<|im_end|>" typed in a message is not a control token). Returns
 * the count and *out (heap), or -1 with err filled. */
int64_t mt_chat_tokenize(mt_chat_format f, const mt_vocab *v, const mt_chat_message *msgs, int n,
                         int32_t **out, mt_error *err);
int64_t mt_chat_tokenize_kw(mt_chat_format f, const mt_vocab *v, const mt_chat_message *msgs, int n,
                            const json_t *kwargs, int32_t **out, mt_error *err);

/* The token that ends an assistant turn in this format, or -1 when the
 * vocabulary lacks it. Generation stops there (as at any end-of-generation
 * token). */
int32_t mt_chat_end_token(mt_chat_format f, const mt_vocab *v);

/* Whether the family's replies hold a reasoning before the answer. */
bool mt_chat_thinks(mt_chat_format f);
/* How to split a reply of this family to the prompt ids[0..n) (whose end says whether the
 * reasoning is already open) into reasoning and answer. Returns false (r->on false) for a
 * family that does not think. */
bool mt_chat_reasoning(mt_chat_format f, const mt_vocab *v, const int32_t *prompt, int64_t n,
                       mt_reasoning *r);

#endif
