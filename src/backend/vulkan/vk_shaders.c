/* SPIR-V of every shader, compiled by glslc at build time (see CMakeLists.txt) and
 * embedded here so the binary needs no shader files at run time. The weight-decoding
 * shaders come in one variant per IQ lattice (vk_internal.h says why). */
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
static const uint32_t spv_kv_store[] = {
#include "kv_store.spv.inc"
};
static const uint32_t spv_attention[] = {
#include "attention.spv.inc"
};
static const uint32_t spv_get_rows[] = {
#include "get_rows.spv.inc"
};
static const uint32_t spv_get_rows_iq2xxs[] = {
#include "get_rows_iq2xxs.spv.inc"
};
static const uint32_t spv_get_rows_iq2xs[] = {
#include "get_rows_iq2xs.spv.inc"
};
static const uint32_t spv_get_rows_iq2s[] = {
#include "get_rows_iq2s.spv.inc"
};
static const uint32_t spv_get_rows_iq3xxs[] = {
#include "get_rows_iq3xxs.spv.inc"
};
static const uint32_t spv_get_rows_iq3s[] = {
#include "get_rows_iq3s.spv.inc"
};
static const uint32_t spv_get_rows_iq1s[] = {
#include "get_rows_iq1s.spv.inc"
};
static const uint32_t spv_matmul[] = {
#include "matmul.spv.inc"
};
static const uint32_t spv_matmul_iq2xxs[] = {
#include "matmul_iq2xxs.spv.inc"
};
static const uint32_t spv_matmul_iq2xs[] = {
#include "matmul_iq2xs.spv.inc"
};
static const uint32_t spv_matmul_iq2s[] = {
#include "matmul_iq2s.spv.inc"
};
static const uint32_t spv_matmul_iq3xxs[] = {
#include "matmul_iq3xxs.spv.inc"
};
static const uint32_t spv_matmul_iq3s[] = {
#include "matmul_iq3s.spv.inc"
};
static const uint32_t spv_matmul_iq1s[] = {
#include "matmul_iq1s.spv.inc"
};
static const uint32_t spv_cpy[] = {
#include "cpy.spv.inc"
};
static const uint32_t spv_cpy_iq2xxs[] = {
#include "cpy_iq2xxs.spv.inc"
};
static const uint32_t spv_cpy_iq2xs[] = {
#include "cpy_iq2xs.spv.inc"
};
static const uint32_t spv_cpy_iq2s[] = {
#include "cpy_iq2s.spv.inc"
};
static const uint32_t spv_cpy_iq3xxs[] = {
#include "cpy_iq3xxs.spv.inc"
};
static const uint32_t spv_cpy_iq3s[] = {
#include "cpy_iq3s.spv.inc"
};
static const uint32_t spv_cpy_iq1s[] = {
#include "cpy_iq1s.spv.inc"
};

#define OB_SPV_ENTRY(a, n) {a, sizeof(a), n}
#define OB_SPV_VARIANTS(sh, n)                                  \
    {[OB_VK_VAR_BASE] = OB_SPV_ENTRY(spv_##sh, n),              \
        [OB_VK_VAR_IQ2XXS] = OB_SPV_ENTRY(spv_##sh##_iq2xxs, n), \
        [OB_VK_VAR_IQ2XS] = OB_SPV_ENTRY(spv_##sh##_iq2xs, n), \
        [OB_VK_VAR_IQ2S] = OB_SPV_ENTRY(spv_##sh##_iq2s, n), \
        [OB_VK_VAR_IQ3XXS] = OB_SPV_ENTRY(spv_##sh##_iq3xxs, n), \
        [OB_VK_VAR_IQ3S] = OB_SPV_ENTRY(spv_##sh##_iq3s, n), \
        [OB_VK_VAR_IQ1S] = OB_SPV_ENTRY(spv_##sh##_iq1s, n)}

const ob_vk_spv ob_vk_spv_table[OB_VK_SH_COUNT][OB_VK_VAR_COUNT] = {
    [OB_VK_SH_NORM] = {[OB_VK_VAR_BASE] = OB_SPV_ENTRY(spv_norm, "norm")},
    [OB_VK_SH_ELEMENTWISE] = {[OB_VK_VAR_BASE] = OB_SPV_ENTRY(spv_elementwise, "elementwise")},
    [OB_VK_SH_SOFTMAX] = {[OB_VK_VAR_BASE] = OB_SPV_ENTRY(spv_softmax, "softmax")},
    [OB_VK_SH_ROPE] = {[OB_VK_VAR_BASE] = OB_SPV_ENTRY(spv_rope, "rope")},
    [OB_VK_SH_GET_ROWS] = OB_SPV_VARIANTS(get_rows, "get_rows"),
    [OB_VK_SH_MATMUL] = OB_SPV_VARIANTS(matmul, "matmul"),
    [OB_VK_SH_CPY] = OB_SPV_VARIANTS(cpy, "cpy"),
    [OB_VK_SH_KV_STORE] = {[OB_VK_VAR_BASE] = OB_SPV_ENTRY(spv_kv_store, "kv_store")},
    [OB_VK_SH_ATTENTION] = {[OB_VK_VAR_BASE] = OB_SPV_ENTRY(spv_attention, "attention")},
};

ob_vk_variant ob_vk_variant_of(ob_type type) {
    switch (type) {
    case OB_TYPE_IQ2_XXS: return OB_VK_VAR_IQ2XXS;
    case OB_TYPE_IQ2_XS: return OB_VK_VAR_IQ2XS;
    case OB_TYPE_IQ2_S: return OB_VK_VAR_IQ2S;
    case OB_TYPE_IQ3_XXS: return OB_VK_VAR_IQ3XXS;
    case OB_TYPE_IQ3_S: return OB_VK_VAR_IQ3S;
    case OB_TYPE_IQ1_S: case OB_TYPE_IQ1_M: return OB_VK_VAR_IQ1S;
    default: return OB_VK_VAR_BASE;
    }
}
