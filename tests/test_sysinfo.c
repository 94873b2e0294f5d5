/* test_sysinfo.c - sysinfo.h and the directory calls of file.h: memory,
 * processors and free disk are plausible and, on Linux, agree with sysconf
 * and statvfs asked directly; the home directory follows MOONTAIL_HOME; the
 * cache directory lies under XDG_CACHE_HOME (POSIX); mt_dir_make_all makes a
 * nested directory, is content when it exists, and fails on a file in the
 * way. Built for Linux and, with ./dev win, for Windows. */
#include "check.h"
#include "moontail/file.h"
#include "moontail/sysinfo.h"

#include <errno.h>
#include <stdint.h>
#ifndef _WIN32
#include <sys/statvfs.h>
#endif

/* setenv and unsetenv, which Windows' C runtime spells _putenv_s */
static void set_env(const char *name, const char *value) {
#ifdef _WIN32
    _putenv_s(name, value ? value : "");
#else
    if (value)
        setenv(name, value, 1);
    else
        unsetenv(name);
#endif
}

static void test_machine(void) {
    int64_t total = mt_sys_ram_total(), avail = mt_sys_ram_available();
    CHECK(total > (64 << 20) && avail > 0 && avail <= total,
          "memory: %lld bytes total, %lld available", (long long)total, (long long)avail);
    int cpus = mt_sys_cpus();
    size_t page = mt_sys_page_size();
    CHECK(cpus >= 1 && page >= 4096 && (page & (page - 1)) == 0, "%d processors, page %zu", cpus,
          page);
    int64_t disk = mt_sys_disk_free(".");
    CHECK(disk > 0, "free disk in .: %lld", (long long)disk);
    CHECK(mt_sys_disk_free("no/such/dir/here") == -1, "free disk of a missing directory");
    char host[64];
    CHECK(mt_sys_host_name(host, sizeof host) == 0 && host[0] && !strchr(host, '.'),
          "host name '%s'", host);
#ifndef _WIN32
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    CHECK(total == (int64_t)pages * psize ||
              (total <= (int64_t)pages * psize && total > (int64_t)pages * psize / 100 * 99),
          "memory %lld, sysconf says %lld", (long long)total, (long long)pages * psize);
    CHECK(cpus == sysconf(_SC_NPROCESSORS_ONLN) && (long)page == psize,
          "processors %d / page %zu, sysconf says %ld / %ld", cpus, page,
          sysconf(_SC_NPROCESSORS_ONLN), psize);
    struct statvfs sv;
    CHECK(statvfs(".", &sv) == 0, "statvfs");
    int64_t want = (int64_t)sv.f_bavail * (int64_t)sv.f_frsize;
    CHECK(disk > want - (256 << 20) && disk < want + (256 << 20),
          "free disk %lld, statvfs says %lld", (long long)disk, (long long)want);
#endif
}

static void test_dirs(void) {
    char home[1024], cache[1024];
    set_env("MOONTAIL_HOME", "some/where");
    CHECK(mt_sys_home_dir(home, sizeof home) == 0 && strcmp(home, "some/where") == 0,
          "home with MOONTAIL_HOME set: '%s'", home);
    set_env("MOONTAIL_HOME", NULL);
    CHECK(mt_sys_home_dir(home, sizeof home) == 0 && strlen(home) > 8 &&
              (strstr(home, "/.moontail") || strstr(home, "\\MoonTail")),
          "home: '%s'", home);
#ifndef _WIN32
    set_env("XDG_CACHE_HOME", "/x/cache");
    CHECK(mt_sys_cache_dir(cache, sizeof cache) == 0 && strcmp(cache, "/x/cache/moontail") == 0,
          "cache under XDG_CACHE_HOME: '%s'", cache);
    set_env("XDG_CACHE_HOME", NULL);
#endif
    CHECK(mt_sys_cache_dir(cache, sizeof cache) == 0 && strstr(cache, "oon"), "cache: '%s'", cache);

    char base[512], deep[600], file[600];
    snprintf(base, sizeof base, "%s", check_tmp("-dirs"));
    snprintf(deep, sizeof deep, "%s/a/b/c/", base);
    CHECK(mt_dir_make_all(deep, true) == 0, "mt_dir_make_all(%s): %s", deep, strerror(errno));
    mt_file_info st;
    CHECK(mt_file_stat(deep, &st) == 0 && st.dir && !st.regular, "%s is not a directory", deep);
#ifndef _WIN32
    CHECK(st.mode == 0700, "%s has mode %o, not 0700", deep, (unsigned)st.mode);
#endif
    CHECK(mt_dir_make_all(deep, true) == 0, "mt_dir_make_all again: %s", strerror(errno));
    errno = 0;
    CHECK(mt_dir_make(deep, true) == -1 && errno == EEXIST, "mt_dir_make of an existing dir: %s",
          strerror(errno));
    snprintf(file, sizeof file, "%s/a/f", base);
    FILE *f = fopen(file, "w");
    if (f) fclose(f);
    snprintf(deep, sizeof deep, "%s/a/f/g", base);
    CHECK(mt_dir_make_all(deep, false) == -1, "mt_dir_make_all through a file succeeded");
    remove(file);
    const char *subs[] = {"/a/b/c", "/a/b", "/a", ""};
    for (int i = 0; i < 4; i++) {
        snprintf(deep, sizeof deep, "%s%s", base, subs[i]);
        CHECK(rmdir(deep) == 0, "rmdir %s: %s", deep, strerror(errno));
    }
}

int main(void) {
    test_machine();
    test_dirs();
    return check_report("test_sysinfo");
}
