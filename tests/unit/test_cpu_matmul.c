/* OB_OP_MATMUL on the CPU: every weight type with a to_float, at every SIMD level the CPU
 * has, with 1 and 2 threads, against ob_cpu_ref_matmul (dequantize, dot in double).
 * Weights are random normal values quantized with the type's reference quantizer.
 *
 * ONEBIT_BENCH=1 also times one decode-shaped matvec (K=1024, N=3072) per type, its 4-column
 * cost relative to one column (4 parallel sequences) and a 64-token prefill tile, and prints
 * the weight bandwidth reached. ONEBIT_BENCH_LEVEL=N times SIMD level N instead of the best;
 * ONEBIT_BENCH_N=rows sets N (an output head streams far more rows than 3072). */
#include "backend/cpu/cpu.h"
#include "backend/cpu/vec_dot.h"
#include "testutil.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    ob_tensor *dst;
    void *wdata;
    size_t wsize;
    ob_cpu_pool *pool;
} run_arg;

static void run_fn(void *arg, int ith, int nth) {
    run_arg *a = arg;
    ob_cpu_op_ctx c = { .ith = ith, .nth = nth, .wdata = a->wdata, .wsize = a->wsize, .pool = a->pool };
    ob_cpu_op_matmul(a->dst, &c);
}

/* Runs the op with nth threads (nth 1: directly on this thread, no pool). */
static void run_matmul(ob_tensor *dst, ob_cpu_pool *pool) {
    const int nth = pool ? ob_cpu_pool_size(pool) : 1;
    size_t ws = ob_cpu_matmul_work_size(dst, nth);
    void *wd = ws ? malloc(ws) : NULL;
    run_arg a = { dst, wd, ws, pool };
    if (pool) ob_cpu_pool_run(pool, run_fn, &a);
    else run_fn(&a, 0, 1);
    free(wd);
}


typedef struct {
    ob_tensor w, x, y;
    float *xf, *ref, *out;
    void *wq;
} mm_case;

/* The IQ quantizers search grids and are slow; for these types random bytes are valid
 * blocks once the f16 scale is made finite, and they cover every grid index and sign. */
static bool random_block_type(ob_type t) {
    return t == OB_TYPE_IQ2_XXS || t == OB_TYPE_IQ2_XS || t == OB_TYPE_IQ2_S || t == OB_TYPE_IQ3_XXS ||
           t == OB_TYPE_IQ3_S || t == OB_TYPE_IQ1_S || t == OB_TYPE_IQ1_M;
}

static void random_blocks(ob_type t, void *dst, size_t nblocks, ob_rng *rng) {
    const ob_type_traits *tr = ob_type_traits_get(t);
    uint8_t *p = dst;
    for (size_t i = 0; i < nblocks * tr->type_size; i++) p[i] = (uint8_t)ob_rng_u64(rng);
    for (size_t b = 0; b < nblocks; b++, p += tr->type_size) {
        const uint16_t d = ob_f32_to_f16(0.5f + ob_rng_uniform(rng));
        if (t == OB_TYPE_IQ1_M) {
            /* IQ1_M spreads its f16 scale over the top nibbles of its four scale words. */
            ob_block_iq1_m *bm = (ob_block_iq1_m *)p;
            uint16_t sc[4];
            memcpy(sc, bm->scales, 8);
            for (int j = 0; j < 4; j++) sc[j] = (uint16_t)((sc[j] & 0x0fff) | (((d >> (4 * j)) & 0xf) << 12));
            memcpy(bm->scales, sc, 8);
        } else {
            memcpy(p, &d, 2); /* the other types start with their f16 scale */
        }
    }
}

