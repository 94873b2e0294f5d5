/* file_write.c - replacing a file whole through a temporary file, fsync'd
 * and renamed into place (file_write.h). */
#include "moontail/file_write.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void mt_file_sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

void mt_file_sync_parent(const char *path) {
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else if ((size_t)(slash - path) < sizeof dir)
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    else
        return;
    mt_file_sync_dir(dir);
}

int mt_file_write_atomic(const char *path, const void *data, size_t n, mode_t mode, mt_error *err) {
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return mt_error_set(err, "%s: the path is too long", path);
    unlink(tmp); /* left by a crash */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0) return mt_error_set(err, "%s: cannot create: %s", tmp, strerror(errno));
    int rc = 0;
    /* the umask may have taken bits away: exactly mode */
    if (fchmod(fd, mode) != 0)
        rc =
            mt_error_set(err, "%s: cannot set mode %03o: %s", tmp, (unsigned)mode, strerror(errno));
    const char *p = data;
    for (size_t off = 0; rc == 0 && off < n;) {
        ssize_t w = write(fd, p + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0)
            rc =
                mt_error_set(err, "%s: cannot write: %s", tmp, w < 0 ? strerror(errno) : "no room");
        else
            off += (size_t)w;
    }
    if (rc == 0 && fsync(fd) != 0)
        rc = mt_error_set(err, "%s: cannot sync to disk: %s", tmp, strerror(errno));
    if (close(fd) != 0 && rc == 0)
        rc = mt_error_set(err, "%s: cannot close: %s", tmp, strerror(errno));
    if (rc == 0 && rename(tmp, path) != 0)
        rc = mt_error_set(err, "%s: cannot replace it with %s: %s", path, tmp, strerror(errno));
    if (rc) {
        unlink(tmp);
        return rc;
    }
    mt_file_sync_parent(path);
    return 0;
}
