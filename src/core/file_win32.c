/* file_win32.c - file.h on Windows. Files are opened with CreateFileW (UTF-16
 * paths, shared for reading, writing and deleting so that a file can be
 * replaced or removed while another handle reads it, not inherited) and
 * handed to the C runtime as binary descriptors; "private" is an ACL that
 * grants the owner (and SYSTEM) alone; mappings are file-mapping views. */
/* the rename with POSIX semantics (FileRenameInfoEx) is Windows 10 1607's: declared only for
 * that target, and tried at run time before the older MoveFileExW */
#undef _WIN32_WINNT
#define _WIN32_WINNT 0x0A000002
#include "moontail/file.h"
#include "text_win32.h"

#include <aclapi.h>
#include <errno.h>
#include <fcntl.h>
#include <io.h>
#include <sddl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

/* The errno value closest to a Win32 error of a file call. */
static int file_errno(DWORD e) {
    switch (e) {
    case ERROR_FILE_NOT_FOUND:
    case ERROR_PATH_NOT_FOUND:
    case ERROR_INVALID_DRIVE:
    case ERROR_INVALID_NAME:
        return ENOENT;
    case ERROR_ALREADY_EXISTS:
    case ERROR_FILE_EXISTS:
        return EEXIST;
    case ERROR_ACCESS_DENIED:
    case ERROR_SHARING_VIOLATION:
    case ERROR_LOCK_VIOLATION:
    case ERROR_USER_MAPPED_FILE:
        return EACCES;
    case ERROR_DISK_FULL:
    case ERROR_HANDLE_DISK_FULL:
        return ENOSPC;
    case ERROR_FILENAME_EXCED_RANGE:
        return ENAMETOOLONG;
    case ERROR_NOT_ENOUGH_MEMORY:
    case ERROR_OUTOFMEMORY:
    case ERROR_COMMITMENT_LIMIT:
        return ENOMEM;
    case ERROR_DIR_NOT_EMPTY:
        return ENOTEMPTY;
    case ERROR_INVALID_HANDLE:
        return EBADF;
    case ERROR_NOT_SUPPORTED:
    case ERROR_INVALID_FUNCTION:
        return EOPNOTSUPP;
    default:
        return EIO;
    }
}

static int fail(void) {
    errno = file_errno(GetLastError());
    return -1;
}

static HANDLE handle_of(int fd) {
    return (HANDLE)_get_osfhandle(fd);
}

/* A DACL that grants the current user and SYSTEM full access and nothing
 * else, not inheriting from the directory; LocalFree the result. */
static PSECURITY_DESCRIPTOR private_sd(PACL *dacl) {
    HANDLE tok;
    if (!OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &tok)) return NULL;
    union {
        TOKEN_USER u;
        char buf[256];
    } tu;
    DWORD len;
    BOOL ok = GetTokenInformation(tok, TokenUser, &tu, sizeof tu, &len);
    CloseHandle(tok);
    LPWSTR sid = NULL;
    if (!ok || !ConvertSidToStringSidW(tu.u.User.Sid, &sid)) return NULL;
    wchar_t sddl[256];
    _snwprintf(sddl, sizeof sddl / sizeof sddl[0], L"D:P(A;;FA;;;%ls)(A;;FA;;;SY)", sid);
    LocalFree(sid);
    PSECURITY_DESCRIPTOR sd = NULL;
    if (!ConvertStringSecurityDescriptorToSecurityDescriptorW(sddl, SDDL_REVISION_1, &sd, NULL))
        return NULL;
    BOOL present, defaulted;
    if (!GetSecurityDescriptorDacl(sd, &present, dacl, &defaulted) || !present) {
        LocalFree(sd);
        return NULL;
    }
    return sd;
}