/* Weight rows of any type: quantize random normals when the type has a quantizer. */
static bool make_case(mm_case *m, ob_type t, int64_t k, int64_t n, int64_t tk, ob_rng *rng) {
    const ob_type_traits *tr = ob_type_traits_get(t);
    const size_t rs = ob_row_size(t, k);
    memset(m, 0, sizeof(*m));
    m->wq = malloc(rs * (size_t)n);
    float *wf = malloc(sizeof(float) * (size_t)(k * n));
    m->xf = malloc(sizeof(float) * (size_t)(k * tk));
    m->ref = malloc(sizeof(float) * (size_t)(n * tk));
    m->out = malloc(sizeof(float) * (size_t)(n * tk));
    ob_rng_fill_normal(rng, wf, k * n, 1.0f);
    ob_rng_fill_normal(rng, m->xf, k * tk, 1.0f);
    /* A few large activations, as real hidden states have: stresses per-block scaling. */
    for (int64_t i = 0; i < k * tk; i += 97) m->xf[i] *= 8.0f;
    bool ok = true;
    if (random_block_type(t)) random_blocks(t, m->wq, (size_t)(n * k / tr->block_size), rng);
    else for (int64_t r = 0; r < n && ok; r++)
        ok = tr->from_float(wf + r * k, (char *)m->wq + (size_t)r * rs, k) == rs;
    free(wf);
    m->w = (ob_tensor){ .op = OB_OP_LEAF, .type = t, .ne = { k, n, 1, 1 }, .data = m->wq };
    m->x = (ob_tensor){ .op = OB_OP_LEAF, .type = OB_TYPE_F32, .ne = { k, tk, 1, 1 }, .data = m->xf };
    m->y = (ob_tensor){ .op = OB_OP_MATMUL, .type = OB_TYPE_F32, .ne = { n, tk, 1, 1 }, .data = m->ref };
    m->y.src[0] = &m->w;
    m->y.src[1] = &m->x;
    snprintf(m->y.name, sizeof m->y.name, "mm_%s", tr->name);
    return ok;
}

static void free_case(mm_case *m) {
    free(m->wq); free(m->xf); free(m->ref); free(m->out);
}

/* Relative L2 error of the op's output against the reference; NaN if anything is not finite. */
static double rel_err(const float *y, const float *ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(y[i])) return NAN;
        num += ((double)y[i] - ref[i]) * ((double)y[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0);
}

static const ob_type all_types[] = {
    OB_TYPE_F32, OB_TYPE_F16, OB_TYPE_BF16, OB_TYPE_Q4_0, OB_TYPE_Q4_1, OB_TYPE_Q5_0,
    OB_TYPE_Q5_1, OB_TYPE_Q8_0, OB_TYPE_Q2_K, OB_TYPE_Q3_K, OB_TYPE_Q4_K, OB_TYPE_Q5_K,
    OB_TYPE_Q6_K, OB_TYPE_IQ2_XXS, OB_TYPE_IQ2_XS, OB_TYPE_IQ2_S, OB_TYPE_IQ3_XXS,
    OB_TYPE_IQ3_S, OB_TYPE_IQ1_S, OB_TYPE_IQ1_M, OB_TYPE_IQ4_NL, OB_TYPE_IQ4_XS,
    OB_TYPE_TQ1_0, OB_TYPE_TQ2_0, OB_TYPE_Q1_0, OB_TYPE_MXFP4,
};

static ob_act_fmt act_format(ob_type t, int level) {
    ob_vec_dot_kernel k = { 0 };
    if (level >= 2) k = ob_cpu_vec_dot_avx512(t);
    if (!k.dot && level >= 1) k = ob_cpu_vec_dot_avx2(t);
    if (!k.dot) k = ob_cpu_vec_dot_ref(t);
    return k.act;
}

/* The reference run on the activations the int8 kernels really see: quantized to fmt and
 * back. An int8 kernel must match it to float rounding, which catches a wrong scale or
 * offset that the loose comparison with the true reference would let through. */
static void ref_on_quantized_act(mm_case *m, ob_act_fmt fmt, float *out) {
    const int64_t k = m->x.ne[0], tk = m->x.ne[1];
    float *xq = malloc(sizeof(float) * (size_t)(k * tk));
    void *buf = malloc(ob_cpu_act_row_size(fmt, k));
    for (int64_t j = 0; j < tk; j++) {
        ob_cpu_quantize_act(fmt, m->xf + j * k, buf, k);
        float *o = xq + j * k;
        if (fmt == OB_ACT_Q8_32) {
            const ob_q8a_block *b = buf;
            for (int64_t i = 0; i < k; i++) o[i] = b[i / 32].d * b[i / 32].qs[i % 32];
        } else {
            const ob_block_q8_k *b = buf;
            for (int64_t i = 0; i < k; i++) o[i] = b[i / 256].d * b[i / 256].qs[i % 256];
        }
    }
    ob_tensor x2 = m->x, y2 = m->y;
    x2.data = xq;
    y2.src[1] = &x2;
    y2.data = out;
    ob_cpu_ref_matmul(&y2);
    free(buf);
    free(xq);
}

