/* The CUDA backend: the ob_backend interface over device memory, the compute loop, CUDA
 * graph capture of repeated steps, and the CPU fallback for nodes without a kernel.
 *
 * Ordering: everything runs on one stream of the context; downloads and large uploads
 * synchronize it, so the engine sees plain blocking copies; small uploads (a step's
 * inputs) are staged in pinned memory and only queued, ordered before the compute.
 * compute synchronizes at its end, so a device fault surfaces as OB_ERR_DEVICE from the
 * call that caused it (or from the compute after a failed staged upload), and the context
 * then refuses all later work (a faulted CUDA context cannot be trusted). */
#include "backend/cuda/cuda_int.h"
#include "backend/cuda/cuda_mmq.h"
#include "backend/cuda/cuda_stats.h"
#include "backend/cuda/cuda_sample.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern "C" {
#include "backend/cpu/cpu.h"
}

bool ob_cu_check(ob_cu_ctx *cx, cudaError_t e, const char *file, int line, const char *what) {
    if (e == cudaSuccess) return true;
    if (cx && !cx->faulted) {
        const char *f = strrchr(file, '/');
        snprintf(cx->last_err, sizeof(cx->last_err), "%s:%d: %s: %s", f ? f + 1 : file, line, what, cudaGetErrorString(e));
        cx->last_code = e;
        /* a kernel's fault seen at a launch of the step: cu_compute names it in one line */
        if (!(cx->in_step && ob_cu_sticky(e))) ob_log(OB_LOG_ERROR, "cuda: %s", cx->last_err);
    }
    if (cx) cx->faulted = true;
    return false;
}

/* ---- what the device can run --------------------------------------------------------------- */

/* The shapes and types are ob_op_valid's; what is left are the kernels' own limits. */
static bool supports_node(const ob_tensor *n) {
    if (!ob_op_valid(n)) return false;
    const ob_tensor *a = n->src[0];
    switch (n->op) {
    case OB_OP_LEAF:
    case OB_OP_VIEW:
        return true;
    case OB_OP_GET_ROWS:
    case OB_OP_MATMUL:
    case OB_OP_CPY:
        return ob_cu_supports_quant_op(n);
    case OB_OP_RMS_NORM:
    case OB_OP_LAYER_NORM:
    case OB_OP_SOFTMAX:
        return ob_nrows(a) <= 0x7fffffff;
    case OB_OP_ADD:
    case OB_OP_MUL:
    case OB_OP_SCALE:
    case OB_OP_ACT:
    case OB_OP_GLU: /* plain, or gpt-oss's clamped SwiGLU (op_elementwise.cu's glu_f) */
    case OB_OP_ROPE: /* with its factors (src2: NULL or F32 [n_rot/2]) and a finite mscale */
    case OB_OP_KV_STORE:
        return true;
    case OB_OP_ATTENTION: {
        const int64_t hd = a->ne[0], H = a->ne[1], T = a->ne[2] * a->ne[3], dv = n->ne[0] / H;
        if (!(n->fp[2] >= 0.0f)) return false; /* ALiBi max bias: 0 = none; NaN refused */
        /* (attention sinks, src6, on every path: rowops.cuh's attn_inv; values narrower than
         * the keys, from the K cache itself as MLA's, on k_attn / k_attn_pf: op_attention.cu)
         * any head size that is a multiple of 4 up to 256 (encoders use 12, 16, ...), and
         * MLA's latent rows up to 576 (OB_ATTN_MAX_NE_W) */
        return hd % 4 == 0 && hd <= 576 && dv <= 576 && H <= 65535 && T <= 65535;
    }
    case OB_OP_POOL:
        return ob_cu_supports_pool(n);
    case OB_OP_SAMPLE:
        return ob_cu_supports_sample(n);
    case OB_OP_MOE_GATE:
    case OB_OP_MATMUL_ID:
    case OB_OP_MOE_SUM:
    case OB_OP_ADD_ID:
        return ob_cu_supports_moe(n);
    case OB_OP_CONCAT:
    case OB_OP_SLICE:
        return true;
    case OB_OP_SSM_CONV: /* its grids: a thread per output element, per state element / (K-1) */
        return ob_nelements(n) <= 0x7fffffff && ob_nelements(n->src[2]) <= 0x7fffffff;
    case OB_OP_DELTA_NET:
        return ob_cu_supports_delta_net(n);
    default:
        return false;
    }
}

static bool cu_supports(ob_backend *be, const ob_tensor *node) { return supports_node(node); }

/* ---- memory ---------------------------------------------------------------------------------- */

/* Bytes every buffer of alloc gets past its end (never read as data). Kernels that fetch
 * a row's tail as a whole 16-byte piece rely on it: MMQ's cp.async ring (op_mmq.cu,
 * `issue`) copies the piece covering a row's last bytes with src-size = the bytes left,
 * which reads no further, but the instruction's 16-byte access may pass the end of the
 * tensor, and compute-sanitizer memcheck counts it. Tensors (model weights, KV cache,
 * scratch, a test's leaves) all come from alloc, so the pad covers every last row. */
#define OB_CU_ALLOC_PAD 256

static void *cu_alloc(ob_backend *be, size_t size) {
    ob_cu_ctx *cx = (ob_cu_ctx *)be->ctx;
    void *p = NULL;
    if (cx->faulted) return NULL;
    if (size > SIZE_MAX - OB_CU_ALLOC_PAD) return NULL;
    cudaError_t e = cudaMalloc(&p, size + OB_CU_ALLOC_PAD);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* out of memory is not sticky; clear it so later calls work */
        ob_log(OB_LOG_WARN, "cuda: cannot allocate %zu bytes: %s", size, cudaGetErrorString(e));
        return NULL;
    }
    /* the pad zeroed, so the whole-vector reads that pass a row end read defined bytes
     * (compute-sanitizer initcheck) */
    if (!OB_CU(cx, cudaMemsetAsync((char *)p + size, 0, OB_CU_ALLOC_PAD, cx->stream))) {
        cudaFree(p);
        return NULL;
    }
    return p;
}

static void cu_free_buf(ob_backend *be, void *p) {
    if (p) cudaFree(p);
}

