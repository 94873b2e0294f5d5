/* file_win32.c - file.h on Windows. */
#include "moontail/file.h"
#include "text_win32.h"

#include <errno.h>
#include <stdlib.h>
#include <windows.h>

/* The errno value closest to a Win32 error of a file call. */
static int file_errno(DWORD e) {
    switch (e) {
    case ERROR_FILE_NOT_FOUND:
    case ERROR_PATH_NOT_FOUND:
    case ERROR_INVALID_DRIVE:
        return ENOENT;
    case ERROR_ALREADY_EXISTS:
    case ERROR_FILE_EXISTS:
        return EEXIST;
    case ERROR_ACCESS_DENIED:
    case ERROR_SHARING_VIOLATION:
    case ERROR_LOCK_VIOLATION:
        return EACCES;
    case ERROR_DISK_FULL:
    case ERROR_HANDLE_DISK_FULL:
        return ENOSPC;
    case ERROR_FILENAME_EXCED_RANGE:
        return ENAMETOOLONG;
    case ERROR_NOT_ENOUGH_MEMORY:
    case ERROR_OUTOFMEMORY:
        return ENOMEM;
    case ERROR_DIR_NOT_EMPTY:
        return ENOTEMPTY;
    default:
        return EIO;
    }
}

int mt_dir_make(const char *path, bool private_) {
    (void)private_; /* inherits the parent's permissions (see file.h) */
    wchar_t *w = win32_wide(path);
    if (!w) return -1;
    BOOL ok = CreateDirectoryW(w, NULL);
    DWORD e = GetLastError();
    free(w);
    if (ok) return 0;
    errno = file_errno(e);
    return -1;
}

bool mt_path_sep(char c) {
    return c == '/' || c == '\\';
}