/* Whether token j of m's batch, run alone (with pool, or NULL: this thread), gives the bits
 * batch[j * n ..] it got among the others; col: n floats of scratch. */
static bool token_alone_same(const mm_case *m, int64_t j, int64_t k, int64_t n, ob_cpu_pool *pool,
                             const float *batch, float *col) {
    ob_tensor xj = m->x, yj = m->y;
    xj.ne[1] = 1;
    xj.data = m->xf + j * k;
    yj.ne[1] = 1;
    yj.src[1] = &xj;
    yj.data = col;
    run_matmul(&yj, pool);
    return memcmp(col, batch + j * n, sizeof(float) * (size_t)n) == 0;
}

static void test_type(ob_type t, const int *levels, int n_levels, ob_cpu_pool *pool2, ob_rng *rng) {
    static const struct { int64_t k, n, t; } shapes[] = {
        { 4096, 9, 1 }, { 256, 31, 2 }, { 768, 5, 3 }, { 512, 9, 5 }, { 1024, 7, 17 }, { 256, 13, 64 },
        { 384, 3, 6 },  /* Q1_0 and the 32-blocks: K not a multiple of 256 */
        { 37, 5, 5 },   /* float weights: K with a tail that no vector width divides */
        /* Row tiles (8 rows, up to 8 columns): 4 and 7 columns, a partial last tile, and
         * K = 72 blocks of 32 (9 of 256) so the decode chunks end with a short pass. */
        { 1024, 19, 4 }, { 2304, 11, 7 }, { 96, 8, 8 },
    };
    const ob_type_traits *tr = ob_type_traits_get(t);
    if (!tr || !tr->to_float || !tr->from_float) {
        printf("  %-8s skipped: no reference quantizer/dequantizer yet\n", ob_type_name(t));
        return;
    }
    double worst[3] = { 0, 0, 0 }, worst_q[3] = { 0, 0, 0 };
    for (size_t s = 0; s < OB_ARRAY_LEN(shapes); s++) {
        const int64_t k = shapes[s].k, n = shapes[s].n, tk = shapes[s].t;
        if (k % tr->block_size) continue;
        mm_case m;
        if (!make_case(&m, t, k, n, tk, rng)) {
            CHECKF(false, "%s: quantizer wrote an unexpected size", tr->name);
            free_case(&m);
            continue;
        }
        for (int64_t i = 0; i < n * tk; i++) m.ref[i] = NAN;
        ob_cpu_ref_matmul(&m.y);
        double ref_norm = 0;
        for (int64_t i = 0; i < n * tk; i++) ref_norm += (double)m.ref[i] * m.ref[i];
        CHECKF(isfinite(ref_norm) && ref_norm > 0, "%s: reference output is degenerate", tr->name);
        float *qref = malloc(sizeof(float) * (size_t)(n * tk));
        float *first = malloc(sizeof(float) * (size_t)(n * tk)), *col = malloc(sizeof(float) * (size_t)n);
        for (int li = 0; li < n_levels; li++) {
            ob_cpu_set_simd_level(levels[li]);
            const ob_act_fmt fmt = act_format(t, levels[li]);
            /* int8 activations: ~0.5% relative per dot, more with outliers in a block. */
            const double tol = fmt == OB_ACT_F32 ? 2e-5 : 5e-2;
            if (fmt != OB_ACT_F32) ref_on_quantized_act(&m, fmt, qref);
            for (int th = 0; th < 2; th++) {
                m.y.data = m.out;
                for (int64_t i = 0; i < n * tk; i++) m.out[i] = NAN;
                run_matmul(&m.y, th ? pool2 : NULL);
                m.y.data = m.ref;
                /* The thread count must not change a single bit (batch invariance). */
                if (th == 0) memcpy(first, m.out, sizeof(float) * (size_t)(n * tk));
                else CHECKF(memcmp(first, m.out, sizeof(float) * (size_t)(n * tk)) == 0,
                            "%s level %d K=%lld N=%lld T=%lld: two threads differ from one", tr->name,
                            levels[li], (long long)k, (long long)n, (long long)tk);
                const double e = rel_err(m.out, m.ref, n * tk);
                if (e > worst[li] || isnan(e)) worst[li] = e;
                CHECKF(e <= tol, "%s level %d nth %d K=%lld N=%lld T=%lld: rel err %.3g > %.3g",
                       tr->name, levels[li], th + 1, (long long)k, (long long)n, (long long)tk, e, tol);
                if (fmt != OB_ACT_F32) {
                    const double eq = rel_err(m.out, qref, n * tk);
                    if (eq > worst_q[li] || isnan(eq)) worst_q[li] = eq;
                    CHECKF(eq <= 2e-5, "%s level %d nth %d K=%lld N=%lld T=%lld: vs quantized-act ref %.3g",
                           tr->name, levels[li], th + 1, (long long)k, (long long)n, (long long)tk, eq);
                }
            }
            /* Each token alone gives the bits it got among the others (T = 1 vs tiles). */
            for (int64_t j = 0; j < tk && tk > 1; j++) {
                CHECKF(token_alone_same(&m, j, k, n, pool2, first, col),
                       "%s level %d K=%lld N=%lld T=%lld: token %lld alone differs from the batch", tr->name,
                       levels[li], (long long)k, (long long)n, (long long)tk, (long long)j);
            }
        }
        free(first);
        free(col);
        free(qref);
        free_case(&m);
    }
    printf("  %-8s worst rel err:", tr->name);
    for (int li = 0; li < n_levels; li++) {
        printf(" L%d %.2e", levels[li], worst[li]);
        if (worst_q[li] > 0) printf(" (int8 act %.1e)", worst_q[li]);
    }
    printf("\n");
}

