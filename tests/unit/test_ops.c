/* The one op test: every case of the registry (ops_cases.h, the tables in ops_*.c) on
 * every backend compiled in and present, against the plain-C reference (ob_cpu_ref_op run
 * node by node on host copies), with the scratch (every node's output) poisoned with NaN
 * bytes before each run, so an element a kernel forgets to write fails.
 *
 * Backends: the CPU always, at 1, 2 and 3 threads with the scalar and the best SIMD
 * kernels; CUDA (built with ONEBIT_CUDA, a device present); Vulkan (built with
 * ONEBIT_VULKAN, a device present; lavapipe allowed unless ONEBIT_VULKAN_ALLOW_CPU is set
 * otherwise) on mapped memory, through staging copies and with staged reads (a case of
 * more than ~4 M multiply-adds on the first only: the others move the same bytes to the
 * same kernels). A case with knobs runs on a backend of its family made with them; a
 * fused chain also on the family's backend with fusion off.
 *
 * Usage: test_ops [-l] [-v] [substring ...]: -l lists the cases, -v prints each as it runs,
 * substrings keep the cases whose names contain one. ONEBIT_TEST_SHARD=i/n runs every n-th
 * case from the i-th (testutil.h). ONEBIT_TEST_BACKENDS="cuda" (families among cpu, cuda
 * and vulkan, space or comma separated; unset or empty: all) opens only those, so a slow
 * run on one backend (a GPU sanitizer) spends no time on the others; a case of none of
 * them is skipped as on a missing device, and the whole run's op coverage check builds
 * it all the same. Prints "<backend>: N checks, M failed" per backend ("<backend>:
 * SKIPPED (why)" for one not built, without a device or not listed), then the total. */
#include "ops_cases.h"
#include "backend/cpu/cpu.h"
#include "graph/op_table.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef ONEBIT_VULKAN
/* vk_testutil.c: keeps lavapipe's libraries loaded so LeakSanitizer can attribute what the
 * driver keeps (its suppression list is there too) */
void pin_mesa_drivers(void);
#endif

static const char *const g_fam_name[OPS_NFAM] = {"cpu", "cuda", "vulkan"};

/* ---- the registry and the build helpers ------------------------------------------------ */

ops_case *ops_add(ops_list *l, void (*build)(ops_build *, const void *), const void *p, const char *fmt, ...) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->c = realloc(l->c, sizeof(ops_case) * (size_t)l->cap);
        if (!l->c) { fprintf(stderr, "test_ops: out of memory\n"); exit(2); }
    }
    ops_case *c = &l->c[l->n++];
    memset(c, 0, sizeof(*c));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->name, sizeof(c->name), fmt, ap);
    va_end(ap);
    c->build = build;
    c->p = p;
    return c;
}

void *ops_own(ops_build *b, size_t bytes) {
    if (b->n_owned == b->cap_owned) {
        b->cap_owned = b->cap_owned ? 2 * b->cap_owned : 32;
        b->owned = realloc(b->owned, sizeof(void *) * (size_t)b->cap_owned);
    }
    void *p = calloc(1, bytes ? bytes : 1);
    if (!b->owned || !p) { fprintf(stderr, "test_ops: out of memory\n"); exit(2); }
    b->owned[b->n_owned++] = p;
    return p;
}

float *ops_f32(ops_build *b, int64_t n, float scale) {
    float *x = ops_own(b, sizeof(float) * (size_t)n);
    ob_rng_fill_normal(&b->rng, x, n, scale);
    return x;
}

float *ops_rope_factors(ops_build *b, int64_t n) {
    float *f = ops_own(b, sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) f[i] = 0.5f + 39.5f * ob_rng_uniform(&b->rng);
    return f;
}

static bool lattice_type(ob_type t) {
    return t == OB_TYPE_IQ2_XXS || t == OB_TYPE_IQ2_XS || t == OB_TYPE_IQ2_S || t == OB_TYPE_IQ3_XXS ||
           t == OB_TYPE_IQ3_S || t == OB_TYPE_IQ1_S || t == OB_TYPE_IQ1_M;
}

/* Random bytes are valid blocks of the lattice types (every index names a grid point, every
 * sign and scale code is legal); only the f16 block scale is set, finite in [0.005, 0.015).
 * Q4_K and Q6_K likewise (every bit pattern of their quants and sub-block scales is valid)
 * with sane super-block scales: quantizing floats to them costs ~0.2 us an element. */
static void random_blocks(ops_build *b, ob_type t, uint8_t *q, size_t nblocks) {
    const size_t bs = ob_type_traits_get(t)->type_size;
    for (size_t i = 0; i < bs * nblocks; i++) q[i] = (uint8_t)ob_rng_u64(&b->rng);
    for (size_t k = 0; k < nblocks; k++) {
        uint8_t *blk = q + k * bs;
        const uint16_t d = ob_f32_to_f16(0.005f + 0.01f * ob_rng_uniform(&b->rng));
        if (t == OB_TYPE_IQ1_M) {
            /* the scale's four nibbles sit in the top nibble of each 16-bit scale word */
            for (int j = 0; j < 4; j++) blk[48 + 2 * j + 1] = (uint8_t)((blk[48 + 2 * j + 1] & 0x0f) | (((d >> (4 * j)) & 15) << 4));
        } else if (t == OB_TYPE_Q4_K) {
            const uint16_t dmin = ob_f32_to_f16(0.001f + 0.004f * ob_rng_uniform(&b->rng));
            memcpy(blk, &d, 2);
            memcpy(blk + 2, &dmin, 2);
        } else if (t == OB_TYPE_Q6_K) {
            memcpy(blk + 208, &d, 2);
        } else {
            memcpy(blk, &d, 2);
        }
    }
}

