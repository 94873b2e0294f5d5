/* draft.h - drafters for exact speculative decoding (generate.h): cheap guesses of
 * the tokens that come next, which the generation loop checks against the model in one
 * pass. A guess only decides how much work a pass saves; the text is plain decoding's
 * whatever the guesses.
 *
 *   - n-gram (prompt lookup): the longest suffix of the history, up to MT_DRAFT_NGRAM
 *     tokens, that occurred before; the guesses are the tokens that followed its latest
 *     earlier occurrence. Costs nothing; good on text that repeats its context (code being
 *     edited, quotes, lists).
 *   - a draft model: a small model of the same vocabulary, computed in this process,
 *     generating greedily. Its cache follows the history: a call evaluates only the
 *     tokens it has not seen, and goes back (mt_kv_rewind) over its guesses that were not
 *     taken. */
#ifndef MOONTAIL_DRAFT_H
#define MOONTAIL_DRAFT_H

#include "moontail/error.h"
#include "moontail/generate.h"
#include "moontail/model.h"
#include "moontail/tokenizer.h"

/* The longest suffix the n-gram drafter looks up. */
enum { MT_DRAFT_NGRAM = 3 };

/* The n-gram drafter of k guesses a pass (1..MT_GEN_MAX_DRAFT). NULL with err when out of
 * memory or k is out of range. Free with mt_gen_drafter_free. */
mt_gen_drafter *mt_draft_ngram_new(int32_t k, mt_error *err);

/* A drafter with the model draft (taken: freed with the drafter, also when this fails;
 * NULL, a load that failed, returns NULL with err untouched), k guesses a pass, for
 * sequences of up to n_ctx tokens, on `threads` threads (<= 0: all CPUs), with a cache of
 * kv_type. Refused unless draft is a whole model whose vocabulary is target's token for
 * token (name: the draft's file, for the messages). */
mt_gen_drafter *mt_draft_model_new(mt_model *draft, const char *name, const mt_vocab *target,
                                   int32_t k, int32_t n_ctx, int threads, mt_kv_type kv_type,
                                   mt_error *err);

/* Frees a drafter made here (NULL: nothing). */
void mt_gen_drafter_free(mt_gen_drafter *d);

#endif
