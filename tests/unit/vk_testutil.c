/* Helpers of the Vulkan op tests (vk_testutil.h). */
#ifdef ONEBIT_VULKAN
#include "vk_testutil.h"
#include "backend/cpu/cpu.h"
#include "backend/vulkan/vulkan.h"
#include "format/quant.h"
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* lavapipe keeps a few small allocations reachable only from its own globals. The loader
 * unloads the driver when the last instance goes, and LeakSanitizer then reports them
 * from an unknown module; pinning the libraries (before the loader opens them) keeps them reachable (driver-owned, not
 * ours), and the suppression covers what the driver itself never frees. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libvulkan_lvp.so\n"; }
void pin_mesa_drivers(void) {
    static const char *libs[] = {"libvulkan_lvp.so", "libvulkan_intel.so", "libvulkan_intel_hasvk.so", "libvulkan_radeon.so"};
    for (size_t i = 0; i < OB_ARRAY_LEN(libs); i++) (void)dlopen(libs[i], RTLD_LAZY | RTLD_NODELETE);
}

ob_backend *g_be[N_BE];
const char *const g_be_name[N_BE] = {"mapped", "staging", "staged reads"};
ob_rng g_rng;
bool g_model_weights;

float *rand_f32(int64_t n, float scale) {
    float *x = malloc(sizeof(float) * (size_t)(n ? n : 1));
    ob_rng_fill_normal(&g_rng, x, n, scale);
    return x;
}

float *rand_rope_factors(int64_t n) {
    float *f = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) f[i] = 0.5f + 39.5f * ob_rng_uniform(&g_rng);
    return f;
}

bool is_iq(ob_type t) {
    return t == OB_TYPE_IQ2_XXS || t == OB_TYPE_IQ2_XS || t == OB_TYPE_IQ2_S || t == OB_TYPE_IQ3_XXS ||
           t == OB_TYPE_IQ3_S || t == OB_TYPE_IQ1_S || t == OB_TYPE_IQ1_M;
}

/* Lattice types: random bytes are valid blocks (every index names a grid point, every
 * sign and scale code is legal) and reach every grid point, which a quantizer's output
 * would not; only the f16 block scale is set, to a finite value in [0.005, 0.015). */
void *rand_iq(ob_type t, int64_t ne0, int64_t rows) {
    size_t bsz = ob_row_size(t, ob_type_block_size(t)), nb = (size_t)(ne0 * rows / ob_type_block_size(t));
    uint8_t *q = malloc(bsz * nb);
    for (size_t i = 0; i < bsz * nb; i++) q[i] = (uint8_t)ob_rng_u64(&g_rng);
    for (size_t b = 0; b < nb; b++) {
        uint8_t *blk = q + b * bsz;
        uint16_t d = ob_f32_to_f16(0.005f + 0.01f * ob_rng_uniform(&g_rng));
        if (t == OB_TYPE_IQ1_M) {
            /* the scale's four nibbles sit in the top nibble of each 16-bit scale word */
            for (int k = 0; k < 4; k++) blk[48 + 2 * k + 1] = (uint8_t)((blk[48 + 2 * k + 1] & 0x0f) | (((d >> (4 * k)) & 15) << 4));
        } else {
            memcpy(blk, &d, 2);
        }
    }
    return q;
}

void *rand_typed(ob_type t, int64_t ne0, int64_t rows, float scale) {
    if (is_iq(t)) return rand_iq(t, ne0, rows);
    float *f = rand_f32(ne0 * rows, scale);
    size_t rb = ob_row_size(t, ne0);
    char *q = malloc(rb * (size_t)rows);
    for (int64_t r = 0; r < rows; r++) {
        if (t == OB_TYPE_F32) memcpy(q + rb * (size_t)r, f + r * ne0, rb);
        else ob_type_traits_get(t)->from_float(f + r * ne0, q + rb * (size_t)r, ne0);
    }
    free(f);
    return q;
}

/* x rounded the way quant_x.comp quantizes it (d = max|x| / 127, q = round(x / d)): the
 * int8 path then sees exactly these integers and must match the reference on this x to
 * float rounding, which catches a wrong scale, offset or element order. */
