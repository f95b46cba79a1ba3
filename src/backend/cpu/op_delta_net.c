/* DELTA_NET on the CPU (graph.h): the gated delta rule of Gated DeltaNet layers (Qwen3.5,
 * Qwen3-Next), its plain-C reference, and the chunked form of that reference.
 *
 * The kernel runs the recurrence token by token: work items are (sequence, value head) pairs,
 * dealt round-robin over the threads, and each walks its sequence's tokens of the batch in
 * order with the head's dk x dv state in place (two passes over it per token: decay and read
 * S^T k, then the rank-one update and read S^T q; AVX2 8 columns at a time). A token's output
 * and the state after it are computed the same way whatever else shares the batch, so decode,
 * prefill and batches of several sequences give the same bits (the CPU's batch invariance).
 * The state of a head is 64 KB at dk = dv = 128 and stays in cache across a prefill; the
 * recurrence costs ~4 dk dv multiply-adds per token and head, ~2% of a Qwen3.5-27B decode
 * step's work on the CPU (bench/NOTES.md: Correctness).
 *
 * The chunked form (ob_cpu_ref_delta_net_chunked) is what a GPU runs for prefill: the tokens
 * of a chunk solve a small triangular system for their updates, then the chunk's outputs and
 * end state come from products with the state at the chunk's start. Chunks are aligned to
 * absolute positions, so a prefill split at a chunk boundary runs the same chunks; the state
 * is rounded to float at every chunk end, as a kernel would keep it. */
#include "backend/cpu/cpu.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Whether token t is its sequence's first in the batch. */
static bool first_of_seq(const int32_t *seq, int64_t t) {
    for (int64_t u = 0; u < t; u++)
        if (seq[u] == seq[t]) return false;
    return true;
}

/* Token t's query, key (value head h's query/key head: h % Hk) and value rows. */
static void token_rows(const ob_tensor *dst, int64_t t, int64_t h, const float **q, const float **k, const float **v) {
    const int64_t dk = dst->ip[0], Hk = dst->ip[1], dv = dst->ip[2], kh = h % Hk;
    const float *row = (const float *)dst->src[0]->data + t * dst->src[0]->ne[0];
    *q = row + kh * dk;
    *k = row + Hk * dk + kh * dk;
    *v = row + 2 * Hk * dk + h * dv;
}

/* x / sqrt(|x|^2 + eps) times scale into y (or x times scale, without the norm). */
static void norm_scale(const float *x, float *y, int64_t n, bool l2, float eps, float scale) {
    float r = scale;
    if (l2) {
        float ss = 0.0f;
        for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
        r = scale / sqrtf(ss + eps);
    }
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * r;
}

/* The two passes over a head's state S [dk, dv] for one token, on columns [j0, dv), each
 * column's dk rows summed in order (rows walked in address order):
 *   read:   S *= decay;            kv[j] = sum_i S[i][j] k[i]
 *   update: S[i][j] += k[i] d[j];  o[j]  = sum_i S[i][j] q[i]
 * AVX2 takes the columns before j0, 8 a step with FMA; a column's arithmetic depends only on
 * dv, never on the batch, so the kernel stays batch invariant at either level. */
static void pass_read(float *S, const float *k, float decay, float *kv, int64_t dk, int64_t dv, int64_t j0) {
    for (int64_t j = j0; j < dv; j++) kv[j] = 0.0f;
    for (int64_t i = 0; i < dk; i++) {
        float *row = S + i * dv;
        for (int64_t j = j0; j < dv; j++) {
            const float s = row[j] * decay;
            row[j] = s;
            kv[j] += s * k[i];
        }
    }
}

static void pass_update(float *S, const float *k, const float *q, const float *d, float *o, int64_t dk, int64_t dv,
                        int64_t j0) {
    for (int64_t j = j0; j < dv; j++) o[j] = 0.0f;
    for (int64_t i = 0; i < dk; i++) {
        float *row = S + i * dv;
        for (int64_t j = j0; j < dv; j++) {
            const float s = row[j] + k[i] * d[j];
            row[j] = s;
            o[j] += s * q[i];
        }
    }
}

#if defined(__x86_64__)
#include <immintrin.h>

