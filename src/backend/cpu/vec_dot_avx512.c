/* AVX-512 (F, BW, VL, VNNI) dot kernels. The bodies live in vec_dot_x86.inc; this file only sets
 * the target so the default build needs no -march flag (the level is picked at run time). */
#include "backend/cpu/vec_dot.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#endif

#define OB_X86_VNNI 1
#define OB_X86_GETTER ob_cpu_vec_dot_avx512
#include "backend/cpu/vec_dot_x86.inc"

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else
ob_vec_dot_kernel ob_cpu_vec_dot_avx512(ob_type t) { return (ob_vec_dot_kernel){ 0 }; }
#endif
