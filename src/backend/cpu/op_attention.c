/* KV_STORE (F32 rows into a cache of any cache type, op_table.c's kv_type) and ATTENTION (flash style: one pass of
 * online softmax per query over blocks of cells, f32 accumulation).
 *
 * Attention work is split into tasks (tile of up to OB_ATTN_TILE batch tokens, kv head,
 * kv split). A task serves all n_head/n_kv query heads of its kv head for every token of
 * its tile, so each K/V block is converted to float once per task, not once per query.
 * When there are fewer (token, kv head) pairs than threads (decode; MLA's one kv head for
 * every head), a kv head's query heads are dealt over several tasks instead, so a decode
 * step uses every thread (a row's cells are never split, see attn_dims). Attention sinks
 * (src6) join a row's softmax once its cells are done. */
#include "backend/cpu/cpu.h"
#include "backend/cpu/simd_exp.h"
#include <math.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* ---- KV_STORE -------------------------------------------------------------------------- */

static void f16_row_ref(const float *src, uint16_t *d, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] = ob_f32_to_f16(src[i]);
}

#if defined(__x86_64__)
/* F16C rounds to nearest even like ob_f32_to_f16: the same bits for every non-NaN value
 * (a NaN stays a NaN). A decode step stores every layer's K and V rows on one thread, so the
 * scalar conversion was a serial 20 us per layer at 4 sequences. */
__attribute__((target("avx2,f16c"))) static void f16_row_f16c(const float *src, uint16_t *d, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) d[i] = ob_f32_to_f16(src[i]);
}
#endif

void ob_cpu_op_kv_store(ob_tensor *dst, const ob_cpu_op_ctx *c) {
    const ob_tensor *x = dst->src[0], *cache = dst->src[1];
    const int32_t *pos = dst->src[2]->data, *seq = dst->src[3]->data;
    int64_t row = cache->ne[0], T = ob_nelements(x) / row, cps = dst->ip[0], t0, t1;
    size_t rb = ob_row_size(cache->type, row);
    const ob_from_float_fn from_float = ob_type_traits_get(cache->type)->from_float;
    void (*f16_row)(const float *, uint16_t *, int64_t) = f16_row_ref;
#if defined(__x86_64__)
    if (ob_cpu_simd_level() >= 1) f16_row = f16_row_f16c; /* every AVX2 CPU has F16C */
#endif
    ob_cpu_split(T, c->ith, c->nth, &t0, &t1);
    for (int64_t t = t0; t < t1; t++) {
        const float *src = (const float *)x->data + t * row;
        char *d = (char *)cache->data + (size_t)((int64_t)seq[t] * cps + pos[t]) * rb;
        if (cache->type == OB_TYPE_F32) memcpy(d, src, rb);
        else if (cache->type == OB_TYPE_F16) f16_row(src, (uint16_t *)d, row);
        else from_float(src, d, row); /* the reference quantizer: the bytes a GGUF holds */
    }
    if (c->ith == 0) *(float *)dst->data = 0.0f;
}

/* ---- vector helpers -------------------------------------------------------------------- */

