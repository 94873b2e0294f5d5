/* replay_main.c - a main() for a fuzz target outside libFuzzer: calls the
 * target's LLVMFuzzerTestOneInput once per file named on the command line
 * (a directory: every file in it, in name order). The normal build links it
 * with each fuzz/fuzz_*.c as fuzz_replay_<target> and CTest runs that on the
 * target's corpus and fuzz/regressions/<target>/ (the inputs of bugs the
 * fuzzers found), so CI replays every found bug with gcc and, in the ASan
 * build, with the sanitizers, without needing clang. */
#include "fuzz_target.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int n_run;

static void run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    size_t cap = 1 << 16, len = 0;
    uint8_t *buf = malloc(cap);
    for (size_t got; (got = fread(buf + len, 1, cap - len, f)) > 0;) {
        len += got;
        if (len == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    /* an exact-size copy, so an overread is caught in the ASan build */
    uint8_t *exact = malloc(len ? len : 1);
    memcpy(exact, buf, len);
    free(buf);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    n_run++;
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void run_path(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return; /* a target without regressions yet */
    if (!S_ISDIR(st.st_mode)) return run_file(path);
    DIR *d = opendir(path);
    if (!d) return;
    char **names = NULL;
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        names = realloc(names, (n + 1) * sizeof *names);
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, by_name); /* an empty directory: names is NULL */
    for (size_t i = 0; i < n; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", path, names[i]);
        run_file(p);
        free(names[i]);
    }
    free(names);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) run_path(argv[i]);
    printf("%d inputs replayed without a crash\n", n_run);
    return 0;
}
