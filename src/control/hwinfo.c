/* hwinfo.c - the node's machine as the registry sees it (hwinfo.h). */
#include "moontail/hwinfo.h"
#include "moontail/clock.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

static int64_t meminfo(const char *key) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    int64_t v = 0;
    size_t n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0 && line[n] == ':') {
            v = strtoll(line + n + 1, NULL, 10) * 1024;
            break;
        }
    fclose(f);
    return v;
}

/* The first GPU: NVIDIA from its driver's /proc entry, others (amdgpu
 * reports VRAM) from /sys/class/drm. */
static void find_gpu(mt_hwinfo *hw) {
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
                snprintf(hw->gpu, sizeof hw->gpu, "%.63s", m);
                for (char *c = hw->gpu; *c; c++) /* the registry refuses control characters */
                    if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = ' ';
            }
        if (f) fclose(f);
        if (hw->gpu[0]) break;
    }
    if (d) closedir(d);
    for (int k = 0; k < 8 && !hw->gpu[0]; k++) {
        char path[128];
        snprintf(path, sizeof path, "/sys/class/drm/card%d/device/mem_info_vram_total", k);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        long long v = 0;
        if (fscanf(f, "%lld", &v) == 1 && v > 0) {
            hw->vram = v;
            snprintf(hw->gpu, sizeof hw->gpu, "drm card%d", k);
        }
        fclose(f);
    }
}

void mt_hwinfo_detect(const char *dir, mt_hwinfo *hw) {
    memset(hw, 0, sizeof *hw);
    hw->ram_total = meminfo("MemTotal");
    hw->ram_available = meminfo("MemAvailable");
    struct statvfs sv;
    if (dir && statvfs(dir, &sv) == 0) hw->disk_free = (int64_t)sv.f_bavail * (int64_t)sv.f_frsize;
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    hw->cores = c > 0 ? (int32_t)c : 1;
    const char *simd = "generic";
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        simd = "avx512";
    else if (__builtin_cpu_supports("avx2"))
        simd = "avx2";
    else if (__builtin_cpu_supports("sse4.2"))
        simd = "sse4.2";
#endif
    snprintf(hw->simd, sizeof hw->simd, "%s", simd);
    find_gpu(hw);
}

typedef struct bw_part {
    const uint64_t *data;
    size_t n;
    uint64_t sum;
} bw_part;

static void *sum_part(void *arg) {
    bw_part *p = arg;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= p->n; i += 4)
        s0 += p->data[i], s1 += p->data[i + 1], s2 += p->data[i + 2], s3 += p->data[i + 3];
    p->sum = s0 + s1 + s2 + s3;
    return NULL;
}

double mt_hwinfo_read_bandwidth(int threads) {
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    const size_t bytes = 64u << 20, n = bytes / sizeof(uint64_t);
    uint64_t *data = malloc(bytes);
    if (!data) return 0;
    for (size_t i = 0; i < n; i++) data[i] = i * 2654435761u; /* touch every page */
    double best = 0;
    volatile uint64_t keep = 0; /* so the sums are not optimised away */
    for (int run = 0; run < 4; run++) {
        bw_part parts[64];
        pthread_t tid[64];
        double t0 = mt_mono_s();
        int started = 0;
        for (int k = 0; k < threads; k++) {
            size_t a = n * (size_t)k / (size_t)threads, b = n * (size_t)(k + 1) / (size_t)threads;
            parts[k] = (bw_part){data + a, b - a, 0};
            if (k > 0 && pthread_create(&tid[k], NULL, sum_part, &parts[k]) == 0)
                started |= 1;
            else if (k > 0)
                sum_part(&parts[k]), tid[k] = 0;
        }
        sum_part(&parts[0]);
        for (int k = 1; k < threads; k++)
            if (tid[k]) pthread_join(tid[k], NULL);
        double dt = mt_mono_s() - t0;
        for (int k = 0; k < threads; k++) keep += parts[k].sum;
        if (dt > 0 && bytes / dt > best) best = (double)bytes / dt;
        (void)started;
    }
    (void)keep; /* only written: clang warns about a variable that is never read */
    free(data);
    return best;
}

double mt_hwinfo_speed(double bytes_per_s) {
    double s = bytes_per_s / 1e10;
    return s > 0.01 ? s : 0.01;
}
