/* Shared by test_cuda_ops' files: seeded random inputs, a graph run on a CUDA backend
 * against ob_cpu_ref_op on host copies, and backends made under an environment switch. */
#include "cuda_testutil.h"
#include "backend/cpu/cpu.h"
#include "format/quant.h"
#include <math.h>
#include <string.h>

ob_rng g_rng;

/* Max |a - ref| over max |ref|; NaN counts as infinite. */
double rel_err(const float *a, const float *ref, int64_t n) {
    double md = 0, mr = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (!(d <= md)) md = d != d ? INFINITY : d;
        if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
    }
    return md / (mr > 0 ? mr : 1);
}

float *rand_f32(int64_t n, float scale) {
    float *x = malloc(sizeof(float) * (size_t)n);
    ob_rng_fill_normal(&g_rng, x, n, scale);
    return x;
}

/* n ROPE frequency factors, uniform in [0.5, 40]: a YaRN-like spread that divides the
 * angles, never the identity. */
float *rand_factors(int64_t n) {
    float *f = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) f[i] = 0.5f + 39.5f * ob_rng_uniform(&g_rng);
    return f;
}

/* Bytes of n random values of type t (quantized from normals). */
void *rand_typed(ob_type t, int64_t n, float scale) {
    float *x = rand_f32(n, scale);
    size_t nb = ob_type_row_size(t, n);
    void *q = malloc(nb);
    if (t == OB_TYPE_F32) memcpy(q, x, nb);
    else ob_quantize(t, x, q, n);
    free(x);
    return q;
}

/* Tolerance of run_both_keep's cache check: rows rounded from the same f32 match exactly, but
 * a normed row (q/k norm) may differ from the CPU's by a float ulp (the GPU's rsqrtf), which
 * the rare element at an f16 rounding boundary turns into one f16 ulp. */
double g_cache_tol = 1e-6;

/* Runs g's computed nodes with ob_cpu_ref_op on host copies and with the backend on device
 * copies, and compares `out` (and, if given, a leaf the graph writes, such as a KV cache).
 * Leaves keep host data; graph-owned buffers are freed by the caller. */