void *ops_typed(ops_build *b, ob_type t, int64_t ne0, int64_t rows, float scale) {
    const size_t rb = ob_row_size(t, ne0);
    uint8_t *q = ops_own(b, rb * (size_t)rows);
    const bool huge = (t == OB_TYPE_Q4_K || t == OB_TYPE_Q6_K) && ne0 * rows > ((int64_t)1 << 22);
    if (lattice_type(t) || huge) {
        random_blocks(b, t, q, (size_t)(ne0 * rows / ob_type_block_size(t)));
        return q;
    }
    /* a huge plain table (a long KV cache's history): uniform draws of unit variance, the
     * normal's logs and cosines cost seconds there */
    const bool fast = ob_type_block_size(t) == 1 && ne0 * rows > ((int64_t)1 << 20);
    float *f = malloc(sizeof(float) * (size_t)ne0);
    for (int64_t r = 0; r < rows; r++) {
        if (fast)
            for (int64_t i = 0; i < ne0; i++) f[i] = scale * 1.7320508f * (2.0f * ob_rng_uniform(&b->rng) - 1.0f);
        else ob_rng_fill_normal(&b->rng, f, ne0, scale);
        ob_type_traits_get(t)->from_float(f, q + rb * (size_t)r, ne0);
    }
    free(f);
    return q;
}

void ops_round_q8(float *x, int64_t n) {
    for (int64_t k = 0; k + 32 <= n; k += 32) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[k + j]));
        const float d = amax / 127.0f, id = amax > 0 ? 127.0f / amax : 0.0f;
        for (int j = 0; j < 32; j++) x[k + j] = d * rintf(x[k + j] * id);
    }
}

void ops_special_row(float *x, int64_t ne0, int64_t r) {
    static const float sp[4] = {NAN, INFINITY, -INFINITY, -0.0f};
    for (int64_t i = 0; i < ne0 && i < 4; i++) x[r * ne0 + i] = sp[i];
}

ob_tensor *ops_leaf(ops_build *b, const char *name, ob_type t, int nd, const int64_t *ne, void *data) {
    return ob_leaf(b->g, name, t, nd, ne, data);
}

ob_tensor *ops_leaf_f32(ops_build *b, const char *name, int nd, const int64_t *ne, float scale) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= ne[d];
    return ob_leaf(b->g, name, OB_TYPE_F32, nd, ne, ops_f32(b, n, scale));
}

ob_tensor *ops_leaf_i32(ops_build *b, const char *name, int64_t n, const int32_t *v) {
    int32_t *c = ops_own(b, sizeof(int32_t) * (size_t)n);
    memcpy(c, v, sizeof(int32_t) * (size_t)n);
    const int64_t ne[1] = {n};
    return ob_leaf(b->g, name, OB_TYPE_I32, 1, ne, c);
}

void ops_check(ops_build *b, ob_tensor *t, ops_tol tol) {
    if (b->n_chk == OPS_MAX_CHECKS) { fprintf(stderr, "%s: too many checks\n", b->name); exit(2); }
    b->chk[b->n_chk] = t;
    for (int f = 0; f < OPS_NFAM; f++) b->tol[b->n_chk][f] = tol;
    b->n_chk++;
}

void ops_tol_on(ops_build *b, unsigned mask, ops_tol tol) {
    for (int f = 0; f < OPS_NFAM; f++)
        if (b->n_chk && (mask & OPS_BIT(f))) b->tol[b->n_chk - 1][f] = tol;
}

int ops_weight_types(ob_type *out) {
    int n = 0;
    for (int t = 0; t < OB_TYPE_COUNT; t++) {
        const ob_type_traits *tr = ob_type_traits_get((ob_type)t);
        if (tr && tr->name && tr->to_float && (tr->is_quantized || t == OB_TYPE_F32 || t == OB_TYPE_F16 || t == OB_TYPE_BF16))
            out[n++] = (ob_type)t;
    }
    return n;
}

/* ---- backends ------------------------------------------------------------------------- */

typedef struct target {
    int fam;
    const char *label;
    ob_backend *be;
    int simd; /* CPU: the SIMD level compute runs at (ob_cpu_set_simd_level) */
} target;

/* Backends made for knobs (and for batch-invariant mode), kept for the cases after. */
typedef struct knob_be {
    int fam;
    char knobs[160];
    bool det;
    ob_backend *be;
} knob_be;