static ob_status cu_copy(ob_backend *be, void *dst, const void *src, size_t size, bool up) {
    ob_cu_ctx *cx = (ob_cu_ctx *)be->ctx;
    if (cx->faulted) return OB_ERR_DEVICE;
    if (!size) return OB_OK;
    if (up && cx->stage && size <= cx->stage_size / 2) {
        /* A small upload (a step's inputs) goes through pinned staging without waiting: the
         * stream orders it before the compute that reads it, and the staged bytes stay
         * untouched until a sync of the stream (which resets the staging). */
        if (cx->stage_used + size > cx->stage_size) {
            if (!OB_CU(cx, cudaStreamSynchronize(cx->stream))) return OB_ERR_DEVICE;
            cx->stage_used = 0;
        }
        uint8_t *st = cx->stage + cx->stage_used;
        memcpy(st, src, size);
        if (!OB_CU(cx, cudaMemcpyAsync(dst, st, size, cudaMemcpyHostToDevice, cx->stream))) return OB_ERR_DEVICE;
        cx->stage_used += (size + 255) & ~(size_t)255;
        return OB_OK;
    }
    if (!up && cx->stage && size <= cx->stage_size) {
        /* A small download (a step's sampled tokens) lands in pinned memory: one DMA, no
         * pageable bounce. Earlier staged uploads on the stream are done before it runs. */
        if (!OB_CU(cx, cudaMemcpyAsync(cx->stage, src, size, cudaMemcpyDeviceToHost, cx->stream)) ||
            !OB_CU(cx, cudaStreamSynchronize(cx->stream)))
            return OB_ERR_DEVICE;
        memcpy(dst, cx->stage, size);
        cx->stage_used = 0;
        return OB_OK;
    }
    if (!OB_CU(cx, cudaMemcpyAsync(dst, src, size, up ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, cx->stream)) ||
        !OB_CU(cx, cudaStreamSynchronize(cx->stream)))
        return OB_ERR_DEVICE;
    cx->stage_used = 0;
    return OB_OK;
}

static ob_status cu_upload(ob_backend *be, void *dst, const void *src, size_t size) { return cu_copy(be, dst, src, size, true); }
static ob_status cu_download(ob_backend *be, void *dst, const void *src, size_t size) { return cu_copy(be, dst, src, size, false); }

/* ---- CPU fallback ------------------------------------------------------------------------------ */

/* Runs n with the CPU reference: host copies of its direct inputs, then the output (and the
 * sources it writes in place: KV_STORE's cache, the recurrent ops' state) back to the device. Slow, and only for nodes the
 * placement check let through with --no-strict-device. */
static ob_status run_fallback(ob_cu_ctx *cx, ob_tensor *n, char *err, size_t err_len) {
    if (!cx->warned[n->op]) {
        cx->warned[n->op] = true;
        ob_log(OB_LOG_WARN, "cuda: node %s (%s, %s x %s) runs on the CPU (no CUDA kernel)", n->name, ob_op_name(n->op),
               n->src[0] ? ob_type_name(n->src[0]->type) : "-", n->src[1] ? ob_type_name(n->src[1]->type) : "-");
    }
    ob_tensor h = *n;
    ob_tensor hs[OB_MAX_SRC];
    void *bufs[OB_MAX_SRC + 1] = {0};
    ob_status st = OB_OK;
    if (!OB_CU(cx, cudaStreamSynchronize(cx->stream))) return ob_fail(err, err_len, OB_ERR_DEVICE, "cuda: %s", cx->last_err);
    for (int s = 0; s < OB_MAX_SRC && !st; s++) {
        if (!n->src[s]) continue;
        hs[s] = *n->src[s];
        size_t nb = ob_nbytes(n->src[s]);
        bufs[s] = malloc(nb ? nb : 1);
        if (!bufs[s]) { st = ob_fail(err, err_len, OB_ERR_NOMEM, "cuda: fallback buffer for %s", n->name); break; }
        if (!OB_CU(cx, cudaMemcpy(bufs[s], n->src[s]->data, nb, cudaMemcpyDeviceToHost))) st = OB_ERR_DEVICE;
        hs[s].data = bufs[s];
        h.src[s] = &hs[s];
    }
    size_t ob = ob_nbytes(n);
    if (!st) {
        bufs[OB_MAX_SRC] = malloc(ob ? ob : 1);
        if (!bufs[OB_MAX_SRC]) st = ob_fail(err, err_len, OB_ERR_NOMEM, "cuda: fallback buffer for %s", n->name);
    }
    if (!st) {
        h.data = bufs[OB_MAX_SRC];
        ob_cpu_ref_op(&h);
        if (!OB_CU(cx, cudaMemcpy(n->data, h.data, ob, cudaMemcpyHostToDevice))) st = OB_ERR_DEVICE;
        for (int s = 0; s < OB_MAX_SRC && !st; s++)
            if (ob_op_writes_src(n, s) &&
                !OB_CU(cx, cudaMemcpy(n->src[s]->data, bufs[s], ob_nbytes(n->src[s]), cudaMemcpyHostToDevice)))
                st = OB_ERR_DEVICE;
    }
    for (int s = 0; s <= OB_MAX_SRC; s++) free(bufs[s]);
    if (st == OB_ERR_DEVICE) return ob_fail(err, err_len, OB_ERR_DEVICE, "cuda: %s", cx->last_err);
    return st;
}

/* ---- compute ----------------------------------------------------------------------------------- */

static size_t node_tmp_size(const ob_cu_ctx *cx, const ob_tensor *n) {
    if (n->op == OB_OP_MATMUL) return ob_cu_matmul_tmp_size(cx, n);
    if (n->op == OB_OP_ATTENTION) return ob_cu_attention_tmp_size(cx, n);
    if (n->op == OB_OP_MATMUL_ID) return ob_cu_moe_tmp_size(n);
    return 0;
}

/* The quantized activations in cx->qx stay valid until a node writes over the x they came
 * from (the scratch planner reuses a dead input's bytes for later outputs). */
static void qx_note_write(ob_cu_ctx *cx, const ob_tensor *n) {
    if (!cx->qx_src) return;
    if (n->op == OB_OP_KV_STORE) n = n->src[1]; /* it writes into its cache, which may be an x */
    const char *a = (const char *)cx->qx_src, *b = (const char *)n->data;
    const size_t an = (size_t)(cx->qx_k * cx->qx_t) * sizeof(float), bn = ob_nbytes(n);
    if (b < a + an && a < b + bn) cx->qx_src = NULL;
}

static bool launch_op(ob_cu_ctx *cx, ob_tensor *n) {
    switch (n->op) {
    case OB_OP_GET_ROWS: return ob_cu_op_get_rows(cx, n);
    case OB_OP_MATMUL: return ob_cu_op_matmul(cx, n);
    case OB_OP_CPY: return ob_cu_op_cpy(cx, n);
    case OB_OP_RMS_NORM:
    case OB_OP_LAYER_NORM: return ob_cu_op_norm(cx, n);
    case OB_OP_ADD:
    case OB_OP_MUL: return ob_cu_op_binary(cx, n);
    case OB_OP_SCALE:
    case OB_OP_ACT: return n->ip[0] == OB_ACT_TANH ? ob_cu_op_tanh(cx, n) : ob_cu_op_unary(cx, n);
    case OB_OP_GLU: return ob_cu_op_glu(cx, n);
    case OB_OP_ROPE: return ob_cu_op_rope(cx, n);
    case OB_OP_SOFTMAX: return ob_cu_op_softmax(cx, n);
    case OB_OP_KV_STORE: return ob_cu_op_kv_store(cx, n);
    case OB_OP_ATTENTION: return ob_cu_op_attention(cx, n);
    case OB_OP_POOL: return ob_cu_op_pool(cx, n);
    case OB_OP_SAMPLE: return ob_cu_op_sample(cx, n);
    case OB_OP_MOE_GATE: return ob_cu_op_moe_gate(cx, n);
    case OB_OP_MATMUL_ID: return ob_cu_op_matmul_id(cx, n);
    case OB_OP_MOE_SUM: return ob_cu_op_moe_sum(cx, n);
    case OB_OP_ADD_ID: return ob_cu_op_add_id(cx, n);
    case OB_OP_CONCAT:
    case OB_OP_SLICE: return ob_cu_op_concat(cx, n);
    case OB_OP_SSM_CONV: return ob_cu_op_ssm_conv(cx, n);
    case OB_OP_DELTA_NET: return ob_cu_op_delta_net(cx, n);
    default: return false;
    }
}

