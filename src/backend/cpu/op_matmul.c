/* OB_OP_MATMUL on the CPU: y[t][n] = dot(W row n, x column t).
 *
 *   src0 W [K, N] any type with a to_float; src1 x F32 [K, T]; dst F32 [N, T].
 *
 * Phase 1: the threads quantize the T activation columns into the weight kernel's act
 * format (work buffer), then meet at a barrier; with few tokens each thread quantizes all
 * of them into its own copy instead, and there is no barrier. Phase 2: each thread takes a contiguous
 * range of output rows and walks it in tiles of rows small enough to stay in cache; for
 * each tile it sweeps the tokens OB_DOT_MAX_COLS at a time (OB_TILE_MAX_COLS where the
 * kernel works on 8-row tiles), so prefill streams the weights from memory once instead
 * of once per token. */
#include "backend/cpu/cpu.h"
#include "backend/cpu/vec_dot.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

/* Requested level (-1: best the CPU has). A test hook; normal runs never set it. */
static _Atomic int requested_level = -1;

static int detect_level(void) {
#if defined(__x86_64__) || defined(__i386__)
    /* F16C is not asked for: every AVX2 part has it, and clang cannot query it here. */
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
        __builtin_cpu_supports("fma"))
        return 2;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return 1;
#endif
    return 0;
}

/* What the CPU offers, detected once (-2: not yet). Racing first callers store the same value. */
static _Atomic int detected_level = -2;

static int best_level(void) {
    int l = atomic_load_explicit(&detected_level, memory_order_relaxed);
    if (l == -2) {
        l = detect_level();
        atomic_store_explicit(&detected_level, l, memory_order_relaxed);
    }
    return l;
}

int ob_cpu_set_simd_level(int level) {
    int best = best_level();
    if (level < 0 || level > best) level = best;
    atomic_store(&requested_level, level);
    return level;
}

int ob_cpu_simd_level(void) {
    int l = atomic_load_explicit(&requested_level, memory_order_relaxed);
    return l < 0 ? best_level() : l;
}

static ob_vec_dot_kernel pick_kernel(ob_type t, int level) {
    ob_vec_dot_kernel k = { 0 };
    if (level >= 2) k = ob_cpu_vec_dot_avx512(t);
    if (!k.dot && level >= 1) k = ob_cpu_vec_dot_avx2(t);
    if (!k.dot) k = ob_cpu_vec_dot_ref(t);
    return k;
}

/* Shape and type checks; the graph builder and supports() should have refused these
 * already, so failing here means a bug upstream, not bad user input. */
static bool matmul_shape_ok(const ob_tensor *dst) {
    const ob_tensor *w = dst->src[0], *x = dst->src[1];
    if (!w || !x || x->type != OB_TYPE_F32 || dst->type != OB_TYPE_F32) return false;
    const ob_type_traits *tr = ob_type_traits_get(w->type);
    if (!tr || !tr->to_float || tr->block_size <= 0) return false;
    int64_t k = w->ne[0];
    if (k <= 0 || k % tr->block_size != 0 || x->ne[0] != k || dst->ne[0] != w->ne[1]) return false;
    return ob_nrows(x) == ob_nrows(dst) && w->ne[2] == 1 && w->ne[3] == 1;
}

static char *align64(void *p) {
    return (char *)(((uintptr_t)p + 63) & ~(uintptr_t)63);
}

/* Few tokens (decode): every thread quantizes all columns into its own copy, which costs
 * less than the barrier that sharing one copy would need. The bytes are the same either way. */
#define OB_MM_PRIVATE_ELEMS 16384

static bool private_act(int64_t t, int64_t k, int nth) {
    return nth > 1 && t * k <= OB_MM_PRIVATE_ELEMS;
}