static target g_tg[12];
static int g_ntg;
static knob_be g_kb[48];
static int g_nkb;
static bool g_have[OPS_NFAM];
static bool g_want[OPS_NFAM]; /* ONEBIT_TEST_BACKENDS */
static char g_skip[OPS_NFAM][300];
static int g_checks[OPS_NFAM + 1], g_failed[OPS_NFAM + 1], g_unsup[OPS_NFAM], g_known[OPS_NFAM]; /* [OPS_NFAM]: the reference */
static bool g_verbose;
static bool g_op_seen[OB_OP_COUNT]; /* ops in the graphs built */

/* The family an environment variable belongs to (-1: none). */
static int knob_family(const char *var) {
    if (!strncmp(var, "ONEBIT_CUDA_", 12)) return OPS_CUDA;
    if (!strncmp(var, "ONEBIT_VK_", 10) || !strncmp(var, "ONEBIT_VULKAN_", 14)) return OPS_VK;
    return -1;
}

static unsigned knob_families(const char *knobs) {
    unsigned m = 0;
    char buf[160];
    snprintf(buf, sizeof(buf), "%s", knobs);
    for (char *s = strtok(buf, " "); s; s = strtok(NULL, " "))
        if (knob_family(s) >= 0) m |= OPS_BIT(knob_family(s));
    return m;
}

static ob_backend *new_backend(int fam, char *err, size_t err_len) {
#ifdef ONEBIT_CUDA
    if (fam == OPS_CUDA) return ob_backend_cuda_new(0, false, err, err_len);
#endif
#ifdef ONEBIT_VULKAN
    if (fam == OPS_VK) return ob_backend_vulkan_new(0, false, err, err_len);
#endif
    snprintf(err, err_len, "no such backend");
    return NULL;
}

/* A backend of family fam made while the knobs' variables of that family are set (the
 * backends read their switches when made); the environment is restored after. */
static ob_backend *backend_with(int fam, const char *knobs, char *err, size_t err_len) {
    char buf[160], *var[8], old[8][128];
    bool had[8];
    int n = 0;
    snprintf(buf, sizeof(buf), "%s", knobs);
    for (char *s = strtok(buf, " "); s && n < 8; s = strtok(NULL, " ")) {
        char *eq = strchr(s, '=');
        if (!eq || knob_family(s) != fam) continue;
        *eq = 0;
        const char *was = getenv(s);
        had[n] = was != NULL;
        snprintf(old[n], sizeof(old[n]), "%s", was ? was : "");
        var[n++] = s;
        setenv(s, eq + 1, 1);
    }
    ob_backend *be = new_backend(fam, err, err_len);
    for (int i = n - 1; i >= 0; i--) {
        if (had[i]) setenv(var[i], old[i], 1);
        else unsetenv(var[i]);
    }
    return be;
}

static ob_backend *knob_backend(int fam, const char *knobs, bool det) {
    for (int i = 0; i < g_nkb; i++)
        if (g_kb[i].fam == fam && g_kb[i].det == det && !strcmp(g_kb[i].knobs, knobs)) return g_kb[i].be;
    if (g_nkb == (int)OB_ARRAY_LEN(g_kb)) { fprintf(stderr, "test_ops: too many knob backends\n"); exit(2); }
    char err[256] = "";
    knob_be *k = &g_kb[g_nkb++];
    k->fam = fam;
    k->det = det;
    snprintf(k->knobs, sizeof(k->knobs), "%s", knobs);
    k->be = backend_with(fam, knobs, err, sizeof(err));
    const int c0 = ob_test_checks, f0 = ob_test_failures;
    CHECKF(k->be != NULL, "%s backend with \"%s\": %s", g_fam_name[fam], knobs, err);
    g_checks[fam] += ob_test_checks - c0;
    g_failed[fam] += ob_test_failures - f0;
    if (k->be) k->be->deterministic = det;
    return k->be;
}

static void add_target(int fam, const char *label, ob_backend *be, int simd) {
    g_tg[g_ntg++] = (target){fam, label, be, simd};
}

/* g_want from ONEBIT_TEST_BACKENDS; false: a name that is no family (printed). */
static bool parse_backends(void) {
    const char *e = getenv("ONEBIT_TEST_BACKENDS");
    bool any = false;
    for (const char *p = e ? e : ""; *p;) {
        const size_t n = strcspn(p, " ,");
        int f = 0;
        while (f < OPS_NFAM && (strlen(g_fam_name[f]) != n || strncmp(p, g_fam_name[f], n))) f++;
        if (n && f == OPS_NFAM) {
            fprintf(stderr, "test_ops: ONEBIT_TEST_BACKENDS: unknown backend \"%.*s\" (want cpu, cuda or vulkan)\n", (int)n, p);
            return false;
        }
        if (n) g_want[f] = any = true;
        p += n + (p[n] != 0);
    }
    for (int f = 0; f < OPS_NFAM && !any; f++) g_want[f] = true;
    return true;
}