static bool launch(ob_cu_ctx *cx, ob_tensor *n) {
    const bool ok = launch_op(cx, n);
    qx_note_write(cx, n);
    return ok;
}

/* ---- fusion: a few node pairs of every decoder layer run as one kernel ---------------------- */

/* The next node after i that launches work (LEAF and VIEW do not), or g->n. */
static int64_t next_op(const ob_graph *g, int64_t i) {
    for (i++; i < g->n; i++)
        if (g->nodes[i].op != OB_OP_LEAF && g->nodes[i].op != OB_OP_VIEW) return i;
    return g->n;
}

static bool overlap(const ob_tensor *a, const ob_tensor *b) {
    const char *pa = (const char *)a->data, *pb = (const char *)b->data;
    return pa < pb + ob_nbytes(b) && pb < pa + ob_nbytes(a);
}

/* An elementwise output may be its input itself (each element is read, then written, by
 * one thread) but not a shifted part of it. */
static bool same_or_apart(const ob_tensor *out, const ob_tensor *in) { return out->data == in->data || !overlap(out, in); }

/* The fused norm's output may take the bytes of the ADD's dead inputs (the planner frees
 * them right after the ADD): a block reads its whole row before writing the row, so a
 * single row, or the same rows exactly, is safe; a shifted overlap is not. */
static bool row_safe(const ob_tensor *out, const ob_tensor *in) { return same_or_apart(out, in) || ob_nrows(out) == 1; }

static bool takes_mmvq(const ob_cu_ctx *cx, const ob_tensor *n) {
    return n->op == OB_OP_MATMUL && supports_node(n) && ob_cu_mmvq_applies(cx, n); /* never cuBLAS */
}

/* Node c (index k) is an int8 matvec that reads x, right after it: x's producer may
 * quantize for it. */
static bool feeds_mmvq(const ob_cu_ctx *cx, const ob_graph *g, int64_t k, const ob_tensor *x) {
    if (k >= g->n) return false;
    const ob_tensor *c = &g->nodes[k];
    return takes_mmvq(cx, c) && c->src[1] == x && ob_cu_mmvq_qx_size(c) <= cx->qx_size;
}

static void qx_now_holds(ob_cu_ctx *cx, const ob_tensor *x) {
    cx->qx_src = x->data;
    cx->qx_k = x->ne[0];
    cx->qx_t = ob_nrows(x);
}

/* Whether ROPEs a and b turn alike: same rotation, angles and mscale, and factors that are
 * the same bytes (two leaves of one weight count as one) or both none. */
static bool same_rope(const ob_tensor *a, const ob_tensor *b) {
    const ob_tensor *fa = a->src[2], *fb = b->src[2];
    return a->ip[0] == b->ip[0] && a->ip[1] == b->ip[1] && a->fp[0] == b->fp[0] && a->fp[1] == b->fp[1] && a->fp[2] == b->fp[2] &&
           (fa == fb || (fa && fb && fa->data == fb->data));
}

/* Factors the fold may read before its PDL wait: none, or a leaf (no kernel ahead makes
 * them) apart from what the attention writes. */
static bool fold_factors_ok(const ob_tensor *f, const ob_tensor *at) { return !f || (f->op == OB_OP_LEAF && !overlap(at, f)); }

/* The q/k/v tail of a decode layer from node i: [RMS_NORM ->] ROPE (q), [RMS_NORM ->] ROPE
 * (k), KV_STORE of k's rope, KV_STORE (v) at the same positions, consecutive. Its blocks
 * run concurrently, so every output must be apart from every input and other output,
 * except a rope written over its own part's input (each row is read before written). The
 * norms' outputs are never written (kept in shared memory), nor k's rope when only its
 * KV_STORE reads it, so the planner may reuse those bytes freely. */