/* Columns [0, dv & ~7) of pass_read and pass_update; returns the first column left. Groups
 * of 64 columns walk the rows in address order (eight accumulators), then 8 at a time; each
 * column's sum is the same either way. */
__attribute__((target("avx2,fma"))) static int64_t pass_read_avx2(float *S, const float *k, float decay, float *kv,
                                                                   int64_t dk, int64_t dv) {
    const __m256 dc = _mm256_set1_ps(decay);
    int64_t j = 0;
    for (; j + 64 <= dv; j += 64) {
        __m256 acc[8];
        for (int u = 0; u < 8; u++) acc[u] = _mm256_setzero_ps();
        for (int64_t i = 0; i < dk; i++) {
            const __m256 ki = _mm256_set1_ps(k[i]);
            float *row = S + i * dv + j;
            for (int u = 0; u < 8; u++) {
                const __m256 s = _mm256_mul_ps(_mm256_loadu_ps(row + 8 * u), dc);
                _mm256_storeu_ps(row + 8 * u, s);
                acc[u] = _mm256_fmadd_ps(s, ki, acc[u]);
            }
        }
        for (int u = 0; u < 8; u++) _mm256_storeu_ps(kv + j + 8 * u, acc[u]);
    }
    for (; j + 8 <= dv; j += 8) {
        __m256 acc = _mm256_setzero_ps();
        for (int64_t i = 0; i < dk; i++) {
            const __m256 s = _mm256_mul_ps(_mm256_loadu_ps(S + i * dv + j), dc);
            _mm256_storeu_ps(S + i * dv + j, s);
            acc = _mm256_fmadd_ps(s, _mm256_set1_ps(k[i]), acc);
        }
        _mm256_storeu_ps(kv + j, acc);
    }
    return j;
}

__attribute__((target("avx2,fma"))) static int64_t pass_update_avx2(float *S, const float *k, const float *q,
                                                                     const float *d, float *o, int64_t dk, int64_t dv) {
    int64_t j = 0;
    for (; j + 64 <= dv; j += 64) {
        __m256 acc[8], dj[8];
        for (int u = 0; u < 8; u++) {
            acc[u] = _mm256_setzero_ps();
            dj[u] = _mm256_loadu_ps(d + j + 8 * u);
        }
        for (int64_t i = 0; i < dk; i++) {
            const __m256 ki = _mm256_set1_ps(k[i]), qi = _mm256_set1_ps(q[i]);
            float *row = S + i * dv + j;
            for (int u = 0; u < 8; u++) {
                const __m256 s = _mm256_fmadd_ps(ki, dj[u], _mm256_loadu_ps(row + 8 * u));
                _mm256_storeu_ps(row + 8 * u, s);
                acc[u] = _mm256_fmadd_ps(s, qi, acc[u]);
            }
        }
        for (int u = 0; u < 8; u++) _mm256_storeu_ps(o + j + 8 * u, acc[u]);
    }
    for (; j + 8 <= dv; j += 8) {
        const __m256 dj = _mm256_loadu_ps(d + j);
        __m256 acc = _mm256_setzero_ps();
        for (int64_t i = 0; i < dk; i++) {
            const __m256 s = _mm256_fmadd_ps(_mm256_set1_ps(k[i]), dj, _mm256_loadu_ps(S + i * dv + j));
            _mm256_storeu_ps(S + i * dv + j, s);
            acc = _mm256_fmadd_ps(s, _mm256_set1_ps(q[i]), acc);
        }
        _mm256_storeu_ps(o + j, acc);
    }
    return j;
}
#endif

/* Per thread: the normalised q and k, kv, d and o rows, then a flag per state row (the
 * sequences already dealt). */
static size_t thread_floats(const ob_tensor *node) {
    const size_t dk = (size_t)node->ip[0], dv = (size_t)node->ip[2], n_state = (size_t)ob_nrows(node->src[3]);
    return 2 * dk + 3 * dv + (n_state + sizeof(float) - 1) / sizeof(float);
}

size_t ob_cpu_delta_net_work_size(const ob_tensor *node, int nth) {
    return sizeof(float) * (size_t)nth * thread_floats(node);
}

