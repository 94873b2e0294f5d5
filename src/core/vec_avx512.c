/* vec_avx512.c - the vector kernels of vec_x86.inc with 512-bit registers
 * (the "avx512" kernel set): twice the lanes per instruction for
 * exponentials, sums and attention. The same bits as the portable ones. */
#include "vec_kernels.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <math.h>

#define VX_TGT                                                                                     \
    __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi")))
#define VX_W 16
#include "vec_x86.inc"

const vec_kernel_set *const vec_avx512_kernels = &vx_kernels;

#else

const vec_kernel_set *const vec_avx512_kernels = NULL;

#endif