void round_q8(float *x, int64_t n) {
    for (int64_t b = 0; b + 32 <= n; b += 32) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[b + j]));
        const float d = amax / 127.0f, id = amax > 0 ? 127.0f / amax : 0.0f;
        for (int j = 0; j < 32; j++) x[b + j] = d * rintf(x[b + j] * id);
    }
}

ob_graph *q8_matmul_graph(ob_type t, int64_t K, int64_t N, int64_t T, void **w, float **x, ob_tensor **o) {
    const int64_t nw[2] = {K, N}, nx[2] = {K, T};
    *w = rand_typed(t, K, N, 1.0f);
    *x = rand_f32(K * T, 1.0f);
    round_q8(*x, K * T);
    ob_graph *g = ob_graph_new(4);
    *o = ob_matmul(g, ob_leaf(g, "w", t, 2, nw, *w), ob_leaf(g, "x", OB_TYPE_F32, 2, nx, *x));
    return g;
}

/* Runs g on a Vulkan backend: leaves are uploaded, the scratch is NaN-poisoned, and the
 * bytes of `check` (the output, or a leaf the graph writes) are downloaded into result.
 * Leaf data pointers are restored afterwards. */
ob_status run_on(ob_backend *be, ob_graph *g, ob_tensor *check, void *result, char *err, size_t err_len) {
    void **host = calloc((size_t)g->n, sizeof(void *)), **dev = calloc((size_t)g->n, sizeof(void *));
    ob_status st = OB_OK;
    for (int64_t i = 0; i < g->n && !st; i++) {
        ob_tensor *t = &g->nodes[i];
        if (t->op != OB_OP_LEAF) continue;
        size_t sz = ob_nbytes(t);
        host[i] = t->data;
        dev[i] = be->iface->alloc(be, sz);
        if (!dev[i]) { st = OB_ERR_NOMEM; break; }
        /* block-type leaves as a model's weights (the backend's own layout, vk_repack.c) */
        const bool wt = g_model_weights && be->iface->upload_weight && ob_type_block_size(t->type) > 1;
        st = wt ? be->iface->upload_weight(be, dev[i], host[i], sz, t->type, t->ne[0])
                : be->iface->upload(be, dev[i], host[i], sz);
        t->data = dev[i];
    }
    ob_graph_plan(g);
    void *scratch = st ? NULL : be->iface->alloc(be, g->scratch_size);
    if (!st && !scratch) st = OB_ERR_NOMEM;
    if (!st && g->scratch_size) {
        float *nan = malloc(g->scratch_size);
        for (size_t i = 0; i < g->scratch_size / 4; i++) nan[i] = NAN;
        st = be->iface->upload(be, scratch, nan, g->scratch_size / 4 * 4);
        free(nan);
    }
    if (!st) {
        ob_graph_bind(g, scratch);
        st = be->iface->compute(be, g, err, err_len);
    }
    if (!st) st = be->iface->download(be, result, check->data, ob_nbytes(check));
    if (scratch) be->iface->free_buf(be, scratch);
    for (int64_t i = 0; i < g->n; i++) {
        if (g->nodes[i].op != OB_OP_LEAF) continue;
        if (dev[i]) be->iface->free_buf(be, dev[i]);
        if (host[i]) g->nodes[i].data = host[i];
    }
    free(host);
    free(dev);
    return st;
}

/* The CPU reference for every computed node of g in order (host memory). */
void run_ref(ob_graph *g, void **scratch) {
    ob_graph_plan(g);
    *scratch = aligned_alloc(64, (g->scratch_size + 64) & ~(size_t)63);
    ob_graph_bind(g, *scratch);
    for (int64_t i = 0; i < g->n; i++)
        if (g->nodes[i].op != OB_OP_LEAF && g->nodes[i].op != OB_OP_VIEW) ob_cpu_ref_op(&g->nodes[i]);
}

/* Compares `check` after a Vulkan run with the reference (as floats: non-F32 results
 * are dequantized first). */