static void open_backends(void) {
    static const char *const cpu_label[6] = {"cpu nth=1 scalar", "cpu nth=2 scalar", "cpu nth=3 scalar",
                                             "cpu nth=1 simd", "cpu nth=2 simd", "cpu nth=3 simd"};
    for (int f = 0; f < OPS_NFAM; f++)
        if (!g_want[f]) snprintf(g_skip[f], sizeof(g_skip[f]), "not in ONEBIT_TEST_BACKENDS");
    if (g_want[OPS_CPU]) {
        ob_backend *cpu[3];
        for (int i = 0; i < 3; i++) cpu[i] = ob_backend_cpu_new(i + 1);
        for (int lv = 0; lv < 2; lv++)
            for (int i = 0; i < 3; i++) add_target(OPS_CPU, cpu_label[3 * lv + i], cpu[i], lv ? -1 : 0);
        g_have[OPS_CPU] = true;
    }
#if defined(ONEBIT_CUDA) || defined(ONEBIT_VULKAN)
    char err[256] = "";
#endif
#ifdef ONEBIT_CUDA
    ob_backend *cu = g_want[OPS_CUDA] ? ob_backend_cuda_new(0, false, err, sizeof(err)) : NULL;
    if (cu) {
        add_target(OPS_CUDA, "cuda", cu, 0);
        g_have[OPS_CUDA] = true;
    } else if (g_want[OPS_CUDA]) {
        snprintf(g_skip[OPS_CUDA], sizeof(g_skip[OPS_CUDA]), "no CUDA device: %s", err);
    }
#else
    if (g_want[OPS_CUDA]) snprintf(g_skip[OPS_CUDA], sizeof(g_skip[OPS_CUDA]), "built without -DONEBIT_CUDA=ON");
#endif
#ifdef ONEBIT_VULKAN
    if (!g_want[OPS_VK]) return;
    setenv("ONEBIT_VULKAN_ALLOW_CPU", "1", 0); /* lavapipe where there is no GPU, as test_vulkan_ops */
    /* every level's dispatches checked apart from the hazard ranges (vk_hazard.c): a
     * missing barrier shows on lavapipe too, which runs dispatches one after another */
    setenv("ONEBIT_VK_HZ_AUDIT", "1", 0);
    pin_mesa_drivers();
    err[0] = 0;
    ob_backend *vk = ob_backend_vulkan_new(0, false, err, sizeof(err));
    if (vk) {
        add_target(OPS_VK, "vulkan mapped", vk, 0);
        g_have[OPS_VK] = true;
        /* staging copies; mapped writes with staged reads (a discrete GPU's uncached maps) */
        static const char *const var[2] = {"ONEBIT_VULKAN_STAGING=1", "ONEBIT_VULKAN_STAGED_READS=1"};
        static const char *const label[2] = {"vulkan staging", "vulkan staged reads"};
        for (int i = 0; i < 2; i++) {
            ob_backend *v = backend_with(OPS_VK, var[i], err, sizeof(err));
            const int c0 = ob_test_checks, f0 = ob_test_failures;
            CHECKF(v != NULL, "%s backend: %s", label[i], err);
            g_checks[OPS_VK] += ob_test_checks - c0;
            g_failed[OPS_VK] += ob_test_failures - f0;
            if (v) add_target(OPS_VK, label[i], v, 0);
        }
    } else {
        snprintf(g_skip[OPS_VK], sizeof(g_skip[OPS_VK]), "no Vulkan device: %s", err);
    }
#else
    if (g_want[OPS_VK]) snprintf(g_skip[OPS_VK], sizeof(g_skip[OPS_VK]), "built without -DONEBIT_VULKAN=ON");
#endif
}

static void close_backends(void) {
    for (int i = 0; i < g_nkb; i++) ob_backend_free(g_kb[i].be);
    for (int i = 0; i < g_ntg; i++) {
        bool dup = false;
        for (int j = 0; j < i; j++) dup |= g_tg[j].be == g_tg[i].be;
        if (!dup) ob_backend_free(g_tg[i].be);
    }
}

/* The knobs that turn a family's fusions off (a chain's unfused run). */
static const char *unfused_knobs(int fam) {
    return fam == OPS_CUDA ? "ONEBIT_CUDA_FUSE=0" : fam == OPS_VK ? "ONEBIT_VK_NO_FUSE=1" : NULL;
}

/* ---- running a graph ------------------------------------------------------------------ */

static bool is_computed(const ob_tensor *t) { return t->op != OB_OP_LEAF && t->op != OB_OP_VIEW; }

/* Is t a leaf some node writes (a KV_STORE's cache, a recurrent op's state)? */
static bool written_leaf(const ob_graph *g, const ob_tensor *t) {
    for (int64_t i = 0; i < g->n; i++)
        for (int s = 0; s < OB_MAX_SRC; s++)
            if (g->nodes[i].src[s] == t && ob_op_writes_src(&g->nodes[i], s)) return true;
    return false;
}

/* The reference: every computed node in order, on host copies of the leaves the graph
 * writes; the checked tensors' bytes into ref[i]. */
