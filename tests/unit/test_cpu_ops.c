/* Every CPU op except MATMUL (test_cpu_matmul covers it): the backend's kernels, run
 * through compute() on 1, 2 and 3 threads with the scalar and the best SIMD level, must
 * match ob_cpu_ref_op on seeded random inputs. Outputs are poisoned with NaN first, so an
 * element a kernel forgets to write fails the comparison. */
#include "backend/cpu/cpu.h"
#include "testutil.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define N_BACKENDS 3
static ob_backend *g_be[N_BACKENDS]; /* 1, 2, 3 threads */
static ob_rng g_rng;

/* ---- helpers ------------------------------------------------------------------------- */

static float *rand_f32(int64_t n, float scale) {
    float *x = malloc(sizeof(float) * (size_t)n);
    ob_rng_fill_normal(&g_rng, x, n, scale);
    return x;
}

/* Random values quantized to type t (rows of ne0), as a weight file would hold them. */
static void *rand_typed(ob_type t, int64_t ne0, int64_t rows, float scale) {
    float *f = rand_f32(ne0 * rows, scale);
    size_t rb = ob_row_size(t, ne0);
    char *q = malloc(rb * (size_t)rows);
    for (int64_t r = 0; r < rows; r++) ob_type_traits_get(t)->from_float(f + r * ne0, q + rb * (size_t)r, ne0);
    free(f);
    return q;
}

static void poison(void *p, size_t bytes) {
    float nan = NAN;
    for (size_t i = 0; i + 4 <= bytes; i += 4) memcpy((char *)p + i, &nan, 4);
}

/* Plans g, runs the reference for out, then every backend at both SIMD levels; compares
 * out (F32) against the reference. */
static void check_graph(ob_graph *g, ob_tensor *out, double atol, double rtol, const char *what) {
    ob_graph_plan(g);
    void *scratch = aligned_alloc(64, (g->scratch_size + 63) & ~(size_t)63);
    ob_graph_bind(g, scratch);
    int64_t n = ob_nelements(out);
    float *ref = malloc(sizeof(float) * (size_t)n);
    poison(ref, sizeof(float) * (size_t)n);
    void *saved = out->data;
    out->data = ref;
    ob_cpu_ref_op(out);
    out->data = saved;
    int levels[2] = {0, -1};
    for (int li = 0; li < 2; li++) {
        ob_cpu_set_simd_level(levels[li]);
        for (int b = 0; b < N_BACKENDS; b++) {
            poison(scratch, g->scratch_size);
            char err[256] = "";
            ob_status st = g_be[b]->iface->compute(g_be[b], g, err, sizeof(err));
            CHECKF(st == OB_OK, "%s: compute failed: %s", what, err);
            int64_t at = 0;
            double e = ob_test_err_ratio(out->data, ref, n, atol, rtol, &at);
            CHECKF(e <= 1.0, "%s: nth=%d simd=%d err ratio %g at %lld: got %g want %g", what, b + 1, levels[li], e,
                   (long long)at, ((float *)out->data)[at], ref[at]);
        }
    }
    ob_cpu_set_simd_level(-1);
    free(ref);
    free(scratch);
}

/* ---- norms, element-wise, softmax ---------------------------------------------------- */

static void test_norms(void) {
    int64_t ne[2] = {1003, 7};
    for (int layer = 0; layer < 2; layer++)
        for (int variant = 0; variant < 3; variant++) { /* weight+bias, weight only, none */
            ob_graph *g = ob_graph_new(8);
            float *x = rand_f32(ne[0] * ne[1], 3.0f), *w = rand_f32(ne[0], 1.0f), *bb = rand_f32(ne[0], 1.0f);
            for (int64_t i = 0; i < ne[0] * ne[1]; i++) x[i] += 0.5f; /* non-zero mean for LAYER_NORM */
            ob_tensor *tx = ob_leaf(g, "x", OB_TYPE_F32, 2, ne, x);
            ob_tensor *tw = variant < 2 ? ob_leaf(g, "w", OB_TYPE_F32, 1, ne, w) : NULL;
            ob_tensor *tb = variant < 1 ? ob_leaf(g, "b", OB_TYPE_F32, 1, ne, bb) : NULL;
            ob_tensor *o = layer ? ob_layer_norm(g, tx, tw, tb, 1e-5f) : ob_rms_norm(g, tx, tw, 1e-6f);
            char what[64];
            snprintf(what, sizeof(what), "%s variant %d", layer ? "layer_norm" : "rms_norm", variant);
            check_graph(g, o, 1e-5, 1e-5, what);
            ob_graph_free(g);
            free(x); free(w); free(bb);
        }
}

