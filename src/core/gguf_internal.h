/* gguf_internal.h - what the GGUF reader's files share (gguf_read.c opens
 * one file, gguf_split_read.c joins the parts of a split model): the
 * private side of a gguf_file and its name look-up. Not a public header. */
#ifndef MOONTAIL_GGUF_INTERNAL_H
#define MOONTAIL_GGUF_INTERNAL_H

#include "moontail/gguf.h"

/* Open-addressing hash set of indices into kv[] or tensors[], so duplicate
 * checks and look-ups stay O(1) even for hostile files with huge counts. */
typedef struct gguf_name_index {
    uint32_t *slots; /* index + 1; 0 = empty */
    uint64_t cap;
} gguf_name_index;

typedef struct gguf_file_priv {
    gguf_file pub;
    gguf_name_index kv_ix, tensor_ix;
    gguf_part part0; /* parts[0] of a single file */
    /* A split model: the opened part files (n_sub of them), which own the
     * mappings, the metadata (pub.kv and kv_ix are part 0's) and the tensor
     * names; pub.tensors, tensor_ix and pub.parts are the set's own. */
    gguf_file **sub;
    uint32_t n_sub;
} gguf_file_priv;

/* Sizes an empty index for n names (n < UINT32_MAX). Returns 0 or -1. */
int gguf_index_init(gguf_name_index *ix, uint64_t n);

/* Adds f->tensors[i] to f's tensor index; returns the index of a tensor
 * already there under the same name (and adds nothing), or -1. */
int64_t gguf_index_add_tensor(gguf_file *f, uint64_t i);

/* Joins the parts of the split model that `given` (a single file just
 * opened, split.count > 1) belongs to. Takes `given` over: it is part of
 * the result, or closed on failure. */
gguf_file *gguf_split_join(gguf_file *given, mt_error *err);

/* split.count of a single file (1 when absent) and split.no (0 when
 * absent); -1 with err naming the key when one is malformed. */
int gguf_split_keys(const gguf_file *f, uint32_t *no, uint32_t *count, mt_error *err);

/* Refuses a file whose tensors' data does not lie back to back in info
 * order with only alignment padding between (ggml's rule; gguf_layout.c):
 * overlapping tensors are named with their byte ranges. Every tensor must
 * already be known to lie inside the data section. */
int gguf_check_layout(const gguf_file *f, mt_error *err);

#endif
