/* file.c - the parts of file.h that are the same on every platform. */
#include "moontail/file.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int mt_dir_make_all(const char *path, bool private_) {
    char p[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof p) {
        errno = n ? ENAMETOOLONG : ENOENT;
        return -1;
    }
    memcpy(p, path, n + 1);
    while (n > 1 && mt_path_sep(p[n - 1])) p[--n] = '\0';
    /* each prefix that ends before a separator, then the whole path; a prefix
     * that is a drive ("C:") or the root fails with EEXIST or EACCES, harmlessly */
    for (size_t i = 1; i <= n; i++) {
        if (i < n && !mt_path_sep(p[i])) continue;
        char keep = p[i];
        p[i] = '\0';
        int rc = mt_dir_make(p, private_);
        int e = errno;
        p[i] = keep;
        if (rc != 0 && e != EEXIST && (i == n || e != EACCES)) {
            errno = e;
            return -1;
        }
    }
    return 0;
}

void mt_dir_sync_parent(const char *path) {
    const char *sep = NULL;
    for (const char *p = path; *p; p++)
        if (mt_path_sep(*p)) sep = p;
    char dir[4096];
    if (!sep)
        snprintf(dir, sizeof dir, ".");
    else if (sep == path)
        snprintf(dir, sizeof dir, "/");
    else if ((size_t)(sep - path) < sizeof dir)
        snprintf(dir, sizeof dir, "%.*s", (int)(sep - path), path);
    else
        return;
    mt_dir_sync(dir);
}
