/* sysinfo_posix.c - sysinfo.h on Linux (and other POSIX systems, where the
 * Linux files are missing and the sysconf fallbacks answer). */
#include "moontail/sysinfo.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* A "Key: N kB" line of /proc/meminfo in bytes, or -1. */
static int64_t meminfo(const char *key) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    int64_t v = -1;
    size_t n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0 && line[n] == ':') {
            v = strtoll(line + n + 1, NULL, 10) * 1024;
            break;
        }
    fclose(f);
    return v;
}

int64_t mt_sys_ram_total(void) {
    int64_t v = meminfo("MemTotal");
    if (v > 0) return v;
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (int64_t)pages * size : 0;
}

int64_t mt_sys_ram_available(void) {
    int64_t v = meminfo("MemAvailable");
    if (v >= 0) return v;
    long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages >= 0 && size > 0 ? (int64_t)pages * size : -1;
}

int mt_sys_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

size_t mt_sys_page_size(void) {
    long n = sysconf(_SC_PAGESIZE);
    return n > 0 ? (size_t)n : 4096;
}

int64_t mt_sys_disk_free(const char *dir) {
    struct statvfs sv;
    if (statvfs(dir, &sv) != 0) return -1;
    return (int64_t)sv.f_bavail * (int64_t)sv.f_frsize;
}

/* NVIDIA from its driver's /proc entry, others (amdgpu reports VRAM) from
 * /sys/class/drm. */
void mt_sys_gpu(char *name, size_t cap, int64_t *vram) {
    name[0] = '\0';
    *vram = 0;
    DIR *d = opendir("/proc/driver/nvidia/gpus");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[512], line[256];
        snprintf(path, sizeof path, "/proc/driver/nvidia/gpus/%s/information", e->d_name);
        FILE *f = fopen(path, "r");
        while (f && fgets(line, sizeof line, f))
            if (strncmp(line, "Model:", 6) == 0) {
                char *m = line + 6;
                while (*m == ' ' || *m == '\t') m++;
                m[strcspn(m, "\n")] = 0;
                snprintf(name, cap, "%s", m);
            }
        if (f) fclose(f);
        if (name[0]) break;
    }
    if (d) closedir(d);
    for (int k = 0; k < 8 && !name[0]; k++) {
        char path[128];
        snprintf(path, sizeof path, "/sys/class/drm/card%d/device/mem_info_vram_total", k);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        long long v = 0;
        if (fscanf(f, "%lld", &v) == 1 && v > 0) {
            *vram = v;
            snprintf(name, cap, "drm card%d", k);
        }
        fclose(f);
    }
}

int mt_sys_host_name(char *out, size_t cap) {
    char host[256];
    if (cap == 0) return -1;
    if (gethostname(host, sizeof host) != 0 || !host[0]) {
        out[0] = '\0';
        return -1;
    }
    host[sizeof host - 1] = '\0';
    host[strcspn(host, ".")] = '\0'; /* "pc7.lab.example" -> "pc7" */
    snprintf(out, cap, "%s", host);
    return 0;
}

bool mt_sys_firewall_blocks(char *hint, size_t cap) {
    if (cap) hint[0] = '\0';
    return false;
}

int64_t mt_sys_open_files(int64_t want) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return want;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (rlim_t)want) {
        rlim_t to =
            rl.rlim_max == RLIM_INFINITY || rl.rlim_max > (rlim_t)want ? (rlim_t)want : rl.rlim_max;
        struct rlimit nr = {to, rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &nr) == 0) rl.rlim_cur = to;
    }
    return rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= (rlim_t)want ? want
                                                                       : (int64_t)rl.rlim_cur;
}

int mt_sys_home_dir(char *out, size_t cap) {
    const char *h = getenv("MOONTAIL_HOME");
    if (h && *h) return snprintf(out, cap, "%s", h) < (int)cap ? 0 : -1;
    const char *home = getenv("HOME");
    if (!home || !*home) return -1;
    return snprintf(out, cap, "%s/.moontail", home) < (int)cap ? 0 : -1;
}

int mt_sys_cache_dir(char *out, size_t cap) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && xdg[0] == '/') return snprintf(out, cap, "%s/moontail", xdg) < (int)cap ? 0 : -1;
    if (home && home[0]) return snprintf(out, cap, "%s/.cache/moontail", home) < (int)cap ? 0 : -1;
    return -1;
}
