/* What the Vulkan kernels accept, and how each node becomes one dispatch: which shader,
 * which push constants, how many workgroups. Shapes follow src/graph/graph.h. */
#include "backend/vulkan/vk_internal.h"
#include "format/quant.h"

static bool is_f32(const ob_tensor *t) { return t && t->type == OB_TYPE_F32; }
static bool is_i32(const ob_tensor *t) { return t && t->type == OB_TYPE_I32; }

/* Weight types with a decoder in shaders/dequant.glsl. */
static bool weight_type_ok(ob_type t) {
    switch (t) {
    case OB_TYPE_F32: case OB_TYPE_F16: case OB_TYPE_BF16:
    case OB_TYPE_Q4_0: case OB_TYPE_Q4_1: case OB_TYPE_Q5_0: case OB_TYPE_Q5_1:
    case OB_TYPE_Q8_0: case OB_TYPE_Q8_1: case OB_TYPE_Q2_K: case OB_TYPE_Q3_K:
    case OB_TYPE_Q4_K: case OB_TYPE_Q5_K: case OB_TYPE_Q6_K: case OB_TYPE_Q8_K:
    case OB_TYPE_IQ4_NL: case OB_TYPE_IQ4_XS: case OB_TYPE_TQ1_0: case OB_TYPE_TQ2_0:
    case OB_TYPE_Q1_0: case OB_TYPE_MXFP4: case OB_TYPE_IQ2_XXS: case OB_TYPE_IQ2_XS:
    case OB_TYPE_IQ2_S: case OB_TYPE_IQ3_XXS: case OB_TYPE_IQ3_S: case OB_TYPE_IQ1_S:
    case OB_TYPE_IQ1_M:
        return true;
    default:
        return false;
    }
}

static bool is_plain(ob_type t) { return t == OB_TYPE_F32 || t == OB_TYPE_F16 || t == OB_TYPE_BF16; }
static bool is_kv_type(ob_type t) { return t == OB_TYPE_F32 || t == OB_TYPE_F16 || t == OB_TYPE_Q8_0; }

static bool row_aligned(ob_type t, int64_t n) {
    int64_t bs = ob_type_block_size(t);
    return bs > 0 && n > 0 && n % bs == 0;
}

/* Indices inside shaders are 32-bit. */
static bool fits32(int64_t n) { return n >= 0 && n < ((int64_t)1 << 31); }

bool ob_vk_supports_node(const ob_tensor *n) {
    const ob_tensor *a = n->src[0], *b = n->src[1];
    if (!fits32(ob_nelements(n))) return false;
    switch (n->op) {
    case OB_OP_GET_ROWS:
        return a && weight_type_ok(a->type) && row_aligned(a->type, a->ne[0]) && is_i32(b) && is_f32(n) &&
               n->ne[0] == a->ne[0] && ob_nrows(n) == ob_nelements(b) && fits32(ob_nrows(a)) &&
               fits32((int64_t)ob_row_size(a->type, a->ne[0]));
    case OB_OP_RMS_NORM:
    case OB_OP_LAYER_NORM:
        return ob_node_f32_shapes_ok(n);
    case OB_OP_MATMUL:
        return a && weight_type_ok(a->type) && row_aligned(a->type, a->ne[0]) && is_f32(b) && is_f32(n) &&
               b->ne[0] == a->ne[0] && n->ne[0] == a->ne[1] && ob_nrows(n) == ob_nrows(b) &&
               (is_plain(a->type) || a->ne[0] % 32 == 0) && fits32(ob_nelements(b)) &&
               fits32((int64_t)ob_row_size(a->type, a->ne[0]));
    case OB_OP_ADD:
    case OB_OP_MUL:
    case OB_OP_SCALE:
    case OB_OP_ACT:
    case OB_OP_SOFTMAX:
    case OB_OP_GLU:
    case OB_OP_ROPE:
        return ob_node_f32_shapes_ok(n);
    case OB_OP_KV_STORE: {
        const ob_tensor *pos = n->src[2], *seq = n->src[3];
        if (!is_f32(a) || !b || !is_kv_type(b->type) || !is_i32(pos) || !is_i32(seq) || !is_f32(n)) return false;
        int64_t row = b->ne[0];
        /* Q8_0 writes whole blocks; F32/F16 rows may end in a partial 32-chunk (tiny heads). */
        if (row <= 0 || (b->type == OB_TYPE_Q8_0 && row % 32 != 0) || ob_nelements(a) % row != 0) return false;
        int64_t T = ob_nelements(a) / row;
        return ob_nelements(pos) == T && ob_nelements(seq) == T && n->ip[0] > 0 && fits32(ob_nrows(b)) &&
               fits32(ob_nelements(a));
    }
    case OB_OP_ATTENTION: {
        const ob_tensor *kc = n->src[1], *vc = n->src[2], *pos = n->src[3], *seq = n->src[4];
        if (!is_f32(a) || !is_f32(n) || !kc || !vc || !is_kv_type(kc->type) || !is_kv_type(vc->type)) return false;
        if (!is_i32(pos) || !is_i32(seq)) return false;
        int64_t hd = a->ne[0], H = a->ne[1], T = a->ne[2] * a->ne[3];
        int n_kv = n->ip[1];
        if (n_kv <= 0 || H % n_kv != 0 || n->ip[0] <= 0 || n->ip[2] < 0 || hd > 512) return false;
        if (!(n->fp[2] >= 0.0f)) return false; /* ALiBi max bias: 0 = none; NaN refused */
        if (kc->ne[0] != hd * n_kv || vc->ne[0] != hd * n_kv || ob_nrows(kc) != ob_nrows(vc)) return false;
        if ((kc->type == OB_TYPE_Q8_0 || vc->type == OB_TYPE_Q8_0) && hd % 32 != 0) return false;
        return ob_nelements(pos) == T && ob_nelements(seq) == T && n->ne[0] == hd * H && ob_nrows(n) == T &&
               fits32(ob_nrows(kc)) && fits32(ob_nelements(kc));
    }
    case OB_OP_POOL: {
        const ob_tensor *seq = n->src[1], *pos = n->src[2];
        int64_t T = a ? ob_nrows(a) : 0;
        return is_f32(a) && is_f32(n) && is_i32(seq) && is_i32(pos) && ob_nelements(seq) == T &&
               ob_nelements(pos) == T && n->ne[0] == a->ne[0] && ob_nrows(n) == n->ip[2] && n->ip[2] > 0 &&
               n->ip[0] >= OB_POOL_MEAN && n->ip[0] <= OB_POOL_LAST && fits32(ob_nelements(a));
    }
    case OB_OP_CPY: {
        if (!a || ob_nelements(a) != ob_nelements(n) || !weight_type_ok(a->type)) return false;
        if (n->type != OB_TYPE_F32 && n->type != OB_TYPE_F16 && n->type != OB_TYPE_BF16 && n->type != OB_TYPE_Q8_0)
            return false;
        if (!row_aligned(a->type, a->ne[0]) || !row_aligned(n->type, n->ne[0])) return false;
        /* Block sources decode whole 32-element chunks; a Q8_0 destination writes them. */
        return (is_plain(a->type) && n->type != OB_TYPE_Q8_0) || ob_nelements(n) % 32 == 0;
    }
    default:
        return false;
    }
}