/* One (sequence, head) pair over the batch: tokens from t0 (the sequence's first) on. */
static void run_head(ob_tensor *dst, int64_t t0, int64_t h, float *wk) {
    const ob_tensor *st = dst->src[3];
    const int64_t dk = dst->ip[0], dv = dst->ip[2], H = dst->ne[1], T = ob_nrows(dst->src[0]);
    const int32_t *pos = dst->src[4]->data, *seq = dst->src[5]->data;
    const float *g = dst->src[1]->data, *beta = dst->src[2]->data;
    const bool l2 = dst->ip[3] != 0, simd = ob_cpu_simd_level() >= 1;
    float *qn = wk, *kn = qn + dk, *kv = kn + dk, *d = kv + dv, *o = d + dv;
    const int32_t s = seq[t0];
    float *S = (float *)st->data + (int64_t)s * st->ne[0] + h * dk * dv;
    for (int64_t t = t0; t < T; t++) {
        if (seq[t] != s) continue;
        if (pos[t] == 0) memset(S, 0, sizeof(float) * (size_t)(dk * dv)); /* a new sequence */
        const float *q, *k, *v;
        token_rows(dst, t, h, &q, &k, &v);
        norm_scale(q, qn, dk, l2, dst->fp[1], dst->fp[0]);
        norm_scale(k, kn, dk, l2, dst->fp[1], 1.0f);
        const float decay = expf(g[t * H + h]), b = beta[t * H + h];
        int64_t j0 = 0;
#if defined(__x86_64__)
        if (simd) j0 = pass_read_avx2(S, kn, decay, kv, dk, dv);
#endif
        pass_read(S, kn, decay, kv, dk, dv, j0);
        for (int64_t j = 0; j < dv; j++) d[j] = (v[j] - kv[j]) * b;
#if defined(__x86_64__)
        if (simd) j0 = pass_update_avx2(S, kn, qn, d, o, dk, dv);
#endif
        pass_update(S, kn, qn, d, o, dk, dv, j0);
        memcpy((float *)dst->data + (t * H + h) * dv, o, sizeof(float) * (size_t)dv);
    }
}

void ob_cpu_op_delta_net(ob_tensor *dst, const ob_cpu_op_ctx *c) {
    const int64_t H = dst->ne[1], T = ob_nrows(dst->src[0]), n_state = ob_nrows(dst->src[3]);
    const int32_t *seq = dst->src[5]->data;
    float *wk = (float *)c->wdata + (size_t)c->ith * thread_floats(dst);
    bool *seen = (bool *)(wk + 2 * dst->ip[0] + 3 * dst->ip[2]);
    memset(seen, 0, (size_t)n_state);
    int64_t item = 0;
    for (int64_t t0 = 0; t0 < T; t0++) {
        const int32_t s = seq[t0];
        if (s < 0 || s >= n_state || seen[s]) continue; /* (check_indices refuses a graph with the former) */
        seen[s] = true;
        for (int64_t h = 0; h < H; h++, item++)
            if (item % c->nth == c->ith) run_head(dst, t0, h, wk);
    }
}

/* ---- references --------------------------------------------------------------------------- */

/* Token t's query (normalised where the op asks, times its scale) and key for value head h,
 * in double. */
static void ref_qk(const ob_tensor *dst, int64_t t, int64_t h, double *q, double *k, const float **v) {
    const int64_t dk = dst->ip[0];
    const float *qf, *kf;
    token_rows(dst, t, h, &qf, &kf, v);
    double nq = 0, nk = 0;
    for (int64_t i = 0; i < dk; i++) {
        nq += (double)qf[i] * qf[i];
        nk += (double)kf[i] * kf[i];
    }
    const double rq = dst->ip[3] ? 1.0 / sqrt(nq + dst->fp[1]) : 1.0, rk = dst->ip[3] ? 1.0 / sqrt(nk + dst->fp[1]) : 1.0;
    for (int64_t i = 0; i < dk; i++) {
        q[i] = qf[i] * rq * dst->fp[0];
        k[i] = kf[i] * rk;
    }
}

/* Zeros for the tokens whose sequence has no state row. */
static void ref_zero_missing(ob_tensor *dst) {
    const int64_t H = dst->ne[1], dv = dst->ip[2], T = ob_nrows(dst->src[0]), S = ob_nrows(dst->src[3]);
    const int32_t *seq = dst->src[5]->data;
    for (int64_t t = 0; t < T; t++)
        if (seq[t] < 0 || seq[t] >= S) memset((float *)dst->data + t * H * dv, 0, sizeof(float) * (size_t)(H * dv));
}

