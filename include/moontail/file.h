/* file.h - files, directories and mappings where POSIX and Windows differ.
 * Descriptors are C runtime ints on both (opened in binary mode, not
 * inherited by child processes); paths are UTF-8 on every platform (the
 * Windows side calls the UTF-16 "W" functions). Errors are -1 with a POSIX
 * errno. file_posix.c and file_win32.c. */
#ifndef MOONTAIL_FILE_H
#define MOONTAIL_FILE_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifndef EDQUOT
#define EDQUOT ENOSPC /* Windows has no quota errno: a full quota reads as a full disk */
#endif

enum {
    MT_O_READ = 1,        /* read (alone, or with MT_O_WRITE) */
    MT_O_WRITE = 2,       /* write */
    MT_O_CREATE = 4,      /* create when missing */
    MT_O_EXCL = 8,        /* with MT_O_CREATE: fail (EEXIST) when it exists */
    MT_O_TRUNC = 16,      /* cut to 0 bytes */
    MT_O_APPEND = 32,     /* every write at the end */
    MT_O_SEQUENTIAL = 64, /* read front to back: a larger read-ahead (a hint) */
};

/* Opens path: a descriptor, or -1 with errno. mode is the POSIX mode of a new
 * file (the umask applies); on Windows a mode without group and other bits
 * makes the file owner-only (mt_file_make_private). Another process may read,
 * replace or remove the file while it is open (Windows: shared for delete). */
int mt_file_open(const char *path, int flags, int mode);
int mt_file_close(int fd);
/* read and write as read(2)/write(2) (EINTR retried by the caller). */
ssize_t mt_file_read(int fd, void *buf, size_t n);
ssize_t mt_file_write(int fd, const void *buf, size_t n);
/* At offset off, leaving the file position alone on POSIX (Windows moves it). */
ssize_t mt_file_pread(int fd, void *buf, size_t n, uint64_t off);
ssize_t mt_file_pwrite(int fd, const void *buf, size_t n, uint64_t off);
/* Flushes the file to disk (data_only: its data and size, not its times). */
int mt_file_sync(int fd, bool data_only);
/* Starts writing [off, off + n) out to disk without waiting (a hint, so that
 * a later mt_file_sync has little left to do; nothing on Windows). */
void mt_file_start_writeback(int fd, uint64_t off, uint64_t n);
/* Sets the file's length (zeros when it grows). */
int mt_file_resize(int fd, uint64_t size);
/* Allocates disk blocks for the first size bytes (ENOSPC when they do not
 * fit; EOPNOTSUPP where the file system cannot, and the caller goes on). */
int mt_file_reserve(int fd, uint64_t size);
/* Takes this process's exclusive lock on the whole file, waiting for another
 * holder to let go (*waited: whether it had to); released by closing. */
int mt_file_lock(int fd, bool *waited);
/* Only the owner may read or write the file (mode 0600; on Windows an ACL
 * that grants the owner alone). */
int mt_file_make_private(int fd);
/* Sets exactly mode (POSIX; the umask aside). On Windows only "private or
 * not" is kept: mt_file_make_private when mode has no group/other bits. */
int mt_file_set_mode(int fd, int mode);

typedef struct mt_file_info {
    uint64_t size;
    uint64_t dev, ino;          /* which file this is (Windows: volume serial, file index) */
    int64_t mtime_ns, ctime_ns; /* last data change, last change of any kind */
    bool regular, dir;
    bool private_; /* nobody but the owner (and, on Windows, SYSTEM/Administrators) may read it */
    int mode;      /* POSIX permission bits (Windows: 0600 when private_, else 0644) */
} mt_file_info;

int mt_file_stat(const char *path, mt_file_info *info);
int mt_file_fstat(int fd, mt_file_info *info);
/* The command that makes path private, for an error message: "chmod 600
 * PATH", or on Windows an icacls line that leaves the user alone. */
const char *mt_file_private_fix(const char *path, char *buf, size_t cap);
/* Renames from over to, replacing to if it exists (also on Windows). */
int mt_file_replace(const char *from, const char *to);
/* Removes a file / an empty directory. */
int mt_file_remove(const char *path);
int mt_dir_remove(const char *path);
/* fsyncs the directory dir, or the one that holds path, so that a file just
 * created or renamed there survives a crash (best effort; Windows has no such
 * call and needs none: its renames are journalled with the file). */
void mt_dir_sync(const char *dir);
void mt_dir_sync_parent(const char *path);
/* The absolute, canonical form of path into out: 0, or -1 with errno. */
int mt_path_real(const char *path, char *out, size_t cap);
/* Creates a new, empty, private file named after stem in the temporary
 * directory and opens it for writing; its path into out. */
int mt_file_temp(const char *stem, char *out, size_t cap);

/* Makes a new directory, only this user's, named after stem in base (NULL:
 * the system's temporary directory, $TMPDIR or /tmp, %TEMP% on Windows);
 * its path into out. 0, or -1 with errno. */
int mt_dir_temp(const char *base, const char *stem, char *out, size_t cap);
/* Makes the directory path: 0, or -1 with errno (EEXIST when it is there
 * already). private_: only this user may enter it (mode 0700 on POSIX; on
 * Windows it keeps the permissions it inherits, which under %LOCALAPPDATA%
 * are the user's alone); else 0755. */
int mt_dir_make(const char *path, bool private_);
/* mt_dir_make of path and of every missing directory above it: 0, or -1 with
 * errno. A directory already there is fine. */
int mt_dir_make_all(const char *path, bool private_);
/* Sets exactly mode on the file or directory path (chmod; on Windows only
 * "private or not": an owner-only ACL when mode has no group/other bits). */
int mt_path_set_mode(const char *path, int mode);
/* Whether c separates directories in a path here ('/', and '\\' on Windows). */
bool mt_path_sep(char c);

/* The first size bytes of the open file fd mapped read-only (a private
 * mapping: the file may be replaced on disk meanwhile); NULL with errno. The
 * descriptor may be closed afterwards. */
const void *mt_map_file(int fd, uint64_t size);
void mt_map_release(const void *p, uint64_t size);
/* Gives back the whole pages of [p, p + n) of a mapping (read again from the
 * file if touched; a hint). */
void mt_map_drop(const void *p, size_t n);
/* n bytes of zeroed memory straight from the OS, pages committed as they are
 * first touched on Linux (at once on Windows); NULL when out of memory. */
void *mt_mem_zeroed(size_t n);
void mt_mem_release(void *p, size_t n);

#endif
