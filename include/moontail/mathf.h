/* mathf.h - the elementary functions the engine computes with (exp, log,
 * sin, cos, and log2/pow for floats), giving the same bits on every platform
 * and compiler.
 *
 * Why not libm: C libraries do not agree in the last bit. mingw-w64's libm
 * differs from glibc 2.36 on 200k float inputs in 2,579 cosf, 2,644 sinf,
 * 58 logf, 126 powf and 124 expf results, so a Windows pipeline stage would
 * build other RoPE tables (and another sampler, other YaRN factors) than a
 * Linux replica of the same model, and their logits would differ. These are
 * written from the math (src/core/mathf.c) with IEEE additions,
 * subtractions, multiplications and divisions only, each rounded on its own
 * (the file is compiled with -ffp-contract=off), and integer steps; every
 * platform with IEEE double arithmetic returns the same bits.
 *
 * Accuracy: the double functions are within 1 ulp of the exact value
 * (measured: at most 0.75 ulp from mpmath's on samples of every range;
 * test_mathf compares them with glibc's on millions of inputs). The float
 * ones evaluate in double and round once, so they equal the correctly
 * rounded result except when the exact value lies within a double ulp or so
 * of a midpoint between two floats (a few in a million inputs; then they are
 * 1 float ulp away). Special values (zeros, infinities, NaN, arguments
 * outside the domain) give what C's functions give. mt_expf (vecops.h) is a
 * different, float-only exponential of the vector kernels. */
#ifndef MOONTAIL_MATHF_H
#define MOONTAIL_MATHF_H

/* e^x. +inf above 709.79, +0 below -745.2, results below 2^-1022 are
 * subnormal (rounded twice: the double result, then to the subnormal grid). */
double mt_math_exp(double x);

/* The natural logarithm: -inf for +-0, NaN for x < 0 and NaN, +inf for +inf;
 * log(1) = +0. */
double mt_math_log(double x);

/* sin x and cos x of any double: |x| <= 2^26 is reduced by pi/2 in five
 * parts (168 bits of pi/2), beyond that with 2/pi to 1280 bits (Payne and
 * Hanek), so every finite x keeps its accuracy. NaN for +-inf and NaN.
 * mt_math_sincos computes both from one reduction. */
double mt_math_sin(double x);
double mt_math_cos(double x);
void mt_math_sincos(double x, double *s, double *c);

/* (float) of the double functions above: ln x, log2 x (exactly k for
 * x = 2^k), sin x, cos x, both of x at once. */
float mt_math_logf(float x);
float mt_math_log2f(float x);
float mt_math_sinf(float x);
float mt_math_cosf(float x);
void mt_math_sincosf(float x, float *s, float *c);

/* x^y with the special cases of C's powf: e^(y ln x) evaluated in double
 * and rounded once for x > 0 (so an exact x^y halfway between two floats,
 * such as 2^-150 or 4097^2, may round away from the even one); 1 for y = +-0 or x = 1 (even for a
 * NaN); otherwise NaN for a NaN, and for finite x < 0 with a finite y that is not an integer;
 * (-1)^y |x|^y for x < 0 (or -0) and an integer y; for x = +-0, +inf if y < 0 and +0 if y > 0,
 * negative for -0 and an odd y; for x = +-inf the reverse; for y = +inf, +inf if |x| > 1 and +0 if
 * |x| < 1, for y = -inf the reverse, 1 for x = -1. */
float mt_math_powf(float x, float y);

#endif