static void test_binary_unary(void) {
    int64_t ne[3] = {67, 5, 3};
    for (int op = 0; op < 2; op++)
        for (int bc = 0; bc < 2; bc++) {
            ob_graph *g = ob_graph_new(8);
            float *a = rand_f32(ne[0] * ne[1] * ne[2], 1.0f), *b = rand_f32(ne[0] * ne[1] * ne[2], 1.0f);
            ob_tensor *ta = ob_leaf(g, "a", OB_TYPE_F32, 3, ne, a);
            ob_tensor *tb = ob_leaf(g, "b", OB_TYPE_F32, bc ? 1 : 3, ne, b);
            ob_tensor *o = op ? ob_mul(g, ta, tb) : ob_add(g, ta, tb);
            char what[64];
            snprintf(what, sizeof(what), "%s%s", op ? "mul" : "add", bc ? " broadcast" : "");
            check_graph(g, o, 1e-7, 1e-6, what);
            ob_graph_free(g);
            free(a); free(b);
        }
    {
        ob_graph *g = ob_graph_new(4);
        float *a = rand_f32(ne[0] * ne[1] * ne[2], 1.0f);
        ob_tensor *o = ob_scale(g, ob_leaf(g, "a", OB_TYPE_F32, 3, ne, a), -0.37f);
        check_graph(g, o, 1e-7, 1e-6, "scale");
        ob_graph_free(g);
        free(a);
    }
    for (int act = OB_ACT_SILU; act < OB_ACT_COUNT; act++) /* every activation, TANH included */
        for (int glu = 0; glu < 2; glu++) {
            ob_graph *g = ob_graph_new(4);
            float *a = rand_f32(ne[0] * ne[1] * ne[2], 3.0f), *b = rand_f32(ne[0] * ne[1] * ne[2], 1.0f);
            ob_tensor *ta = ob_leaf(g, "gate", OB_TYPE_F32, 3, ne, a);
            ob_tensor *o = glu ? ob_glu(g, ta, ob_leaf(g, "up", OB_TYPE_F32, 3, ne, b), (ob_act)act)
                               : ob_act_op(g, ta, (ob_act)act);
            char what[64];
            snprintf(what, sizeof(what), "%s act %d", glu ? "glu" : "act", act);
            check_graph(g, o, 1e-6, 1e-5, what);
            ob_graph_free(g);
            free(a); free(b);
        }
    {
        ob_graph *g = ob_graph_new(4);
        float *a = rand_f32(ne[0] * ne[1] * ne[2], 4.0f);
        ob_tensor *o = ob_softmax(g, ob_leaf(g, "a", OB_TYPE_F32, 3, ne, a));
        check_graph(g, o, 1e-7, 1e-5, "softmax");
        ob_graph_free(g);
        free(a);
    }
}

/* Known values, independent of the reference: silu(1) = 1/(1+e^-1), gelu_tanh(1) per HF
 * gelu_pytorch_tanh, gelu_erf(1) = 0.5(1+erf(1/sqrt 2)). */
