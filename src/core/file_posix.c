/* file_posix.c - file.h on POSIX (Linux first: fallocate, posix_fadvise). */
#include "moontail/file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int mt_file_open(const char *path, int flags, int mode) {
    int o = O_CLOEXEC;
    if ((flags & MT_O_READ) && (flags & MT_O_WRITE))
        o |= O_RDWR;
    else if (flags & MT_O_WRITE)
        o |= O_WRONLY;
    else
        o |= O_RDONLY;
    if (flags & MT_O_CREATE) o |= O_CREAT;
    if (flags & MT_O_EXCL) o |= O_EXCL;
    if (flags & MT_O_TRUNC) o |= O_TRUNC;
    if (flags & MT_O_APPEND) o |= O_APPEND;
    int fd = open(path, o, mode);
    if (fd >= 0 && (flags & MT_O_SEQUENTIAL)) posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    return fd;
}

int mt_file_close(int fd) {
    return close(fd);
}

ssize_t mt_file_read(int fd, void *buf, size_t n) {
    return read(fd, buf, n);
}

ssize_t mt_file_write(int fd, const void *buf, size_t n) {
    return write(fd, buf, n);
}

ssize_t mt_file_pread(int fd, void *buf, size_t n, uint64_t off) {
    return pread(fd, buf, n, (off_t)off);
}

ssize_t mt_file_pwrite(int fd, const void *buf, size_t n, uint64_t off) {
    return pwrite(fd, buf, n, (off_t)off);
}

int mt_file_sync(int fd, bool data_only) {
    return data_only ? fdatasync(fd) : fsync(fd);
}

void mt_file_start_writeback(int fd, uint64_t off, uint64_t n) {
#ifdef __linux__
    sync_file_range(fd, (off_t)off, (off_t)n, SYNC_FILE_RANGE_WRITE);
#else
    (void)fd, (void)off, (void)n;
#endif
}

int mt_file_resize(int fd, uint64_t size) {
    return ftruncate(fd, (off_t)size);
}

int mt_file_reserve(int fd, uint64_t size) {
#ifdef __linux__
    return fallocate(fd, 0, 0, (off_t)size);
#else
    int rc = posix_fallocate(fd, 0, (off_t)size);
    if (rc) errno = rc;
    return rc ? -1 : 0;
#endif
}

int mt_file_lock(int fd, bool *waited) {
    *waited = false;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) return 0;
    if (errno != EWOULDBLOCK) return -1;
    *waited = true;
    while (flock(fd, LOCK_EX) != 0)
        if (errno != EINTR) return -1;
    return 0;
}

int mt_file_make_private(int fd) {
    return fchmod(fd, 0600);
}

int mt_file_set_mode(int fd, int mode) {
    return fchmod(fd, (mode_t)mode);
}

static void info_of(const struct stat *sb, mt_file_info *i) {
    i->size = (uint64_t)sb->st_size;
    i->dev = (uint64_t)sb->st_dev;
    i->ino = (uint64_t)sb->st_ino;
    i->mtime_ns = (int64_t)sb->st_mtim.tv_sec * 1000000000 + sb->st_mtim.tv_nsec;
    i->ctime_ns = (int64_t)sb->st_ctim.tv_sec * 1000000000 + sb->st_ctim.tv_nsec;
    i->regular = S_ISREG(sb->st_mode);
    i->dir = S_ISDIR(sb->st_mode);
    i->private_ = (sb->st_mode & 077) == 0;
    i->mode = (int)(sb->st_mode & 07777);
}

const char *mt_file_private_fix(const char *path, char *buf, size_t cap) {
    snprintf(buf, cap, "chmod 600 '%s'", path);
    return buf;
}

int mt_file_stat(const char *path, mt_file_info *info) {
    struct stat sb;
    if (stat(path, &sb) != 0) return -1;
    info_of(&sb, info);
    return 0;
}

int mt_file_fstat(int fd, mt_file_info *info) {
    struct stat sb;
    if (fstat(fd, &sb) != 0) return -1;
    info_of(&sb, info);
    return 0;
}

int mt_file_replace(const char *from, const char *to) {
    return rename(from, to);
}

int mt_file_remove(const char *path) {
    return unlink(path);
}

int mt_dir_remove(const char *path) {
    return rmdir(path);
}

void mt_dir_sync(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

int mt_path_real(const char *path, char *out, size_t cap) {
    char real[PATH_MAX];
    if (!realpath(path, real)) return -1;
    if (snprintf(out, cap, "%s", real) >= (int)cap) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return 0;
}

int mt_file_temp(const char *stem, char *out, size_t cap) {
    const char *dir = getenv("TMPDIR");
    if (snprintf(out, cap, "%s/%s-XXXXXX", dir && *dir ? dir : "/tmp", stem) >= (int)cap) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int fd = mkstemp(out);
    if (fd >= 0) fcntl(fd, F_SETFD, FD_CLOEXEC);
    return fd;
}

int mt_dir_temp(const char *base, const char *stem, char *out, size_t cap) {
    const char *env = getenv("TMPDIR");
    if (!base) base = env && *env ? env : "/tmp";
    if (snprintf(out, cap, "%s/%s-XXXXXX", base, stem) >= (int)cap) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return mkdtemp(out) ? 0 : -1;
}

int mt_dir_make(const char *path, bool private_) {
    return mkdir(path, private_ ? 0700 : 0755);
}

int mt_path_set_mode(const char *path, int mode) {
    return chmod(path, (mode_t)mode);
}

bool mt_path_sep(char c) {
    return c == '/';
}

const void *mt_map_file(int fd, uint64_t size) {
    void *p = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

void mt_map_release(const void *p, uint64_t size) {
    if (p) munmap((void *)p, (size_t)size);
}

void mt_map_drop(const void *p, size_t n) {
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)p + page - 1) & ~(page - 1);
    uintptr_t b = ((uintptr_t)p + n) & ~(page - 1);
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
}

void *mt_mem_zeroed(size_t n) {
    void *p =
        mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void mt_mem_release(void *p, size_t n) {
    if (p) munmap(p, n);
}
