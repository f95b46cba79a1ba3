/* Shared by test_cuda_ops.c and cuda_ops_matmul.c: seeded random inputs, a graph run on a
 * CUDA backend against the CPU reference, backends made under an environment switch, and
 * the groups cuda_ops_matmul.c holds (called from test_cuda_ops' main in order: each draws
 * from g_rng, so the order fixes every input). */
#ifndef OB_CUDA_TESTUTIL_H
#define OB_CUDA_TESTUTIL_H
#include "backend/backend.h"
#include "graph/graph.h"
#include "testutil.h"
#include <stdbool.h>
#include <stddef.h>

extern ob_rng g_rng;
/* run_both_keep's tolerance on the leaf a graph writes (a KV cache): 1e-6 unless a case
 * with a q/k norm loosens it */
extern double g_cache_tol;

/* Max |a - ref| over max |ref|; NaN counts as infinite. */
double rel_err(const float *a, const float *ref, int64_t n);
float *rand_f32(int64_t n, float scale);
/* n ROPE frequency factors, uniform in [0.5, 40]. */
float *rand_factors(int64_t n);
/* Bytes of n random values of type t (quantized from normals). */
void *rand_typed(ob_type t, int64_t n, float scale);
/* g on the reference and on be, `out` (and `written`, if given) compared within tol;
 * keep: where given, gets be's `out` (the caller frees it). */
ob_status run_both_keep(ob_backend *be, ob_graph *g, ob_tensor *out, ob_tensor *written, double tol, const char *what,
                        float **keep);
ob_status run_both(ob_backend *be, ob_graph *g, ob_tensor *out, ob_tensor *written, double tol, const char *what);
/* run_both, then one line saying how the case went, counted in *cases. */
void run_case(ob_backend *be, ob_graph *g, ob_tensor *out, double tol, const char *what, int *cases);
/* Sets env var k to v (NULL: unset), its previous value kept in keep for env_restore. */
void env_swap(const char *k, const char *v, char keep[64]);
void env_restore(const char *k, const char keep[64]);
/* A CUDA backend created while env var name is value (restored after). */
ob_backend *cuda_backend_with(const char *name, const char *value, char *err, size_t err_len);

/* cuda_ops_matmul.c */
void test_matmul_get_rows(ob_backend *be);
void test_plain_rows(ob_backend *be);
void test_matmul_int8(ob_backend *be);
void test_matmul_mmvq_run(void);
void test_matmul_mmq(ob_backend *be);
void test_matmul_mmq_stream(ob_backend *be);
void test_matmul_blas(void);
void test_det_matmul(void);
void test_moe_invariance(void);
#endif