static void test_act_values(void) {
    const float want[4] = {0.7310585786f, 0.8411920071f, 0.8413447461f, 1.0f};
    for (int act = 0; act < 4; act++) {
        ob_graph *g = ob_graph_new(4);
        float x[2] = {1.0f, -2.0f};
        int64_t ne[1] = {2};
        ob_tensor *o = ob_act_op(g, ob_leaf(g, "x", OB_TYPE_F32, 1, ne, x), (ob_act)act);
        ob_graph_plan(g);
        float *buf = aligned_alloc(64, 256);
        ob_graph_bind(g, buf);
        CHECK(g_be[1]->iface->compute(g_be[1], g, NULL, 0) == OB_OK);
        CHECKF(fabsf(((float *)o->data)[0] - want[act]) < 1e-6f, "act %d (1) = %g", act, ((float *)o->data)[0]);
        free(buf);
        ob_graph_free(g);
    }
}

/* ---- CPY and GET_ROWS ------------------------------------------------------------------ */

static void test_cpy(void) {
    static const ob_type pairs[][2] = {
        {OB_TYPE_F32, OB_TYPE_F16}, {OB_TYPE_F16, OB_TYPE_F32}, {OB_TYPE_F32, OB_TYPE_Q8_0},
        {OB_TYPE_Q8_0, OB_TYPE_F32}, {OB_TYPE_Q4_0, OB_TYPE_F16}, {OB_TYPE_F16, OB_TYPE_Q8_0},
        {OB_TYPE_Q4_K, OB_TYPE_Q8_0}, {OB_TYPE_BF16, OB_TYPE_F32},
    };
    int64_t ne[2] = {512, 6};
    for (size_t p = 0; p < OB_ARRAY_LEN(pairs); p++) {
        ob_type ts = pairs[p][0], td = pairs[p][1];
        ob_graph *g = ob_graph_new(4);
        void *src = rand_typed(ts, ne[0], ne[1], 1.0f);
        ob_tensor *o = ob_cpy(g, ob_leaf(g, "x", ts, 2, ne, src), td);
        ob_graph_plan(g);
        void *scratch = aligned_alloc(64, (g->scratch_size + 63) & ~(size_t)63);
        ob_graph_bind(g, scratch);
        size_t nb = ob_nbytes(o);
        char *ref = malloc(nb);
        memset(ref, 0xA5, nb);
        void *saved = o->data;
        o->data = ref;
        ob_cpu_ref_op(o);
        o->data = saved;
        /* The reference itself must land near the source values (catches a wrong layout
         * that the kernel would share with the reference). */
        float *fs = malloc(sizeof(float) * 512 * 6), *fd = malloc(sizeof(float) * 512 * 6);
        ob_dequantize(ts, src, fs, ne[0] * ne[1]);
        ob_dequantize(td, ref, fd, ne[0] * ne[1]);
        int64_t at = 0;
        CHECKF(ob_test_err_ratio(fd, fs, ne[0] * ne[1], 0.02, 0.02, &at) <= 1.0, "cpy %s->%s reference off at %lld",
               ob_type_name(ts), ob_type_name(td), (long long)at);
        for (int b = 0; b < N_BACKENDS; b++) {
            memset(scratch, 0x5A, g->scratch_size);
            CHECK(g_be[b]->iface->compute(g_be[b], g, NULL, 0) == OB_OK);
            CHECKF(memcmp(o->data, ref, nb) == 0, "cpy %s->%s nth=%d differs from reference", ob_type_name(ts),
                   ob_type_name(td), b + 1);
        }
        free(fs); free(fd); free(ref); free(scratch); free(src);
        ob_graph_free(g);
    }
}

