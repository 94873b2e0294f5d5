/* file_posix.c - file.h on POSIX. */
#include "moontail/file.h"

#include <sys/stat.h>

int mt_dir_make(const char *path, bool private_) {
    return mkdir(path, private_ ? 0700 : 0755);
}

bool mt_path_sep(char c) {
    return c == '/';
}