ob_status run_both_keep(ob_backend *be, ob_graph *g, ob_tensor *out, ob_tensor *written, double tol, const char *what,
                        float **keep) {
    ob_graph_plan(g);
    int64_t n = g->n;
    void **host = calloc((size_t)n, sizeof(void *)), **dev = calloc((size_t)n, sizeof(void *));
    for (int64_t i = 0; i < n; i++) {
        ob_tensor *t = &g->nodes[i];
        if (t->op != OB_OP_LEAF) continue;
        size_t nb = ob_nbytes(t);
        host[i] = t->data;
        void *copy = malloc(nb);
        memcpy(copy, t->data, nb);
        t->data = copy; /* the reference may write it (KV cache) */
        dev[i] = be->iface->alloc(be, nb);
        be->iface->upload(be, dev[i], host[i], nb);
    }
    void *hs = malloc(g->scratch_size + 64);
    memset(hs, 0xff, g->scratch_size + 64);
    ob_graph_bind(g, hs);
    for (int64_t i = 0; i < n; i++)
        if (g->nodes[i].op != OB_OP_LEAF && g->nodes[i].op != OB_OP_VIEW) ob_cpu_ref_op(&g->nodes[i]);
    size_t onb = ob_nbytes(out), wnb = written ? ob_nbytes(written) : 0;
    float *ref = malloc(onb), *got = malloc(onb);
    memcpy(ref, out->data, onb);
    void *wref = written ? malloc(wnb) : NULL, *wgot = written ? malloc(wnb) : NULL;
    if (written) memcpy(wref, written->data, wnb);
    for (int64_t i = 0; i < n; i++)
        if (g->nodes[i].op == OB_OP_LEAF) { free(g->nodes[i].data); g->nodes[i].data = dev[i]; }
    void *ds = be->iface->alloc(be, g->scratch_size + 64);
    be->iface->upload(be, ds, hs, g->scratch_size + 64); /* poison: all-ones bytes are NaN */
    ob_graph_bind(g, ds);
    char err[256] = {0};
    ob_status st = be->iface->compute(be, g, err, sizeof(err));
    if (!st) st = be->iface->download(be, got, out->data, onb);
    if (!st && written) st = be->iface->download(be, wgot, written->data, wnb);
    if (st) CHECKF(0, "%s: compute failed: %s", what, err);
    else if (out->type == OB_TYPE_F32) {
        double e = rel_err(got, ref, (int64_t)(onb / 4));
        CHECKF(e <= tol, "%s: rel err %.3g > %.1g", what, e, tol);
    } else if (memcmp(got, ref, onb)) {
        size_t i = 0;
        while (((uint8_t *)got)[i] == ((uint8_t *)ref)[i]) i++;
        CHECKF(0, "%s: bytes differ from byte %zu (got %02x, want %02x)", what, i, ((uint8_t *)got)[i], ((uint8_t *)ref)[i]);
    }
    if (!st && written) {
        /* Cache rows: compare dequantized values (f16 rounding of the same f32 is exact). */
        int64_t ne = ob_nelements(written);
        float *a = malloc(sizeof(float) * (size_t)ne), *b = malloc(sizeof(float) * (size_t)ne);
        ob_dequantize(written->type, wgot, a, ne);
        ob_dequantize(written->type, wref, b, ne);
        double e = rel_err(a, b, ne);
        CHECKF(e <= g_cache_tol, "%s: cache rel err %.3g > %.1g", what, e, g_cache_tol);
        free(a);
        free(b);
    }
    for (int64_t i = 0; i < n; i++) {
        if (g->nodes[i].op != OB_OP_LEAF) continue;
        be->iface->free_buf(be, dev[i]);
        g->nodes[i].data = host[i];
    }
    be->iface->free_buf(be, ds);
    if (keep && !st) { *keep = got; got = NULL; }
    free(hs); free(ref); free(got); free(wref); free(wgot); free(host); free(dev);
    return st;
}

ob_status run_both(ob_backend *be, ob_graph *g, ob_tensor *out, ob_tensor *written, double tol, const char *what) {
    return run_both_keep(be, g, out, written, tol, what, NULL);
}

/* run_both, then one line saying how the case went (the lead reads these off a device run),
 * counted in *cases. */
void run_case(ob_backend *be, ob_graph *g, ob_tensor *out, double tol, const char *what, int *cases) {
    const int before = ob_test_failures;
    run_both(be, g, out, NULL, tol, what);
    if (tol > 0) printf("%s: %s (tol %.0e)\n", what, ob_test_failures == before ? "ok" : "FAILED", tol);
    else printf("%s: %s (exact)\n", what, ob_test_failures == before ? "ok" : "FAILED");
    (*cases)++;
}

/* Sets env var k to v (NULL: unset) and returns its previous value in keep (keep[0] = 1
 * when it was set). */
void env_swap(const char *k, const char *v, char keep[64]) {
    const char *was = getenv(k);
    char old[64] = {0};
    if (was) {
        old[0] = 1;
        snprintf(old + 1, sizeof(old) - 1, "%s", was);
    }
    if (v) setenv(k, v, 1);
    else unsetenv(k);
    memcpy(keep, old, sizeof(old));
}
void env_restore(const char *k, const char keep[64]) {
    if (keep[0]) setenv(k, keep + 1, 1);
    else unsetenv(k);
}

/* A CUDA backend created while env var name is value (the backend reads its switches at
 * creation); the variable is restored after. */
ob_backend *cuda_backend_with(const char *name, const char *value, char *err, size_t err_len) {
    char keep[64];
    env_swap(name, value, keep);
    ob_backend *be = ob_backend_cuda_new(0, false, err, err_len);
    env_restore(name, keep);
    return be;
}