static void test_get_rows(void) {
    static const ob_type types[] = {OB_TYPE_F32, OB_TYPE_F16, OB_TYPE_BF16, OB_TYPE_Q8_0, OB_TYPE_Q4_0,
                                    OB_TYPE_Q4_K, OB_TYPE_Q6_K, OB_TYPE_IQ4_NL};
    int64_t ne[2] = {256, 40};
    for (size_t i = 0; i < OB_ARRAY_LEN(types); i++) {
        ob_graph *g = ob_graph_new(4);
        void *tab = rand_typed(types[i], ne[0], ne[1], 1.0f);
        int32_t ids[9];
        int64_t nid[1] = {9};
        for (int k = 0; k < 9; k++) ids[k] = (int32_t)(ob_rng_u64(&g_rng) % (uint64_t)ne[1]);
        ids[3] = ids[1]; /* repeated ids are legal */
        ob_tensor *o = ob_get_rows(g, ob_leaf(g, "tab", types[i], 2, ne, tab), ob_leaf(g, "ids", OB_TYPE_I32, 1, nid, ids));
        char what[64];
        snprintf(what, sizeof(what), "get_rows %s", ob_type_name(types[i]));
        check_graph(g, o, 0, 0, what);
        /* Independent of the reference: row k is the dequantized table row ids[k]. */
        float *row = malloc(sizeof(float) * 256);
        ob_dequantize(types[i], (char *)tab + ob_row_size(types[i], 256) * (size_t)ids[5], row, 256);
        ob_graph_plan(g);
        float *buf = aligned_alloc(64, (g->scratch_size + 63) & ~(size_t)63);
        ob_graph_bind(g, buf);
        CHECK(g_be[2]->iface->compute(g_be[2], g, NULL, 0) == OB_OK);
        CHECKF(memcmp(row, (float *)o->data + 5 * 256, sizeof(float) * 256) == 0, "%s row 5", what);
        ids[0] = (int32_t)ne[1]; /* out of range: an error, not a wild read */
        char err[128] = "";
        CHECK(g_be[1]->iface->compute(g_be[1], g, err, sizeof(err)) == OB_ERR_ARG && err[0]);
        free(buf); free(row); free(tab);
        ob_graph_free(g);
    }
}

/* ---- ROPE ------------------------------------------------------------------------------ */

static void test_rope(void) {
    int64_t ne[3] = {64, 3, 5};
    int32_t pos[5] = {0, 1, 17, 4095, 100000};
    int64_t npos[1] = {5};
    /* with frequency factors (llama3's rope_freqs, YaRN's folded ramp) and an mscale */
    for (int ff = 0; ff < 2; ff++)
        for (int mode = 0; mode <= 2; mode += 2)
            for (int nr = 0; nr < 2; nr++) {
                int n_rot = nr ? 32 : 64;
                ob_graph *g = ob_graph_new(5);
                float *x = rand_f32(ne[0] * ne[1] * ne[2], 1.0f), fac[32];
                ob_rng r;
                ob_rng_seed(&r, 77 + (uint64_t)n_rot);
                for (int i = 0; i < n_rot / 2; i++) fac[i] = 0.5f + 39.5f * ob_rng_uniform(&r);
                int64_t nf[1] = {n_rot / 2};
                ob_tensor *o = ob_rope(g, ob_leaf(g, "x", OB_TYPE_F32, 3, ne, x),
                                       ob_leaf(g, "pos", OB_TYPE_I32, 1, npos, pos),
                                       ff ? ob_leaf(g, "ff", OB_TYPE_F32, 1, nf, fac) : NULL, n_rot, mode, 10000.0f,
                                       nr ? 0.25f : 1.0f, ff ? 1.1386294f : 1.0f);
                char what[64];
                snprintf(what, sizeof(what), "rope mode %d n_rot %d factors %d", mode, n_rot, ff);
                check_graph(g, o, 1e-6, 1e-5, what);
                ob_graph_free(g);
                free(x);
            }
    /* Known values with factors and mscale: pair 0 of a head at position p turns by
     * p / factor_0, both outputs scaled; elements past n_rot pass through unscaled. */
    {
        ob_graph *g = ob_graph_new(5);
        float x[6] = {1, 0, 1, 0, 5, 7}, fac[2] = {4, 2};
        int64_t ne1[3] = {6, 1, 1}, n1[1] = {1}, nf[1] = {2};
        int32_t p[1] = {3};
        ob_tensor *o = ob_rope(g, ob_leaf(g, "x", OB_TYPE_F32, 3, ne1, x), ob_leaf(g, "pos", OB_TYPE_I32, 1, n1, p),
                               ob_leaf(g, "ff", OB_TYPE_F32, 1, nf, fac), 4, 0, 10000.0f, 1.0f, 2.0f);
        ob_graph_plan(g);
        float *buf = aligned_alloc(64, 256);
        ob_graph_bind(g, buf);
        CHECK(g_be[0]->iface->compute(g_be[0], g, NULL, 0) == OB_OK);
        float *y = o->data;
        CHECKF(fabsf(y[0] - 2 * cosf(0.75f)) < 1e-6f && fabsf(y[1] - 2 * sinf(0.75f)) < 1e-6f && y[4] == 5 && y[5] == 7,
               "rope factors: %g %g %g %g", y[0], y[1], y[4], y[5]);
        free(buf);
        ob_graph_free(g);
    }
    /* Known values: the first pair of a head at position p rotates by exactly p radians. */
    {
        ob_graph *g = ob_graph_new(4);
        float x[4] = {1, 0, 1, 0};
        int64_t ne1[3] = {4, 1, 1}, n1[1] = {1};
        int32_t p[1] = {3};
        ob_tensor *o = ob_rope(g, ob_leaf(g, "x", OB_TYPE_F32, 3, ne1, x), ob_leaf(g, "pos", OB_TYPE_I32, 1, n1, p), NULL, 4, 0,
                               10000.0f, 1.0f, 1.0f);
        ob_graph_plan(g);
        float *buf = aligned_alloc(64, 256);
        ob_graph_bind(g, buf);
        CHECK(g_be[0]->iface->compute(g_be[0], g, NULL, 0) == OB_OK);
        float *y = o->data;
        CHECKF(fabsf(y[0] - cosf(3)) < 1e-6f && fabsf(y[1] - sinf(3)) < 1e-6f, "rope pair 0: %g %g", y[0], y[1]);
        CHECKF(fabsf(y[2] - (float)cos(0.03)) < 1e-6f && fabsf(y[3] - (float)sin(0.03)) < 1e-6f, "rope pair 1: %g %g",
               y[2], y[3]);
        free(buf);
        ob_graph_free(g);
    }
}

