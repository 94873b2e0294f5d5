/* text_win32.h - UTF-8 <-> UTF-16 for the Win32 sides of the portability
 * layer: MoonTail keeps every path and name in UTF-8 and calls the Win32 "W"
 * functions with UTF-16. */
#ifndef MOONTAIL_TEXT_WIN32_H
#define MOONTAIL_TEXT_WIN32_H

#include <stddef.h>
#include <wchar.h>

/* s as a malloc'd UTF-16 string, or NULL (errno EINVAL for invalid UTF-8,
 * ENOMEM). */
wchar_t *win32_wide(const char *s);
/* w as UTF-8 into out (cap bytes): 0, or -1 when it does not fit or w is not
 * valid UTF-16 (out is then ""). */
int win32_utf8(const wchar_t *w, char *out, size_t cap);
/* The environment variable name (ASCII) as UTF-8 into out: 0, or -1 when it
 * is unset, empty or does not fit. */
int win32_env(const char *name, char *out, size_t cap);

#endif