/* The activation quantizers themselves: scale from the block max, values round-trip. */
static void test_act_quant(ob_rng *rng) {
    float x[512], back;
    ob_rng_fill_normal(rng, x, 512, 3.0f);
    ob_q8a_block q32[16];
    ob_cpu_quantize_act(OB_ACT_Q8_32, x, q32, 512);
    double maxerr = 0;
    for (int i = 0; i < 512; i++) {
        back = q32[i / 32].d * q32[i / 32].qs[i % 32];
        maxerr = fmax(maxerr, fabs(back - x[i]) / (q32[i / 32].d * 0.5 + 1e-30));
    }
    CHECKF(maxerr <= 1.0001, "Q8_32 round-trip error %.4f half-steps", maxerr);
    for (int b = 0; b < 16; b++) {
        int s = 0;
        for (int l = 0; l < 32; l++) s += q32[b].qs[l];
        CHECKF(s == q32[b].sum, "Q8_32 block %d: sum %d, qs add up to %d", b, (int)q32[b].sum, s);
    }
    ob_block_q8_k qk[2];
    ob_cpu_quantize_act(OB_ACT_Q8_K, x, qk, 512);
    for (int b = 0; b < 2; b++) {
        int amax = 0;
        for (int j = 0; j < 16; j++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += qk[b].qs[16 * j + l];
            CHECK(s == qk[b].bsums[j]);
        }
        for (int i = 0; i < 256; i++) amax = OB_MAX(amax, abs(qk[b].qs[i]));
        CHECK(amax == 127);
    }
    /* The SIMD quantizers must give the scalar one's bytes: a result must not depend on the
     * level. Ties (x * id exactly half-way), a zero block and tiny values included
     * (NaN input has no defined result: the scalar float-to-int conversion is UB). */
    for (int i = 256; i < 288; i++) x[i] = 0.0f;
    x[301] = 1e-30f;
    for (int i = 320; i < 352; i++) x[i] = (float)(i - 336) + 0.5f; /* id = 1: every x * id a tie */
    x[351] = 127.0f;
    ob_cpu_quantize_act(OB_ACT_Q8_32, x, q32, 512);
    ob_cpu_quantize_act(OB_ACT_Q8_K, x, qk, 512);
    for (int level = 1; level <= ob_cpu_set_simd_level(-1); level++) {
        ob_vec_dot_kernel k32 = level == 2 ? ob_cpu_vec_dot_avx512(OB_TYPE_Q8_0) : ob_cpu_vec_dot_avx2(OB_TYPE_Q8_0);
        ob_vec_dot_kernel kk = level == 2 ? ob_cpu_vec_dot_avx512(OB_TYPE_Q4_K) : ob_cpu_vec_dot_avx2(OB_TYPE_Q4_K);
        if (!k32.quant || !kk.quant) continue;
        ob_q8a_block s32[16];
        ob_block_q8_k sk[2];
        memset(s32, 0x55, sizeof(s32));
        memset(sk, 0x55, sizeof(sk));
        k32.quant(OB_ACT_Q8_32, x, s32, 512);
        kk.quant(OB_ACT_Q8_K, x, sk, 512);
        CHECKF(memcmp(s32, q32, sizeof(q32)) == 0, "level %d Q8_32 quantizer differs from scalar", level);
        CHECKF(memcmp(sk, qk, sizeof(qk)) == 0, "level %d Q8_K quantizer differs from scalar", level);
    }
}

