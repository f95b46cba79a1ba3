/* Mixture of experts on the CPU (graph.h): MOE_GATE picks each token's k experts and their
 * weights (within the best groups, for group-limited routing), MATMUL_ID multiplies each
 * (token, slot) by its expert's matrix (without a gate, slot j by matrix j: MLA's per-head
 * products), MOE_SUM adds the slots up by weight. With their plain-C references (double
 * accumulation).
 *
 * MATMUL_ID walks each chosen expert's weights once per node, as llama.cpp's MUL_MAT_ID
 * does: thread 0 groups the (token, slot) pairs by expert, the threads quantize each
 * pair's x row into the weight kernel's act format in group order (so an expert's columns
 * are contiguous), then every thread takes its share of the rows of each expert in turn
 * and sweeps that expert's columns with the matmul's dot or tile kernels (op_matmul.c).
 * A decode step reads only its k experts; a prefill reads each chosen expert once. A
 * column's result does not depend on which other columns share its kernel call
 * (vec_dot.h), so a token's output is the same in any batch. */
#include "backend/cpu/cpu.h"
#include "backend/cpu/vec_dot.h"
#include <math.h>
#include <stdlib.h>

static char *align64(void *p) { return (char *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }
static size_t round64(size_t n) { return (n + 63) & ~(size_t)63; }

/* ---- MOE_GATE --------------------------------------------------------------------------- */

/* Selection score of expert e: the logit (softmax is monotone), or sigmoid + bias, in
 * double so every implementation orders the experts alike; NaN ranks below everything. */
static double gate_score(int gating, float l, const float *bias, int64_t e) {
    double s = gating == OB_MOE_SOFTMAX ? (double)l : 1.0 / (1.0 + exp(-(double)l)) + (bias ? (double)bias[e] : 0.0);
    return isnan(s) ? -INFINITY : s;
}

/* The k best of E scores, best first, ties to the lower id: pick j is the largest score
 * ranked after pick j-1 in (score descending, id ascending) order. Ids always in [0, E). */
static void gate_select(const double *s, int64_t E, int k, int32_t *ids) {
    for (int j = 0; j < k; j++) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++) {
            if (j > 0) {
                const int64_t p = ids[j - 1];
                if (!(s[e] < s[p] || (s[e] == s[p] && e > p))) continue; /* ranked before pick j-1 */
            }
            if (best < 0 || s[e] > s[best]) best = e;
        }
        ids[j] = (int32_t)(best < 0 ? 0 : best); /* unreachable: E >= k distinct ranks */
    }
}

/* Group-limited routing (graph.h: OB_MOE_GROUPS): every expert outside the `used` best
 * groups gets the score -inf, so only the others can be chosen. A group's score is the sum
 * of its two best selection scores (softmax: probabilities, in double); gs [n_group] and
 * gid [used] are scratch. */
static void gate_mask_groups(double *s, const float *l, int gating, int64_t E, int32_t groups, double *gs, int32_t *gid) {
    const int64_t ng = OB_MOE_GROUP_COUNT(groups), nu = OB_MOE_GROUP_USED(groups), per = E / ng;
    double mx = -INFINITY, den = 0;
    if (gating == OB_MOE_SOFTMAX) {
        for (int64_t e = 0; e < E; e++) mx = l[e] > mx ? l[e] : mx;
        for (int64_t e = 0; e < E; e++) den += isnan(l[e]) ? 0.0 : exp((double)l[e] - mx);
    }
    for (int64_t gi = 0; gi < ng; gi++) {
        double b1 = -INFINITY, b2 = -INFINITY;
        for (int64_t e = gi * per; e < (gi + 1) * per; e++) {
            double v = gating == OB_MOE_SOFTMAX ? exp((double)l[e] - mx) / den : s[e];
            if (isnan(v)) v = -INFINITY;
            if (v > b1) { b2 = b1; b1 = v; }
            else if (v > b2) b2 = v;
        }
        gs[gi] = per > 1 ? b1 + b2 : b1;
        if (isnan(gs[gi])) gs[gi] = -INFINITY; /* inf + -inf, from an infinite bias */
    }
    gate_select(gs, ng, (int)nu, gid);
    for (int64_t gi = 0; gi < ng; gi++) {
        bool used = false;
        for (int64_t j = 0; j < nu; j++) used = used || gid[j] == gi;
        if (!used)
            for (int64_t e = gi * per; e < (gi + 1) * per; e++) s[e] = -INFINITY;
    }
}