static uint64_t addr(const ob_tensor *t) { return t ? (uint64_t)(uintptr_t)t->data : 0; }
static uint64_t cdiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

ob_status ob_vk_record_node(ob_vk *vk, ob_tensor *n, char *err, size_t err_len) {
    const ob_tensor *a = n->src[0], *b = n->src[1];
    ob_vk_pc pc;
    memset(&pc, 0, sizeof(pc));
    pc.a = addr(a);
    pc.b = addr(b);
    pc.c = addr(n->src[2]);
    pc.d = addr(n->src[3]);
    pc.e = addr(n->src[4]);
    pc.o = addr(n);
    /* Weight decoders find the IQ lattice tables at e (no such node has a fifth source). */
    if (n->op == OB_OP_GET_ROWS || n->op == OB_OP_MATMUL || n->op == OB_OP_CPY) pc.e = vk->iq_tab;
    uint64_t ne = (uint64_t)ob_nelements(n);
    switch (n->op) {
    case OB_OP_GET_ROWS:
        pc.u[0] = (uint32_t)a->ne[0];
        pc.u[1] = (uint32_t)ob_nelements(b);
        pc.u[2] = (uint32_t)ob_row_size(a->type, a->ne[0]);
        pc.u[3] = (uint32_t)ob_nrows(a);
        return ob_vk_dispatch(vk, OB_VK_SH_GET_ROWS, a->type, &pc, cdiv(is_plain(a->type) ? ne : ne / 32, 256), err,
                              err_len);
    case OB_OP_RMS_NORM:
    case OB_OP_LAYER_NORM:
        pc.u[0] = (uint32_t)a->ne[0];
        pc.u[1] = n->op == OB_OP_LAYER_NORM;
        pc.u[2] = n->src[1] != NULL;
        pc.u[3] = n->op == OB_OP_LAYER_NORM && n->src[2] != NULL;
        if (n->op == OB_OP_RMS_NORM) pc.c = 0;
        pc.f[0] = n->fp[0];
        return ob_vk_dispatch(vk, OB_VK_SH_NORM, OB_TYPE_F32, &pc, (uint64_t)ob_nrows(a), err, err_len);
    case OB_OP_MATMUL: {
        uint64_t N = (uint64_t)a->ne[1], T = (uint64_t)ob_nrows(b);
        pc.u[0] = (uint32_t)a->ne[0];
        pc.u[1] = (uint32_t)N;
        pc.u[2] = (uint32_t)T;
        pc.u[3] = (uint32_t)ob_row_size(a->type, a->ne[0]);
        /* Up to 8 tokens (decode, small batches) W is read once by matvec.comp; beyond, the
         * 64 x 64 output tiles of matmul.comp / matmul_coop.comp. */
        if (T <= 8 && !vk->no_matvec) {
            pc.u[4] = vk->matvec_rows;
            pc.u[5] = vk->matvec_stage;
            return ob_vk_dispatch(vk, OB_VK_SH_MATVEC, a->type, &pc, cdiv(N, vk->matvec_rows), err, err_len);
        }
        pc.u[4] = vk->coop_fast;
        return ob_vk_dispatch(vk, vk->use_coop ? OB_VK_SH_MATMUL_COOP : OB_VK_SH_MATMUL, a->type, &pc,
                              cdiv(N, 64) * cdiv(T, 64), err, err_len);
    }
    case OB_OP_ADD:
    case OB_OP_MUL:
    case OB_OP_SCALE:
    case OB_OP_ACT:
    case OB_OP_GLU:
        pc.u[0] = (uint32_t)ne;
        pc.u[1] = n->op == OB_OP_ADD ? 0 : n->op == OB_OP_MUL ? 1 : n->op == OB_OP_SCALE ? 2 : n->op == OB_OP_ACT ? 3 : 4;
        pc.u[2] = b && n->op != OB_OP_GLU ? (uint32_t)ob_nelements(b) : 1;
        pc.u[3] = (uint32_t)n->ip[0];
        pc.f[0] = n->fp[0];
        return ob_vk_dispatch(vk, OB_VK_SH_ELEMENTWISE, OB_TYPE_F32, &pc, cdiv(ne, 256), err, err_len);
    case OB_OP_SOFTMAX:
        pc.u[0] = (uint32_t)a->ne[0];
        return ob_vk_dispatch(vk, OB_VK_SH_SOFTMAX, OB_TYPE_F32, &pc, (uint64_t)ob_nrows(a), err, err_len);
    case OB_OP_ROPE:
        pc.u[0] = (uint32_t)a->ne[0];
        pc.u[1] = (uint32_t)a->ne[1];
        pc.u[2] = (uint32_t)n->ip[0];
        pc.u[3] = (uint32_t)n->ip[1];
        pc.u[4] = (uint32_t)ob_nrows(a);
        pc.f[0] = n->fp[0];
        pc.f[1] = n->fp[1];
        return ob_vk_dispatch(vk, OB_VK_SH_ROPE, OB_TYPE_F32, &pc, cdiv(ne, 256), err, err_len);
    case OB_OP_KV_STORE: {
        int64_t row = b->ne[0], T = ob_nelements(a) / row;
        pc.u[0] = (uint32_t)row;
        pc.u[1] = (uint32_t)T;
        pc.u[2] = (uint32_t)b->type;
        pc.u[3] = (uint32_t)n->ip[0];
        pc.u[4] = (uint32_t)ob_nrows(b);
        pc.u[5] = (uint32_t)ob_row_size(b->type, row);
        return ob_vk_dispatch(vk, OB_VK_SH_KV_STORE, OB_TYPE_F32, &pc, cdiv((uint64_t)T * cdiv((uint64_t)row, 32), 64), err,
                              err_len);
    }
    case OB_OP_ATTENTION: {
        const ob_tensor *kc = n->src[1], *vc = n->src[2];
        uint64_t H = (uint64_t)a->ne[1], T = (uint64_t)(a->ne[2] * a->ne[3]);
        pc.u[0] = (uint32_t)a->ne[0];
        pc.u[1] = (uint32_t)H;
        pc.u[2] = (uint32_t)T;
        pc.u[3] = (uint32_t)n->ip[1];
        pc.u[4] = (uint32_t)n->ip[0];
        pc.u[5] = (uint32_t)n->ip[2];
        pc.u[6] = n->ip[3] != 0;
        pc.u[7] = (uint32_t)kc->type;
        pc.u[8] = (uint32_t)vc->type;
        pc.u[9] = (uint32_t)ob_nrows(kc);
        pc.f[0] = n->fp[0];
        pc.f[1] = n->fp[1];
        pc.f[2] = n->fp[2];
        return ob_vk_dispatch(vk, OB_VK_SH_ATTENTION, OB_TYPE_F32, &pc, T * H, err, err_len);
    }
    case OB_OP_POOL:
        pc.u[0] = (uint32_t)a->ne[0];
        pc.u[1] = (uint32_t)ob_nrows(a);
        pc.u[2] = (uint32_t)n->ip[0];
        pc.u[3] = n->ip[1] != 0;
        return ob_vk_dispatch(vk, OB_VK_SH_POOL, OB_TYPE_F32, &pc, (uint64_t)n->ip[2], err, err_len);
    case OB_OP_CPY:
        pc.u[0] = (uint32_t)ne;
        pc.u[1] = (uint32_t)n->type;
        return ob_vk_dispatch(vk, OB_VK_SH_CPY, a->type, &pc, cdiv(cdiv(ne, 32), 64), err, err_len);
    default:
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "vulkan: op %s has no kernel", ob_op_name(n->op));
    }
}