int mt_file_open(const char *path, int flags, int mode) {
    DWORD access = 0, disp, attrs = FILE_ATTRIBUTE_NORMAL;
    if (flags & MT_O_READ || !(flags & MT_O_WRITE)) access |= GENERIC_READ;
    if (flags & MT_O_WRITE) access |= GENERIC_WRITE;
    if (flags & MT_O_CREATE) access |= READ_CONTROL | WRITE_DAC; /* mt_file_make_private */
    if ((flags & MT_O_CREATE) && (flags & MT_O_EXCL))
        disp = CREATE_NEW;
    else if ((flags & MT_O_CREATE) && (flags & MT_O_TRUNC))
        disp = CREATE_ALWAYS;
    else if (flags & MT_O_CREATE)
        disp = OPEN_ALWAYS;
    else if (flags & MT_O_TRUNC)
        disp = TRUNCATE_EXISTING;
    else
        disp = OPEN_EXISTING;
    if (flags & MT_O_SEQUENTIAL) attrs |= FILE_FLAG_SEQUENTIAL_SCAN;
    SECURITY_ATTRIBUTES sa = {.nLength = sizeof sa, .bInheritHandle = FALSE};
    PACL dacl = NULL;
    PSECURITY_DESCRIPTOR sd = NULL;
    if ((flags & MT_O_CREATE) && (mode & 077) == 0) {
        if (!(sd = private_sd(&dacl))) return fail();
        sa.lpSecurityDescriptor = sd;
    }
    wchar_t *w = win32_wide(path);
    if (!w) {
        LocalFree(sd);
        return -1;
    }
    HANDLE h = CreateFileW(w, access, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, &sa,
                           disp, attrs, NULL);
    DWORD e = GetLastError();
    free(w);
    LocalFree(sd);
    if (h == INVALID_HANDLE_VALUE) {
        errno = file_errno(e);
        return -1;
    }
    int crt =
        _O_BINARY | (flags & MT_O_WRITE ? (flags & MT_O_READ ? _O_RDWR : _O_WRONLY) : _O_RDONLY);
    if (flags & MT_O_APPEND) crt |= _O_APPEND;
    int fd = _open_osfhandle((intptr_t)h, crt);
    if (fd < 0) {
        CloseHandle(h);
        errno = EMFILE;
    }
    return fd;
}

int mt_file_close(int fd) {
    return _close(fd);
}

/* Windows' read and write take 32-bit counts */
static unsigned io_count(size_t n) {
    return n > (1u << 30) ? 1u << 30 : (unsigned)n;
}

ssize_t mt_file_read(int fd, void *buf, size_t n) {
    return _read(fd, buf, io_count(n));
}

ssize_t mt_file_write(int fd, const void *buf, size_t n) {
    return _write(fd, buf, io_count(n));
}

ssize_t mt_file_pread(int fd, void *buf, size_t n, uint64_t off) {
    OVERLAPPED ov = {.Offset = (DWORD)off, .OffsetHigh = (DWORD)(off >> 32)};
    DWORD got = 0;
    if (ReadFile(handle_of(fd), buf, io_count(n), &got, &ov)) return (ssize_t)got;
    if (GetLastError() == ERROR_HANDLE_EOF) return 0;
    return fail();
}

ssize_t mt_file_pwrite(int fd, const void *buf, size_t n, uint64_t off) {
    OVERLAPPED ov = {.Offset = (DWORD)off, .OffsetHigh = (DWORD)(off >> 32)};
    DWORD put = 0;
    if (WriteFile(handle_of(fd), buf, io_count(n), &put, &ov)) return (ssize_t)put;
    return fail();
}

int mt_file_sync(int fd, bool data_only) {
    (void)data_only;
    return FlushFileBuffers(handle_of(fd)) ? 0 : fail();
}

void mt_file_start_writeback(int fd, uint64_t off, uint64_t n) {
    (void)fd, (void)off, (void)n;
}

int mt_file_resize(int fd, uint64_t size) {
    FILE_END_OF_FILE_INFO i = {.EndOfFile.QuadPart = (LONGLONG)size};
    return SetFileInformationByHandle(handle_of(fd), FileEndOfFileInfo, &i, sizeof i) ? 0 : fail();
}

int mt_file_reserve(int fd, uint64_t size) {
    FILE_ALLOCATION_INFO i = {.AllocationSize.QuadPart = (LONGLONG)size};
    return SetFileInformationByHandle(handle_of(fd), FileAllocationInfo, &i, sizeof i) ? 0 : fail();
}

int mt_file_lock(int fd, bool *waited) {
    HANDLE h = handle_of(fd);
    OVERLAPPED ov = {0};
    *waited = false;
    if (LockFileEx(h, LOCKFILE_EXCLUSIVE_LOCK | LOCKFILE_FAIL_IMMEDIATELY, 0, MAXDWORD, MAXDWORD,
                   &ov))
        return 0;
    if (GetLastError() != ERROR_LOCK_VIOLATION && GetLastError() != ERROR_IO_PENDING) return fail();
    *waited = true;
    memset(&ov, 0, sizeof ov);
    return LockFileEx(h, LOCKFILE_EXCLUSIVE_LOCK, 0, MAXDWORD, MAXDWORD, &ov) ? 0 : fail();
}