/* Q4_K and Q6_K, the K-quants of a Q4_K_M decode, with T = 1..9 columns (past one 4- or
 * 8-column pass), K of 1, 3, 9 and 13 blocks, several N, through the op at every int8 level
 * against the reference on the quantized activations; each token alone must give its bits
 * in the batch. Weights come both from the quantizer and as random bytes (every scale, min
 * and quant pattern, including Q6_K scale -128 and q = 63). */
static void random_kquant_blocks(ob_type t, void *dst, size_t nblocks, ob_rng *rng) {
    const ob_type_traits *tr = ob_type_traits_get(t);
    uint8_t *p = dst;
    for (size_t i = 0; i < nblocks * tr->type_size; i++) p[i] = (uint8_t)ob_rng_u64(rng);
    for (size_t b = 0; b < nblocks; b++, p += tr->type_size) {
        const uint16_t d = ob_f32_to_f16(0.01f + 0.02f * ob_rng_uniform(rng));
        const uint16_t dm = ob_f32_to_f16(0.01f + 0.02f * ob_rng_uniform(rng));
        if (t == OB_TYPE_Q6_K) {
            memcpy(p + offsetof(ob_block_q6_k, d), &d, 2);
        } else {
            memcpy(p + offsetof(ob_block_q4_k, d), &d, 2);
            memcpy(p + offsetof(ob_block_q4_k, dmin), &dm, 2);
        }
    }
}

static void test_kquant_batches(const int *levels, int n_levels, ob_cpu_pool *pool2, ob_rng *rng) {
    static const ob_type types[] = { OB_TYPE_Q4_K, OB_TYPE_Q6_K };
    /* 3328: 13 blocks, past one 12-block pass of the Q4_K tile */
    static const int64_t ks[] = { 256, 768, 2304, 3328 }, ns[] = { 1, 8, 13, 27 };
    int cases = 0;
    for (size_t ti = 0; ti < OB_ARRAY_LEN(types); ti++) {
        const ob_type t = types[ti];
        double worst = 0;
        for (int rb = 0; rb < 2; rb++)
            for (size_t ki = 0; ki < OB_ARRAY_LEN(ks); ki++)
                for (size_t ni = 0; ni < OB_ARRAY_LEN(ns); ni++)
                    for (int64_t tk = 1; tk <= 9; tk++) {
                        const int64_t k = ks[ki], n = ns[ni];
                        /* every T for one shape, a spread of T for the rest (test time) */
                        if (!(ki == 1 && ni == 2) && tk != 1 && tk != 4 && tk != 9 && (tk + (int64_t)ni) % 3) continue;
                        mm_case m;
                        if (!make_case(&m, t, k, n, tk, rng)) {
                            CHECKF(false, "%s: quantizer wrote an unexpected size", ob_type_name(t));
                            free_case(&m);
                            continue;
                        }
                        if (rb) random_kquant_blocks(t, m.wq, (size_t)(n * k / OB_QK_K), rng);
                        float *qref = malloc(sizeof(float) * (size_t)(n * tk));
                        float *col = malloc(sizeof(float) * (size_t)n);
                        for (int li = 1; li < n_levels; li++) {
                            ob_cpu_set_simd_level(levels[li]);
                            const ob_act_fmt fmt = act_format(t, levels[li]);
                            ref_on_quantized_act(&m, fmt, qref);
                            m.y.data = m.out;
                            for (int64_t i = 0; i < n * tk; i++) m.out[i] = NAN;
                            run_matmul(&m.y, (tk + (int64_t)ni) % 2 ? pool2 : NULL);
                            const double e = rel_err(m.out, qref, n * tk);
                            if (e > worst || isnan(e)) worst = e;
                            CHECKF(e <= 2e-5, "%s%s level %d K=%lld N=%lld T=%lld: vs quantized-act ref %.3g",
                                   ob_type_name(t), rb ? " (random bytes)" : "", levels[li], (long long)k,
                                   (long long)n, (long long)tk, e);
                            for (int64_t j = 0; j < tk && tk > 1; j += tk - 1) { /* first and last token */
                                CHECKF(token_alone_same(&m, j, k, n, NULL, m.out, col),
                                       "%s level %d K=%lld N=%lld T=%lld: token %lld alone differs from the batch",
                                       ob_type_name(t), levels[li], (long long)k, (long long)n, (long long)tk,
                                       (long long)j);
                            }
                            cases++;
                        }
                        m.y.data = m.ref;
                        free(col);
                        free(qref);
                        free_case(&m);
                    }
        printf("  %-8s T=1..9: worst rel err vs quantized-act ref %.2e\n", ob_type_name(t), worst);
    }
    CHECK(n_levels == 1 || cases > 0);
}