/* ---- KV_STORE and ATTENTION ------------------------------------------------------------ */

static void test_kv_store(void) {
    static const ob_type types[] = {OB_TYPE_F32, OB_TYPE_F16, OB_TYPE_Q8_0};
    int64_t row = 128, cps = 10, n_seq = 3, T = 5;
    int32_t pos[5] = {0, 1, 2, 7, 9}, seq[5] = {0, 0, 0, 2, 1};
    for (size_t ti = 0; ti < OB_ARRAY_LEN(types); ti++) {
        ob_type t = types[ti];
        size_t cb = ob_row_size(t, row) * (size_t)(cps * n_seq);
        char *cache0 = malloc(cb), *cache1 = malloc(cb);
        for (size_t i = 0; i < cb; i++) cache0[i] = (char)(ob_rng_u64(&g_rng) & 0x3f); /* finite junk */
        memcpy(cache1, cache0, cb);
        float *x = rand_f32(row * T, 1.0f);
        ob_graph *g = ob_graph_new(8);
        int64_t nx[3] = {32, 4, T}, nc[2] = {row, cps * n_seq}, nt[1] = {T};
        ob_tensor *tc = ob_leaf(g, "cache", t, 2, nc, cache0);
        ob_tensor *o = ob_kv_store(g, ob_leaf(g, "x", OB_TYPE_F32, 3, nx, x), tc, ob_leaf(g, "pos", OB_TYPE_I32, 1, nt, pos),
                                   ob_leaf(g, "seq", OB_TYPE_I32, 1, nt, seq), (int)cps);
        ob_graph_plan(g);
        void *scratch = aligned_alloc(64, (g->scratch_size + 63) & ~(size_t)63);
        ob_graph_bind(g, scratch);
        float tok = NAN;
        void *saved = o->data;
        o->data = &tok;
        tc->data = cache1;
        ob_cpu_ref_op(o);
        o->data = saved;
        tc->data = cache0;
        CHECK(tok == 0.0f);
        for (int b = 0; b < N_BACKENDS; b++) {
            poison(scratch, g->scratch_size);
            CHECK(g_be[b]->iface->compute(g_be[b], g, NULL, 0) == OB_OK);
            CHECK(*(float *)o->data == 0.0f);
            CHECKF(memcmp(cache0, cache1, cb) == 0, "kv_store %s nth=%d differs from reference", ob_type_name(t), b + 1);
        }
        /* The stored row reads back as the input (to the cache type's precision). */
        float back[128];
        ob_dequantize(t, cache0 + ob_row_size(t, row) * (size_t)(2 * cps + 7), back, row);
        int64_t at = 0;
        CHECKF(ob_test_err_ratio(back, x + 3 * row, row, 0.02, 0.01, &at) <= 1.0, "kv_store %s readback at %lld",
               ob_type_name(t), (long long)at);
        pos[4] = (int32_t)cps; /* past the sequence's cells: refused */
        CHECK(g_be[0]->iface->compute(g_be[0], g, NULL, 0) == OB_ERR_CONTEXT);
        /* the reference (the GPU backends' oracle and CPU fallback) skips such a token, as the
         * GPU backends do: not into the next sequence's first cell, nor past the cache (seq 3
         * of 3), so the other tokens' rows stored again leave the cache as it was */
        for (int k = 0; k < 2; k++) {
            char *snap = malloc(cb);
            memcpy(snap, cache1, cb);
            o->data = &tok;
            tc->data = cache1;
            ob_cpu_ref_op(o);
            o->data = saved;
            tc->data = cache0;
            CHECKF(memcmp(snap, cache1, cb) == 0, "kv_store %s reference: token outside the cache (seq %d pos %d) stored",
                   ob_type_name(t), (int)seq[4], (int)pos[4]);
            free(snap);
            pos[4] = 9;
            seq[4] = (int32_t)n_seq;
        }
        seq[4] = 1;
        pos[4] = 9;
        free(scratch); free(x); free(cache0); free(cache1);
        ob_graph_free(g);
    }
}