static float dot_ref(const float *a, const float *b, int64_t n) {
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static void axpy_ref(float *y, float a, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

/* out[c] = dot(q, rows[c]) for c < nb: one query row against a K block. */
static void dot_rows_ref(float *out, const float *q, const float *const *rows, int64_t nb, int64_t n) {
    for (int64_t c = 0; c < nb; c++) out[c] = dot_ref(q, rows[c], n);
}

/* acc[e] += sum_c p[c] * rows[c][e] for c < nb, e < n: one head's share of a V block. */
static void acc_rows_ref(float *acc, const float *p, const float *const *rows, int64_t nb, int64_t n) {
    for (int64_t c = 0; c < nb; c++) axpy_ref(acc, p[c], rows[c], n);
}

/* n values of a cache row slice (starting on a block) -> float. F32 rows are used in place
 * (returns src). */
static const float *kv_row_ref(ob_type t, const void *src, float *buf, int64_t n) {
    if (t == OB_TYPE_F32) return src;
    if (t == OB_TYPE_F16) {
        const uint16_t *h = src;
        for (int64_t i = 0; i < n; i++) buf[i] = ob_f16_to_f32(h[i]);
    } else {
        ob_type_traits_get(t)->to_float(src, buf, n);
    }
    return buf;
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma,f16c"))) static float dot_avx2(const float *a, const float *b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    __m256 v = _mm256_add_ps(s0, s1);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    float r = _mm_cvtss_f32(s);
    for (; i < n; i++) r += a[i] * b[i];
    return r;
}

__attribute__((target("avx2,fma,f16c"))) static void axpy_avx2(float *y, float a, const float *x, int64_t n) {
    __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

/* Four K rows per pass: each load of q serves four products, and the four sums reduce
 * together. */
__attribute__((target("avx2,fma,f16c"))) static void dot_rows_avx2(float *out, const float *q,
                                                                   const float *const *rows, int64_t nb, int64_t n) {
    int64_t c = 0;
    for (; c + 4 <= nb; c += 4) {
        const float *r0 = rows[c], *r1 = rows[c + 1], *r2 = rows[c + 2], *r3 = rows[c + 3];
        __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
        int64_t e = 0;
        for (; e + 8 <= n; e += 8) {
            __m256 qv = _mm256_loadu_ps(q + e);
            s0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(r0 + e), s0);
            s1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(r1 + e), s1);
            s2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(r2 + e), s2);
            s3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(r3 + e), s3);
        }
        /* hadd pairs lanes so one vector ends up holding the four totals. */
        __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(s0, s1), _mm256_hadd_ps(s2, s3));
        __m128 t = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
        float tail[4];
        _mm_storeu_ps(tail, t);
        for (; e < n; e++) {
            tail[0] += q[e] * r0[e];
            tail[1] += q[e] * r1[e];
            tail[2] += q[e] * r2[e];
            tail[3] += q[e] * r3[e];
        }
        memcpy(out + c, tail, sizeof(tail));
    }
    for (; c < nb; c++) out[c] = dot_avx2(q, rows[c], n);
}

/* Keeps a 32-wide strip of the accumulator in registers across the whole block. */
__attribute__((target("avx2,fma,f16c"))) static void acc_rows_avx2(float *acc, const float *p,
                                                                   const float *const *rows, int64_t nb, int64_t n) {
    int64_t e = 0;
    for (; e + 32 <= n; e += 32) {
        __m256 a0 = _mm256_loadu_ps(acc + e), a1 = _mm256_loadu_ps(acc + e + 8);
        __m256 a2 = _mm256_loadu_ps(acc + e + 16), a3 = _mm256_loadu_ps(acc + e + 24);
        for (int64_t c = 0; c < nb; c++) {
            __m256 pc = _mm256_set1_ps(p[c]);
            const float *r = rows[c] + e;
            a0 = _mm256_fmadd_ps(pc, _mm256_loadu_ps(r), a0);
            a1 = _mm256_fmadd_ps(pc, _mm256_loadu_ps(r + 8), a1);
            a2 = _mm256_fmadd_ps(pc, _mm256_loadu_ps(r + 16), a2);
            a3 = _mm256_fmadd_ps(pc, _mm256_loadu_ps(r + 24), a3);
        }
        _mm256_storeu_ps(acc + e, a0);
        _mm256_storeu_ps(acc + e + 8, a1);
        _mm256_storeu_ps(acc + e + 16, a2);
        _mm256_storeu_ps(acc + e + 24, a3);
    }
    for (; e + 8 <= n; e += 8) {
        __m256 a0 = _mm256_loadu_ps(acc + e);
        for (int64_t c = 0; c < nb; c++) a0 = _mm256_fmadd_ps(_mm256_set1_ps(p[c]), _mm256_loadu_ps(rows[c] + e), a0);
        _mm256_storeu_ps(acc + e, a0);
    }
    for (; e < n; e++)
        for (int64_t c = 0; c < nb; c++) acc[e] += p[c] * rows[c][e];
}

__attribute__((target("avx2,fma,f16c"))) static const float *kv_row_avx2(ob_type t, const void *src, float *buf,
                                                                         int64_t n) {
    if (t == OB_TYPE_F32) return src;
    int64_t i = 0;
    if (t == OB_TYPE_F16) {
        const uint16_t *h = src;
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(buf + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
        for (; i < n; i++) buf[i] = ob_f16_to_f32(h[i]);
        return buf;
    }
    if (t != OB_TYPE_Q8_0) return kv_row_ref(t, src, buf, n); /* the other cache types: their reference */
    const ob_block_q8_0 *b = src;
    for (int64_t k = 0; k < n / 32; k++) {
        __m256 d = _mm256_set1_ps(ob_f16_to_f32(b[k].d));
        for (int j = 0; j < 32; j += 8) {
            __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b[k].qs + j)));
            _mm256_storeu_ps(buf + k * 32 + j, _mm256_mul_ps(d, _mm256_cvtepi32_ps(q)));
        }
    }
    return buf;
}
#endif