#define OB_QKV_MAX_T 16
static int64_t try_qkv(ob_cu_ctx *cx, ob_graph *g, int64_t i, bool *ok) {
    ob_tensor *nd[6] = {NULL, NULL, NULL, NULL, NULL, NULL}; /* qn qr kn kr ks vs */
    int64_t k = i;
    for (int part = 0; part < 2; part++) {
        if (k >= g->n) return -1;
        ob_tensor *a = &g->nodes[k];
        if (a->op == OB_OP_RMS_NORM) {
            nd[2 * part] = a;
            k = next_op(g, k);
            if (k >= g->n) return -1;
            a = &g->nodes[k];
            if (a->src[0] != nd[2 * part]) return -1;
        }
        if (a->op != OB_OP_ROPE) return -1;
        nd[2 * part + 1] = a;
        k = next_op(g, k);
    }
    for (int s = 4; s < 6; s++) {
        if (k >= g->n || g->nodes[k].op != OB_OP_KV_STORE) return -1;
        nd[s] = &g->nodes[k];
        if (s == 4) k = next_op(g, k);
    }
    ob_tensor *qn = nd[0], *qr = nd[1], *kn = nd[2], *kr = nd[3], *ks = nd[4], *vs = nd[5];
    for (int s = 0; s < 6; s++)
        if (nd[s] && !supports_node(nd[s])) return -1;
    const ob_tensor *qx = qr->src[0], *kx = kr->src[0], *pos = ks->src[2];
    const int64_t hd = qx->ne[0], T = qx->ne[2] * qx->ne[3], Hk = kx->ne[1];
    if (ks->src[0] != kr || kx->ne[0] != hd || kx->ne[2] * kx->ne[3] != T || T > OB_QKV_MAX_T) return -1;
    if (qr->src[1] != pos || kr->src[1] != pos || vs->src[2] != pos || vs->src[3] != ks->src[3] || vs->ip[0] != ks->ip[0]) return -1;
    if (ks->src[1]->ne[0] != hd * Hk || ob_nelements(kr) != hd * Hk * T || ob_nelements(vs->src[0]) != vs->src[1]->ne[0] * T)
        return -1;
    if (ob_type_block_size(ks->src[1]->type) > 1 && hd % 32 != 0) return -1;
    if (ob_nrows(qx) > 0x7fffffff || ob_nrows(kx) > 0x7fffffff || hd > 1024) return -1;
    /* The norms' outputs are not written: only their ropes may read them (the planner's
     * last_use; a node nobody reads is a graph output). */
    if ((qn && qn->last_use != qr - g->nodes) || (kn && kn->last_use != kr - g->nodes)) return -1;
    /* k's rope is written only where a node besides its KV_STORE reads it; the stores'
     * tokens (zeros that order the cache writes before the attention) only where some
     * node may read their value: not when the V store (src[4], unread) and the ATTENTION
     * right after it (its order, src[5], unread) are their only readers. */
    const int64_t ks_i = ks - g->nodes, vs_i = vs - g->nodes, at_i = next_op(g, vs_i);
    const bool keep_kr = kr->last_use != ks_i;
    const bool keep_tok = !(ks->last_use == vs_i && vs->src[4] == ks && at_i < g->n && g->nodes[at_i].op == OB_OP_ATTENTION &&
                            g->nodes[at_i].src[5] == vs && vs->last_use == at_i);
    /* what the launch writes and what it reads */
    const ob_tensor *outs[8] = {NULL, qr, NULL, keep_kr ? kr : NULL, ks->src[1], vs->src[1], keep_tok ? ks : NULL, keep_tok ? vs : NULL};
    const ob_tensor *ins[9] = {qn ? qn->src[0] : qx, qn ? qn->src[1] : NULL, kn ? kn->src[0] : kx, kn ? kn->src[1] : NULL,
                               vs->src[0], pos, ks->src[3], qr->src[2], kr->src[2]};
    for (int o = 0; o < 8; o++) {
        if (!outs[o]) continue;
        for (int p = o + 1; p < 8; p++)
            if (outs[p] && overlap(outs[o], outs[p])) return -1;
        for (int p = 0; p < 9; p++) {
            if (!ins[p] || !overlap(outs[o], ins[p])) continue;
            /* the rope over its own part's input, exactly */
            const bool own = (o == 1 && p == 0) || (o == 3 && p == 2);
            if (!(own && outs[o]->data == ins[p]->data && ob_nbytes(outs[o]) == ob_nbytes(ins[p]))) return -1;
        }
    }
    /* Folded into the one-token decode attention right after it, where that reads this tail
     * alone: q's rope (nothing else reads it), the two caches, the positions and sequences.
     * Its output may not overlap the raw k and v (other blocks may still read them when a
     * head's last split writes it), nor the raw q but in exactly its bytes (head h's output
     * then takes head h's q, which every block of head h read before that write). q and k
     * share the block's angles, so their ropes must match, factors and mscale included. */
    if (!keep_kr && !keep_tok && at_i < g->n) {
        ob_tensor *at = &g->nodes[at_i];
        if (at->src[0] == qr && qr->last_use == at_i && at->src[1] == ks->src[1] && at->src[2] == vs->src[1] &&
            at->src[3] == pos && at->src[4] == ks->src[3] && at->ip[0] == ks->ip[0] && at->ip[1] == Hk && T == 1 &&
            supports_node(at) && qr->ip[0] == hd && same_rope(qr, kr) && fold_factors_ok(qr->src[2], at) &&
            fold_factors_ok(kr->src[2], at) && ob_cu_attention_fold_ok(cx, at) &&
            ((at->data == ins[0]->data && ob_nbytes(at) == ob_nbytes(ins[0])) || !overlap(at, ins[0])) && !overlap(at, ins[2]) &&
            !overlap(at, ins[4]) && !overlap(at, ks->src[1]) && !overlap(at, vs->src[1])) {
            const bool quant = (cx->fuse & OB_CU_FUSE_ATTN_Q) && feeds_mmvq(cx, g, next_op(g, at_i), at) && ob_cu_attention_merges(cx, at);
            *ok = ob_cu_op_attention_fold(cx, at, quant, qn, qr, kn, kr, vs);
            for (int s = 0; s < 6; s++)
                if (nd[s]) qx_note_write(cx, nd[s]);
            qx_note_write(cx, at);
            if (quant) qx_now_holds(cx, at);
            return at_i;
        }
    }
    *ok = ob_cu_op_qkv(cx, qn, qr, kn, kr, ks, vs, keep_kr, keep_tok);
    for (int s = 0; s < 6; s++)
        if (nd[s]) qx_note_write(cx, nd[s]);
    return k;
}

/* Launches node i fused with the nodes after it when a pattern applies, and returns the
 * index of the last node it covered; -1: no pattern (launch node i alone). *ok: false
 * after a launch error. Patterns (each only where the unfused result is the same):
 *   ADD (residual, same shapes) -> RMS_NORM of it [-> int8 matvec of that]
 *   [RMS_NORM ->] ROPE (q), [RMS_NORM ->] ROPE (k), KV_STORE (k), KV_STORE (v): one launch,
 *     or none of its own: folded into the one-token ATTENTION after it (try_qkv)
 *   RMS_NORM -> ROPE of it (q/k norm);  KV_STORE -> KV_STORE at the same positions
 *   RMS_NORM, GLU or split decode ATTENTION -> int8 matvec of it
 *   consecutive int8 matvecs of one x, weight type and K (q/k/v, gate/up): one launch. */
