/* reasoning.h - the output of a model that thinks, split into its reasoning and its
 * answer (the `reasoning_content` and `content` of a chat reply).
 *
 * Thinking models write their reasoning between markers before the answer: `<think>` ...
 * `</think>` (DeepSeek R1, Qwen3, Kimi K2 Thinking) or Kimi K3's think and response
 * sections (`<|open|>think<|sep|>` ... `<|close|>think<|sep|><|open|>response<|sep|>` ...
 * `<|close|>response<|sep|>`). A marker is a sequence of pieces: control tokens, which are
 * matched by their id (they have no text: the detokenizer leaves them out), and text,
 * matched on the detokenized text (so `<think>` is found whether the model wrote the
 * vocabulary's `<think>` token or spelled it out).
 *
 * The splitter works on a byte stream: the generated text, with each marker control token
 * written as the byte 0xFF (never in UTF-8 text) followed by its code. It holds back only
 * what may still turn out to be a marker, so the pieces it hands out are the same whether
 * the output arrives whole or token by token, and a marker split across tokens is found. */
#ifndef MOONTAIL_REASONING_H
#define MOONTAIL_REASONING_H

#include "moontail/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    MT_REASONING_SPECIALS = 8, /* control tokens that markers may hold */
    MT_REASONING_MARKER = 64,  /* bytes of one marker, NUL included */
    MT_REASONING_ALTS = 3,     /* markers that may end one part */
};

/* A thinking format's markers (all NUL-terminated; "" = none). */
typedef struct mt_reasoning {
    bool on;              /* this output is split */
    bool starts_thinking; /* the prompt opened the reasoning (R1, K3, ...): the output starts in it
                           */
    int n_special;
    int32_t special[MT_REASONING_SPECIALS]; /* marker control tokens; code i + 1 */
    char open[MT_REASONING_MARKER];         /* opens the reasoning at the start of the output */
    char close[MT_REASONING_ALTS][MT_REASONING_MARKER]; /* end the reasoning */
    bool close_answers[MT_REASONING_ALTS]; /* this close also opens the answer (K3's response
                                               section when the model skips the think closer) */
    char answer_open[MT_REASONING_MARKER]; /* dropped where the answer starts (K3) */
    char answer_end[MT_REASONING_ALTS][MT_REASONING_MARKER]; /* the answer is over; what
                                                                  follows is dropped (K3) */
} mt_reasoning;

/* Writes the marker made of pieces (NULL-terminated) into out: a piece that is a control
 * token of v becomes its code (the token is added to r->special), any other piece is text.
 * Returns 0, or -1 when the marker or the token list is too long (a caller's bug). */
int mt_reasoning_marker(mt_reasoning *r, const mt_vocab *v, const char *const *pieces,
                        char out[MT_REASONING_MARKER]);

/* The code (1..n_special) of a marker control token, 0 for any other token. */
int mt_reasoning_code(const mt_reasoning *r, int32_t id);

/* Whether a prompt ends inside an opened reasoning: its last r->open is followed by
 * whitespace only. */
bool mt_reasoning_prompt_opens(const mt_reasoning *r, const mt_vocab *v, const int32_t *ids,
                               int64_t n);

/* ---- the splitter ------------------------------------------------------------------------- */

/* Receives n bytes of reasoning (reasoning true) or of the answer: whole UTF-8 characters,
 * no markers. Returns 0, or -1 to stop. */
typedef int (*mt_reasoning_split_out)(void *ctx, bool reasoning, const char *s, size_t n);

typedef struct mt_reasoning_split {
    const mt_reasoning *r; /* borrowed */
    int state;
    char *buf; /* bytes not yet decided */
    size_t len, cap;
} mt_reasoning_split;

void mt_reasoning_split_init(mt_reasoning_split *s, const mt_reasoning *r);
/* Appends n bytes of the stream and hands out what is decided. Returns 0, -1 when out()
 * asked to stop, -2 when out of memory. */
int mt_reasoning_split_push(mt_reasoning_split *s, const char *p, size_t n,
                            mt_reasoning_split_out out, void *ctx);
/* The output is over: what was held back goes out as the part it is in (a reasoning that
 * never closed is all reasoning). Returns as mt_reasoning_split_push. */
int mt_reasoning_split_finish(mt_reasoning_split *s, mt_reasoning_split_out out, void *ctx);
void mt_reasoning_split_free(mt_reasoning_split *s);

#endif