/* ---- ONEBIT_BENCH=1 ---------------------------------------------------------------- */

/* Single thread: this thread's CPU time, so other jobs on a shared machine do not count.
 * With a pool: wall time (only meaningful on an idle machine). */
static double now_s(bool cpu) {
    struct timespec ts;
    if (!cpu) return ob_time_s();
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Times one matvec with the weights in cache (the same matrix again and again) and from
 * DRAM (a sweep over copies adding up to 4x the L3 of a typical desktop/server part). */
static double time_sweep(ob_tensor *dst, void **copies, int ncopy, ob_cpu_pool *pool, int reps) {
    const bool cpu = pool == NULL;
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        double t0 = now_s(cpu);
        for (int i = 0; i < ncopy; i++) {
            dst->src[0]->data = copies[i];
            run_matmul(dst, pool);
        }
        if (r > 0) best = fmin(best, (now_s(cpu) - t0) / ncopy); /* r 0 warms up */
    }
    return best;
}

static void bench(ob_cpu_pool *pool2, ob_rng *rng) {
    static const ob_type bt[] = {
        OB_TYPE_F16, OB_TYPE_BF16, OB_TYPE_Q8_0, OB_TYPE_Q4_0, OB_TYPE_Q4_K, OB_TYPE_Q5_K,
        OB_TYPE_Q6_K, OB_TYPE_IQ4_NL, OB_TYPE_IQ4_XS, OB_TYPE_TQ1_0, OB_TYPE_TQ2_0,
        OB_TYPE_Q1_0, OB_TYPE_IQ1_S, OB_TYPE_IQ1_M, OB_TYPE_Q4_1, OB_TYPE_Q2_K, OB_TYPE_Q3_K,
    };
    /* ONEBIT_BENCH_N=rows: a taller matrix (an output head streams far more than 3072 rows) */
    const char *bn = getenv("ONEBIT_BENCH_N");
    const int64_t k = 1024, n = bn && atoll(bn) > 0 ? atoll(bn) : 3072;
    printf("bench: matvec K=%lld N=%lld, simd level %d. GB/s = weight bytes / best time;\n"
           "1t columns use thread CPU time, 2t columns wall time (noisy on a busy machine)\n",
           (long long)k, (long long)n, ob_cpu_simd_level());
    printf("%-8s %7s %11s %9s %9s %9s %8s %12s %12s\n", "type", "MB", "cache 1t us", "cache 1t", "DRAM 1t",
           "DRAM 2t", "T=4/T=1", "T=64 1t GF/s", "T=64 2t GF/s");
    for (size_t i = 0; i < OB_ARRAY_LEN(bt); i++) {
        const ob_type_traits *tr = ob_type_traits_get(bt[i]);
        if (!tr || !tr->from_float || !tr->to_float) continue;
        mm_case m;
        if (!make_case(&m, bt[i], k, n, 64, rng)) { free_case(&m); continue; }
        m.y.data = m.out;
        const size_t bytes = ob_row_size(bt[i], k) * (size_t)n;
        const int ncopy = (int)OB_MAX((size_t)2, ((size_t)128 << 20) / bytes);
        void **copies = calloc((size_t)ncopy, sizeof(void *));
        int made = 0;
        for (; made < ncopy; made++) {
            if (!(copies[made] = malloc(bytes))) break;
            memcpy(copies[made], m.wq, bytes);
        }
        const double gb = (double)bytes / 1e9;
        m.x.ne[1] = 1; m.y.ne[1] = 1;
        const double tc = time_sweep(&m.y, &m.wq, 1, NULL, 20);
        const double t1 = time_sweep(&m.y, copies, made, NULL, 3);
        const double t2 = time_sweep(&m.y, copies, made, pool2, 3);
        /* 4 parallel sequences: cost of the 4-column matvec relative to one column */
        m.x.ne[1] = 4; m.y.ne[1] = 4;
        const double t4 = time_sweep(&m.y, &m.wq, 1, NULL, 20);
        m.x.ne[1] = 64; m.y.ne[1] = 64;
        const double tp1 = time_sweep(&m.y, &m.wq, 1, NULL, 3);
        const double tp = time_sweep(&m.y, &m.wq, 1, pool2, 3);
        m.w.data = m.wq;
        printf("%-8s %7.2f %11.1f %9.2f %9.2f %9.2f %8.2f %12.1f %12.1f\n", tr->name, gb * 1e3, tc * 1e6, gb / tc,
               gb / t1, gb / t2, t4 / tc, 2.0 * k * n * 64 / tp1 / 1e9, 2.0 * k * n * 64 / tp / 1e9);
        for (int c = 0; c < made; c++) free(copies[c]);
        free(copies);
        free_case(&m);
    }
}

