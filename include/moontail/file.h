/* file.h - files and directories where POSIX and Windows differ. Paths are
 * UTF-8 on every platform (the Windows side calls the UTF-16 "W" functions).
 * file_posix.c and file_win32.c. */
#ifndef MOONTAIL_FILE_H
#define MOONTAIL_FILE_H

#include <stdbool.h>

/* Makes the directory path: 0, or -1 with errno (EEXIST when it is there
 * already). private_: only this user may enter it (mode 0700 on POSIX; on
 * Windows it keeps the permissions it inherits, which under %LOCALAPPDATA%
 * are the user's alone); else 0755. */
int mt_dir_make(const char *path, bool private_);
/* mt_dir_make of path and of every missing directory above it: 0, or -1 with
 * errno. A directory already there is fine. */
int mt_dir_make_all(const char *path, bool private_);
/* Whether c separates directories in a path here ('/', and '\\' on Windows). */
bool mt_path_sep(char c);

#endif