/* The tokens of every sequence in double, one at a time, the state read once from and written
 * once back to the float leaf. A token whose sequence has no state gets zeros. */
void ob_cpu_ref_delta_net(ob_tensor *dst) {
    const ob_tensor *st = dst->src[3];
    const int64_t dk = dst->ip[0], dv = dst->ip[2], H = dst->ne[1], T = ob_nrows(dst->src[0]);
    const int32_t *pos = dst->src[4]->data, *seq = dst->src[5]->data;
    const float *g = dst->src[1]->data, *beta = dst->src[2]->data;
    double *S = malloc(sizeof(double) * (size_t)(dk * dv)), *q = malloc(sizeof(double) * (size_t)(2 * dk + dv));
    if (!S || !q) goto done;
    double *k = q + dk, *d = k + dk;
    ref_zero_missing(dst);
    for (int64_t t0 = 0; t0 < T; t0++) {
        if (!first_of_seq(seq, t0) || seq[t0] < 0 || seq[t0] >= ob_nrows(st)) continue;
        for (int64_t h = 0; h < H; h++) {
            float *Sf = (float *)st->data + (int64_t)seq[t0] * st->ne[0] + h * dk * dv;
            for (int64_t i = 0; i < dk * dv; i++) S[i] = Sf[i];
            for (int64_t t = t0; t < T; t++) {
                if (seq[t] != seq[t0]) continue;
                if (pos[t] == 0) memset(S, 0, sizeof(double) * (size_t)(dk * dv));
                const float *vf;
                ref_qk(dst, t, h, q, k, &vf);
                const double decay = exp((double)g[t * H + h]);
                for (int64_t i = 0; i < dk * dv; i++) S[i] *= decay;
                for (int64_t j = 0; j < dv; j++) {
                    double m = 0;
                    for (int64_t i = 0; i < dk; i++) m += S[i * dv + j] * k[i];
                    d[j] = (double)beta[t * H + h] * (vf[j] - m);
                }
                for (int64_t i = 0; i < dk; i++)
                    for (int64_t j = 0; j < dv; j++) S[i * dv + j] += k[i] * d[j];
                float *o = (float *)dst->data + (t * H + h) * dv;
                for (int64_t j = 0; j < dv; j++) {
                    double m = 0;
                    for (int64_t i = 0; i < dk; i++) m += S[i * dv + j] * q[i];
                    o[j] = (float)m;
                }
            }
            for (int64_t i = 0; i < dk * dv; i++) Sf[i] = (float)S[i];
        }
    }
done:
    free(S);
    free(q);
}

/* One chunk of n tokens (ids tk[0..n)) of one sequence and head, from the state S0 (double,
 * dk x dv), in the UT form: with G_i the cumulative log decay inside the chunk,
 *   (I + A) D = diag(beta) (V - diag(e^G) K S0),  A_ij = beta_i e^(G_i - G_j) k_i.k_j (j < i),
 *   o_i = e^(G_i) S0^T q_i + sum_(j <= i) e^(G_i - G_j) (q_i.k_j) d_j,
 *   S_end = e^(G_n) S0 + sum_j e^(G_n - G_j) k_j d_j^T,
 * the triangular system solved by forward substitution. Unrolled, it is the recurrence. */
