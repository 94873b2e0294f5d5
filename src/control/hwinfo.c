/* hwinfo.c - the node's machine as the registry sees it (hwinfo.h). */
#include "moontail/hwinfo.h"
#include "moontail/clock.h"
#include "moontail/sysinfo.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void mt_hwinfo_detect(const char *dir, mt_hwinfo *hw) {
    memset(hw, 0, sizeof *hw);
    hw->ram_total = mt_sys_ram_total();
    int64_t avail = mt_sys_ram_available();
    hw->ram_available = avail > 0 ? avail : 0;
    int64_t disk = dir ? mt_sys_disk_free(dir) : -1;
    hw->disk_free = disk > 0 ? disk : 0;
    hw->cores = mt_sys_cpus();
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
    mt_sys_gpu(hw->gpu, sizeof hw->gpu, &hw->vram);
    for (char *c = hw->gpu; *c; c++) /* the registry refuses control characters */
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = ' ';
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