/* Per thread: the E scores and the k chosen ids, and the group scores and chosen groups. */
static size_t gate_thread_bytes(const ob_tensor *n) {
    const size_t ng = n->ip[3] ? (size_t)OB_MOE_GROUP_COUNT(n->ip[3]) : 0;
    return round64(sizeof(double) * (size_t)n->src[0]->ne[0]) + round64(sizeof(int32_t) * (size_t)n->ip[0]) +
           round64(sizeof(double) * ng) + round64(sizeof(int32_t) * ng);
}

static size_t gate_work_size(const ob_tensor *n, int nth) { return (size_t)nth * gate_thread_bytes(n) + 64; }

void ob_cpu_op_moe_gate(ob_tensor *dst, const ob_cpu_op_ctx *c) {
    const ob_tensor *a = dst->src[0];
    const float *bias = dst->src[1] ? dst->src[1]->data : NULL;
    const int64_t E = a->ne[0], T = ob_nrows(a);
    const int k = dst->ip[0], gating = dst->ip[1];
    if (!c->wdata || gate_work_size(dst, c->nth) > c->wsize) {
        if (c->ith == 0) ob_log(OB_LOG_ERROR, "moe_gate %s: work buffer too small", dst->name);
        return;
    }
    double *s = (double *)(align64(c->wdata) + (size_t)c->ith * gate_thread_bytes(dst));
    int32_t *id = (int32_t *)((char *)s + round64(sizeof(double) * (size_t)E));
    double *gs = (double *)((char *)id + round64(sizeof(int32_t) * (size_t)k));
    int32_t *gid = (int32_t *)((char *)gs + round64(sizeof(double) * (size_t)OB_MOE_GROUP_COUNT(dst->ip[3])));
    int64_t t0, t1;
    ob_cpu_split(T, c->ith, c->nth, &t0, &t1);
    for (int64_t t = t0; t < t1; t++) {
        const float *l = (const float *)a->data + t * E;
        float *y = (float *)dst->data + t * 2 * k;
        for (int64_t e = 0; e < E; e++) s[e] = gate_score(gating, l[e], bias, e);
        if (dst->ip[3]) gate_mask_groups(s, l, gating, E, dst->ip[3], gs, gid);
        gate_select(s, E, k, id);
        float sum = 0.0f;
        if (gating == OB_MOE_SOFTMAX) {
            float mx = -INFINITY, den = 0.0f;
            for (int64_t e = 0; e < E; e++) mx = l[e] > mx ? l[e] : mx;
            for (int64_t e = 0; e < E; e++) den += expf(l[e] - mx);
            for (int j = 0; j < k; j++) y[j] = expf(l[id[j]] - mx) / den;
        } else {
            for (int j = 0; j < k; j++) y[j] = 1.0f / (1.0f + expf(-l[id[j]]));
        }
        for (int j = 0; j < k; j++) sum += y[j];
        for (int j = 0; j < k; j++) {
            if (dst->ip[2] & OB_MOE_NORM) y[j] /= sum;
            y[j] *= dst->fp[0];
            y[k + j] = (float)id[j];
        }
    }
}

