/* The IQ lattice tables on the device: packed from src/format/quant_iq_grids.h (the data
 * the CPU reference decodes with) into one buffer at start-up; shaders/dequant.glsl
 * documents the layout and holds the matching word offsets. */
#include "backend/vulkan/vk_internal.h"
#include "format/quant_iq_grids.h"

#include <stdlib.h>

/* Words: IQ2_XXS 512, IQ2_XS 1024, IQ2_S 2048, IQ3_XXS 256, IQ3_S 512, IQ1 1024. */
#define OB_VK_IQ_WORDS 5376

static uint32_t pack4(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint32_t *put_iq2(uint32_t *w, const uint8_t (*g)[8], int n) {
    for (int i = 0; i < n; i++) {
        *w++ = pack4(g[i]);
        *w++ = pack4(g[i] + 4);
    }
    return w;
}

static uint32_t *put_iq3(uint32_t *w, const uint8_t (*g)[4], int n) {
    for (int i = 0; i < n; i++) *w++ = pack4(g[i]);
    return w;
}

ob_status ob_vk_iq_tables_init(ob_backend *be, char *err, size_t err_len) {
    ob_vk *vk = be->ctx;
    /* The shaders rebuild the sign table as 7 bits plus even parity; check that holds. */
    for (int i = 0; i < 128; i++)
        if (ob_iq_ksigns[i] != (i | (__builtin_popcount((unsigned)i) & 1) << 7))
            return ob_fail(err, err_len, OB_ERR_FORMAT, "vulkan: IQ sign table entry %d is not 7 bits + parity", i);
    uint32_t *words = malloc(sizeof(uint32_t) * OB_VK_IQ_WORDS), *w = words;
    if (!words) return ob_fail(err, err_len, OB_ERR_NOMEM, "vulkan: out of memory");
    w = put_iq2(w, ob_iq2xxs_grid, 256);
    w = put_iq2(w, ob_iq2xs_grid, 512);
    w = put_iq2(w, ob_iq2s_grid, 1024);
    w = put_iq3(w, ob_iq3xxs_grid, 256);
    w = put_iq3(w, ob_iq3s_grid, 512);
    for (int i = 0; i < 2048; i += 2) {
        uint32_t v = 0;
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < 8; j++) v |= (uint32_t)(ob_iq1s_grid[i + k][j] + 1) << (16 * k + 2 * j);
        *w++ = v;
    }
    _Static_assert(256 * 2 + 512 * 2 + 1024 * 2 + 256 + 512 + 1024 == OB_VK_IQ_WORDS, "IQ table words");
    size_t size = sizeof(uint32_t) * OB_VK_IQ_WORDS;
    void *dev = be->iface->alloc(be, size);
    ob_status st = dev ? ob_vk_copy(vk, dev, words, size, true, err, err_len)
                       : ob_fail(err, err_len, OB_ERR_NOMEM, "vulkan: cannot allocate the IQ tables");
    free(words);
    if (!st) vk->iq_tab = (uint64_t)(uintptr_t)dev;
    return st;
}
