/* text_win32.c - text_win32.h. Windows only (CMake leaves it out elsewhere). */
#include "text_win32.h"

#include <errno.h>
#include <stdlib.h>
#include <windows.h>

wchar_t *win32_wide(const char *s) {
    int n = MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, s, -1, NULL, 0);
    if (n <= 0) {
        errno = EINVAL;
        return NULL;
    }
    wchar_t *w = malloc((size_t)n * sizeof *w);
    if (!w) {
        errno = ENOMEM;
        return NULL;
    }
    MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, s, -1, w, n);
    return w;
}

int win32_utf8(const wchar_t *w, char *out, size_t cap) {
    if (cap == 0) return -1;
    int n = WideCharToMultiByte(CP_UTF8, WC_ERR_INVALID_CHARS, w, -1, out,
                                cap > (size_t)INT_MAX ? INT_MAX : (int)cap, NULL, NULL);
    if (n <= 0) {
        out[0] = '\0';
        return -1;
    }
    return 0;
}

int win32_env(const char *name, char *out, size_t cap) {
    wchar_t wname[64], value[32768];
    size_t i = 0;
    for (; name[i] && i + 1 < sizeof wname / sizeof wname[0]; i++) wname[i] = (wchar_t)name[i];
    wname[i] = 0;
    DWORD n = GetEnvironmentVariableW(wname, value, sizeof value / sizeof value[0]);
    if (n == 0 || n >= sizeof value / sizeof value[0]) return -1;
    return win32_utf8(value, out, cap);
}