size_t ob_cpu_matmul_work_size(const ob_tensor *node, int nth) {
    const ob_tensor *w = node->src[0], *x = node->src[1];
    if (!w || !x) return 0;
    int64_t k = w->ne[0], t = ob_nrows(x);
    /* The larger of the two int8 formats, so the size holds whatever level runs. */
    size_t rs = 0;
    if (k % 32 == 0) rs = ob_cpu_act_row_size(OB_ACT_Q8_32, k);
    if (k % OB_QK_K == 0) rs = OB_MAX(rs, ob_cpu_act_row_size(OB_ACT_Q8_K, k));
    if (rs == 0) return 0;
    if (private_act(t, k, nth)) return (size_t)nth * ((rs * (size_t)t + 63) & ~(size_t)63) + 64;
    return rs * (size_t)t + 64;
}

typedef struct mm_rows {
    int64_t k, n, t;
    size_t w_rs, act_rs;
    const char *w, *act;
    float *y;
    ob_vec_dot_fn dot;
    ob_vec_tile_fn tile;
} mm_rows;

/* Output rows [r0, r1) for every token, OB_DOT_MAX_COLS tokens per weight-row pass
 * (OB_TILE_MAX_COLS tokens per pass over a tile of OB_TILE_ROWS rows). */
static void mm_do_rows(const mm_rows *m, int64_t r0, int64_t r1) {
    if (m->tile) {
        for (int64_t c0 = 0; c0 < m->t; c0 += OB_TILE_MAX_COLS) {
            const int nc = (int)OB_MIN((int64_t)OB_TILE_MAX_COLS, m->t - c0);
            const char *a = m->act + (size_t)c0 * m->act_rs;
            for (int64_t r = r0; r < r1; r += OB_TILE_ROWS)
                m->tile(m->k, m->w + (size_t)r * m->w_rs, m->w_rs, (int)OB_MIN((int64_t)OB_TILE_ROWS, r1 - r),
                        a, m->act_rs, nc, m->y + c0 * m->n + r, (size_t)m->n);
        }
        return;
    }
    float out[OB_DOT_MAX_COLS];
    for (int64_t c0 = 0; c0 < m->t; c0 += OB_DOT_MAX_COLS) {
        const int nc = (int)OB_MIN((int64_t)OB_DOT_MAX_COLS, m->t - c0);
        const char *a = m->act + (size_t)c0 * m->act_rs;
        for (int64_t r = r0; r < r1; r++) {
            m->dot(m->k, m->w + (size_t)r * m->w_rs, a, m->act_rs, nc, out);
            for (int j = 0; j < nc; j++) m->y[(c0 + j) * m->n + r] = out[j];
        }
    }
}

ob_vec_dot_kernel ob_cpu_matmul_kernel(ob_type t) { return pick_kernel(t, ob_cpu_simd_level()); }

bool ob_cpu_matmul_has_kernel(ob_type t) { return ob_cpu_matmul_kernel(t).dot != NULL; }

