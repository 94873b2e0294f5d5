/* test_file_write.c - mt_file_write_atomic (file_write.h), the one writer of
 * a file through a temporary: a new file and a replaced one hold exactly
 * the bytes given, with exactly the mode given whatever the umask, and no
 * temporary is left; a write that fails (a directory where the temporary
 * goes) names that path, leaves the old file as it was and nothing else. */
#include "check.h"
#include "moontail/file.h"
#include "moontail/file_write.h"

#include <dirent.h>
#include <sys/stat.h>

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[256];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return buf;
}

/* Entries of dir other than . and .. */
static int entries(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

int main(void) {
    char dir[256], path[300], tmp[310];
    snprintf(dir, sizeof dir, "%s", check_tmp("-fw"));
    mt_dir_make(dir, true);
    snprintf(path, sizeof path, "%s/state.json", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
#ifndef _WIN32
    mode_t old_umask = umask(077);
#endif
    mt_error err = {{0}};

    CHECK(mt_file_write_atomic(path, "first\n", 6, 0644, &err) == 0, "new file: %s", err.msg);
    mt_file_info sb; /* on Windows the mode is only "private (0600) or not (0644)" */
    CHECK(mt_file_stat(path, &sb) == 0 && sb.mode == 0644 && !sb.private_,
          "mode %03o under umask 077, wanted 0644", (unsigned)sb.mode);
    char *t = read_text(path);
    CHECK(t && strcmp(t, "first\n") == 0, "content: %s", t ? t : "(none)");
    CHECK(mt_file_write_atomic(path, "second", 6, 0600, &err) == 0, "replace: %s", err.msg);
    t = read_text(path);
    CHECK(t && strcmp(t, "second") == 0 && mt_file_stat(path, &sb) == 0 && sb.mode == 0600 &&
              sb.private_,
          "replaced: %s, mode %03o", t ? t : "(none)", (unsigned)sb.mode);
    CHECK(mt_file_write_atomic(path, "", 0, 0600, &err) == 0 && read_text(path) &&
              !*read_text(path),
          "an empty file: %s", err.msg);
    mt_file_write_atomic(path, "second", 6, 0600, &err);
    CHECK(entries(dir) == 1, "%d entries in the directory, wanted the file alone", entries(dir));

    /* a directory where the temporary goes: refused, named; the old file kept */
    mt_dir_make(tmp, true);
    err.msg[0] = 0;
    CHECK(mt_file_write_atomic(path, "third", 5, 0600, &err) == -1 && strstr(err.msg, tmp) &&
              strstr(err.msg, "cannot create"),
          "blocked temporary: %s", err.msg);
    t = read_text(path);
    CHECK(t && strcmp(t, "second") == 0, "the old file after a failed write: %s", t ? t : "(none)");
    rmdir(tmp);
    CHECK(entries(dir) == 1, "%d entries after the failure", entries(dir));

#ifndef _WIN32
    umask(old_umask);
#endif
    unlink(path);
    rmdir(dir);
    return check_report("test_file_write");
}
