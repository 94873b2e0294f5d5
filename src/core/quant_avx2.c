/* quant_avx2.c - the "avx2" kernel set (AVX2 + FMA + F16C), laid over the
 * reference set when the CPU has all three: the dot products and matrix
 * tiles of quant_x86.inc compiled with maddubs/madd.
 *
 * They must return bit-identical results to the reference kernels: every
 * float operation is the reference's, on the same values, in the same order
 * (one vector lane per reference lane); only exact integer sums are
 * regrouped. FMA is used only where the reference calls fmaf. */
#include "quant_kernels.h"
#include "vec_kernels.h"
#include "moontail/compat.h"

#if defined(__x86_64__) || defined(__i386__)

#include <cpuid.h>
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))

#define QX_TGT  AVX2
#define QX_VNNI 0
#define QX_TB   1
#define QX_ZMM  0
#include "quant_x86.inc"

/* ------------------------------------------------------------ install */

bool quant_avx2_install(quant_kernel_set *ks) {
    __builtin_cpu_init();
    /* F16C from CPUID leaf 1 (ECX bit 29): clang before 16 has no "f16c" for
     * __builtin_cpu_supports, and the fuzz build (docs/fuzzing.md) uses clang */
    unsigned a, b, c, d;
    bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !f16c) return false;
    ks->name = "avx2";
    qx_install(ks);
    ks->vec = vec_avx2_kernels;
    return true;
}

#else /* not x86 */

bool quant_avx2_install(quant_kernel_set *ks) {
    (void)ks;
    return false;
}

#endif