static int64_t launch_fused(ob_cu_ctx *cx, ob_graph *g, int64_t i, bool *ok) {
    ob_tensor *n = &g->nodes[i];
    *ok = true;
    if (!cx->fuse || !supports_node(n)) return -1;
    const unsigned f = cx->fuse;
    const int64_t j = next_op(g, i);
    if ((f & OB_CU_FUSE_MMVQ_GROUP) && n->op == OB_OP_MATMUL && takes_mmvq(cx, n)) {
        ob_tensor *grp[8];
        const int most = OB_MIN(ob_cu_mmvq_group_max(), (int)OB_ARRAY_LEN(grp));
        int c = 1;
        int64_t last = i;
        grp[0] = n;
        for (int64_t k = j; k < g->n && c < most; k = next_op(g, k)) {
            ob_tensor *m = &g->nodes[k];
            if (!takes_mmvq(cx, m) || m->src[1] != n->src[1] || m->src[0]->type != n->src[0]->type) break;
            bool apart = !overlap(m, m->src[1]);
            for (int e = 0; e < c && apart; e++) apart = !overlap(m, grp[e]);
            if (!apart) break;
            grp[c++] = m;
            last = k;
        }
        if (c == 1) return -1;
        *ok = ob_cu_op_mmvq_group(cx, grp, c);
        for (int e = 0; e < c; e++) qx_note_write(cx, grp[e]);
        return last;
    }
    if ((f & OB_CU_FUSE_ADD_NORM) && n->op == OB_OP_ADD && j < g->n) {
        ob_tensor *m = &g->nodes[j];
        const ob_tensor *a = n->src[0], *b = n->src[1];
        if (m->op != OB_OP_RMS_NORM || m->src[0] != n || !supports_node(m) || ob_nelements(b) != ob_nelements(a) ||
            !same_or_apart(n, a) || !same_or_apart(n, b) || !row_safe(m, a) || !row_safe(m, b) || overlap(m, n))
            return -1;
        const bool quant = (f & OB_CU_FUSE_NORM_Q) && feeds_mmvq(cx, g, next_op(g, j), m);
        *ok = ob_cu_op_rms_fused(cx, n, m, quant);
        qx_note_write(cx, n);
        qx_note_write(cx, m);
        if (quant) qx_now_holds(cx, m);
        return j;
    }
    if ((f & OB_CU_FUSE_QKV) && (n->op == OB_OP_RMS_NORM || n->op == OB_OP_ROPE)) {
        const int64_t last = try_qkv(cx, g, i, ok);
        if (last >= 0) return last;
    }
    if ((f & OB_CU_FUSE_NORM_ROPE) && n->op == OB_OP_RMS_NORM && j < g->n) {
        ob_tensor *m = &g->nodes[j];
        if (m->op == OB_OP_ROPE && m->src[0] == n && supports_node(m) && m->src[0]->ne[0] == n->src[0]->ne[0] &&
            ob_nrows(n->src[0]) <= 0x7fffffff && !overlap(n, n->src[0]) && !overlap(m, n) && same_or_apart(m, n->src[0])) {
            *ok = ob_cu_op_rms_rope(cx, n, m);
            qx_note_write(cx, n);
            qx_note_write(cx, m);
            return j;
        }
    }
    if ((f & OB_CU_FUSE_NORM_Q) && n->op == OB_OP_RMS_NORM && feeds_mmvq(cx, g, j, n) && !overlap(n, n->src[0])) {
        *ok = ob_cu_op_rms_fused(cx, NULL, n, true);
        qx_note_write(cx, n);
        qx_now_holds(cx, n);
        return i;
    }
    if ((f & OB_CU_FUSE_KV_PAIR) && n->op == OB_OP_KV_STORE && j < g->n) {
        ob_tensor *m = &g->nodes[j];
        if (m->op == OB_OP_KV_STORE && supports_node(m) && m->src[2] == n->src[2] && m->src[3] == n->src[3] &&
            m->ip[0] == n->ip[0] && !overlap(m->src[0], n->src[1]) && !overlap(m->src[0], n) && !overlap(n->src[0], m->src[1]) &&
            !overlap(n->src[1], m->src[1]) && !overlap(m, n->src[1]) && !overlap(n, m->src[1]) &&
            !overlap(m, n->src[0]) && !overlap(n, m->src[0])) {
            *ok = ob_cu_op_kv_store_pair(cx, n, m);
            qx_note_write(cx, n);
            qx_note_write(cx, m);
            return j;
        }
    }
    if ((f & OB_CU_FUSE_ATTN_Q) && n->op == OB_OP_ATTENTION && feeds_mmvq(cx, g, j, n) && ob_cu_attention_merges(cx, n)) {
        *ok = ob_cu_op_attention_q(cx, n, true);
        qx_note_write(cx, n);
        qx_now_holds(cx, n);
        return i;
    }
    if ((f & OB_CU_FUSE_GLU_Q) && n->op == OB_OP_GLU && feeds_mmvq(cx, g, j, n) && same_or_apart(n, n->src[0]) && same_or_apart(n, n->src[1])) {
        *ok = ob_cu_op_glu_quant(cx, n, n->ne[0]);
        qx_note_write(cx, n);
        qx_now_holds(cx, n);
        return i;
    }
    return -1;
}

/* FNV-style, a 64-bit word at a time: the key is hashed on the host every step (a
 * thousand nodes), and a byte-at-a-time multiply chain cost a noticeable part of a step. */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = (const uint8_t *)p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 1099511628211ull;
        h ^= h >> 32;
    }
    for (; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* Everything a launch depends on besides device memory contents. */
static uint64_t graph_key(const ob_graph *g) {
    uint64_t h = fnv(1469598103934665603ull, &g->n, sizeof(g->n));
    for (int64_t i = 0; i < g->n; i++) {
        const ob_tensor *t = &g->nodes[i];
        h = fnv(h, &t->op, sizeof(t->op));
        h = fnv(h, &t->type, sizeof(t->type));
        h = fnv(h, t->ne, sizeof(t->ne));
        h = fnv(h, &t->data, sizeof(t->data));
        h = fnv(h, t->ip, sizeof(t->ip));
        h = fnv(h, t->fp, sizeof(t->fp));
        for (int s = 0; s < OB_MAX_SRC; s++) {
            const void *d = t->src[s] ? t->src[s]->data : NULL;
            h = fnv(h, &d, sizeof(d));
        }
    }
    return h;
}

/* ONEBIT_CUDA_SKIP (cuda_int.h): whether node n's launch is left out of a capturable step
 * (diagnostics: what a stage costs inside the captured graph; the results are wrong). */
static bool skipped(const ob_cu_ctx *cx, const ob_tensor *n) {
    switch (n->op) {
    case OB_OP_MATMUL:
    case OB_OP_MATMUL_ID: return (cx->opt.skip & 1) != 0;
    case OB_OP_ATTENTION: return (cx->opt.skip & 2) != 0;
    case OB_OP_GET_ROWS:
    case OB_OP_SAMPLE: return false;
    case OB_OP_GLU: return (cx->opt.skip & (4 | 8)) != 0;
    case OB_OP_ADD: return (cx->opt.skip & (4 | 16)) != 0;
    case OB_OP_RMS_NORM:
        if ((cx->opt.skip & 16) && n->src[0]->op == OB_OP_ADD) return true; /* the residual's norm */
        return (cx->opt.skip & (4 | 32)) != 0;
    case OB_OP_ROPE:
    case OB_OP_KV_STORE: return (cx->opt.skip & (4 | 32)) != 0;
    default: return (cx->opt.skip & 4) != 0;
    }
}

static bool enqueue_all(ob_cu_ctx *cx, ob_graph *g) {
    cx->qx_src = NULL;
    for (int64_t i = 0; i < g->n; i++) {
        ob_tensor *n = &g->nodes[i];
        if (n->op == OB_OP_LEAF || n->op == OB_OP_VIEW) continue;
        if (cx->opt.skip && skipped(cx, n)) continue;
        bool ok;
        cx->cur_node = (int32_t)i;
        ob_tensor *s0 = n->src[0];
        void *keep = ob_cu_fault_inject(cx, n);
        int64_t last = launch_fused(cx, g, i, &ok);
        if (ok && last < 0) ok = launch(cx, n);
        if (keep) s0->data = keep;
        if (!ok) return false;
        if (last >= 0) i = last;
    }
    return true;
}

static ob_cu_exec *find_exec(ob_cu_ctx *cx, uint64_t key) {
    for (int i = 0; i < OB_CU_MAX_EXEC; i++)
        if (cx->execs[i].exec && cx->execs[i].key == key) return &cx->execs[i];
    return NULL;
}

/* Captures the graph's launches into a CUDA graph, kept in the least recently used slot. */
static ob_cu_exec *capture(ob_cu_ctx *cx, ob_graph *g, uint64_t key) {
    ob_cu_exec *slot = &cx->execs[0];
    for (int i = 1; i < OB_CU_MAX_EXEC; i++)
        if (!cx->execs[i].exec || (slot->exec && cx->execs[i].last_used < slot->last_used)) slot = &cx->execs[i];
    if (slot->exec) { cudaGraphExecDestroy(slot->exec); slot->exec = NULL; }
    cudaGraph_t graph = NULL;
    if (!OB_CU(cx, cudaStreamBeginCapture(cx->stream, cudaStreamCaptureModeThreadLocal))) return NULL;
    bool ok = enqueue_all(cx, g);
    cudaError_t e = cudaStreamEndCapture(cx->stream, &graph);
    if (!ok || !OB_CU(cx, e)) { if (graph) cudaGraphDestroy(graph); return NULL; }
    e = cudaGraphInstantiate(&slot->exec, graph, 0);
    cudaGraphDestroy(graph);
    if (!OB_CU(cx, e)) { slot->exec = NULL; return NULL; }
    slot->key = key;
    if (!ob_cu_log_keep(cx, slot)) ob_log(OB_LOG_WARN, "cuda: out of memory keeping a captured step's launch log");
    return slot;
}

/* ---- profiling (ONEBIT_CUDA_PROFILE=1) ------------------------------------------------------- */

/* Events for up to n launches of one step (n + 1 marks); false: profiling is dropped. */
static bool prof_reserve(ob_cu_ctx *cx, int64_t n) {
    if (n + 1 <= cx->prof_cap) return true;
    cudaEvent_t *ev = (cudaEvent_t *)realloc(cx->prof_ev, sizeof(cudaEvent_t) * (size_t)(n + 1));
    if (!ev) { cx->prof = false; return false; }
    cx->prof_ev = ev;
    for (int64_t k = cx->prof_cap; k < n + 1; k++)
        if (cudaEventCreate(&cx->prof_ev[k]) != cudaSuccess) {
            cudaGetLastError();
            cx->prof_cap = k;
            cx->prof = false;
            return false;
        }
    cx->prof_cap = n + 1;
    return true;
}

static void prof_print(const ob_cu_ctx *cx) {
    double total = 0;
    const int nk = OB_OP_COUNT + OB_TYPE_COUNT;
    for (int o = 0; o < nk; o++) total += cx->prof_ms[o][0] + cx->prof_ms[o][1];
    if (!cx->prof_steps || total <= 0) return;
    fprintf(stderr, "cuda profile: %lld steps, %.3f ms GPU per step (launch to launch, uncaptured)\n",
            (long long)cx->prof_steps, total / (double)cx->prof_steps);
    for (int o = 0; o < nk; o++)
        for (int f = 0; f < 2; f++)
            if (cx->prof_count[o][f])
                fprintf(stderr, "  %-7s %-6s %-6s %8lld launches %10.3f ms/step %5.1f%%\n",
                        o < OB_OP_COUNT ? ob_op_name((ob_op)o) : "MATMUL", o < OB_OP_COUNT ? "" : ob_type_name((ob_type)(o - OB_OP_COUNT)),
                        f ? "fused" : "",
                        (long long)cx->prof_count[o][f], cx->prof_ms[o][f] / (double)cx->prof_steps,
                        100.0 * cx->prof_ms[o][f] / total);
}

/* ---- step timing (ONEBIT_CUDA_TIMING=1) ----------------------------------------------------- */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* A step's wall time runs from its compute's start to the next compute's start (the
 * engine's host work between steps included), so it is booked when the next one begins. */
static void timing_begin(ob_cu_ctx *cx) {
    const double t = now_ms();
    if (cx->t_last_kind >= 0) {
        cx->t_gpu[cx->t_last_kind] += cx->t_last_gpu;
        cx->t_wall[cx->t_last_kind] += t - cx->t_last_start;
        cx->t_steps[cx->t_last_kind]++;
    }
    cx->t_last_kind = -1;
    cx->t_last_start = t;
    if (cudaEventRecord(cx->tev[0], cx->stream) != cudaSuccess) { cudaGetLastError(); cx->timing = false; }
}

static void timing_end(ob_cu_ctx *cx, bool replay) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, cx->tev[0], cx->tev[1]) != cudaSuccess) { cudaGetLastError(); return; }
    cx->t_last_gpu = ms;
    cx->t_last_kind = replay ? 1 : 0;
}