typedef struct attn_case {
    ob_type kv;
    int hd, n_head, n_kv, window, causal;
    float softcap;
    int decode; /* 1: one token deep into a sequence; 0: several sequences of several tokens */
} attn_case;

static void run_attention(const attn_case *ac) {
    int64_t cps = ac->decode ? 300 : 24, n_seq = 3, hd = ac->hd, row = hd * ac->n_kv, cells = cps * n_seq;
    int32_t pos_p[8] = {5, 6, 7, 8, 9, 0, 1, 17}, seq_p[8] = {0, 0, 0, 0, 0, 2, 2, 1};
    int32_t pos_d[1] = {287}, seq_d[1] = {1};
    int64_t T = ac->decode ? 1 : 8;
    int32_t *pos = ac->decode ? pos_d : pos_p, *seq = ac->decode ? seq_d : seq_p;
    /* Cells beyond what any token may see hold NaN in an F32 cache: reading them shows. */
    float *kf = rand_f32(row * cells, 1.0f), *vf = rand_f32(row * cells, 1.0f);
    void *kc, *vc;
    if (ac->kv == OB_TYPE_F32) {
        for (int64_t s = 0; s < n_seq; s++) {
            int32_t mx = -1;
            for (int64_t t = 0; t < T; t++) if (seq[t] == s && pos[t] > mx) mx = pos[t];
            for (int64_t j = mx + 1; j < cps; j++) {
                poison(kf + (s * cps + j) * row, sizeof(float) * (size_t)row);
                poison(vf + (s * cps + j) * row, sizeof(float) * (size_t)row);
            }
        }
        kc = kf; vc = vf; kf = vf = NULL;
    } else {
        size_t rb = ob_row_size(ac->kv, row);
        kc = malloc(rb * (size_t)cells);
        vc = malloc(rb * (size_t)cells);
        for (int64_t j = 0; j < cells; j++) {
            ob_type_traits_get(ac->kv)->from_float(kf + j * row, (char *)kc + rb * (size_t)j, row);
            ob_type_traits_get(ac->kv)->from_float(vf + j * row, (char *)vc + rb * (size_t)j, row);
        }
    }
    float *q = rand_f32(hd * ac->n_head * T, 1.0f), tok = 0;
    ob_graph *g = ob_graph_new(16);
    int64_t nq[3] = {hd, ac->n_head, T}, nc[2] = {row, cells}, nt[1] = {T}, n1[1] = {1};
    ob_tensor *o = ob_attention(g, ob_leaf(g, "q", OB_TYPE_F32, 3, nq, q), ob_leaf(g, "k", ac->kv, 2, nc, kc),
                                ob_leaf(g, "v", ac->kv, 2, nc, vc), ob_leaf(g, "pos", OB_TYPE_I32, 1, nt, pos),
                                ob_leaf(g, "seq", OB_TYPE_I32, 1, nt, seq), ob_leaf(g, "tok", OB_TYPE_F32, 1, n1, &tok),
                                (int)cps, ac->n_kv, ac->window, ac->causal, 1.0f / sqrtf((float)hd), ac->softcap);
    char what[128];
    snprintf(what, sizeof(what), "attention %s hd %d heads %d/%d window %d causal %d cap %g %s", ob_type_name(ac->kv),
             ac->hd, ac->n_head, ac->n_kv, ac->window, ac->causal, ac->softcap, ac->decode ? "decode" : "prefill");
    check_graph(g, o, 1e-6, 1e-5, what);
    ob_graph_free(g);
    free(q); free(kf); free(vf); free(kc); free(vc);
}

