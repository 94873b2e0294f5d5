/* tokenizer.h - text <-> token ids, from the vocabulary stored in a GGUF file.
 *
 * Supports `tokenizer.ggml.model = gpt2` (byte-level BPE) with the
 * pre-tokenizers qwen2, deepseek-v3, kimi-k2, llama-bpe, gpt-2 and default
 * (regexes run with PCRE2) and `llama` (SentencePiece BPE, e.g. Mixtral),
 * special tokens (control tokens matched only when asked, user-defined
 * tokens always), BOS/EOS/EOG rules as llama.cpp applies them, and a
 * detokenizer that streams only complete UTF-8 characters. The goal is
 * llama.cpp's exact token ids; see src/model/tokenize*.c for the details. */
#ifndef MOONTAIL_TOKENIZER_H
#define MOONTAIL_TOKENIZER_H

#include "moontail/error.h"
#include "moontail/gguf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct mt_vocab mt_vocab;

/* Loads and validates the tokenizer.* keys of f. The vocab copies what it
 * needs; f may be closed afterwards. Other tokenizer models than gpt2 and
 * pre-tokenizer names without a regex table are refused ("not supported
 * yet"); malformed keys, count mismatches and out-of-range ids are errors
 * naming the file and key. */
mt_vocab *mt_vocab_load(const gguf_file *f, mt_error *err);
void mt_vocab_free(mt_vocab *v);

int32_t mt_vocab_n_tokens(const mt_vocab *v);
int32_t mt_vocab_bos(const mt_vocab *v); /* -1 if none */
int32_t mt_vocab_eos(const mt_vocab *v); /* -1 if none */
bool mt_vocab_add_bos(const mt_vocab *v);
bool mt_vocab_is_eog(const mt_vocab *v, int32_t id); /* end of generation */
const char *mt_vocab_pre_name(const mt_vocab *v);

bool mt_vocab_add_eos(const mt_vocab *v);
bool mt_vocab_is_control(const mt_vocab *v, int32_t id);
/* Raw text of a token as stored in the file (byte-level alphabet for
 * normal gpt2 tokens), NUL-terminated; NULL for an id out of range. */
const char *mt_vocab_token_text(const mt_vocab *v, int32_t id, size_t *len);
/* Id of the token whose raw text is exactly text[0..len), or -1. */
int32_t mt_vocab_find(const mt_vocab *v, const char *text, size_t len);

/* Longest text mt_tokenize accepts (1 GiB). */
#define MT_TOKENIZE_MAX_BYTES (1 << 30)

/* Tokenizes len bytes of text. add_special: prepend BOS (and append EOS)
 * when the vocabulary's metadata asks for it. parse_special: match control
 * tokens' text (user-defined tokens always match). Returns the number of
 * ids written to *out (malloc'd even when 0, caller frees), or -1 with err
 * filled. Invalid UTF-8 is not an error: as in llama.cpp, each byte that
 * does not start a decodable sequence is replaced by U+FFFD before
 * pre-tokenization (so such input does not round-trip). Thread-safe: a
 * vocabulary may be used by several threads at once. */
int64_t mt_tokenize(const mt_vocab *v, const char *text, size_t len, bool add_special,
                    bool parse_special, int32_t **out, mt_error *err);

/* A byte range of a text. */
typedef struct mt_text_span {
    size_t off, len;
} mt_text_span;

/* Tokenizes like mt_tokenize with parse_special set, except that a control
 * token's text only counts where it lies wholly outside the plain ranges
 * (sorted, not overlapping): text that came from a user stays text even when
 * it reads like a control token. The text around is tokenized as one piece,
 * so the ids equal mt_tokenize's whenever no plain range holds such text. */
int64_t mt_tokenize_spans(const mt_vocab *v, const char *text, size_t len, bool add_special,
                          const mt_text_span *plain, size_t n_plain, int32_t **out, mt_error *err);

/* The bytes of one token (byte-level decoded). Control tokens give "" unless
 * render_special. Returns the byte count (may exceed cap: then nothing is
 * written past cap), or -1 for an id out of range. */
int64_t mt_token_to_bytes(const mt_vocab *v, int32_t id, bool render_special, char *buf,
                          size_t cap);

/* Streaming detokenizer: feed ids, get back only whole UTF-8 characters;
 * bytes of an incomplete character wait for the next token. Invalid byte
 * sequences come out as U+FFFD once it is clear they cannot complete. */
typedef struct mt_detok {
    const mt_vocab *vocab;
    bool render_special;
    char pending[8];
    size_t n_pending;
} mt_detok;

void mt_detok_init(mt_detok *d, const mt_vocab *v, bool render_special);
/* Appends the text now complete to out (NUL-terminated, cap bytes); returns
 * bytes appended, or -1 if cap is too small or the id is invalid. */
int64_t mt_detok_push(mt_detok *d, int32_t id, char *out, size_t cap);
/* Flushes what is pending at the end of a stream (as U+FFFD). */
int64_t mt_detok_flush(mt_detok *d, char *out, size_t cap);

/* ------------------------------------------------ vocabularies for writers */

struct gguf_writer;
/* Writes the tokenizer.* keys of a small byte vocabulary: 256 byte tokens in
 * the byte-level alphabet, no merges, plus control tokens <|endoftext|>,
 * <|im_start|>, <|im_end|> (EOS = <|endoftext|>), with the given
 * pre-tokenizer name and add_bos flag. Returns the vocabulary size. */
int32_t mt_vocab_write_bytes(struct gguf_writer *w, const char *pre, bool add_bos);
/* The same with other control tokens: ids 256.. are specials[0..n) (n <= 64),
 * BOS and EOS 256. */
int32_t mt_vocab_write_bytes_with(struct gguf_writer *w, const char *pre, bool add_bos,
                                  const char *const *specials, int n);
/* The same, each of specials[i] a control token when control[i] (or control is NULL),
 * else a user-defined one (matched in any text and shown when detokenized, like the
 * `<think>` of DeepSeek R1 and Qwen3 vocabularies). */
int32_t mt_vocab_write_bytes_typed(struct gguf_writer *w, const char *pre, bool add_bos,
                                   const char *const *specials, const bool *control, int n);

/* Writes the tokenizer.* keys converted from a Hugging Face tokenizer.json
 * (as llama.cpp's converter would for Qwen3: model gpt2, pre qwen2, special
 * added tokens as control, others user-defined). Returns the vocabulary
 * size, or -1 with err filled. */
int32_t mt_vocab_write_hf_json(struct gguf_writer *w, const char *tokenizer_json_path,
                               const char *pre, mt_error *err);

#endif