static void run_reference(ob_graph *g, const ops_build *b, void **ref) {
    void **saved = calloc((size_t)g->n, sizeof(void *));
    for (int64_t i = 0; i < g->n; i++) {
        ob_tensor *t = &g->nodes[i];
        if (t->op != OB_OP_LEAF || !written_leaf(g, t)) continue;
        saved[i] = t->data;
        t->data = malloc(ob_nbytes(t));
        memcpy(t->data, saved[i], ob_nbytes(t));
    }
    uint8_t *scratch = aligned_alloc(64, (g->scratch_size + 64) & ~(size_t)63);
    memset(scratch, 0xff, g->scratch_size);
    ob_graph_bind(g, scratch);
    for (int64_t i = 0; i < g->n; i++)
        if (is_computed(&g->nodes[i])) ob_cpu_ref_op(&g->nodes[i]);
    for (int c = 0; c < b->n_chk; c++) {
        ref[c] = malloc(ob_nbytes(b->chk[c]));
        memcpy(ref[c], b->chk[c]->data, ob_nbytes(b->chk[c]));
    }
    for (int64_t i = 0; i < g->n; i++)
        if (saved[i]) { free(g->nodes[i].data); g->nodes[i].data = saved[i]; }
    free(saved);
    free(scratch);
}

/* Runs g on be: leaves uploaded from their host data, the scratch poisoned (all-ones
 * bytes: NaN floats, -1 ids), the checked tensors downloaded into out[i]; leaf pointers
 * restored after. */
static ob_status run_on(ob_backend *be, ob_graph *g, const ops_build *b, void **out, char *err, size_t err_len) {
    void **host = calloc((size_t)g->n, sizeof(void *)), **dev = calloc((size_t)g->n, sizeof(void *));
    ob_status st = OB_OK;
    for (int64_t i = 0; i < g->n && !st; i++) {
        ob_tensor *t = &g->nodes[i];
        if (t->op != OB_OP_LEAF) continue;
        host[i] = t->data;
        dev[i] = be->iface->alloc(be, ob_nbytes(t));
        if (!dev[i]) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "leaf %s: no memory", t->name); break; }
        st = be->iface->upload(be, dev[i], host[i], ob_nbytes(t));
        t->data = dev[i];
    }
    void *scratch = st ? NULL : be->iface->alloc(be, g->scratch_size + 64);
    if (!st && !scratch) st = ob_fail(err, err_len, OB_ERR_NOMEM, "scratch: no memory");
    if (!st) {
        void *poison = malloc(g->scratch_size + 64);
        memset(poison, 0xff, g->scratch_size + 64);
        st = be->iface->upload(be, scratch, poison, g->scratch_size + 64);
        free(poison);
    }
    if (!st) {
        ob_graph_bind(g, scratch);
        st = be->iface->compute(be, g, err, err_len);
    }
    for (int c = 0; c < b->n_chk && !st; c++) st = be->iface->download(be, out[c], b->chk[c]->data, ob_nbytes(b->chk[c]));
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

/* The first computed node be refuses, or NULL. */
static const ob_tensor *refused_node(ob_backend *be, const ob_graph *g) {
    for (int64_t i = 0; i < g->n; i++)
        if (is_computed(&g->nodes[i]) && !be->iface->supports(be, &g->nodes[i])) return &g->nodes[i];
    return NULL;
}

/* t's bytes as n floats (owned by the caller). */
static float *as_f32(const ob_tensor *t, const void *bytes) {
    const int64_t n = ob_nelements(t);
    float *f = malloc(sizeof(float) * (size_t)(n ? n : 1));
    ob_dequantize(t->type, bytes, f, n);
    return f;
}

static double max_abs(const float *r, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(r[i]) && fabs(r[i]) > m) m = fabs(r[i]);
    return m;
}

/* How many elements of a miss r by more than tol (ops_tol); the worst in *at, its error
 * over its bound in *ratio (inf: a NaN or infinity where the other has none). */
static int64_t compare(const float *a, const float *r, int64_t n, ops_tol tol, int64_t *at, double *ratio) {
    const double mx = max_abs(r, n);
    int64_t bad = 0;
    *at = 0;
    *ratio = 0;
    for (int64_t i = 0; i < n; i++) {
        double e;
        const bool sign_off = tol.sign && a[i] == 0 && r[i] == 0 && signbit(a[i]) != signbit(r[i]);
        if (isnan(r[i]) || isnan(a[i])) e = isnan(r[i]) && isnan(a[i]) ? 0 : INFINITY;
        else if (isinf(r[i]) || isinf(a[i])) e = a[i] == r[i] ? 0 : INFINITY;
        else if (tol.exact) e = a[i] == r[i] ? 0 : INFINITY;
        else {
            const double d = fabs((double)a[i] - r[i]), lim = tol.atol + tol.rtol * fabs(r[i]) + tol.mrel * mx;
            e = d == 0 ? 0 : lim > 0 ? d / lim : INFINITY;
        }
        if (sign_off) e = INFINITY;
        if (e > 1.0) bad++;
        if (e > *ratio) { *ratio = e; *at = i; }
    }
    return bad;
}

/* Check c of b: got (bytes) against ref within tol; true when within. quiet: no check
 * counted (a known failure's run). */
