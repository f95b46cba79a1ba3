/* Shared by the Vulkan op tests (test_vulkan_ops.c, test_vulkan_fold.c): three Vulkan
 * backends over the same device (mapped memory, staging copies, staged reads), seeded
 * random inputs, and a graph run on each backend against the CPU reference. */
#ifndef OB_VK_TESTUTIL_H
#define OB_VK_TESTUTIL_H
#include "backend/backend.h"
#include "graph/graph.h"
#include "testutil.h"
#include <stdbool.h>

#define N_BE 3
/* 0: mapped memory, 1: staging copies, 2: mapped writes with staged reads (as on a
 * discrete GPU whose device memory maps uncached) */
extern ob_backend *g_be[N_BE];
extern const char *const g_be_name[N_BE];
extern ob_rng g_rng;
/* run_on uploads block-type leaves through upload_weight, as a model's weights (false:
 * upload, as they are) */
extern bool g_model_weights;

/* The three backends (lavapipe where there is no GPU); false: no Vulkan device (the test
 * is skipped, printed as such) or a backend failed (a failed check). vkt_end frees them. */
bool vkt_begin(const char *name);
void vkt_end(void);

float *rand_f32(int64_t n, float scale);
/* A rope's frequency factors: n floats uniform in [0.5, 40], below and far above 1 (the
 * angle is divided by them), and an mscale to pair them with. */
float *rand_rope_factors(int64_t n);
#define VKT_MSCALE 1.1386f
bool is_iq(ob_type t);
/* Rows of type t from N(0, scale) floats (lattice types: random valid blocks). */
void *rand_typed(ob_type t, int64_t ne0, int64_t rows, float scale);
/* x rounded to quant_x.comp's int8 grid (d = max|x| / 127 per 32, q = round(x / d)): the
 * int8 decode path then matches the reference to float rounding. */
void round_q8(float *x, int64_t n);
/* A MATMUL of a random W of type t (K x N, from N(0, 1)) over T tokens of x on the int8
 * grid: the graph, its output in *o, the host data in *w and *x (the caller frees them
 * after the graph). */
ob_graph *q8_matmul_graph(ob_type t, int64_t K, int64_t N, int64_t T, void **w, float **x, ob_tensor **o);
/* Runs g on be: leaves uploaded, scratch NaN-poisoned, `check`'s bytes downloaded into
 * result; leaf data pointers restored afterwards. */
ob_status run_on(ob_backend *be, ob_graph *g, ob_tensor *check, void *result, char *err, size_t err_len);
/* The CPU reference for every computed node of g in order (host memory). */
void run_ref(ob_graph *g, void **scratch);
/* `check` after a run on every backend against the reference (as floats). */
void check_graph(ob_graph *g, ob_tensor *check, double atol, double rtol, const char *what);
/* A Vulkan backend made with env var `var` set to `val` (restored after). */
ob_backend *backend_with(const char *var, const char *val);
/* g on one backend against the reference; check_on_as names it "what, suffix". */
void check_on(ob_backend *be, ob_graph *g, ob_tensor *o, double atol, double rtol, const char *what);
void check_on_as(ob_backend *be, ob_graph *g, ob_tensor *o, double atol, double rtol, const char *what,
                 const char *suffix);
#endif