/* Whether no ACE lets anyone but the owner, the current user, SYSTEM or the
 * Administrators read the file (an absent DACL lets everyone). */
static bool dacl_private(HANDLE h) {
    PSID owner = NULL;
    PACL dacl = NULL;
    PSECURITY_DESCRIPTOR sd = NULL;
    if (GetSecurityInfo(h, SE_FILE_OBJECT, OWNER_SECURITY_INFORMATION | DACL_SECURITY_INFORMATION,
                        &owner, NULL, &dacl, NULL, &sd) != ERROR_SUCCESS)
        return false;
    bool ok = dacl != NULL;
    union {
        TOKEN_USER u;
        char buf[256];
    } tu;
    HANDLE tok;
    DWORD len;
    PSID me = NULL;
    if (OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &tok)) {
        if (GetTokenInformation(tok, TokenUser, &tu, sizeof tu, &len)) me = tu.u.User.Sid;
        CloseHandle(tok);
    }
    const DWORD reads = FILE_READ_DATA | GENERIC_READ | GENERIC_ALL;
    for (DWORD i = 0; ok && i < dacl->AceCount; i++) {
        ACE_HEADER *ace;
        if (!GetAce(dacl, i, (void **)&ace)) continue;
        if (ace->AceType != ACCESS_ALLOWED_ACE_TYPE || (ace->AceFlags & INHERIT_ONLY_ACE)) continue;
        ACCESS_ALLOWED_ACE *a = (ACCESS_ALLOWED_ACE *)ace;
        if (!(a->Mask & reads)) continue;
        PSID sid = (PSID)&a->SidStart;
        if ((owner && EqualSid(sid, owner)) || (me && EqualSid(sid, me)) ||
            IsWellKnownSid(sid, WinLocalSystemSid) ||
            IsWellKnownSid(sid, WinBuiltinAdministratorsSid) ||
            IsWellKnownSid(sid, WinCreatorOwnerRightsSid))
            continue;
        ok = false;
    }
    LocalFree(sd);
    return ok;
}

/* Gives h the owner-and-SYSTEM DACL, unless it is private already (wine, replacing such a
 * DACL, reads back one that lets everyone in). */
static int set_private(HANDLE h) {
    if (dacl_private(h)) return 0;
    PACL dacl;
    PSECURITY_DESCRIPTOR sd = private_sd(&dacl);
    if (!sd) return fail();
    DWORD rc = SetSecurityInfo(h, SE_FILE_OBJECT,
                               DACL_SECURITY_INFORMATION | PROTECTED_DACL_SECURITY_INFORMATION,
                               NULL, NULL, dacl, NULL);
    LocalFree(sd);
    if (rc != ERROR_SUCCESS) {
        errno = file_errno(rc);
        return -1;
    }
    return 0;
}

int mt_file_make_private(int fd) {
    return set_private(handle_of(fd));
}

int mt_file_set_mode(int fd, int mode) {
    return (mode & 077) == 0 ? mt_file_make_private(fd) : 0;
}

/* 100 ns ticks since 1601 -> ns since 1970 */
static int64_t unix_ns(LARGE_INTEGER t) {
    return (t.QuadPart - 116444736000000000LL) * 100;
}

static int info_of(HANDLE h, mt_file_info *i) {
    BY_HANDLE_FILE_INFORMATION bh;
    FILE_BASIC_INFO basic;
    if (!GetFileInformationByHandle(h, &bh) ||
        !GetFileInformationByHandleEx(h, FileBasicInfo, &basic, sizeof basic))
        return fail();
    memset(i, 0, sizeof *i);
    i->size = (uint64_t)bh.nFileSizeHigh << 32 | bh.nFileSizeLow;
    i->dev = bh.dwVolumeSerialNumber;
    i->ino = (uint64_t)bh.nFileIndexHigh << 32 | bh.nFileIndexLow;
    i->mtime_ns = unix_ns(basic.LastWriteTime);
    i->ctime_ns = unix_ns(basic.ChangeTime);
    i->dir = (bh.dwFileAttributes & FILE_ATTRIBUTE_DIRECTORY) != 0;
    i->regular = !i->dir && !(bh.dwFileAttributes & FILE_ATTRIBUTE_DEVICE);
    i->private_ = dacl_private(h);
    i->mode = i->private_ ? 0600 : 0644;
    return 0;
}