static void timing_print(const ob_cu_ctx *cx) {
    static const char *const kind[2] = {"uncaptured", "graph replays"};
    for (int k = 0; k < 2; k++) {
        if (!cx->t_steps[k]) continue;
        const double n = (double)cx->t_steps[k], gpu = cx->t_gpu[k] / n, wall = cx->t_wall[k] / n;
        fprintf(stderr, "cuda timing: %-13s %6lld steps: GPU %.3f ms/step, wall %.3f ms/step, host gap %.3f ms/step (pdl %s)\n",
                kind[k], (long long)cx->t_steps[k], gpu, wall, wall - gpu, cx->pdl ? "on" : "off");
    }
}

static ob_status cu_compute(ob_backend *be, ob_graph *g, char *err, size_t err_len) {
    ob_cu_ctx *cx = (ob_cu_ctx *)be->ctx;
    if (cx->faulted) return ob_fail(err, err_len, OB_ERR_DEVICE, "cuda: device unusable after an earlier fault (%s)", cx->last_err);
    ob_cu_marks_step(cx);
    if (be->deterministic && !cx->det) { /* set once, before the first step (backend.h) */
        cx->det = true;
        cx->fuse &= cx->opt.det_fuse;
        cx->pass_g = NULL;
    }
    /* One pass on the host: support, scratch size, and whether the step can be captured. */
    size_t need = 0, qneed = 0, cneed = 0;
    bool capturable = cx->opt.graphs, any_fallback = false;
    const bool same = g->version && g == cx->pass_g && g->version == cx->pass_version;
    if (same) {
        need = cx->pass_need;
        qneed = cx->pass_qneed;
        cneed = cx->pass_cneed;
        capturable = cx->pass_capturable;
    }
    for (int64_t i = 0; i < g->n && !same; i++) {
        ob_tensor *n = &g->nodes[i];
        if (n->op == OB_OP_LEAF || n->op == OB_OP_VIEW) continue;
        if (!supports_node(n)) {
            if (!cx->allow_fallback)
                return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "cuda: node %s (%s, %s) not supported", n->name,
                               ob_op_name(n->op), ob_type_name(n->type) ? ob_type_name(n->type) : "?");
            any_fallback = true;
            continue;
        }
        size_t s = node_tmp_size(cx, n);
        if (s > need) need = s;
        if (n->op == OB_OP_ATTENTION && ob_cu_attention_cnt_size(cx, n) > cneed) cneed = ob_cu_attention_cnt_size(cx, n);
        if (n->op == OB_OP_MATMUL && ob_cu_matmul_uses_blas(cx, n)) capturable = false;
        /* the int8 x of the matvec, and of MMQ's batch path (T <= 16), which reuses it
         * across matmuls of one x (q/k/v, gate/up) as the matvec does */
        if (n->op == OB_OP_MATMUL && !ob_cu_matmul_uses_blas(cx, n) &&
            (ob_cu_mmvq_applies(cx, n) || (ob_cu_mmq_applies(cx, n) && ob_nrows(n->src[1]) <= OB_CU_MMVQ_MAX_T)) &&
            ob_cu_mmvq_qx_size(n) > qneed)
            qneed = ob_cu_mmvq_qx_size(n);
        if (n->op == OB_OP_MATMUL && ob_cu_matmul_det_qx_size(cx, n) > qneed) qneed = ob_cu_matmul_det_qx_size(cx, n);
    }
    if (any_fallback) capturable = false;
    if (!same) {
        cx->pass_g = g;
        cx->pass_version = g->version;
        cx->pass_need = need;
        cx->pass_qneed = qneed;
        cx->pass_cneed = cneed;
        cx->pass_capturable = capturable;
        cx->pass_key = capturable ? graph_key(g) : 0;
    }
    if ((cx->fuse & OB_CU_FUSE_ATTN_ONE) && cneed > cx->attn_cnt_n) {
        /* Counters start at zero once; each launch leaves them at zero. Captured steps hold
         * the old pointer: drop them with it. */
        for (int i = 0; i < OB_CU_MAX_EXEC; i++)
            if (cx->execs[i].exec) { cudaGraphExecDestroy(cx->execs[i].exec); cx->execs[i].exec = NULL; }
        if (cx->attn_cnt && !OB_CU(cx, cudaStreamSynchronize(cx->stream)))
            return ob_fail(err, err_len, OB_ERR_DEVICE, "cuda: %s", cx->last_err);
        if (cx->attn_cnt) cudaFree(cx->attn_cnt);
        cx->attn_cnt = NULL;
        cx->attn_cnt_n = 0;
        const size_t want = OB_MAX(cneed, (size_t)1024);
        if (cudaMalloc((void **)&cx->attn_cnt, want * sizeof(unsigned)) != cudaSuccess) {
            cudaGetLastError();
            cx->attn_cnt = NULL; /* the separate merge launch then */
        } else if (!OB_CU(cx, cudaMemsetAsync(cx->attn_cnt, 0, want * sizeof(unsigned), cx->stream))) {
            return ob_fail(err, err_len, OB_ERR_DEVICE, "cuda: %s", cx->last_err);
        } else {
            cx->attn_cnt_n = want;
        }
    }
    if (need > cx->tmp_size || qneed > cx->qx_size) {
        /* Captured steps hold the old scratch pointers: drop them with the buffers. */
        for (int i = 0; i < OB_CU_MAX_EXEC; i++)
            if (cx->execs[i].exec) { cudaGraphExecDestroy(cx->execs[i].exec); cx->execs[i].exec = NULL; }
        for (int k = 0; k < 2; k++) {
            const size_t want = k == 0 ? need : qneed;
            void **buf = k == 0 ? &cx->tmp : &cx->qx;
            size_t *size = k == 0 ? &cx->tmp_size : &cx->qx_size;
            if (want <= *size) continue;
            if (*buf) cudaFree(*buf);
            *buf = NULL;
            *size = 0;
            if (cudaMalloc(buf, want) != cudaSuccess) {
                cudaGetLastError();
                *buf = NULL;
                return ob_fail(err, err_len, OB_ERR_NOMEM, "cuda: cannot allocate %zu bytes of scratch", want);
            }
            *size = want;
        }
    }
    /* Profiled steps: one op (with what it fused) per launch unit, events between units. */
    int64_t nev = 0;
    int *prof_op = NULL;
    bool *prof_fused = NULL;
    if (cx->prof && prof_reserve(cx, g->n)) {
        prof_op = (int *)malloc(sizeof(int) * (size_t)g->n);
        prof_fused = (bool *)malloc(sizeof(bool) * (size_t)g->n);
        if (!prof_op || !prof_fused) { free(prof_op); free(prof_fused); prof_op = NULL; prof_fused = NULL; }
    }
    if (prof_op) capturable = false;
    bool ok = true, replay = false;
    const ob_cu_exec *ran = NULL; /* the captured step replayed, whose log names a fault */
    cx->in_step = true;
    if (cx->timing) timing_begin(cx);
    if (capturable) {
        /* Capture a structure the second time it is seen in a row: one-off graphs (a
         * prefill) are not worth the capture cost; decode steps repeat. */
        uint64_t key = cx->pass_key;
        ob_cu_exec *ex = find_exec(cx, key);
        if (!ex && key == cx->last_key) ex = capture(cx, g, key);
        cx->last_key = key;
        if (ex) {
            ex->last_used = ++cx->tick;
            replay = true;
            ran = ex;
            ok = OB_CU(cx, cudaGraphLaunch(ex->exec, cx->stream));
        } else if (!cx->faulted) {
            ok = enqueue_all(cx, g);
        } else {
            ok = false;
        }
    } else {
        cx->qx_src = NULL;
        for (int64_t i = 0; i < g->n && ok; i++) {
            ob_tensor *n = &g->nodes[i];
            if (n->op == OB_OP_LEAF || n->op == OB_OP_VIEW) continue;
            if (!supports_node(n)) {
                ob_status st = run_fallback(cx, n, err, err_len);
                if (st) { free(prof_op); free(prof_fused); cx->in_step = false; return st; }
                qx_note_write(cx, n);
                continue;
            }
            if (prof_op) {
                prof_op[nev] = n->op == OB_OP_MATMUL && n->src[0] ? OB_OP_COUNT + (int)n->src[0]->type : (int)n->op;
                ok = OB_CU(cx, cudaEventRecord(cx->prof_ev[nev], cx->stream));
                nev++;
                if (!ok) break;
            }
            cx->cur_node = (int32_t)i;
            ob_tensor *s0 = n->src[0];
            void *keep = ob_cu_fault_inject(cx, n);
            const int64_t last = launch_fused(cx, g, i, &ok);
            if (prof_op) prof_fused[nev - 1] = last >= 0;
            if (ok && last < 0) ok = launch(cx, n);
            if (keep) s0->data = keep;
            if (last >= 0) i = last;
        }
        if (ok && prof_op) ok = OB_CU(cx, cudaEventRecord(cx->prof_ev[nev], cx->stream));
    }
    if (ok && cx->timing) ok = OB_CU(cx, cudaEventRecord(cx->tev[1], cx->stream));
    if (ok) {
        const cudaError_t e = cudaStreamSynchronize(cx->stream);
        if (e != cudaSuccess) {
            ok = false;
            if (!cx->faulted) cx->last_code = e;
            cx->faulted = true;
        }
    }
    cx->in_step = false;
    /* a kernel's fault, seen at the synchronize or at a launch after it: one line that
     * names the launch it stopped in */
    if (!ok && ob_cu_sticky(cx->last_code))
        ob_cu_fault_name(cx, g, ran ? ran->log : cx->log, ran ? ran->log_n : cx->log_n, cx->last_code);
    if (ok) cx->stage_used = 0;
    if (ok && cx->timing) timing_end(cx, replay);
    if (ok && prof_op && nev > 0) {
        for (int64_t k = 0; k < nev; k++) {
            float ms = 0;
            if (cudaEventElapsedTime(&ms, cx->prof_ev[k], cx->prof_ev[k + 1]) != cudaSuccess) { cudaGetLastError(); continue; }
            cx->prof_ms[prof_op[k]][prof_fused[k]] += ms;
            cx->prof_count[prof_op[k]][prof_fused[k]]++;
        }
        cx->prof_steps++;
    }
    free(prof_op);
    free(prof_fused);
    if (!ok) {
        if (!cx->last_err[0]) snprintf(cx->last_err, sizeof(cx->last_err), "kernel launch failed");
        cx->faulted = true;
        return ob_fail(err, err_len, OB_ERR_DEVICE, "cuda: %s", cx->last_err);
    }
    return OB_OK;
}