static void ref_moe_gate(ob_tensor *dst) {
    const ob_tensor *a = dst->src[0];
    const float *bias = dst->src[1] ? dst->src[1]->data : NULL;
    const int64_t E = a->ne[0], T = ob_nrows(a);
    const int k = dst->ip[0], gating = dst->ip[1];
    const int64_t ng = OB_MOE_GROUP_COUNT(dst->ip[3]);
    double *s = malloc(sizeof(double) * (size_t)E), *w = malloc(sizeof(double) * (size_t)k);
    double *gs = malloc(sizeof(double) * (size_t)(ng + 1));
    int32_t *id = malloc(sizeof(int32_t) * (size_t)k), *gid = malloc(sizeof(int32_t) * (size_t)(ng + 1));
    if (!s || !w || !id || !gs || !gid) goto done;
    for (int64_t t = 0; t < T; t++) {
        const float *l = (const float *)a->data + t * E;
        float *y = (float *)dst->data + t * 2 * k;
        for (int64_t e = 0; e < E; e++) s[e] = gate_score(gating, l[e], bias, e);
        if (dst->ip[3]) gate_mask_groups(s, l, gating, E, dst->ip[3], gs, gid);
        gate_select(s, E, k, id);
        double mx = -INFINITY, den = 0, sum = 0;
        for (int64_t e = 0; e < E; e++) mx = l[e] > mx ? l[e] : mx;
        for (int64_t e = 0; e < E; e++) den += exp((double)l[e] - mx);
        for (int j = 0; j < k; j++) {
            w[j] = gating == OB_MOE_SOFTMAX ? exp((double)l[id[j]] - mx) / den : 1.0 / (1.0 + exp(-(double)l[id[j]]));
            sum += w[j];
        }
        for (int j = 0; j < k; j++) {
            y[j] = (float)((dst->ip[2] & OB_MOE_NORM ? w[j] / sum : w[j]) * dst->fp[0]);
            y[k + j] = (float)id[j];
        }
    }
done:
    free(s);
    free(w);
    free(id);
    free(gs);
    free(gid);
}

/* ---- MATMUL_ID -------------------------------------------------------------------------- */

/* The expert a gate slot names, or -1 when it names none (not an integer in [0, E)). */
static int64_t slot_expert(float v, int64_t E) {
    return v >= 0.0f && v < (float)E && v == floorf(v) ? (int64_t)v : -1;
}

/* The matrix of pair p (token p / k, slot p % k): its gate slot's expert, or without a
 * gate (g NULL: one matrix per head) matrix p % k. */
static int64_t pair_expert(const float *g, int64_t p, int64_t k, int64_t E) {
    return g ? slot_expert(g[(p / k) * 2 * k + k + p % k], E) : p % k;
}

/* Bytes of one x row in the largest act format any level may pick (F32 included: the
 * rows are gathered even when the kernel reads floats). */
static size_t mmid_act_rs(int64_t K) {
    size_t rs = sizeof(float) * (size_t)K;
    if (K % 32 == 0) rs = OB_MAX(rs, ob_cpu_act_row_size(OB_ACT_Q8_32, K));
    if (K % OB_QK_K == 0) rs = OB_MAX(rs, ob_cpu_act_row_size(OB_ACT_Q8_K, K));
    return round64(rs);
}

/* Work buffer: group offsets [E + 1], the pairs in group order [P], then P act rows. */
static size_t mmid_work_size(const ob_tensor *n) {
    const int64_t E = n->src[0]->ne[2], P = n->ne[1] * n->ne[2] * n->ne[3];
    return 64 + round64(sizeof(int32_t) * (size_t)(E + 1)) + round64(sizeof(int32_t) * (size_t)P) +
           mmid_act_rs(n->src[0]->ne[0]) * (size_t)P;
}

