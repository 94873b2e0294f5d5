/* file_write.c - replacing a file whole through a temporary file, fsync'd
 * and renamed into place (file_write.h). */
#include "moontail/file_write.h"
#include "moontail/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mt_file_write_atomic(const char *path, const void *data, size_t n, int mode, mt_error *err) {
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return mt_error_set(err, "%s: the path is too long", path);
    mt_file_remove(tmp); /* left by a crash */
    int fd = mt_file_open(tmp, MT_O_WRITE | MT_O_CREATE | MT_O_EXCL, mode);
    if (fd < 0) return mt_error_set(err, "%s: cannot create: %s", tmp, strerror(errno));
    int rc = 0;
    /* the umask may have taken bits away: exactly mode */
    if (mt_file_set_mode(fd, mode) != 0)
        rc =
            mt_error_set(err, "%s: cannot set mode %03o: %s", tmp, (unsigned)mode, strerror(errno));
    const char *p = data;
    for (size_t off = 0; rc == 0 && off < n;) {
        ssize_t w = mt_file_write(fd, p + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0)
            rc =
                mt_error_set(err, "%s: cannot write: %s", tmp, w < 0 ? strerror(errno) : "no room");
        else
            off += (size_t)w;
    }
    if (rc == 0 && mt_file_sync(fd, false) != 0)
        rc = mt_error_set(err, "%s: cannot sync to disk: %s", tmp, strerror(errno));
    if (mt_file_close(fd) != 0 && rc == 0)
        rc = mt_error_set(err, "%s: cannot close: %s", tmp, strerror(errno));
    if (rc == 0 && mt_file_replace(tmp, path) != 0)
        rc = mt_error_set(err, "%s: cannot replace it with %s: %s", path, tmp, strerror(errno));
    if (rc) {
        mt_file_remove(tmp);
        return rc;
    }
    mt_dir_sync_parent(path);
    return 0;
}