void ob_cpu_op_matmul(ob_tensor *dst, const ob_cpu_op_ctx *c) {
    const ob_tensor *w = dst->src[0], *x = dst->src[1];
    if (!matmul_shape_ok(dst)) {
        if (c->ith == 0) ob_log(OB_LOG_ERROR, "matmul %s: unsupported shapes or types", dst->name);
        return;
    }
    const int64_t k = w->ne[0], n = w->ne[1], t = ob_nrows(x);
    const size_t w_rs = ob_row_size(w->type, k);
    const ob_vec_dot_kernel kern = pick_kernel(w->type, ob_cpu_simd_level());
    if (!kern.dot) {
        if (c->ith == 0) ob_log(OB_LOG_ERROR, "matmul %s: no kernel for weight type %s", dst->name,
                                ob_type_name(w->type));
        return;
    }

    const char *act = x->data;
    size_t act_rs = (size_t)k * sizeof(float);
    if (kern.act != OB_ACT_F32) {
        act_rs = ob_cpu_act_row_size(kern.act, k);
        const ob_quant_act_fn quant = kern.quant ? kern.quant : ob_cpu_quantize_act;
        const bool priv = private_act(t, k, c->nth);
        const size_t copy = (act_rs * (size_t)t + 63) & ~(size_t)63;
        if (!c->wdata || (priv ? copy * (size_t)c->nth : act_rs * (size_t)t) + 64 > c->wsize) {
            if (c->ith == 0) ob_log(OB_LOG_ERROR, "matmul %s: work buffer too small", dst->name);
            return;
        }
        char *buf = align64(c->wdata);
        if (priv) {
            buf += copy * (size_t)c->ith;
            for (int64_t i = 0; i < t; i++)
                quant(kern.act, (const float *)x->data + i * k, buf + (size_t)i * act_rs, k);
        } else {
            for (int64_t i = c->ith; i < t; i += c->nth)
                quant(kern.act, (const float *)x->data + i * k, buf + (size_t)i * act_rs, k);
            if (c->nth > 1) ob_cpu_sync(c);
        }
        act = buf;
    }

    /* Rows per tile: ~32 KiB of weights, re-read from L1/L2 for each group of tokens. */
    int64_t tile = (int64_t)(32768 / (w_rs ? w_rs : 1));
    tile = OB_MAX(tile, 1);
    mm_rows rows = {k, n, t, w_rs, act_rs, w->data, act, dst->data, kern.dot, kern.tile};
    const int64_t cols = kern.tile ? OB_TILE_MAX_COLS : OB_DOT_MAX_COLS;
    /* Each thread streams one contiguous home range (all rows handed out through an atomic
     * measured slower: the prefetchers lose their streams), but the last eighth of the
     * rows is a shared pool taken in small chunks by whichever thread is done first, so a
     * thread that started late or was slowed does not hold the others at the next
     * barrier. Which thread computes a row never changes its bits. */
    int64_t pool0 = n;
    if (c->next && c->nth > 1 && n >= 64 * (int64_t)c->nth) pool0 = n - n / 8;
    const int64_t r0 = pool0 * c->ith / c->nth, r1 = pool0 * (c->ith + 1) / c->nth;
    const int64_t step = t <= cols ? OB_MAX(r1 - r0, 1) : tile; /* one sweep: nothing to reuse */
    for (int64_t rt = r0; rt < r1; rt += step) mm_do_rows(&rows, rt, OB_MIN(rt + step, r1));
    if (pool0 == n) return;
    const int64_t chunk = OB_MAX((int64_t)8, ((n - pool0) / (8 * (int64_t)c->nth) + 7) & ~(int64_t)7);
    const int64_t cstep = OB_MIN(step, chunk);
    for (;;) {
        const int64_t a = pool0 + __atomic_fetch_add(c->next, chunk, __ATOMIC_RELAXED);
        if (a >= n) break;
        const int64_t b = OB_MIN(a + chunk, n);
        for (int64_t rt = a; rt < b; rt += cstep) mm_do_rows(&rows, rt, OB_MIN(rt + cstep, b));
    }
}

void ob_cpu_ref_matmul(ob_tensor *dst) {
    const ob_tensor *w = dst->src[0], *x = dst->src[1];
    float *y = dst->data;
    if (!matmul_shape_ok(dst)) {
        ob_log(OB_LOG_ERROR, "matmul %s: unsupported shapes or types", dst->name);
        return;
    }
    const int64_t k = w->ne[0], n = w->ne[1], t = ob_nrows(x);
    const ob_type_traits *tr = ob_type_traits_get(w->type);
    const size_t w_rs = ob_row_size(w->type, k);
    float *row = malloc((size_t)k * sizeof(float));
    if (!row) {
        for (int64_t i = 0; i < n * t; i++) y[i] = NAN;
        return;
    }
    for (int64_t r = 0; r < n; r++) {
        tr->to_float((const char *)w->data + (size_t)r * w_rs, row, k);
        for (int64_t j = 0; j < t; j++) {
            const float *xj = (const float *)x->data + j * k;
            double s = 0.0;
            for (int64_t i = 0; i < k; i++) s += (double)row[i] * (double)xj[i];
            y[j * n + r] = (float)s;
        }
    }
    free(row);
}
