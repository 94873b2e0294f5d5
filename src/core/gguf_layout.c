/* gguf_layout.c - checks where a GGUF file's tensors keep their bytes.
 *
 * ggml's reader (the one llama.cpp loads with) accepts one layout only: the
 * tensors' data in the order of their infos, the first at the start of the
 * data section and each next one at the end of the one before, rounded up
 * to the alignment. Every writer that follows the format (llama.cpp's,
 * gguf-split, ours) writes exactly that. Anything else - two tensors sharing
 * bytes, a gap, tensors out of order - is refused here too, so that a file
 * MoonTail runs is a file llama.cpp runs; overlaps get their own message
 * naming both tensors, as they are the case where the weights silently mix.
 * Called by gguf_read.c once every tensor is known to lie inside the file. */
#include "gguf_internal.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct span {
    uint64_t begin, end; /* [begin, end) in the data section */
    uint64_t index;      /* into f->tensors */
} span;

static int by_begin(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Finds two tensors whose bytes overlap; 0 when there are none, 1 when *a
 * and *b are set, -1 when out of memory. */
static int find_overlap(const gguf_file *f, const gguf_tensor **a, const gguf_tensor **b) {
    if (f->n_tensors < 2) return 0;
    span *s = malloc(f->n_tensors * sizeof *s);
    if (!s) return -1;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        s[i] = (span){f->tensors[i].offset, f->tensors[i].offset + f->tensors[i].nbytes, i};
    qsort(s, f->n_tensors, sizeof *s, by_begin);
    /* sorted by start: a tensor overlaps an earlier one exactly when it
     * starts before the furthest end seen so far */
    uint64_t far = 0;
    int found = 0;
    for (uint64_t i = 1; i < f->n_tensors && !found; i++) {
        if (s[i].begin < s[far].end) {
            *a = &f->tensors[s[far].index];
            *b = &f->tensors[s[i].index];
            found = 1;
        } else if (s[i].end > s[far].end)
            far = i;
    }
    free(s);
    return found;
}

static uint64_t padded(uint64_t n, uint64_t align) {
    return n + (align - n % align) % align;
}

int gguf_check_layout(const gguf_file *f, mt_error *err) {
    const gguf_tensor *a = NULL, *b = NULL;
    int rc = find_overlap(f, &a, &b);
    if (rc < 0) return mt_error_set(err, "%s: out of memory checking the tensor layout", f->path);
    if (rc > 0)
        return mt_error_set(err,
                            "%s: tensors '%s' (data bytes [%llu, %llu)) and '%s' (data bytes"
                            " [%llu, %llu)) overlap; the file is damaged or was written wrongly:"
                            " get the model again or convert it again with llama.cpp's tools",
                            f->path, a->name, (unsigned long long)a->offset,
                            (unsigned long long)(a->offset + a->nbytes), b->name,
                            (unsigned long long)b->offset,
                            (unsigned long long)(b->offset + b->nbytes));
    uint64_t want = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (t->offset != want) {
            const gguf_tensor *p = i > 0 ? &f->tensors[i - 1] : NULL;
            char after[400];
            if (p)
                snprintf(after, sizeof after,
                         "right after the previous tensor '%s' (data bytes [%llu, %llu)) padded"
                         " to the alignment %u",
                         p->name, (unsigned long long)p->offset,
                         (unsigned long long)(p->offset + p->nbytes), f->alignment);
            else
                snprintf(after, sizeof after,
                         "at the start of the data section (the first tensor)");
            return mt_error_set(
                err,
                "%s: tensor '%s' (data bytes [%llu, %llu)) should start at %llu, %s;"
                " GGUF stores tensors back to back in the order they are listed"
                " and llama.cpp refuses any other layout. The file is damaged or"
                " was written wrongly: get the model again or convert it again"
                " with llama.cpp's tools",
                f->path, t->name, (unsigned long long)t->offset,
                (unsigned long long)(t->offset + t->nbytes), (unsigned long long)want, after);
        }
        want = padded(t->offset + t->nbytes, f->alignment);
    }
    return 0;
}