static void cu_destroy(ob_backend *be) {
    if (!be) return;
    ob_cu_ctx *cx = (ob_cu_ctx *)be->ctx;
    if (cx) {
        for (int i = 0; i < OB_CU_MAX_EXEC; i++)
            if (cx->execs[i].exec) cudaGraphExecDestroy(cx->execs[i].exec);
        if (cx->stream) cudaStreamSynchronize(cx->stream); /* no staged copy still reads stage */
        if (cx->prof) prof_print(cx);
        if (cx->timing) timing_print(cx);
        for (int k = 0; k < 2; k++)
            if (cx->tev[k]) cudaEventDestroy(cx->tev[k]);
        if (cx->attn_cnt) cudaFree(cx->attn_cnt);
        for (int64_t k = 0; k < cx->prof_cap; k++) cudaEventDestroy(cx->prof_ev[k]);
        free(cx->prof_ev);
        if (cx->tmp) cudaFree(cx->tmp);
        if (cx->qx) cudaFree(cx->qx);
        if (cx->stage) cudaFreeHost(cx->stage);
        if (cx->blas) cublasDestroy(cx->blas);
        ob_cu_marks_free(cx);
        if (cx->stream) cudaStreamDestroy(cx->stream);
        free(cx);
    }
    free(be);
}

