/* vec_avx2.c - the vector kernels of vec_x86.inc with 256-bit registers
 * (AVX2 + FMA + F16C, the "avx2" kernel set); quant.c uses them wherever it
 * uses the avx2 quant kernels. The same bits as the portable ones. */
#include "vec_kernels.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <math.h>

#define VX_TGT __attribute__((target("avx2,fma,f16c")))
#define VX_W   8
#include "vec_x86.inc"

const vec_kernel_set *const vec_avx2_kernels = &vx_kernels;

#else

const vec_kernel_set *const vec_avx2_kernels = NULL;

#endif