static void test_attention(void) {
    static const ob_type kvt[] = {OB_TYPE_F32, OB_TYPE_F16, OB_TYPE_Q8_0};
    static const int heads[][2] = {{4, 4}, {4, 2}, {6, 1}};
    for (size_t k = 0; k < OB_ARRAY_LEN(kvt); k++)
        for (size_t h = 0; h < OB_ARRAY_LEN(heads); h++)
            for (int window = 0; window <= 3; window += 3)
                for (int causal = 0; causal < 2; causal++)
                    for (int cap = 0; cap < 2; cap++)
                        for (int decode = 0; decode < 2; decode++) {
                            attn_case ac = {kvt[k], kvt[k] == OB_TYPE_Q8_0 ? 64 : (decode ? 40 : 36), heads[h][0],
                                            heads[h][1], window, causal, cap ? 1.5f : 0.0f, decode};
                            run_attention(&ac);
                        }
}

/* A single known case: one query, two cells, so out = softmax([q.k0, q.k1]) . [v0, v1]. */
static void test_attention_value(void) {
    float q[2] = {1, 2}, k[4] = {1, 0, 0, 1}, v[4] = {3, 4, -1, 5}, tok = 0;
    int32_t pos[1] = {1}, seq[1] = {0};
    ob_graph *g = ob_graph_new(8);
    int64_t nq[3] = {2, 1, 1}, nc[2] = {2, 2}, n1[1] = {1};
    ob_tensor *o = ob_attention(g, ob_leaf(g, "q", OB_TYPE_F32, 3, nq, q), ob_leaf(g, "k", OB_TYPE_F32, 2, nc, k),
                                ob_leaf(g, "v", OB_TYPE_F32, 2, nc, v), ob_leaf(g, "pos", OB_TYPE_I32, 1, n1, pos),
                                ob_leaf(g, "seq", OB_TYPE_I32, 1, n1, seq), ob_leaf(g, "tok", OB_TYPE_F32, 1, n1, &tok),
                                2, 1, 0, true, 1.0f, 0.0f);
    ob_graph_plan(g);
    float *buf = aligned_alloc(64, 256);
    ob_graph_bind(g, buf);
    CHECK(g_be[2]->iface->compute(g_be[2], g, NULL, 0) == OB_OK);
    double p0 = exp(1.0) / (exp(1.0) + exp(2.0)), p1 = 1 - p0;
    float *y = o->data;
    CHECKF(fabs(y[0] - (3 * p0 - p1)) < 1e-5 && fabs(y[1] - (4 * p0 + 5 * p1)) < 1e-5, "attention value %g %g", y[0], y[1]);
    free(buf);
    ob_graph_free(g);
}