static void chunk_head(ob_tensor *dst, const int64_t *tk, int64_t n, int64_t h, double *S0, double *wk) {
    const int64_t dk = dst->ip[0], dv = dst->ip[2], H = dst->ne[1];
    const float *g = dst->src[1]->data, *beta = dst->src[2]->data;
    double *Q = wk, *K = Q + n * dk, *D = K + n * dk, *G = D + n * dv, *KK = G + n; /* KK [n, n] */
    double cum = 0;
    for (int64_t a = 0; a < n; a++) {
        const float *vf;
        ref_qk(dst, tk[a], h, Q + a * dk, K + a * dk, &vf);
        cum += (double)g[tk[a] * H + h];
        G[a] = cum;
        /* the right-hand side: beta (v - e^G S0^T k) */
        const double eg = exp(G[a]), b = beta[tk[a] * H + h];
        for (int64_t j = 0; j < dv; j++) {
            double m = 0;
            for (int64_t i = 0; i < dk; i++) m += S0[i * dv + j] * K[a * dk + i];
            D[a * dv + j] = b * (vf[j] - eg * m);
        }
    }
    for (int64_t a = 0; a < n; a++)
        for (int64_t c = 0; c < n; c++) {
            double m = 0;
            for (int64_t i = 0; i < dk; i++) m += K[a * dk + i] * K[c * dk + i];
            KK[a * n + c] = m;
        }
    for (int64_t a = 0; a < n; a++) { /* forward substitution: d_a -= sum_(c<a) A_ac d_c */
        const double b = beta[tk[a] * H + h];
        for (int64_t c = 0; c < a; c++) {
            const double A = b * exp(G[a] - G[c]) * KK[a * n + c];
            for (int64_t j = 0; j < dv; j++) D[a * dv + j] -= A * D[c * dv + j];
        }
    }
    for (int64_t a = 0; a < n; a++) {
        float *o = (float *)dst->data + (tk[a] * H + h) * dv;
        const double eg = exp(G[a]);
        for (int64_t j = 0; j < dv; j++) {
            double m = 0;
            for (int64_t i = 0; i < dk; i++) m += S0[i * dv + j] * Q[a * dk + i];
            m *= eg;
            for (int64_t c = 0; c <= a; c++) {
                double qk = 0;
                for (int64_t i = 0; i < dk; i++) qk += Q[a * dk + i] * K[c * dk + i];
                m += exp(G[a] - G[c]) * qk * D[c * dv + j];
            }
            o[j] = (float)m;
        }
    }
    const double en = exp(G[n - 1]);
    for (int64_t i = 0; i < dk; i++)
        for (int64_t j = 0; j < dv; j++) {
            double m = en * S0[i * dv + j];
            for (int64_t c = 0; c < n; c++) m += exp(G[n - 1] - G[c]) * K[c * dk + i] * D[c * dv + j];
            S0[i * dv + j] = (double)(float)m; /* a chunk's end state as a kernel keeps it: float */
        }
}

void ob_cpu_ref_delta_net_chunked(ob_tensor *dst, int chunk) {
    const ob_tensor *st = dst->src[3];
    const int64_t dk = dst->ip[0], dv = dst->ip[2], H = dst->ne[1], T = ob_nrows(dst->src[0]);
    const int32_t *pos = dst->src[4]->data, *seq = dst->src[5]->data;
    if (chunk < 1) chunk = 1;
    double *S = malloc(sizeof(double) * (size_t)(dk * dv));
    double *wk = malloc(sizeof(double) * (size_t)(chunk * (2 * dk + dv + 1 + chunk)));
    int64_t *tk = malloc(sizeof(int64_t) * (size_t)chunk);
    if (!S || !wk || !tk) goto done;
    ref_zero_missing(dst);
    for (int64_t t0 = 0; t0 < T; t0++) {
        if (!first_of_seq(seq, t0) || seq[t0] < 0 || seq[t0] >= ob_nrows(st)) continue;
        for (int64_t h = 0; h < H; h++) {
            float *Sf = (float *)st->data + (int64_t)seq[t0] * st->ne[0] + h * dk * dv;
            for (int64_t i = 0; i < dk * dv; i++) S[i] = Sf[i];
            int64_t n = 0;
            for (int64_t t = t0; t < T; t++) {
                if (seq[t] != seq[t0]) continue;
                if (pos[t] == 0) memset(S, 0, sizeof(double) * (size_t)(dk * dv));
                tk[n++] = t;
                /* the chunk ends at a multiple of `chunk` positions, or with the sequence */
                int64_t next = -1;
                for (int64_t u = t + 1; u < T && next < 0; u++)
                    if (seq[u] == seq[t0]) next = u;
                if (next < 0 || (pos[t] + 1) % chunk == 0 || n == chunk) {
                    chunk_head(dst, tk, n, h, S, wk);
                    n = 0;
                }
            }
            for (int64_t i = 0; i < dk * dv; i++) Sf[i] = (float)S[i];
        }
    }
done:
    free(S);
    free(wk);
    free(tk);
}