/* p[i] = exp(x[i] - m) for x[i] <= m; returns the sum. */
static float exp_sum_ref(float *p, const float *x, float m, int64_t n) {
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += p[i] = expf(x[i] - m);
    return s;
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma,f16c"))) static float exp_sum_avx2(float *p, const float *x, float m, int64_t n) {
    __m256 vm = _mm256_set1_ps(m), acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp_neg_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        _mm256_storeu_ps(p + i, e);
        acc = _mm256_add_ps(acc, e);
    }
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    float r = _mm_cvtss_f32(s);
    for (; i < n; i++) r += p[i] = expf(x[i] - m);
    return r;
}
#endif

typedef struct ob_attn_vec {
    float (*dot)(const float *, const float *, int64_t);
    void (*axpy)(float *, float, const float *, int64_t);
    const float *(*row)(ob_type, const void *, float *, int64_t);
    float (*exp_sum)(float *, const float *, float, int64_t);
    void (*acc_rows)(float *, const float *, const float *const *, int64_t, int64_t);
    void (*dot_rows)(float *, const float *, const float *const *, int64_t, int64_t);
} ob_attn_vec;

static ob_attn_vec attn_vec(void) {
#if defined(__x86_64__)
    if (ob_cpu_simd_level() >= 1) /* every AVX2 CPU has F16C; clang rejects "f16c" here */
        return (ob_attn_vec){dot_avx2, axpy_avx2, kv_row_avx2, exp_sum_avx2, acc_rows_avx2, dot_rows_avx2};
#endif
    return (ob_attn_vec){dot_ref, axpy_ref, kv_row_ref, exp_sum_ref, acc_rows_ref, dot_rows_ref};
}

/* Cells per block of the online softmax: the running max and the rescale of the
 * accumulators move once per block instead of once per cell. */
#define OB_ATTN_BLOCK 64
/* Most batch tokens one task serves: consecutive tokens of one sequence share each
 * converted K/V block, which is what makes prefill cheaper than T separate decodes. */
#define OB_ATTN_TILE 8

/* ---- ATTENTION ------------------------------------------------------------------------- */

typedef struct ob_attn_dims {
    int64_t hd, H, T, n_kv, g, cps, n_split, tile, rows; /* rows: tile * g query rows per task */
    int64_t dv, sv;      /* the values' width, and a kv head's stride in a V row (graph.h) */
    int64_t hsplit, gs;  /* tasks a kv head's group of g heads is dealt over, gs heads each */
    size_t per_thread;   /* floats of scratch per thread (64-byte multiple) */
    size_t partial_off;  /* float offsets in the work buffer */
    size_t maxpos_off;
} ob_attn_dims;

static ob_attn_dims attn_dims(const ob_tensor *n, int nth) {
    ob_attn_dims d;
    const ob_tensor *q = n->src[0];
    d.hd = q->ne[0];
    d.H = q->ne[1];
    d.T = q->ne[2] * q->ne[3];
    d.n_kv = n->ip[1] > 0 ? n->ip[1] : 1;
    d.dv = n->ne[0] / d.H;
    d.sv = n->src[2]->ne[0] / d.n_kv;
    d.g = d.H / d.n_kv;
    d.cps = n->ip[0];
    int64_t pairs = d.T * d.n_kv;
    /* No split of a row's cells across threads: the merge of partial softmaxes rounds
     * differently from one pass, and a token's output must not depend on how many other
     * tokens share its batch (the server promises batched answers equal solo ones). */
    d.n_split = 1;
    /* Tiles only as large as still leaves about four tasks per thread. */
    d.tile = OB_MAX(1, OB_MIN(OB_ATTN_TILE, pairs / (4 * (int64_t)nth)));
    /* Too few (token, kv head) pairs for the threads (a decode step of MLA's one kv head
     * for every head): the heads of a group go to several tasks. A row computes the same
     * whatever rows share its task (blocks align to absolute cells), so outputs do not
     * change with the split. */
    d.hsplit = pairs >= nth ? 1 : OB_MIN(d.g, (nth + pairs - 1) / pairs);
    d.gs = (d.g + d.hsplit - 1) / d.hsplit;
    d.rows = d.tile * d.gs;
    /* k, v blocks [BLOCK*hd], [BLOCK*dv]; per query row: q [hd], acc [dv], m, l, and the
     * cell range (two int64 as four floats), scores, probs [BLOCK] */
    d.per_thread = (size_t)(OB_ATTN_BLOCK * (d.hd + d.dv) + d.rows * (d.hd + d.dv + 6 + 2 * OB_ATTN_BLOCK) + 15) &
                   ~(size_t)15;
    d.partial_off = d.per_thread * (size_t)nth;
    size_t partial = d.n_split > 1 ? (size_t)(d.T * d.H * d.n_split * (d.dv + 2)) : 0;
    d.maxpos_off = d.partial_off + partial;
    return d;
}