/* The reference's attention of a token outside the cache (refused by the CPU backend): zeros,
 * as on the GPU backends, with no cell past the cache read. */
static void test_attention_outside(void) {
    float q[4] = {1, 2, -1, 0.5f}, k[4] = {1, 0, 0, 1}, v[4] = {3, 4, -1, 5}, y[4] = {NAN, NAN, NAN, NAN}, tok = 0;
    int32_t pos[2] = {1, 2}, seq[2] = {0, 0};
    ob_graph *g = ob_graph_new(8);
    int64_t nq[3] = {2, 1, 2}, nc[2] = {2, 2}, nt[1] = {2}, n1[1] = {1};
    ob_tensor *o = ob_attention(g, ob_leaf(g, "q", OB_TYPE_F32, 3, nq, q), ob_leaf(g, "k", OB_TYPE_F32, 2, nc, k),
                                ob_leaf(g, "v", OB_TYPE_F32, 2, nc, v), ob_leaf(g, "pos", OB_TYPE_I32, 1, nt, pos),
                                ob_leaf(g, "seq", OB_TYPE_I32, 1, nt, seq), ob_leaf(g, "tok", OB_TYPE_F32, 1, n1, &tok),
                                2, 1, 0, true, 1.0f, 0.0f);
    o->data = y;
    ob_cpu_ref_op(o);
    double p0 = exp(1.0) / (exp(1.0) + exp(2.0)), p1 = 1 - p0;
    CHECKF(fabs(y[0] - (3 * p0 - p1)) < 1e-5 && fabs(y[1] - (4 * p0 + 5 * p1)) < 1e-5, "attention reference %g %g", y[0], y[1]);
    CHECKF(y[2] == 0.0f && y[3] == 0.0f, "attention reference, pos 2 of 2 cells: %g %g", y[2], y[3]);
    ob_graph_free(g);
}

/* ---- the pool: many small nodes in a row -------------------------------------------- */

static void test_chain(void) {
    int64_t ne[1] = {37};
    float *x = rand_f32(37, 1.0f), *b = rand_f32(37, 0.01f);
    ob_graph *g = ob_graph_new(600);
    ob_tensor *t = ob_leaf(g, "x", OB_TYPE_F32, 1, ne, x), *tb = ob_leaf(g, "b", OB_TYPE_F32, 1, ne, b);
    for (int i = 0; i < 500; i++) t = ob_add(g, t, tb);
    ob_graph_plan(g);
    void *scratch = aligned_alloc(64, (g->scratch_size + 63) & ~(size_t)63);
    ob_graph_bind(g, scratch);
    for (int be = 0; be < N_BACKENDS; be++) {
        poison(scratch, g->scratch_size);
        double t0 = ob_time_s();
        CHECK(g_be[be]->iface->compute(g_be[be], g, NULL, 0) == OB_OK);
        double dt = ob_time_s() - t0;
        int64_t bad = 0;
        for (int i = 0; i < 37; i++) {
            float want = x[i];
            for (int k = 0; k < 500; k++) want += b[i];
            if (!(((float *)t->data)[i] == want)) bad++;
        }
        CHECKF(bad == 0, "chain nth=%d: %lld wrong", be + 1, (long long)bad);
        printf("chain of 500 nodes, %d threads: %.1f us/node\n", be + 1, dt * 1e6 / 500);
    }
    free(scratch); free(x); free(b);
    ob_graph_free(g);
}

int main(void) {
    ob_rng_seed(&g_rng, 1234);
    for (int i = 0; i < N_BACKENDS; i++) {
        g_be[i] = ob_backend_cpu_new(i + 1);
        CHECK(g_be[i] != NULL);
        if (!g_be[i]) return ob_test_done("test_cpu_ops");
    }
    test_norms();
    test_binary_unary();
    test_act_values();
    test_cpy();
    test_get_rows();
    test_rope();
    test_kv_store();
    test_attention();
    test_attention_value();
    test_attention_outside();
    test_chain();
    for (int i = 0; i < N_BACKENDS; i++) ob_backend_free(g_be[i]);
    return ob_test_done("test_cpu_ops");
}
