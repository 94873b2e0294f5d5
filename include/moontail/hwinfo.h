/* hwinfo.h - what a node tells the registry about its machine: memory,
 * disk, cores, SIMD level, GPU, and a short self-benchmark of memory read
 * bandwidth (decode is memory bound, so that is what "speed" means). */
#ifndef MOONTAIL_HWINFO_H
#define MOONTAIL_HWINFO_H

#include <stdint.h>

typedef struct mt_hwinfo {
    int64_t ram_total, ram_available; /* bytes (/proc/meminfo) */
    int64_t disk_free;                /* bytes free where shards are kept */
    int32_t cores;                    /* online CPUs */
    char simd[16];                    /* "avx512", "avx2", "sse4.2" or "generic" */
    char gpu[64];                     /* "" when none was found */
    int64_t vram;                     /* bytes, 0 when unknown or none */
} mt_hwinfo;

/* Fills *hw; dir is where shards will be kept (for disk_free). Never fails:
 * what cannot be read stays 0 / "". */
void mt_hwinfo_detect(const char *dir, mt_hwinfo *hw);

/* Measured memory read bandwidth in bytes per second (a ~64 MiB sum over
 * `threads` threads, best of a few runs; about 0.2 s). */
double mt_hwinfo_read_bandwidth(int threads);

/* speed as placement.h counts it: 1.0 = 10 GB/s of reads. */
double mt_hwinfo_speed(double bytes_per_s);

#endif