static bool check_output(const ops_build *b, int c, const void *got, const void *ref, ops_tol tol, const char *where,
                         bool quiet) {
    const ob_tensor *t = b->chk[c];
    const int64_t n = ob_nelements(t);
    if (!memcmp(got, ref, ob_nbytes(t))) { /* the same bytes: within any bound (a long cache, mostly) */
        if (!quiet) CHECK(true);
        return true;
    }
    float *fa = as_f32(t, got), *fr = as_f32(t, ref);
    int64_t at = 0;
    double ratio = 0;
    const int64_t bad = compare(fa, fr, n, tol, &at, &ratio);
    if (!quiet)
        CHECKF(bad == 0, "%s [%s] %s: %lld of %lld off, worst %g x its bound at %lld: got %g want %g", b->name, where,
               t->name[0] ? t->name : ob_op_name(t->op), (long long)bad, (long long)n, ratio, (long long)at,
               n ? fa[at] : 0.0, n ? fr[at] : 0.0);
    free(fa);
    free(fr);
    return bad == 0;
}

/* ---- one case on every backend ---------------------------------------------------------- */

/* Runs the case on be (a target, a knob backend or an unfused one) and compares; got[i]
 * keep the outputs when non-NULL and the run succeeded. */
static void run_case_on(const ops_case *c, ops_build *b, void **ref, int fam, ob_backend *be, int simd, const char *where,
                        void **keep) {
    const int c0 = ob_test_checks, f0 = ob_test_failures;
    const ob_tensor *no = refused_node(be, b->g);
    if (no) {
        if (c->may_refuse & OPS_BIT(fam)) {
            static const ops_case *said[OPS_NFAM];
            if (said[fam] != c) {
                g_unsup[fam]++;
                printf("unsupported on %s: %s (%s)\n", g_fam_name[fam], c->name, ob_op_name(no->op));
            }
            said[fam] = c;
        } else {
            CHECKF(0, "%s [%s]: supports() refuses its %s node (a case a backend may lack says so: may_refuse)", c->name,
                   where, ob_op_name(no->op));
        }
    } else {
        void *got[OPS_MAX_CHECKS];
        for (int i = 0; i < b->n_chk; i++) got[i] = malloc(ob_nbytes(b->chk[i]));
        char err[256] = "";
        if (fam == OPS_CPU) ob_cpu_set_simd_level(simd);
        const ob_status st = run_on(be, b->g, b, got, err, sizeof(err));
        if (fam == OPS_CPU) ob_cpu_set_simd_level(-1);
        if (c->known_on & OPS_BIT(fam)) {
            bool ok = st == OB_OK;
            for (int i = 0; i < b->n_chk && ok; i++) ok = check_output(b, i, got[i], ref[i], b->tol[i][fam], where, true);
            static const ops_case *said[OPS_NFAM];
            if (said[fam] != c || ok) {
                g_known[fam]++;
                printf("%s on %s: %s [%s]: %s\n", ok ? "passes now, drop its known-bug mark" : "known failure", g_fam_name[fam],
                       c->name, where, c->known_bug);
            }
            said[fam] = c;
        } else if (c->err_on & OPS_BIT(fam)) {
            CHECKF(st == c->err_status, "%s [%s]: status %s, want %s (%s)", c->name, where, ob_status_str(st),
                   ob_status_str(c->err_status), err);
        } else {
            CHECKF(st == OB_OK, "%s [%s]: %s: %s", c->name, where, ob_status_str(st), err);
            for (int i = 0; i < b->n_chk && st == OB_OK; i++)
                if (!b->tol[i][fam].skip) check_output(b, i, got[i], ref[i], b->tol[i][fam], where, false);
        }
        for (int i = 0; i < b->n_chk; i++) {
            if (keep && st == OB_OK) keep[i] = got[i];
            else free(got[i]);
        }
    }
    g_checks[fam] += ob_test_checks - c0;
    g_failed[fam] += ob_test_failures - f0;
}

/* The first output fused against unfused: max|fused - unfused| <= fuse_mrel max|ref| (the
 * caches a chain writes are held to the reference alone: a fused kernel may round a
 * normed row to f16 an ulp apart). */
static void compare_fused(const ops_case *c, ops_build *b, int fam, void **fused, void **plain, void **ref) {
    const int c0 = ob_test_checks, f0 = ob_test_failures;
    for (int i = 0; i < 1; i++) {
        const ob_tensor *t = b->chk[i];
        const int64_t n = ob_nelements(t);
        float *fa = as_f32(t, fused[i]), *fb = as_f32(t, plain[i]), *fr = as_f32(t, ref[i]);
        const double mx = max_abs(fr, n);
        double worst = 0;
        for (int64_t k = 0; k < n; k++) {
            const double d = isnan(fa[k]) != isnan(fb[k]) ? INFINITY : isnan(fa[k]) ? 0 : fabs((double)fa[k] - fb[k]);
            if (d > worst) worst = d;
        }
        CHECKF(worst <= c->fuse_mrel * mx, "%s [%s]: fused vs unfused differ by %g (%g of max|ref|, want <= %g)", c->name,
               g_fam_name[fam], worst, mx > 0 ? worst / mx : INFINITY, c->fuse_mrel);
        free(fa);
        free(fb);
        free(fr);
    }
    g_checks[fam] += ob_test_checks - c0;
    g_failed[fam] += ob_test_failures - f0;
}