const char *mt_file_private_fix(const char *path, char *buf, size_t cap) {
    snprintf(buf, cap, "icacls \"%s\" /inheritance:r /grant:r \"%%USERNAME%%\":F", path);
    return buf;
}

int mt_file_fstat(int fd, mt_file_info *info) {
    return info_of(handle_of(fd), info);
}

/* A handle on the file or directory path for its metadata (access), shared every way;
 * INVALID_HANDLE_VALUE with errno. */
static HANDLE open_path(const char *path, DWORD access) {
    wchar_t *w = win32_wide(path);
    if (!w) return INVALID_HANDLE_VALUE;
    HANDLE h = CreateFileW(w, access, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, NULL,
                           OPEN_EXISTING, FILE_FLAG_BACKUP_SEMANTICS, NULL);
    DWORD e = GetLastError();
    free(w);
    if (h == INVALID_HANDLE_VALUE) errno = file_errno(e);
    return h;
}

int mt_file_stat(const char *path, mt_file_info *info) {
    HANDLE h = open_path(path, FILE_READ_ATTRIBUTES | READ_CONTROL);
    if (h == INVALID_HANDLE_VALUE) return -1;
    int rc = info_of(h, info);
    CloseHandle(h);
    return rc;
}

/* Renames from over to with POSIX semantics (Windows 10 1607 and later): an
 * existing target that is open elsewhere is replaced all the same, as rename(2)
 * does; false where that is not offered (the caller then tries MoveFileExW). */
static bool rename_posix(const wchar_t *from, const wchar_t *to) {
    wchar_t full[32768];
    DWORD n = GetFullPathNameW(to, sizeof full / sizeof full[0], full, NULL);
    if (n == 0 || n >= sizeof full / sizeof full[0]) return false;
    HANDLE h = CreateFileW(from, DELETE | SYNCHRONIZE,
                           FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, NULL,
                           OPEN_EXISTING, FILE_FLAG_BACKUP_SEMANTICS, NULL);
    if (h == INVALID_HANDLE_VALUE) return false;
    size_t size = sizeof(FILE_RENAME_INFO) + (size_t)n * sizeof(wchar_t);
    FILE_RENAME_INFO *ri = calloc(1, size);
    BOOL ok = FALSE;
    if (ri) {
        ri->Flags = FILE_RENAME_FLAG_REPLACE_IF_EXISTS | FILE_RENAME_FLAG_POSIX_SEMANTICS;
        ri->FileNameLength = (DWORD)(n * sizeof(wchar_t));
        memcpy(ri->FileName, full, (size_t)n * sizeof(wchar_t));
        ok = SetFileInformationByHandle(h, FileRenameInfoEx, ri, (DWORD)size);
    }
    DWORD e = GetLastError();
    free(ri);
    CloseHandle(h);
    SetLastError(e);
    return ok;
}

/* One call on one or two UTF-16 paths. */
static int path_call(const char *a, const char *b, int which) {
    wchar_t *wa = win32_wide(a), *wb = b ? win32_wide(b) : NULL;
    BOOL ok = FALSE;
    if (wa && (!b || wb)) {
        if (which == 0)
            ok = rename_posix(wa, wb) ||
                 MoveFileExW(wa, wb, MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH);
        else if (which == 1)
            ok = DeleteFileW(wa);
        else
            ok = RemoveDirectoryW(wa);
    }
    DWORD e = GetLastError();
    bool converted = wa && (!b || wb);
    free(wa), free(wb);
    if (ok) return 0;
    if (converted) errno = file_errno(e);
    return -1;
}

int mt_file_replace(const char *from, const char *to) {
    return path_call(from, to, 0);
}

int mt_file_remove(const char *path) {
    return path_call(path, NULL, 1);
}

int mt_dir_remove(const char *path) {
    return path_call(path, NULL, 2);
}

void mt_dir_sync(const char *dir) {
    (void)dir;
}

