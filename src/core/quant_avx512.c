/* quant_avx512.c - the "avx512" kernel set: the kernels of quant_x86.inc
 * compiled for AVX-512 VL with VNNI (vpdpbusd multiplies 4 byte pairs into
 * an int32 lane in one instruction, vpdpwssd 2 word pairs), laid over the
 * avx2 set when the CPU has AVX-512 F, BW, VL, VNNI and VBMI (vpermb looks
 * up 64 MXFP4 codes in one instruction). The 32 vector registers allow
 * micro-tiles of 4 weight rows x 4 tokens. Results are
 * bit-identical to the reference kernels (see quant_x86.inc). */
#include "quant_kernels.h"
#include "vec_kernels.h"
#include "moontail/compat.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>

#define QX_TGT                                                                                     \
    __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi")))
#define QX_VNNI 1
#define QX_TB   4
#define QX_ZMM  1
#include "quant_x86.inc"

bool quant_avx512_install(quant_kernel_set *ks) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512vnni") ||
        !__builtin_cpu_supports("avx512vbmi"))
        return false;
    ks->name = "avx512";
    qx_install(ks);
    ks->vec = vec_avx512_kernels;
    return true;
}

#else /* not x86 */

bool quant_avx512_install(quant_kernel_set *ks) {
    (void)ks;
    return false;
}

#endif