static uint64_t name_seed(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* A graph's multiply-adds, roughly (MATMUL, ATTENTION), and elements elsewhere. */
static int64_t graph_work(const ob_graph *g) {
    int64_t w = 0;
    for (int64_t i = 0; i < g->n; i++) {
        const ob_tensor *t = &g->nodes[i];
        if (t->op == OB_OP_MATMUL) w += t->src[0]->ne[0] * ob_nelements(t);
        else if (t->op == OB_OP_ATTENTION) w += ob_nelements(t) * (int64_t)t->ip[0];
        else if (is_computed(t)) w += ob_nelements(t);
    }
    return w;
}

/* The families that run c here (none: the case is not built at all). */
static unsigned families_of(const ops_case *c) {
    const unsigned only = c->knobs ? knob_families(c->knobs) : c->only ? c->only : OPS_ALL;
    unsigned m = 0;
    for (int f = 0; f < OPS_NFAM; f++)
        if (g_have[f] && (only & OPS_BIT(f))) m |= OPS_BIT(f);
    return m;
}

/* c's graph and inputs in b, its ops marked seen; build_free releases them. */
static void build_case(const ops_case *c, ops_build *b) {
    memset(b, 0, sizeof(*b));
    b->name = c->name;
    ob_rng_seed(&b->rng, name_seed(c->name));
    b->g = ob_graph_new(1100);
    c->build(b, c->p);
    for (int64_t i = 0; i < b->g->n; i++) g_op_seen[b->g->nodes[i].op] = true;
}

static void build_free(ops_build *b) {
    ob_graph_free(b->g);
    for (int i = 0; i < b->n_owned; i++) free(b->owned[i]);
    free(b->owned);
}

static void run_case(const ops_case *c) {
    const unsigned fams = families_of(c);
    if (!fams) return;
    ops_build b;
    build_case(c, &b);
    ob_graph_plan(b.g);
    /* a checked node must be a graph output: the planner gives a read node's bytes away */
    const int c0 = ob_test_checks, f0 = ob_test_failures;
    bool ok = b.n_chk > 0;
    for (int i = 0; i < b.n_chk; i++)
        ok &= b.chk[i]->op == OB_OP_LEAF || b.chk[i]->last_use == b.chk[i]->id;
    CHECKF(ok, "%s: checks must be graph outputs or leaves", c->name);
    void *ref[OPS_MAX_CHECKS] = {NULL};
    if (ok && b.expect[0]) {
        for (int i = 0; i < b.n_chk; i++) {
            ref[i] = malloc(ob_nbytes(b.chk[i]));
            memcpy(ref[i], b.expect[i], ob_nbytes(b.chk[i]));
        }
    } else if (ok) {
        run_reference(b.g, &b, ref);
        if (b.ref_check) {
            void *data[OPS_MAX_CHECKS];
            for (int i = 0; i < b.n_chk; i++) { data[i] = b.chk[i]->data; b.chk[i]->data = ref[i]; }
            b.ref_check(&b, c->p);
            for (int i = 0; i < b.n_chk; i++) b.chk[i]->data = data[i];
        }
    }
    g_checks[OPS_NFAM] += ob_test_checks - c0;
    g_failed[OPS_NFAM] += ob_test_failures - f0;
    /* A heavy case runs on one memory path of a GPU family (Vulkan's staging variants move
     * the same bytes to the same kernels, and lavapipe's time is the kernels'); the CPU's
     * variants are kernels of their own (threads, SIMD) and run everything. */
    const bool heavy = graph_work(b.g) > ((int64_t)1 << 22);
    for (int f = 0; f < OPS_NFAM && ok; f++) {
        if (!(fams & OPS_BIT(f))) continue;
        void *fused[OPS_MAX_CHECKS] = {NULL};
        bool first = true;
        if (c->knobs || (c->det && f != OPS_CPU)) {
            ob_backend *be = knob_backend(f, c->knobs ? c->knobs : "", c->det);
            char where[200];
            snprintf(where, sizeof(where), "%s%s%s%s", g_fam_name[f], c->knobs ? " " : "", c->knobs ? c->knobs : "",
                     c->det ? " deterministic" : "");
            if (be) run_case_on(c, &b, ref, f, be, -1, where, c->chain ? fused : NULL);
        } else {
            for (int k = 0; k < g_ntg; k++) {
                if (g_tg[k].fam != f || (!first && f != OPS_CPU && heavy)) continue;
                run_case_on(c, &b, ref, f, g_tg[k].be, g_tg[k].simd, g_tg[k].label, c->chain && first ? fused : NULL);
                first = false;
            }
        }
        if (c->chain && unfused_knobs(f) && fused[0]) {
            ob_backend *pl = knob_backend(f, unfused_knobs(f), c->det);
            void *plain[OPS_MAX_CHECKS] = {NULL};
            char where[64];
            snprintf(where, sizeof(where), "%s unfused", g_fam_name[f]);
            if (pl) run_case_on(c, &b, ref, f, pl, -1, where, plain);
            if (plain[0]) compare_fused(c, &b, f, fused, plain, ref);
            for (int i = 0; i < b.n_chk; i++) free(plain[i]);
        }
        for (int i = 0; i < b.n_chk; i++) free(fused[i]);
    }
    for (int i = 0; i < b.n_chk; i++) free(ref[i]);
    build_free(&b);
}

/* ---- main ------------------------------------------------------------------------------ */

static void (*const g_families[])(ops_list *) = {ops_add_elementwise, ops_add_types, ops_add_attention, ops_add_chains,
                                                    ops_add_moe, ops_add_mla, ops_add_gptoss, ops_add_recurrent};

static bool selected(const char *name, int argc, char **argv) {
    bool any = false;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-') continue;
        any = true;
        if (strstr(name, argv[i])) return true;
    }
    return !any;
}