void ob_cpu_op_matmul_id(ob_tensor *dst, const ob_cpu_op_ctx *c) {
    const ob_tensor *w = dst->src[0], *x = dst->src[1], *gate = dst->src[2];
    const int64_t K = w->ne[0], N = w->ne[1], E = w->ne[2], k = dst->ne[1], T = dst->ne[2] * dst->ne[3], P = k * T;
    const bool shared = ob_nrows(x) == T && k > 1;
    const ob_vec_dot_kernel kern = ob_cpu_matmul_kernel(w->type);
    if (!kern.dot || !c->wdata || mmid_work_size(dst) > c->wsize) {
        if (c->ith == 0) ob_log(OB_LOG_ERROR, "matmul_id %s: no kernel for %s or work buffer too small", dst->name,
                                ob_type_name(w->type));
        return;
    }
    int32_t *off = (int32_t *)align64(c->wdata);
    int32_t *pairs = (int32_t *)((char *)off + round64(sizeof(int32_t) * (size_t)(E + 1)));
    char *act = (char *)pairs + round64(sizeof(int32_t) * (size_t)P);
    const size_t act_rs = kern.act == OB_ACT_F32 ? sizeof(float) * (size_t)K : ob_cpu_act_row_size(kern.act, K);
    float *y = dst->data;
    const float *g = gate ? gate->data : NULL;
    /* 1. group the pairs by expert (a counting sort: pairs keep their order in a group);
     *    a slot naming no expert gets zeros */
    if (c->ith == 0) {
        memset(off, 0, sizeof(int32_t) * (size_t)(E + 1));
        for (int64_t p = 0; p < P; p++) {
            const int64_t e = pair_expert(g, p, k, E);
            if (e >= 0) off[e + 1]++;
            else memset(y + p * N, 0, sizeof(float) * (size_t)N);
        }
        for (int64_t e = 0; e < E; e++) off[e + 1] += off[e];
        /* fill from each group's start; off[e] ends at the group's end, then is shifted back */
        for (int64_t p = 0; p < P; p++) {
            const int64_t e = pair_expert(g, p, k, E);
            if (e >= 0) pairs[off[e]++] = (int32_t)p;
        }
        for (int64_t e = E; e > 0; e--) off[e] = off[e - 1];
        off[0] = 0;
    }
    if (c->nth > 1) ob_cpu_sync(c);
    const int64_t n_valid = off[E];
    /* 2. each pair's x row in the kernel's act format, in group order */
    const ob_quant_act_fn quant = kern.quant ? kern.quant : ob_cpu_quantize_act;
    for (int64_t q = c->ith; q < n_valid; q += c->nth) {
        const int64_t p = pairs[q];
        const float *xr = (const float *)x->data + (shared ? p / k : p) * K;
        if (kern.act == OB_ACT_F32) memcpy(act + (size_t)q * act_rs, xr, sizeof(float) * (size_t)K);
        else quant(kern.act, xr, act + (size_t)q * act_rs, K);
    }
    if (c->nth > 1) ob_cpu_sync(c);
    /* 3. this thread's rows of each chosen expert, over that expert's columns; rows in
     *    tiles of ~32 KiB of weights re-read from cache for each group of columns */
    const size_t w_rs = ob_row_size(w->type, K);
    int64_t r0, r1;
    ob_cpu_split(N, c->ith, c->nth, &r0, &r1);
    const int64_t tile = OB_MAX((int64_t)(32768 / (w_rs ? w_rs : 1)), (int64_t)1);
    for (int64_t e = 0; e < E; e++) {
        const int64_t q0 = off[e], nq = off[e + 1] - q0;
        if (nq == 0 || r0 >= r1) continue;
        const char *we = (const char *)w->data + (size_t)e * (size_t)N * w_rs;
        const int64_t cols = kern.tile ? OB_TILE_MAX_COLS : OB_DOT_MAX_COLS;
        const int64_t step = nq <= cols ? r1 - r0 : tile;
        for (int64_t rt = r0; rt < r1; rt += step) {
            const int64_t re = OB_MIN(rt + step, r1);
            for (int64_t c0 = 0; c0 < nq; c0 += cols) {
                const int nc = (int)OB_MIN(cols, nq - c0);
                const char *a = act + (size_t)(q0 + c0) * act_rs;
                const int32_t *pc = pairs + q0 + c0;
                if (kern.tile) {
                    float out[OB_TILE_MAX_COLS * OB_TILE_ROWS];
                    for (int64_t r = rt; r < re; r += OB_TILE_ROWS) {
                        const int nr = (int)OB_MIN((int64_t)OB_TILE_ROWS, re - r);
                        kern.tile(K, we + (size_t)r * w_rs, w_rs, nr, a, act_rs, nc, out, OB_TILE_ROWS);
                        for (int j = 0; j < nc; j++)
                            for (int i = 0; i < nr; i++) y[pc[j] * N + r + i] = out[j * OB_TILE_ROWS + i];
                    }
                } else {
                    float out[OB_DOT_MAX_COLS];
                    for (int64_t r = rt; r < re; r++) {
                        kern.dot(K, we + (size_t)r * w_rs, a, act_rs, nc, out);
                        for (int j = 0; j < nc; j++) y[pc[j] * N + r] = out[j];
                    }
                }
            }
        }
    }
}