void check_graph(ob_graph *g, ob_tensor *check, double atol, double rtol, const char *what) {
    size_t nb = ob_nbytes(check);
    int64_t n = ob_nelements(check);
    void *got[N_BE];
    ob_status st[N_BE];
    char err[N_BE][256];
    /* Devices first: the reference may write a leaf (KV_STORE) that the device must see fresh. */
    for (int b = 0; b < N_BE; b++) {
        got[b] = malloc(nb);
        err[b][0] = 0;
        st[b] = run_on(g_be[b], g, check, got[b], err[b], sizeof(err[b]));
    }
    void *scratch;
    run_ref(g, &scratch);
    float *ref = malloc(sizeof(float) * (size_t)n), *gf = malloc(sizeof(float) * (size_t)n);
    ob_dequantize(check->type, check->data, ref, n);
    for (int b = 0; b < N_BE; b++) {
        CHECKF(st[b] == OB_OK, "%s [%s]: run failed: %s", what, g_be_name[b], err[b]);
        if (st[b] == OB_OK) {
            ob_dequantize(check->type, got[b], gf, n);
            int64_t at = 0;
            double e = ob_test_err_ratio(gf, ref, n, atol, rtol, &at);
            CHECKF(e <= 1.0, "%s [%s]: err ratio %g at %lld: got %g want %g", what, g_be_name[b], e,
                   (long long)at, gf[at], ref[at]);
        }
        free(got[b]);
    }
    free(ref);
    free(gf);
    free(scratch);
}

/* A Vulkan backend made with env var `var` set to `val` (restored after). */
ob_backend *backend_with(const char *var, const char *val) {
    char err[256] = "", keep[32] = "";
    const char *was = getenv(var);
    if (was) snprintf(keep, sizeof(keep), "%s", was);
    setenv(var, val, 1);
    ob_backend *be = ob_backend_vulkan_new(0, false, err, sizeof(err));
    if (was) setenv(var, keep, 1);
    else unsetenv(var);
    CHECKF(be != NULL, "backend with %s=%s: %s", var, val, err);
    return be;
}

/* g on one backend against the reference. */
void check_on(ob_backend *be, ob_graph *g, ob_tensor *o, double atol, double rtol, const char *what) {
    int64_t n = ob_nelements(o);
    float *got = malloc(sizeof(float) * (size_t)n);
    char err[256] = "";
    ob_status st = run_on(be, g, o, got, err, sizeof(err));
    CHECKF(st == OB_OK, "%s: %s", what, err);
    void *scratch;
    run_ref(g, &scratch);
    int64_t at = 0;
    double e = st ? 0 : ob_test_err_ratio(got, o->data, n, atol, rtol, &at);
    CHECKF(e <= 1.0, "%s: err ratio %g at %lld: got %g want %g", what, e, (long long)at, got[at], ((float *)o->data)[at]);
    free(scratch);
    free(got);
}

/* check_on under the name "what, suffix". */
void check_on_as(ob_backend *be, ob_graph *g, ob_tensor *o, double atol, double rtol, const char *what,
                        const char *suffix) {
    char w[192];
    snprintf(w, sizeof(w), "%s, %s", what, suffix);
    check_on(be, g, o, atol, rtol, w);
}


bool vkt_begin(const char *name) {
    setenv("ONEBIT_VULKAN_ALLOW_CPU", "1", 0); /* lavapipe where there is no GPU */
    setenv("ONEBIT_VK_HZ_AUDIT", "1", 0);         /* a missing barrier fails (vk_hazard.c) */
    pin_mesa_drivers();
    ob_vulkan_list_devices(stdout);
    char err[512] = "";
    g_be[0] = ob_backend_vulkan_new(0, false, err, sizeof(err));
    if (!g_be[0]) {
        printf("%s: SKIPPED (no Vulkan device: %s)\n", name, err);
        return false;
    }
    setenv("ONEBIT_VULKAN_STAGING", "1", 1);
    g_be[1] = ob_backend_vulkan_new(0, false, err, sizeof(err));
    unsetenv("ONEBIT_VULKAN_STAGING");
    CHECKF(g_be[1] != NULL, "staging backend: %s", err);
    if (!g_be[1]) return false;
    setenv("ONEBIT_VULKAN_STAGED_READS", "1", 1);
    g_be[2] = ob_backend_vulkan_new(0, false, err, sizeof(err));
    unsetenv("ONEBIT_VULKAN_STAGED_READS");
    CHECKF(g_be[2] != NULL, "staged-reads backend: %s", err);
    return g_be[2] != NULL;
}

void vkt_end(void) {
    for (int b = 0; b < N_BE; b++) {
        if (g_be[b]) ob_backend_free(g_be[b]);
        g_be[b] = NULL;
    }
}
#endif
