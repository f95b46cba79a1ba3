/* The recurrent layers' ops on Vulkan (graph.h, issue #33: Qwen3.5's and LFM2's hybrids): what
 * their shaders accept and how each node becomes its dispatches. Both read and write their
 * state leaf in place; the hazard check (vk_hazard.c) counts it as written (the op
 * table's `writes`), so the next reader of the state waits for them.
 *
 *  - SSM_CONV (shaders/ssm_conv.comp): two dispatches with a barrier between, the outputs (an
 *    invocation per channel and token, reading the state as it was before the node) and then
 *    the state's new rows (an invocation per channel and state row).
 *  - DELTA_NET (shaders/delta_net.comp): one dispatch, a workgroup per (state row, value head,
 *    block of 8 columns) walking its sequence's tokens in batch order; head sizes up to 256.
 *
 * Batch-invariant mode (vk->det) needs nothing here: each token is computed the same way on
 * the same pipeline whatever the batch holds. */
#include "backend/vulkan/vk_internal.h"

static bool fits32(int64_t n) { return n >= 0 && n < ((int64_t)1 << 31); }
static uint64_t cdiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
static uint64_t addr(const ob_tensor *t) { return t ? (uint64_t)(uintptr_t)t->data : 0; }

/* delta_net.comp's columns a workgroup (CW) and head size (RW x MAXR). */
#define OB_VK_DN_COLS 8
#define OB_VK_DN_MAX_DK 256

/* The shapes and types are ob_op_valid's (ob_vk_supports_node asked it). */
bool ob_vk_recurrent_supports(const ob_vk *vk, const ob_tensor *n) {
    (void)vk;
    const ob_tensor *a = n->src[0];
    switch (n->op) {
    case OB_OP_SSM_CONV:
        return fits32(ob_nelements(a)) && fits32(ob_nelements(n->src[2])) && fits32(ob_nelements(n->src[1]));
    case OB_OP_DELTA_NET: {
        const int64_t S = ob_nrows(n->src[3]), H = n->ne[1];
        return n->ip[0] <= OB_VK_DN_MAX_DK && fits32(ob_nelements(a)) && fits32(ob_nelements(n->src[3])) &&
               fits32(S * H * (int64_t)cdiv((uint64_t)n->ip[2], OB_VK_DN_COLS));
    }
    default:
        return false;
    }
}

ob_status ob_vk_record_recurrent(ob_vk *vk, const ob_tensor *n, ob_vk_pc *pc, char *err, size_t err_len) {
    const ob_tensor *a = n->src[0];
    switch (n->op) {
    case OB_OP_SSM_CONV: {
        const uint64_t C = (uint64_t)a->ne[0], T = (uint64_t)ob_nrows(a), S = (uint64_t)ob_nrows(n->src[2]);
        pc->c = addr(n->src[2]);
        pc->d = addr(n->src[3]);
        pc->e = addr(n->src[4]);
        pc->u[0] = (uint32_t)C;
        pc->u[1] = (uint32_t)n->src[1]->ne[0];
        pc->u[2] = (uint32_t)T;
        pc->u[3] = (uint32_t)S;
        pc->u[4] = n->ip[0] != 0;
        pc->u[5] = 0;
        ob_status st = ob_vk_dispatch(vk, OB_VK_SH_SSM_CONV, OB_TYPE_F32, pc, cdiv(C * T, 256), err, err_len);
        if (st) return st;
        /* the state's rows after every output has read them: its ranges handed in again (the
         * state written, x and the ids read) put a barrier before it and let the hazard
         * audit check it like any dispatch */
        const ob_vk_range rd[3] = {{pc->a, pc->a + ob_nbytes(a), false},
                                   {pc->d, pc->d + ob_nbytes(n->src[3]), false},
                                   {pc->e, pc->e + ob_nbytes(n->src[4]), false}};
        const ob_vk_range wr[1] = {{pc->c, pc->c + ob_nbytes(n->src[2]), false}};
        ob_vk_hz(vk, rd, 3, wr, 1);
        vk->need_barrier = true;
        pc->u[5] = 1;
        return ob_vk_dispatch(vk, OB_VK_SH_SSM_CONV, OB_TYPE_F32, pc, cdiv(C * S, 256), err, err_len);
    }
    case OB_OP_DELTA_NET: {
        const uint64_t dv = (uint64_t)n->ip[2], H = (uint64_t)n->ne[1], S = (uint64_t)ob_nrows(n->src[3]);
        const uint64_t ncb = cdiv(dv, OB_VK_DN_COLS);
        pc->c = addr(n->src[2]);
        pc->d = addr(n->src[3]);
        pc->e = addr(n->src[4]);
        pc->p = addr(n->src[5]);
        pc->u[0] = (uint32_t)n->ip[0];
        pc->u[1] = (uint32_t)dv;
        pc->u[2] = (uint32_t)n->ip[1];
        pc->u[3] = (uint32_t)H;
        pc->u[4] = (uint32_t)ob_nrows(a);
        pc->u[5] = (uint32_t)S;
        pc->u[6] = n->ip[3] != 0;
        pc->u[7] = (uint32_t)ncb;
        pc->f[0] = n->fp[0];
        pc->f[1] = n->fp[1];
        return ob_vk_dispatch(vk, OB_VK_SH_DELTA_NET, OB_TYPE_F32, pc, S * H * ncb, err, err_len);
    }
    default:
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "vulkan: op %s is not a recurrent op", ob_op_name(n->op));
    }
}