static void ref_matmul_id(ob_tensor *dst) {
    const ob_tensor *w = dst->src[0], *x = dst->src[1];
    const int64_t K = w->ne[0], N = w->ne[1], E = w->ne[2], k = dst->ne[1], T = dst->ne[2] * dst->ne[3];
    const bool shared = ob_nrows(x) == T && k > 1;
    const float *g = dst->src[2] ? dst->src[2]->data : NULL;
    const ob_type_traits *tr = ob_type_traits_get(w->type);
    const size_t w_rs = ob_row_size(w->type, K);
    float *row = malloc(sizeof(float) * (size_t)K), *y = dst->data;
    if (!row) return;
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < k; j++) {
            const int64_t p = t * k + j, e = pair_expert(g, p, k, E);
            const float *xr = (const float *)x->data + (shared ? t : p) * K;
            for (int64_t r = 0; r < N; r++) {
                if (e < 0) { y[p * N + r] = 0.0f; continue; }
                tr->to_float((const char *)w->data + (size_t)(e * N + r) * w_rs, row, K);
                double s = 0;
                for (int64_t i = 0; i < K; i++) s += (double)row[i] * (double)xr[i];
                y[p * N + r] = (float)s;
            }
        }
    free(row);
}

/* ---- MOE_SUM ---------------------------------------------------------------------------- */

void ob_cpu_op_moe_sum(ob_tensor *dst, const ob_cpu_op_ctx *c) {
    const ob_tensor *src = dst->src[0];
    const int64_t N = src->ne[0], k = src->ne[1], T = ob_nrows(dst);
    const float *g = dst->src[1]->data;
    int64_t t0, t1;
    ob_cpu_split(T, c->ith, c->nth, &t0, &t1);
    for (int64_t t = t0; t < t1; t++) {
        float *y = (float *)dst->data + t * N;
        const float *s = (const float *)src->data + t * k * N;
        for (int64_t i = 0; i < N; i++) y[i] = g[t * 2 * k] * s[i];
        for (int64_t j = 1; j < k; j++) {
            const float wj = g[t * 2 * k + j];
            for (int64_t i = 0; i < N; i++) y[i] += wj * s[j * N + i];
        }
    }
}

static void ref_moe_sum(ob_tensor *dst) {
    const ob_tensor *src = dst->src[0];
    const int64_t N = src->ne[0], k = src->ne[1], T = ob_nrows(dst);
    const float *g = dst->src[1]->data;
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < N; i++) {
            double acc = 0;
            for (int64_t j = 0; j < k; j++) acc += (double)g[t * 2 * k + j] * ((const float *)src->data)[(t * k + j) * N + i];
            ((float *)dst->data)[t * N + i] = (float)acc;
        }
}

/* ---- shared with the backend ------------------------------------------------------------- */

size_t ob_cpu_moe_work_size(const ob_tensor *node, int nth) {
    switch (node->op) {
    case OB_OP_MOE_GATE: return gate_work_size(node, nth);
    case OB_OP_MATMUL_ID: return mmid_work_size(node);
    default: return 0;
    }
}

void ob_cpu_ref_moe(ob_tensor *dst) {
    switch (dst->op) {
    case OB_OP_MOE_GATE: ref_moe_gate(dst); break;
    case OB_OP_MATMUL_ID: ref_matmul_id(dst); break;
    case OB_OP_MOE_SUM: ref_moe_sum(dst); break;
    default: break;
    }
}
