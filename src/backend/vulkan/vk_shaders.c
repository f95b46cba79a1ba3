/* SPIR-V of every shader, compiled by glslc at build time (see CMakeLists.txt) and
 * embedded here so the binary needs no shader files at run time. */
#include "backend/vulkan/vk_internal.h"

static const uint32_t spv_norm[] = {
#include "norm.spv.inc"
};
static const uint32_t spv_elementwise[] = {
#include "elementwise.spv.inc"
};
static const uint32_t spv_softmax[] = {
#include "softmax.spv.inc"
};
static const uint32_t spv_rope[] = {
#include "rope.spv.inc"
};
static const uint32_t spv_get_rows[] = {
#include "get_rows.spv.inc"
};
static const uint32_t spv_matmul[] = {
#include "matmul.spv.inc"
};
static const uint32_t spv_matvec[] = {
#include "matvec.spv.inc"
};
static const uint32_t spv_kv_store[] = {
#include "kv_store.spv.inc"
};
static const uint32_t spv_cpy[] = {
#include "cpy.spv.inc"
};
static const uint32_t spv_attention[] = {
#include "attention.spv.inc"
};
static const uint32_t spv_pool[] = {
#include "pool.spv.inc"
};
static const uint32_t spv_norm_rope[] = {
#include "norm_rope.spv.inc"
};
static const uint32_t spv_quant_x[] = {
#include "quant_x.spv.inc"
};
static const uint32_t spv_norm_q8[] = {
#include "norm_q8.spv.inc"
};
static const uint32_t spv_quant_x4[] = {
#include "quant_x4.spv.inc"
};
static const uint32_t spv_attn_dec[] = {
#include "attn_dec.spv.inc"
};
static const uint32_t spv_attn_fold[] = {
#include "attn_fold.spv.inc"
};
static const uint32_t spv_sample[] = {
#include "sample.spv.inc"
};
static const uint32_t spv_matvec_q8[] = {
#include "matvec_q8.spv.inc"
};

static const uint32_t spv_fault[] = {
#include "fault.spv.inc"
};
static const uint32_t spv_matvec_q8_pn[] = {
#include "matvec_q8_pn.spv.inc"
};
static const uint32_t spv_moe_gate[] = {
#include "moe_gate.spv.inc"
};
static const uint32_t spv_moe_gate_f64[] = {
#include "moe_gate_f64.spv.inc"
};
static const uint32_t spv_matmul_id[] = {
#include "matmul_id.spv.inc"
};
static const uint32_t spv_moe_sum[] = {
#include "moe_sum.spv.inc"
};
static const uint32_t spv_add_id[] = {
#include "add_id.spv.inc"
};
static const uint32_t spv_concat[] = {
#include "concat.spv.inc"
};
static const uint32_t spv_ssm_conv[] = {
#include "ssm_conv.spv.inc"
};
static const uint32_t spv_delta_net[] = {
#include "delta_net.spv.inc"
};