static size_t cu_free_memory(ob_backend *be) {
    (void)be;
    size_t fr = 0, total = 0;
    if (cudaMemGetInfo(&fr, &total) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return fr;
}

static const ob_backend_iface g_cuda_iface = {
    "cuda",
    false,
    cu_supports,
    cu_alloc,
    cu_free_buf,
    cu_upload,
    cu_download,
    cu_compute,
    cu_destroy,
    cu_free_memory,
    NULL, /* upload_weight: weights go up as they are */
};

extern "C" int64_t ob_backend_cuda_stat(ob_backend *be, int what) {
    if (!be || be->iface != &g_cuda_iface || what < 0 || what >= OB_CU_STAT_COUNT) return -1;
    return ((const ob_cu_ctx *)be->ctx)->stats[what];
}


__global__ void k_pdl_probe(void) {}

static bool pdl_capable(const cudaDeviceProp *prop) {
#ifdef OB_HIP
    (void)prop;
    return false;
#else
    cudaFuncAttributes fa;
    if (prop->major < 9) return false;
    if (cudaFuncGetAttributes(&fa, k_pdl_probe) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return fa.binaryVersion >= 90 && fa.ptxVersion >= 90;
#endif
}

extern "C" ob_backend *ob_backend_cuda_new(int device, bool allow_fallback, char *err, size_t err_len) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        cudaGetLastError();
        ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "cuda: no CUDA device (%s)",
                e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        return NULL;
    }
    if (device < 0 || device >= count) {
        ob_fail(err, err_len, OB_ERR_ARG, "cuda: device %d out of range (%d found)", device, count);
        return NULL;
    }
    cudaDeviceProp prop;
    if (cudaSetDevice(device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
        ob_fail(err, err_len, OB_ERR_DEVICE, "cuda: cannot open device %d", device);
        return NULL;
    }
#ifndef OB_HIP
    if (prop.major < 7) {
        ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "cuda: %s has compute capability %d.%d; 7.0 or newer is needed", prop.name,
                prop.major, prop.minor);
        return NULL;
    }
#endif
    ob_backend *be = (ob_backend *)calloc(1, sizeof(*be));
    ob_cu_ctx *cx = (ob_cu_ctx *)calloc(1, sizeof(*cx));
    if (!be || !cx) {
        free(be);
        free(cx);
        ob_fail(err, err_len, OB_ERR_NOMEM, "cuda: out of memory");
        return NULL;
    }
    be->iface = &g_cuda_iface;
    be->ctx = cx;
    cx->device = device;
    cx->allow_fallback = allow_fallback;
    cx->sm_count = prop.multiProcessorCount;
    size_t n_env = 0;
    const ob_env_var *env = ob_cuda_env(&n_env);
    ob_env_parse(env, n_env, &cx->opt);
    cx->fuse = cx->opt.fuse;
    cx->prof = cx->opt.profile;
    bool ok = OB_CU(cx, cudaStreamCreateWithFlags(&cx->stream, cudaStreamNonBlocking)) && ob_cu_tables_init(cx) &&
              ob_cu_moe_tables_init(cx) && ob_cu_marks_init(cx);
    if (ok && cublasCreate(&cx->blas) != CUBLAS_STATUS_SUCCESS) {
        cx->blas = NULL;
        snprintf(cx->last_err, sizeof(cx->last_err), "cublasCreate failed");
        ok = false;
    }
    if (ok && cublasSetStream(cx->blas, cx->stream) != CUBLAS_STATUS_SUCCESS) {
        snprintf(cx->last_err, sizeof(cx->last_err), "cublasSetStream failed");
        ok = false;
    }
    cx->t_last_kind = -1;
    if (ok && cx->opt.timing) {
        cx->timing = cudaEventCreate(&cx->tev[0]) == cudaSuccess && cudaEventCreate(&cx->tev[1]) == cudaSuccess;
        if (!cx->timing) cudaGetLastError();
    }
    /* PDL needs an sm_90 device running sm_90 code: kernels JIT-compiled from older PTX
     * lack the wait, and the attribute would then let them race. Profiling puts events
     * between launches: plain launches there. */
    cx->pdl = ok && cx->opt.pdl && !cx->prof && pdl_capable(&prop);
    cx->tma = ok && pdl_capable(&prop) ? cx->opt.tmv : 0u;
    cx->fa_off = !cx->opt.fa || prop.major < 8;
    ob_cu_mmq_init(cx, &prop);
    if (ok && cx->opt.stage) {
        /* Without pinned staging, uploads stay plain blocking copies. */
        if (cudaMallocHost((void **)&cx->stage, (size_t)1 << 16) == cudaSuccess) cx->stage_size = (size_t)1 << 16;
        else { cudaGetLastError(); cx->stage = NULL; }
    }
    if (!ok) {
        ob_fail(err, err_len, OB_ERR_DEVICE, "cuda: cannot start on device %d: %s", device, cx->last_err);
        cu_destroy(be);
        return NULL;
    }
    ob_log(OB_LOG_INFO, "cuda: %s (compute %d.%d, %d SMs, %.1f GiB)", prop.name, prop.major, prop.minor, prop.multiProcessorCount,
           prop.totalGlobalMem / 1073741824.0);
    return be;
}

OB_CU_MARK_BIND(backend)