int main(int argc, char **argv) {
    bool list = false;
    for (int i = 1; i < argc; i++) {
        list |= !strcmp(argv[i], "-l");
        g_verbose |= !strcmp(argv[i], "-v");
    }
    if (!parse_backends()) return 2;
    ops_list l = {NULL, 0, 0};
    for (size_t i = 0; i < OB_ARRAY_LEN(g_families); i++) g_families[i](&l);
    if (list) {
        for (int i = 0; i < l.n; i++)
            if (selected(l.c[i].name, argc, argv)) printf("%4d %s\n", i, l.c[i].name);
        free(l.c);
        return 0;
    }
    open_backends();
    const double t0 = ob_time_s();
    int ran = 0;
    /* -v: checks by the first word of the case names (the op, or "chain") */
    struct { char key[16]; int cases, checks[OPS_NFAM + 1]; } grp[32];
    int ngrp = 0;
    for (int i = 0; i < l.n; i++) {
        if (!ob_test_shard(i) || !selected(l.c[i].name, argc, argv) || !families_of(&l.c[i])) continue;
        const double tc = ob_time_s();
        int before[OPS_NFAM + 1];
        memcpy(before, g_checks, sizeof(before));
        run_case(&l.c[i]);
        ran++;
        if (!g_verbose) continue;
        printf("%4d %s: %.3f s\n", i, l.c[i].name, ob_time_s() - tc);
        char key[16];
        snprintf(key, sizeof(key), "%.*s", (int)strcspn(l.c[i].name, " "), l.c[i].name);
        int k = 0;
        while (k < ngrp && strcmp(grp[k].key, key)) k++;
        if (k == ngrp && ngrp < (int)OB_ARRAY_LEN(grp)) {
            memset(&grp[ngrp], 0, sizeof(grp[0]));
            snprintf(grp[ngrp++].key, sizeof(grp[0].key), "%s", key);
        }
        if (k == ngrp) continue;
        grp[k].cases++;
        for (int f = 0; f <= OPS_NFAM; f++) grp[k].checks[f] += g_checks[f] - before[f];
    }
    for (int k = 0; k < ngrp; k++)
        printf("%-12s %4d cases: reference %d, cpu %d, cuda %d, vulkan %d checks\n", grp[k].key, grp[k].cases,
               grp[k].checks[OPS_NFAM], grp[k].checks[OPS_CPU], grp[k].checks[OPS_CUDA], grp[k].checks[OPS_VK]);
    printf("%d of %d cases in %.1f s\n", ran, l.n, ob_time_s() - t0);
    /* every op of the op table has a case (a whole run: no shard, no filter) */
    bool whole = !getenv("ONEBIT_TEST_SHARD") || !*getenv("ONEBIT_TEST_SHARD");
    for (int i = 1; i < argc; i++) whole &= argv[i][0] == '-';
    if (whole) {
        /* a case no family ran (not built, no device, not listed) is in the table all the same */
        for (int i = 0; i < l.n; i++) {
            if (families_of(&l.c[i])) continue;
            ops_build b;
            build_case(&l.c[i], &b);
            build_free(&b);
        }
        const int c0 = ob_test_checks, f0 = ob_test_failures;
        for (int op = 0; op < OB_OP_COUNT; op++)
            CHECKF(g_op_seen[op], "no case builds a graph with %s: add its table (ops_cases.h)", ob_op_name((ob_op)op));
        g_checks[OPS_NFAM] += ob_test_checks - c0;
        g_failed[OPS_NFAM] += ob_test_failures - f0;
    }
    close_backends();
    free(l.c);
    printf("reference: %d checks, %d failed\n", g_checks[OPS_NFAM], g_failed[OPS_NFAM]);
    for (int f = 0; f < OPS_NFAM; f++) {
        if (!g_have[f]) {
            printf("%s: SKIPPED (%s)\n", g_fam_name[f], g_skip[f]);
            continue;
        }
        if (g_unsup[f]) printf("%s: %d cases unsupported (listed above)\n", g_fam_name[f], g_unsup[f]);
        if (g_known[f]) printf("%s: %d cases with a known defect (listed above)\n", g_fam_name[f], g_known[f]);
        printf("%s: %d checks, %d failed\n", g_fam_name[f], g_checks[f], g_failed[f]);
    }
    return ob_test_done("test_ops");
}
