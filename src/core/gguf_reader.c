/* gguf_reader.c - a model's bytes read with pread instead of through its
 * mapping (gguf_stream.h), so that going through a whole model costs the
 * caller's buffers and not the model's size in resident pages.
 *
 * Each part is read one of three ways:
 *   FILE  pread from the file opened again by its path, when it is still
 *         the file that was mapped (same size, same first 64 KiB);
 *   MAP   the file is gone or is another one now: copied from the mapping
 *         (which still shows the bytes that were parsed), the pages of each
 *         piece copied given back at once (MADV_DONTNEED: the mapping is
 *         read-only and never written, so they come back from the file's
 *         pages if touched again), so residency stays one piece;
 *   MEM   a model opened from a buffer: straight from memory. */
#include "moontail/gguf_stream.h"
#include "moontail/file.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Bytes at the start of a file compared with the mapping on open: the
 * header, where a replaced file would differ first. */
#define SAME_PREFIX (64u << 10)

enum { READ_MEM, READ_FILE, READ_MAP };

struct gguf_reader {
    const gguf_file *f;
    uint32_t n_parts;
    int *fd;          /* (n_parts) the file (READ_FILE) or -1 */
    int *how;         /* (n_parts) READ_* */
    gguf_file_id *id; /* (n_parts) of READ_FILE parts */
};

const gguf_file *gguf_reader_file(const gguf_reader *r) {
    return r->f;
}

uint64_t gguf_tensor_file_offset(const gguf_file *f, const gguf_tensor *t) {
    return (uint64_t)((const uint8_t *)t->data - f->parts[t->part].base);
}

void gguf_reader_close(gguf_reader *r) {
    if (!r) return;
    for (uint32_t p = 0; r->fd && p < r->n_parts; p++)
        if (r->fd[p] >= 0) mt_file_close(r->fd[p]);
    free(r->fd);
    free(r->how);
    free(r->id);
    free(r);
}

/* Reads exactly n bytes at off; -1 with errno (0: the file ended). */
static int pread_all(int fd, void *dst, size_t n, uint64_t off) {
    uint8_t *p = dst;
    while (n > 0) {
        ssize_t k = mt_file_pread(fd, p, n, off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            if (k == 0) errno = 0;
            return -1;
        }
        p += k, n -= (size_t)k, off += (uint64_t)k;
    }
    return 0;
}

static gguf_file_id id_of(const mt_file_info *sb) {
    return (gguf_file_id){sb->dev, sb->ino, sb->size, sb->mtime_ns, sb->ctime_ns};
}

/* Opens part p for pread when its path still leads to the file that was
 * mapped; otherwise (gone, replaced, grown, unreadable) it is read from the
 * mapping. -1 only when out of memory. */
static int open_part(gguf_reader *r, uint32_t p, mt_error *err) {
    const gguf_part *part = &r->f->parts[p];
    r->how[p] = READ_MAP;
    int fd = mt_file_open(part->path, MT_O_READ | MT_O_SEQUENTIAL, 0); /* read-ahead: a hint */
    mt_file_info sb;
    if (fd < 0) return 0;
    if (mt_file_fstat(fd, &sb) != 0 || sb.size != part->size) {
        mt_file_close(fd);
        return 0;
    }
    size_t n = part->size < SAME_PREFIX ? part->size : SAME_PREFIX;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) {
        mt_file_close(fd);
        return mt_error_set(err, "out of memory");
    }
    int same = pread_all(fd, buf, n, 0) == 0 && memcmp(buf, part->base, n) == 0;
    free(buf);
    if (!same) {
        mt_file_close(fd);
        return 0;
    }
    r->fd[p] = fd;
    r->how[p] = READ_FILE;
    r->id[p] = id_of(&sb);
    return 0;
}

gguf_reader *gguf_reader_open(const gguf_file *f, mt_error *err) {
    gguf_reader *r = calloc(1, sizeof *r);
    uint32_t n = f->n_parts ? f->n_parts : 1;
    if (r) {
        r->f = f;
        r->n_parts = n;
        r->fd = malloc(n * sizeof *r->fd);
        r->how = calloc(n, sizeof *r->how); /* READ_MEM */
        r->id = calloc(n, sizeof *r->id);
    }
    if (!r || !r->fd || !r->how || !r->id) {
        gguf_reader_close(r);
        mt_error_set(err, "out of memory");
        return NULL;
    }
    for (uint32_t p = 0; p < n; p++) r->fd[p] = -1;
    for (uint32_t p = 0; f->mapped && p < n; p++)
        if (open_part(r, p, err)) {
            gguf_reader_close(r);
            return NULL;
        }
    return r;
}

int gguf_reader_read(gguf_reader *r, uint32_t part, uint64_t offset, void *dst, size_t n,
                     mt_error *err) {
    if (part >= r->n_parts) return mt_error_set(err, "%s: no part %u", r->f->path, part);
    const gguf_part *pt = &r->f->parts[part];
    if (offset > pt->size || n > pt->size - offset)
        return mt_error_set(err, "%s: bytes %llu..%llu are outside the file (%zu bytes)", pt->path,
                            (unsigned long long)offset, (unsigned long long)(offset + n), pt->size);
    if (r->how[part] != READ_FILE) {
        memcpy(dst, pt->base + offset, n);
        if (r->how[part] == READ_MAP) mt_map_drop(pt->base + offset, n); /* the pages wholly read */
        return 0;
    }
    if (pread_all(r->fd[part], dst, n, offset) == 0) return 0;
    if (errno == 0)
        return mt_error_set(err,
                            "%s ended before byte %llu: it was truncated while being read; open"
                            " the model again",
                            pt->path, (unsigned long long)(offset + n));
    return mt_error_set(err, "%s: read error: %s", pt->path, strerror(errno));
}

const uint8_t *gguf_reader_memory(const gguf_reader *r, uint32_t part, uint64_t offset) {
    if (part >= r->n_parts || r->how[part] != READ_MEM || offset > r->f->parts[part].size)
        return NULL;
    return r->f->parts[part].base + offset;
}

bool gguf_reader_unchanged(const gguf_reader *r, uint32_t part) {
    mt_file_info sb;
    if (part >= r->n_parts || r->how[part] != READ_FILE || mt_file_fstat(r->fd[part], &sb) != 0)
        return false;
    gguf_file_id now = id_of(&sb);
    return memcmp(&now, &r->id[part], sizeof now) == 0;
}

bool gguf_reader_file_id(const gguf_reader *r, uint32_t part, gguf_file_id *id) {
    if (part >= r->n_parts || r->how[part] != READ_FILE) return false;
    *id = r->id[part];
    return true;
}