int main(void) {
    ob_rng rng;
    ob_rng_seed(&rng, 1234);
    ob_log_set_level(OB_LOG_WARN);
    const int best = ob_cpu_set_simd_level(-1);
    int levels[3], n_levels = 0;
    for (int l = 0; l <= best; l++) levels[n_levels++] = l;
    printf("simd levels tested: 0 (scalar)%s%s\n", best >= 1 ? ", 1 (AVX2)" : "",
           best >= 2 ? ", 2 (AVX-512)" : "");
    if (best < 2) printf("AVX-512 (F/BW/VL/VNNI) not available on this CPU: level 2 skipped\n");
    if (best < 1) printf("AVX2/FMA/F16C not available on this CPU: level 1 skipped\n");

    ob_cpu_pool *pool2 = ob_cpu_pool_new(2);
    CHECK(pool2 != NULL);
    if (!pool2) return ob_test_done("cpu_matmul");

    test_act_quant(&rng);
    for (size_t i = 0; i < OB_ARRAY_LEN(all_types); i++) test_type(all_types[i], levels, n_levels, pool2, &rng);
    test_kquant_batches(levels, n_levels, pool2, &rng);

    /* A kernel must refuse, not crash on, a K that is not a block multiple. */
    {
        float wv[40], xv[40], yv[1] = { 12345.0f };
        for (int i = 0; i < 40; i++) { wv[i] = 1.0f; xv[i] = 1.0f; }
        ob_tensor w = { .type = OB_TYPE_Q4_0, .ne = { 40, 1, 1, 1 }, .data = wv };
        ob_tensor x = { .type = OB_TYPE_F32, .ne = { 40, 1, 1, 1 }, .data = xv };
        ob_tensor y = { .op = OB_OP_MATMUL, .type = OB_TYPE_F32, .ne = { 1, 1, 1, 1 }, .data = yv };
        y.src[0] = &w; y.src[1] = &x;
        ob_log_set_level(OB_LOG_ERROR + 1);
        run_matmul(&y, NULL);
        ob_log_set_level(OB_LOG_WARN);
        CHECK(yv[0] == 12345.0f);
    }

    const char *b = getenv("ONEBIT_BENCH");
    if (b && atoi(b) > 0) {
        /* ONEBIT_BENCH_LEVEL=N times SIMD level N instead of the best one */
        const char *bl = getenv("ONEBIT_BENCH_LEVEL");
        ob_cpu_set_simd_level(bl ? atoi(bl) : -1);
        bench(pool2, &rng);
    }
    ob_cpu_set_simd_level(-1);
    ob_cpu_pool_free(pool2);
    return ob_test_done("cpu_matmul");
}