int mt_path_real(const char *path, char *out, size_t cap) {
    wchar_t *w = win32_wide(path), full[32768];
    if (!w) return -1;
    DWORD n = GetFullPathNameW(w, sizeof full / sizeof full[0], full, NULL);
    free(w);
    if (n == 0 || n >= sizeof full / sizeof full[0]) return fail();
    if (GetFileAttributesW(full) == INVALID_FILE_ATTRIBUTES) return fail();
    if (win32_utf8(full, out, cap) != 0) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return 0;
}

int mt_file_temp(const char *stem, char *out, size_t cap) {
    wchar_t wdir[MAX_PATH + 1];
    char dir[4 * MAX_PATH];
    DWORD n = GetTempPathW(sizeof wdir / sizeof wdir[0], wdir);
    if (n == 0 || n > MAX_PATH || win32_utf8(wdir, dir, sizeof dir) != 0) return fail();
    for (int attempt = 0; attempt < 100; attempt++) {
        unsigned r = (unsigned)GetTickCount() ^ (unsigned)GetCurrentProcessId() * 2654435761u ^
                     (unsigned)attempt * 40503u;
        if (snprintf(out, cap, "%s%s-%08x", dir, stem, r) >= (int)cap) {
            errno = ENAMETOOLONG;
            return -1;
        }
        int fd = mt_file_open(out, MT_O_READ | MT_O_WRITE | MT_O_CREATE | MT_O_EXCL, 0600);
        if (fd >= 0 || errno != EEXIST) return fd;
    }
    errno = EEXIST;
    return -1;
}

int mt_dir_temp(const char *base, const char *stem, char *out, size_t cap) {
    char dir[4 * MAX_PATH];
    wchar_t wdir[MAX_PATH + 1];
    if (!base) {
        DWORD n = GetTempPathW(sizeof wdir / sizeof wdir[0], wdir);
        if (n == 0 || n > MAX_PATH || win32_utf8(wdir, dir, sizeof dir) != 0) return fail();
        size_t k = strlen(dir);
        if (k && mt_path_sep(dir[k - 1])) dir[k - 1] = '\0';
        base = dir;
    }
    for (int attempt = 0; attempt < 100; attempt++) {
        unsigned r = (unsigned)GetTickCount() ^ (unsigned)GetCurrentProcessId() * 2654435761u ^
                     (unsigned)attempt * 40503u;
        if (snprintf(out, cap, "%s\\%s-%08x", base, stem, r) >= (int)cap) {
            errno = ENAMETOOLONG;
            return -1;
        }
        if (mt_dir_make(out, true) == 0) return 0;
        if (errno != EEXIST) return -1;
    }
    errno = EEXIST;
    return -1;
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

int mt_path_set_mode(const char *path, int mode) {
    if (mode & 077) return 0;
    HANDLE h = open_path(path, READ_CONTROL | WRITE_DAC);
    if (h == INVALID_HANDLE_VALUE) return -1;
    int rc = set_private(h);
    CloseHandle(h);
    return rc;
}

bool mt_path_sep(char c) {
    return c == '/' || c == '\\';
}

/* The section is closed at once: the view keeps it alive. */
const void *mt_map_file(int fd, uint64_t size) {
    HANDLE m = CreateFileMappingW(handle_of(fd), NULL, PAGE_READONLY, 0, 0, NULL);
    if (!m) {
        fail();
        return NULL;
    }
    void *p = MapViewOfFile(m, FILE_MAP_READ, 0, 0, (SIZE_T)size);
    DWORD e = GetLastError();
    CloseHandle(m);
    if (!p) errno = file_errno(e);
    return p;
}

void mt_map_release(const void *p, uint64_t size) {
    (void)size;
    if (p) UnmapViewOfFile(p);
}

/* Unlocking pages that are not locked takes them out of the working set:
 * the closest Windows has to MADV_DONTNEED on a file view (errors ignored). */
void mt_map_drop(const void *p, size_t n) {
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    uintptr_t page = si.dwPageSize;
    uintptr_t a = ((uintptr_t)p + page - 1) & ~(page - 1);
    uintptr_t b = ((uintptr_t)p + n) & ~(page - 1);
    if (b > a) VirtualUnlock((void *)a, b - a);
}

void *mt_mem_zeroed(size_t n) {
    return VirtualAlloc(NULL, n, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
}

void mt_mem_release(void *p, size_t n) {
    (void)n;
    if (p) VirtualFree(p, 0, MEM_RELEASE);
}
