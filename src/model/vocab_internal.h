/* vocab_internal.h - private pieces shared by the tokenizer files of the
 * model layer (vocab_load.c, vocab_strmap.c, byte_level.c, pretokenize.c,
 * special_tokens.c, tokenize_bpe.c, detokenize.c, vocab_write.c).
 *
 * Nothing here is public API: the public view of a vocabulary is
 * include/moontail/tokenizer.h. Token attributes use the same bit values as
 * llama.cpp's llama_token_attr so that the rules copied from its behaviour
 * (which test bit combinations) read the same way. */
#ifndef MOONTAIL_VOCAB_INTERNAL_H
#define MOONTAIL_VOCAB_INTERNAL_H

#include "moontail/error.h"
#include "moontail/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------ token types */

/* Values of tokenizer.ggml.token_type (GGUF / llama.cpp convention). */
enum {
    MT_TOKTYPE_UNDEFINED = 0,
    MT_TOKTYPE_NORMAL = 1,
    MT_TOKTYPE_UNKNOWN = 2,
    MT_TOKTYPE_CONTROL = 3,
    MT_TOKTYPE_USER_DEFINED = 4,
    MT_TOKTYPE_UNUSED = 5,
    MT_TOKTYPE_BYTE = 6,
};

/* Attribute bits of a loaded token (a token can carry several, e.g. a
 * normal token promoted to control by the end-of-generation rules). */
enum {
    MT_ATTR_UNDEFINED = 0,
    MT_ATTR_UNKNOWN = 1 << 0,
    MT_ATTR_UNUSED = 1 << 1,
    MT_ATTR_NORMAL = 1 << 2,
    MT_ATTR_CONTROL = 1 << 3,
    MT_ATTR_USER_DEFINED = 1 << 4,
    MT_ATTR_BYTE = 1 << 5,
};

/* ------------------------------------------------------------ string map */

/* Open-addressing hash map from byte strings to int32 values. Keys are
 * views (pointer + length) into memory the owner keeps alive; the map never
 * copies them. Capacity is fixed at init (a power of two >= 2 * n). */
typedef struct mt_strmap_entry {
    const char *key;
    uint32_t len;
    int32_t value;
    uint64_t hash;
} mt_strmap_entry;

typedef struct mt_strmap {
    mt_strmap_entry *entries; /* n entries in insertion order */
    uint32_t *slots;          /* entry index + 1; 0 = empty */
    uint64_t cap;             /* slots */
    uint64_t n, max_n;
} mt_strmap;

int mt_strmap_init(mt_strmap *m, uint64_t max_n);
void mt_strmap_free(mt_strmap *m);
/* Inserts key -> value unless the key is present. Returns 1 if inserted, 0
 * if it was already there (*old set to its value when old != NULL), -1 when
 * the map is full (more than max_n keys). */
int mt_strmap_put(mt_strmap *m, const char *key, uint32_t len, int32_t value, int32_t *old);
/* Value of key, or -1 when absent. */
int32_t mt_strmap_get(const mt_strmap *m, const char *key, size_t len);
/* Value of the key "a b" (a, one space, b) without building it, or -1. */
int32_t mt_strmap_get_pair(const mt_strmap *m, const char *a, size_t alen, const char *b,
                           size_t blen);

/* ------------------------------------------------------------ byte level */

/* UTF-8 (1 or 2 bytes) of the code point that stands for byte b in the
 * GPT-2 byte-level alphabet; *n gets the length. */
const char *mt_bytelevel_encode(uint8_t b, int *n);
/* Byte that code point cp stands for, or -1 if cp is not in the alphabet. */
int mt_bytelevel_decode(uint32_t cp);

/* Decodes one code point from s[0..len) the way llama.cpp does (lax: no
 * overlong or surrogate checks). Returns the number of bytes used (>= 1);
 * *cp = 0xFFFD when the bytes at s are not a decodable sequence (then 1 byte
 * is used). Code points above U+10FFFF are reported as invalid too. */
size_t mt_utf8_decode_lax(const unsigned char *s, size_t len, uint32_t *cp);
/* Appends the UTF-8 of cp (<= U+10FFFF, surrogates encoded as 3 bytes like
 * llama.cpp) to out; returns the byte count (1-4). */
int mt_utf8_encode(uint32_t cp, char *out);

/* Rewrites len bytes of text as llama.cpp's tokenizer sees them: every
 * code point decoded laxly and re-encoded, invalid bytes becoming U+FFFD.
 * Writes the result to *out (malloc'd, at most 3 * len bytes, NUL-ended)
 * and, when surrogate code points occur, a copy for the regex engine in
 * *regex_text where each surrogate is replaced by a same-length unassigned
 * code point (U+FFF0), so offsets agree; otherwise *regex_text = *out.
 * Returns 0 or -1 (out of memory). */