const ob_vk_spv ob_vk_spv_table[OB_VK_SH_COUNT] = {
    [OB_VK_SH_NORM] = {spv_norm, sizeof(spv_norm), "norm"},
    [OB_VK_SH_ELEMENTWISE] = {spv_elementwise, sizeof(spv_elementwise), "elementwise"},
    [OB_VK_SH_SOFTMAX] = {spv_softmax, sizeof(spv_softmax), "softmax"},
    [OB_VK_SH_ROPE] = {spv_rope, sizeof(spv_rope), "rope"},
    [OB_VK_SH_GET_ROWS] = {spv_get_rows, sizeof(spv_get_rows), "get_rows"},
    [OB_VK_SH_MATMUL] = {spv_matmul, sizeof(spv_matmul), "matmul"},
    [OB_VK_SH_MATVEC] = {spv_matvec, sizeof(spv_matvec), "matvec"},
    [OB_VK_SH_KV_STORE] = {spv_kv_store, sizeof(spv_kv_store), "kv_store"},
    [OB_VK_SH_CPY] = {spv_cpy, sizeof(spv_cpy), "cpy"},
    [OB_VK_SH_ATTENTION] = {spv_attention, sizeof(spv_attention), "attention"},
    [OB_VK_SH_POOL] = {spv_pool, sizeof(spv_pool), "pool"},
    [OB_VK_SH_NORM_ROPE] = {spv_norm_rope, sizeof(spv_norm_rope), "norm_rope"},
    [OB_VK_SH_QUANT_X] = {spv_quant_x, sizeof(spv_quant_x), "quant_x"},
    [OB_VK_SH_MATVEC_Q8] = {spv_matvec_q8, sizeof(spv_matvec_q8), "matvec_q8"},
    [OB_VK_SH_MATVEC_Q8_1] = {spv_matvec_q8, sizeof(spv_matvec_q8), "matvec_q8"},
    [OB_VK_SH_MATVEC_Q8_1R4] = {spv_matvec_q8, sizeof(spv_matvec_q8), "matvec_q8"},
    [OB_VK_SH_MATVEC_Q8_1R2] = {spv_matvec_q8, sizeof(spv_matvec_q8), "matvec_q8"},
    [OB_VK_SH_MATVEC_Q8_1R1] = {spv_matvec_q8, sizeof(spv_matvec_q8), "matvec_q8"},
    [OB_VK_SH_QUANT_X4] = {spv_quant_x4, sizeof(spv_quant_x4), "quant_x4"},
    [OB_VK_SH_NORM_Q8] = {spv_norm_q8, sizeof(spv_norm_q8), "norm_q8"},
    [OB_VK_SH_ATTN_DEC] = {spv_attn_dec, sizeof(spv_attn_dec), "attn_dec"},
    [OB_VK_SH_ATTN_DEC_G2] = {spv_attn_dec, sizeof(spv_attn_dec), "attn_dec_g2"},
    [OB_VK_SH_ATTN_DEC_G1] = {spv_attn_dec, sizeof(spv_attn_dec), "attn_dec_g1"},
    [OB_VK_SH_ATTN_FOLD] = {spv_attn_fold, sizeof(spv_attn_fold), "attn_fold"},
    [OB_VK_SH_MATVEC_Q8_PNP] = {spv_matvec_q8_pn, sizeof(spv_matvec_q8_pn), "matvec_q8_pnp"},
    [OB_VK_SH_MATVEC_Q8_PNC] = {spv_matvec_q8_pn, sizeof(spv_matvec_q8_pn), "matvec_q8_pnc"},
    [OB_VK_SH_MATVEC_Q8_PNC4] = {spv_matvec_q8_pn, sizeof(spv_matvec_q8_pn), "matvec_q8_pnc"},
    [OB_VK_SH_MATVEC_Q8_PNC2] = {spv_matvec_q8_pn, sizeof(spv_matvec_q8_pn), "matvec_q8_pnc"},
    [OB_VK_SH_MATVEC_Q8_PNC1] = {spv_matvec_q8_pn, sizeof(spv_matvec_q8_pn), "matvec_q8_pnc"},
    [OB_VK_SH_MATVEC_Q8_PNG] = {spv_matvec_q8_pn, sizeof(spv_matvec_q8_pn), "matvec_q8_png"},
    [OB_VK_SH_SAMPLE] = {spv_sample, sizeof(spv_sample), "sample"},
    [OB_VK_SH_MOE_GATE] = {spv_moe_gate, sizeof(spv_moe_gate), "moe_gate"},
    [OB_VK_SH_MOE_GATE_F64] = {spv_moe_gate_f64, sizeof(spv_moe_gate_f64), "moe_gate_f64"},
    [OB_VK_SH_MATMUL_ID] = {spv_matmul_id, sizeof(spv_matmul_id), "matmul_id"},
    [OB_VK_SH_MOE_SUM] = {spv_moe_sum, sizeof(spv_moe_sum), "moe_sum"},
    [OB_VK_SH_ADD_ID] = {spv_add_id, sizeof(spv_add_id), "add_id"},
    [OB_VK_SH_CONCAT] = {spv_concat, sizeof(spv_concat), "concat"},
    [OB_VK_SH_SSM_CONV] = {spv_ssm_conv, sizeof(spv_ssm_conv), "ssm_conv"},
    [OB_VK_SH_DELTA_NET] = {spv_delta_net, sizeof(spv_delta_net), "delta_net"},
    [OB_VK_SH_FAULT] = {spv_fault, sizeof(spv_fault), "fault"},
};