size_t ob_cpu_attention_work_size(const ob_tensor *node, int nth) {
    ob_attn_dims d = attn_dims(node, nth);
    size_t maxpos = node->ip[3] ? 0 : (size_t)d.T;
    return (d.maxpos_off + maxpos) * sizeof(float);
}

/* Cells [*lo, *hi] (inclusive) that token t attends inside its sequence. The window is
 * one-sided for causal attention and symmetric (|p - j| < w) for the non-causal kind. */
static void attn_range(const ob_tensor *n, int32_t p, int32_t maxpos, int64_t *lo, int64_t *hi) {
    int64_t w = n->ip[2];
    *lo = w > 0 ? OB_MAX(0, (int64_t)p - w + 1) : 0;
    *hi = n->ip[3] ? p : maxpos;
    if (!n->ip[3] && w > 0) *hi = OB_MIN(*hi, (int64_t)p + w - 1);
}

/* One thread's scratch, carved from the work buffer. */
typedef struct ob_attn_scratch {
    float *kbuf, *vbuf;      /* [BLOCK * hd], [BLOCK * dv] converted K / V rows of the current block */
    float *q, *acc;          /* [rows * hd] scaled queries, [rows * dv] unnormalised outputs */
    float *m, *l;            /* [rows] running max and sum */
    int64_t *j0, *j1;        /* [rows] each row's cells [j0, j1) */
    float *sc, *pr;          /* [rows * BLOCK] scores and probabilities of the block */
    float *partial;          /* shared [T, H, n_split, 2 + dv] (max, sum, acc) when n_split > 1 */
} ob_attn_scratch;

/* A head's sink (gpt-oss, graph.h): one more logit in the softmax's denominator, with no
 * value; folded into a row's running max m, sum l and accumulator acc [dv] at the end. */
static void sink_merge(float *m, float *l, float *acc, int64_t dv, float sink) {
    if (sink > *m) {
        const float corr = expf(*m - sink);
        *l *= corr;
        for (int64_t e = 0; e < dv; e++) acc[e] *= corr;
        *m = sink;
    }
    *l += expf(sink - *m);
}

/* Batch tokens [t0, t1) of one sequence, kv head kh, heads [h0, h0 + g) of its group, kv
 * split sp: every query row (token, head) walks the union of the rows' cell ranges block by
 * block; each row only scores the cells of its own range, so masks never need -inf. */