int mt_utf8_sanitize(const char *text, size_t len, char **out, size_t *out_len, char **regex_text);

/* ------------------------------------------------------------ pre-tokenizer */

typedef struct mt_pretok mt_pretok;

typedef struct mt_span {
    size_t off, len;
} mt_span;

/* Settings llama.cpp attaches to a pre-tokenizer name. */
typedef struct mt_pretok_flags {
    bool ignore_merges;
    bool add_bos;
} mt_pretok_flags;

/* Compiles the regex list for a tokenizer.ggml.pre name ("" or NULL means
 * "default"). Unknown names are an error that lists the supported ones. */
mt_pretok *mt_pretok_new(const char *pre, mt_pretok_flags *flags, mt_error *err);
void mt_pretok_free(mt_pretok *p);

/* Splits text[0..len) (valid UTF-8) into pieces with the regex list,
 * "isolated" semantics: matches and the gaps between them both become
 * pieces; each regex runs over each current piece on its own. Pieces are
 * returned in order in *out (malloc'd). Returns the count or -1. */
int64_t mt_pretok_split(const mt_pretok *p, const char *text, size_t len, mt_span **out,
                        mt_error *err);

/* ------------------------------------------------------------ the vocabulary */

typedef enum mt_vocab_type {
    MT_VOCAB_BPE, /* tokenizer.ggml.model = gpt2: byte-level BPE with merges */
    MT_VOCAB_SPM, /* tokenizer.ggml.model = llama: SentencePiece BPE with scores */
} mt_vocab_type;

struct mt_vocab {
    char *path; /* file the vocabulary came from, for messages */
    mt_vocab_type type;
    int32_t n_tokens;
    float *scores;         /* (n_tokens) SPM merge priority; 0 when absent */
    bool add_space_prefix; /* SPM: a space before the text and after special tokens */

    /* Raw token texts (as stored in the file), each NUL-terminated. */
    char *text_pool;
    size_t *text_off;
    uint32_t *text_len;
    uint16_t *attr;

    /* Decoded bytes of each token as llama.cpp's piece cache holds them
     * (control / unknown / user-defined tokens: raw text; normal tokens:
     * byte-level decoded; unused / undefined: empty). */
    char *piece_pool;
    size_t *piece_off;
    uint32_t *piece_len;

    mt_strmap tok_map; /* token text -> id */

    char *merge_pool;    /* merge strings, "left right" */
    mt_strmap merge_map; /* "left right" -> rank */

    int32_t *special; /* ids of control / user-defined / unknown tokens, longest text first */
    int32_t n_special;

    uint8_t *eog; /* n_tokens flags */

    int32_t bos, eos, eot, eom, unk, sep, pad, mask;
    int32_t fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
    bool add_bos, add_eos, ignore_merges;

    char *pre_name;
    mt_pretok *pretok; /* BPE only */
};

/* Splits text into fragments at occurrences of special tokens (see
 * special_tokens.c). A fragment with token >= 0 is that token; otherwise it
 * is raw text [off, off + len). Returns the count (fragments in *out,
 * malloc'd) or -1. */
typedef struct mt_fragment {
    int32_t token; /* -1 for raw text */
    size_t off, len;
} mt_fragment;

int64_t mt_special_partition(const mt_vocab *v, const char *text, size_t len, bool parse_special,
                             mt_fragment **out, mt_error *err);
/* The same with parse_special, where control tokens may not overlap plain[]
 * (sorted byte ranges; see mt_tokenize_spans). */
int64_t mt_special_partition_spans(const mt_vocab *v, const char *text, size_t len,
                                   const mt_text_span *plain, size_t n_plain, mt_fragment **out,
                                   mt_error *err);
/* Builds v->special from the attributes (called at load). */
int mt_special_build(mt_vocab *v, mt_error *err);

/* Appends id to the growable array *ids (*n used, *cap allocated). 0 or -1. */
int mt_ids_push(int32_t **ids, size_t *n, size_t *cap, int32_t id);

/* Byte-level BPE of one raw text fragment; appends ids to *ids (growable
 * array with *n used and *cap allocated). Returns 0 or -1. */
int mt_bpe_fragment(const mt_vocab *v, const char *text, size_t len, int32_t **ids, size_t *n,
                    size_t *cap, mt_error *err);

/* SentencePiece BPE of one raw text fragment (spaces already turned into
 * U+2581 by the caller); appends ids like mt_bpe_fragment. */
int mt_spm_fragment(const mt_vocab *v, const char *text, size_t len, int32_t **ids, size_t *n,
                    size_t *cap, mt_error *err);

/* Fills the piece cache from texts and attributes (called at load). */
int mt_detok_build_pieces(mt_vocab *v, mt_error *err);

static inline const char *mt_vocab_text(const mt_vocab *v, int32_t id) {
    return v->text_pool + v->text_off[id];
}

#endif
