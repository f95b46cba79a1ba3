/* Mixture of experts on Vulkan (graph.h, issue #32): what its kernels (and ADD_ID's) accept
 * and how each node becomes one dispatch.
 *
 *  - MOE_GATE (shaders/moe_gate.glsl): a workgroup per token. Softmax gating ranks experts
 *    by their float logits (moe_gate.comp); sigmoid + bias ranks them by a score in double
 *    as the CPU does (moe_gate_f64.comp), and so does routing limited to groups (either
 *    gating: its group scores are sums in double), so a device without shaderFloat64
 *    refuses those rather than choose otherwise (strict placement names the node).
 *  - MATMUL_ID (shaders/matmul_id.comp): matvec.glsl's one-token kernels, a workgroup per
 *    (row block, slot) reading its slot's id from the gate (without a gate, slot j takes
 *    matrix j: MLA's one matrix per head, every slot its own x row): the streaming path where
 *    MATMUL's would take it (Q4_K, Q6_K, Q8_0, Q1_0, TQ2_0 with 16-aligned W and x), else
 *    the chunk decoder; any weight type MATMUL takes, repacked ones included. A decode
 *    step reads only its k experts' rows. A prefill reads an expert once per slot that
 *    names it (from the caches where they hold it): walking each expert once over its
 *    slots, as the CPU does, would take a device-side grouping (a count per expert, a
 *    prefix sum and a scatter of the slots, then matmul.comp's tiles over each expert's
 *    gathered columns, sized on the host for the worst case or dispatched indirectly), and
 *    in batch-invariant mode tiles that sum each column as the one-token kernel does.
 *  - MOE_SUM (shaders/moe_sum.comp): an invocation per output element, slots in order.
 *  - ADD_ID (shaders/add_id.comp, gpt-oss's expert biases): an invocation per output
 *    element, one float add as the CPU's.
 *
 * Batch-invariant mode (vk->det) needs nothing of its own here: each kernel computes a
 * token (or a slot) the same way on the same pipeline whatever the batch holds, and none
 * of them is fused with its neighbours. */
#include "backend/vulkan/vk_internal.h"
#include "format/quant.h"

static bool fits32(int64_t n) { return n >= 0 && n < ((int64_t)1 << 31); }
static uint64_t cdiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

/* Groups moe_gate.glsl's group-limited routing takes (its MAXG). */
#define OB_VK_MOE_MAX_GROUPS 64

/* MOE_GATE's pipeline: softmax ranks by float logits; sigmoid + bias, and any routing
 * limited to groups (group scores in double, as the CPU's), by double scores. */
static ob_vk_shader gate_shader(const ob_tensor *n) {
    return n->ip[1] == OB_MOE_SOFTMAX && n->ip[3] == 0 ? OB_VK_SH_MOE_GATE : OB_VK_SH_MOE_GATE_F64;
}

/* The shapes and types are ob_op_valid's (ob_vk_supports_node asked it). */
bool ob_vk_moe_supports(const ob_vk *vk, const ob_tensor *n) {
    const ob_tensor *a = n->src[0], *b = n->src[1];
    switch (n->op) {
    case OB_OP_MOE_GATE:
        return fits32(ob_nelements(a)) && OB_MOE_GROUP_COUNT(n->ip[3]) <= OB_VK_MOE_MAX_GROUPS &&
               vk->mods[gate_shader(n)] != NULL;
    case OB_OP_MATMUL_ID: /* with a gate, or one matrix per head (MLA's, no gate) */
        return ob_vk_matvec_weight_ok(a) && fits32(ob_nelements(b)) && (!n->src[2] || fits32(ob_nelements(n->src[2])));
    case OB_OP_MOE_SUM:
        return fits32(ob_nelements(a)) && fits32(ob_nelements(b));
    case OB_OP_ADD_ID: /* (the output's elements fit: ob_vk_supports_node) */
        return fits32(ob_nelements(b)) && fits32(ob_nelements(n->src[2]));
    default:
        return false;
    }
}

ob_status ob_vk_record_moe(ob_vk *vk, const ob_tensor *n, ob_vk_pc *pc, char *err, size_t err_len) {
    const ob_tensor *a = n->src[0], *b = n->src[1];
    switch (n->op) {
    case OB_OP_MOE_GATE:
        pc->u[0] = (uint32_t)a->ne[0];
        pc->u[1] = (uint32_t)n->ip[0];
        pc->u[2] = (uint32_t)n->ip[1];
        pc->u[3] = (uint32_t)n->ip[2];
        pc->u[4] = (uint32_t)n->ip[3];
        pc->f[0] = n->fp[0];
        return ob_vk_dispatch(vk, gate_shader(n), OB_TYPE_F32, pc, (uint64_t)ob_nrows(a), err, err_len);
    case OB_OP_MATMUL_ID: {
        const uint64_t N = (uint64_t)a->ne[1], k = (uint64_t)n->ne[1], T = (uint64_t)(n->ne[2] * n->ne[3]);
        /* x [K, T]: a token's slots share its row (with k = 1 either layout is the same) */
        const bool shared = (uint64_t)ob_nrows(b) == T && k > 1;
        pc->e = vk->iq_tab;
        pc->u[0] = (uint32_t)a->ne[0];
        pc->u[1] = (uint32_t)N;
        pc->u[2] = (uint32_t)a->ne[2] | (shared ? 1u << 31 : 0u);
        pc->u[3] = (uint32_t)ob_row_size(a->type, a->ne[0]);
        /* matvec.glsl's rows per workgroup and path, as MATMUL's one token would take them
         * (never staged or split-K: a slot's x is one row) */
        const bool fast = ob_vk_matvec_fast_ok(vk, a, b);
        pc->u[4] = fast ? vk->matvec_fast_rows : vk->matvec_rows;
        pc->u[6] = fast ? vk->matvec_fast_rps : 0;
        pc->u[8] = (uint32_t)cdiv(N, pc->u[4]);
        pc->u[9] = (uint32_t)k;
        return ob_vk_dispatch(vk, OB_VK_SH_MATMUL_ID, ob_vk_wtype(vk, a), pc, pc->u[8] * k * T, err, err_len);
    }
    case OB_OP_MOE_SUM: {
        const uint64_t N = (uint64_t)a->ne[0], T = (uint64_t)ob_nrows(n);
        pc->u[0] = (uint32_t)N;
        pc->u[1] = (uint32_t)a->ne[1];
        pc->u[2] = (uint32_t)T;
        return ob_vk_dispatch(vk, OB_VK_SH_MOE_SUM, OB_TYPE_F32, pc, cdiv(N * T, 256), err, err_len);
    }
    case OB_OP_ADD_ID: {
        const uint64_t ne = (uint64_t)ob_nelements(n);
        pc->u[0] = (uint32_t)a->ne[0];
        pc->u[1] = (uint32_t)a->ne[1];
        pc->u[2] = (uint32_t)b->ne[1];
        pc->u[3] = (uint32_t)ne;
        return ob_vk_dispatch(vk, OB_VK_SH_ADD_ID, OB_TYPE_F32, pc, cdiv(ne, 256), err, err_len);
    }
    default:
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "vulkan: op %s is not a mixture-of-experts op",
                       ob_op_name(n->op));
    }
}
