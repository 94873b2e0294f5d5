/* file_write.h - replacing a file whole: the one way the code writes a file
 * that a reader (another process, or this one after a crash) may open at any
 * moment (state files, certificates, keys, batch results). */
#ifndef MOONTAIL_FILE_WRITE_H
#define MOONTAIL_FILE_WRITE_H

#include "moontail/error.h"

#include <stddef.h>

/* Writes n bytes to path through a temporary file beside it (path.tmp; one
 * writer of a path at a time, as the callers keep):
 * written whole, set to exactly mode (the umask aside), fsync'd and renamed
 * over path, then the directory fsync'd, so that a reader sees the old file
 * or the new one, never a part, and the new one survives a crash once this
 * returns. Returns 0, or -1 with err naming the file and the problem (the
 * temporary file is then removed). */
int mt_file_write_atomic(const char *path, const void *data, size_t n, int mode, mt_error *err);

#endif