static void attn_group(ob_tensor *dst, const ob_attn_dims *d, const ob_attn_scratch *w, const ob_attn_vec *vec,
                       const int32_t *maxpos, int64_t t0, int64_t t1, int64_t kh, int64_t h0, int64_t g, int64_t sp) {
    const ob_tensor *q = dst->src[0], *kc = dst->src[1], *vc = dst->src[2];
    const int32_t *pos = dst->src[3]->data, *seq = dst->src[4]->data;
    int64_t hd = d->hd, dv = d->dv, nr = (t1 - t0) * g, u0 = INT64_MAX, u1 = INT64_MIN;
    float scale = dst->fp[0], cap = dst->fp[1], max_bias = dst->fp[2];
    bool causal = dst->ip[3] != 0;
    for (int64_t t = t0; t < t1; t++) {
        int64_t lo, hi;
        attn_range(dst, pos[t], causal ? pos[t] : maxpos[t], &lo, &hi);
        int64_t n = hi - lo + 1, a = lo + n * sp / d->n_split, b = lo + n * (sp + 1) / d->n_split;
        const float *qt = (const float *)q->data + (t * d->H + h0) * hd;
        for (int64_t i = 0; i < g; i++) {
            int64_t r = (t - t0) * g + i;
            w->j0[r] = a;
            w->j1[r] = b;
            w->m[r] = -INFINITY;
            w->l[r] = 0;
            for (int64_t e = 0; e < hd; e++) w->q[r * hd + e] = qt[i * hd + e] * scale;
        }
        if (a < b) { u0 = OB_MIN(u0, a); u1 = OB_MAX(u1, b); }
    }
    memset(w->acc, 0, sizeof(float) * (size_t)(nr * dv));
    size_t krb = ob_row_size(kc->type, hd * d->n_kv), vrb = ob_row_size(vc->type, d->sv * d->n_kv);
    const char *kbase = (const char *)kc->data + ob_row_size(kc->type, hd * kh) + (size_t)(seq[t0] * d->cps) * krb;
    const char *vbase = (const char *)vc->data + ob_row_size(vc->type, d->sv * kh) + (size_t)(seq[t0] * d->cps) * vrb;
    const float *krows[OB_ATTN_BLOCK], *vrows[OB_ATTN_BLOCK];
    /* Blocks start at absolute multiples of the block size, so each row sees the same
     * block boundaries whatever other rows share its task. */
    if (u0 < u1) u0 -= u0 % OB_ATTN_BLOCK;
    for (int64_t jb = u0; jb < u1; jb += OB_ATTN_BLOCK) {
        int64_t nb = OB_MIN(OB_ATTN_BLOCK, u1 - jb);
        for (int64_t c = 0; c < nb; c++) krows[c] = vec->row(kc->type, kbase + (size_t)(jb + c) * krb, w->kbuf + c * hd, hd);
        for (int64_t r = 0; r < nr; r++) {
            int64_t a = OB_MAX(w->j0[r], jb), b = OB_MIN(w->j1[r], jb + nb);
            if (a >= b) continue;
            float *si = w->sc + r * OB_ATTN_BLOCK + (a - jb), bm = -INFINITY;
            vec->dot_rows(si, w->q + r * hd, krows + (a - jb), b - a, hd);
            /* ALiBi: a penalty growing with the distance between the two positions */
            float slope = max_bias > 0 ? ob_alibi_slope((int)(h0 + r % g), (int)d->H, max_bias) : 0.0f;
            int64_t pq = pos[t0 + r / g];
            for (int64_t c = 0; c < b - a; c++) {
                if (cap > 0) si[c] = cap * tanhf(si[c] / cap);
                if (slope > 0) si[c] -= slope * (float)llabs(pq - (a + c));
                bm = si[c] > bm ? si[c] : bm;
            }
            if (bm > w->m[r]) {
                /* New running max: rescale what was accumulated under the old one. */
                float corr = expf(w->m[r] - bm);
                w->l[r] *= corr;
                for (int64_t e = 0; e < dv; e++) w->acc[r * dv + e] *= corr;
                w->m[r] = bm;
            }
            w->l[r] += vec->exp_sum(w->pr + r * OB_ATTN_BLOCK + (a - jb), si, w->m[r], b - a);
        }
        /* V rows of the block are converted once and shared by every row of the task. */
        for (int64_t c = 0; c < nb; c++) vrows[c] = vec->row(vc->type, vbase + (size_t)(jb + c) * vrb, w->vbuf + c * dv, dv);
        for (int64_t r = 0; r < nr; r++) {
            int64_t a = OB_MAX(w->j0[r], jb), b = OB_MIN(w->j1[r], jb + nb);
            if (a < b) vec->acc_rows(w->acc + r * dv, w->pr + r * OB_ATTN_BLOCK + (a - jb), vrows + (a - jb), b - a, dv);
        }
    }
    const float *sinks = dst->src[6] ? dst->src[6]->data : NULL;
    for (int64_t r = 0; r < nr; r++) {
        int64_t t = t0 + r / g, h = h0 + r % g;
        if (sinks && d->n_split == 1) sink_merge(&w->m[r], &w->l[r], w->acc + r * dv, dv, sinks[h]);
        const float *ar = w->acc + r * dv;
        if (d->n_split == 1) {
            float *o = (float *)dst->data + (t * d->H + h) * dv, inv = w->l[r] > 0 ? 1.0f / w->l[r] : 0.0f;
            for (int64_t e = 0; e < dv; e++) o[e] = ar[e] * inv;
        } else {
            float *pp = w->partial + (size_t)(((t * d->H + h) * d->n_split + sp) * (dv + 2));
            pp[0] = w->m[r];
            pp[1] = w->l[r];
            memcpy(pp + 2, ar, sizeof(float) * (size_t)dv);
        }
    }
}

void ob_cpu_op_attention(ob_tensor *dst, const ob_cpu_op_ctx *c) {
    const int32_t *pos = dst->src[3]->data, *seq = dst->src[4]->data;
    ob_attn_dims d = attn_dims(dst, c->nth);
    int64_t hd = d.hd, dv = d.dv;
    float *wb = c->wdata;
    int32_t *maxpos = (int32_t *)(wb + d.maxpos_off);
    ob_attn_vec vec = attn_vec();

    if (!dst->ip[3]) {
        /* Whole-sequence attention reaches the furthest position of the token's sequence in
         * this batch. O(T^2) integer work, small next to the attention itself. */
        int64_t t0, t1;
        ob_cpu_split(d.T, c->ith, c->nth, &t0, &t1);
        for (int64_t t = t0; t < t1; t++) {
            int32_t m = pos[t];
            for (int64_t u = 0; u < d.T; u++)
                if (seq[u] == seq[t] && pos[u] > m) m = pos[u];
            maxpos[t] = m;
        }
        ob_cpu_sync(c);
    }

    ob_attn_scratch w;
    /* the cell ranges first: the 64-byte aligned start keeps them aligned whatever hd and dv */
    w.j0 = (int64_t *)(void *)(wb + d.per_thread * (size_t)c->ith);
    w.j1 = w.j0 + d.rows;
    w.kbuf = (float *)(void *)(w.j1 + d.rows);
    w.vbuf = w.kbuf + OB_ATTN_BLOCK * hd;
    w.q = w.vbuf + OB_ATTN_BLOCK * dv;
    w.acc = w.q + d.rows * hd;
    w.m = w.acc + d.rows * dv;
    w.l = w.m + d.rows;
    w.sc = w.l + d.rows;
    w.pr = w.sc + d.rows * OB_ATTN_BLOCK;
    w.partial = wb + d.partial_off;

    int64_t n_tiles = (d.T + d.tile - 1) / d.tile, n_tasks = n_tiles * d.n_kv * d.hsplit * d.n_split;
    /* Tasks are dealt round-robin: causal costs grow with position, so contiguous blocks
     * would leave the thread with the last tokens doing most of the work. */
    for (int64_t task = c->ith; task < n_tasks; task += c->nth) {
        int64_t sp = task % d.n_split, rest = task / d.n_split, hs = rest % d.hsplit, kh = rest / d.hsplit % d.n_kv;
        int64_t tile = rest / (d.hsplit * d.n_kv), end = OB_MIN(d.T, (tile + 1) * d.tile);
        int64_t h0 = kh * d.g + hs * d.gs, gn = OB_MIN(d.gs, (kh + 1) * d.g - h0);
        if (gn <= 0) continue;
        /* A tile may straddle sequences: serve each run of one sequence on its own. */
        for (int64_t t0 = tile * d.tile, t1; t0 < end; t0 = t1) {
            for (t1 = t0 + 1; t1 < end && seq[t1] == seq[t0];) t1++;
            attn_group(dst, &d, &w, &vec, maxpos, t0, t1, kh, h0, gn, sp);
        }
    }
    if (d.n_split == 1) return;

    /* Merge the kv splits of each (token, head): rescale every partial to the common max. */
    ob_cpu_sync(c);
    int64_t r0, r1;
    ob_cpu_split(d.T * d.H, c->ith, c->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const float *pp = w.partial + (size_t)(r * d.n_split * (dv + 2));
        float mx = -INFINITY, sum = 0;
        for (int64_t s = 0; s < d.n_split; s++)
            if (pp[s * (dv + 2) + 1] > 0 && pp[s * (dv + 2)] > mx) mx = pp[s * (dv + 2)];
        float *o = (float *)dst->data + r * dv;
        memset(o, 0, sizeof(float) * (size_t)dv);
        for (int64_t s = 0; s < d.n_split; s++) {
            const float *ps = pp + s * (dv + 2);
            if (!(ps[1] > 0)) continue;
            float f = expf(ps[0] - mx);
            sum += ps[1] * f;
            vec.axpy(o, f, ps + 2, dv);
        }
        if (dst->src[6]) sink_merge(&mx, &sum, o, dv, ((const float *)dst->src[6]->data)[r % d.H]);
        float inv = sum > 0 ? 1.0f / sum : 0.0f;
        for (int64_t e = 0; e < dv; e++) o[e] *= inv;
    }
}
