/* Repacked weights. Q6_K (210 bytes), TQ2_0 (66), Q1_0 (18) and Q8_0 (34) blocks are only
 * 2-aligned, so a shader reads their runs of weight bytes as 32-bit words shifted together
 * (shaders/ld2.glsl). A model weight of one of these types whose rows hold a multiple of 8
 * blocks is uploaded in groups of 8 blocks instead: the 8 blocks without their f16 d
 * ("bodies", bytes in order), then the 8 d's. A group still takes 8 blocks' bytes, so rows
 * start where they did and the engine's addresses hold; every body is 16-aligned, so its
 * runs come in whole 16-byte loads. The shaders that read weights take the layout from
 * their specialization constant RP (shaders/dequant.glsl's wblk and wd); a dispatch names
 * it by OB_VK_RP in its type (ob_vk_wtype), found from the ranges kept here. Downloads
 * give the plain bytes back. */
#include <stdlib.h>
#include <string.h>

#include "backend/vulkan/vk_internal.h"
#include "format/quant.h"

#define GROUP 8

/* Where d sits in a plain block (the rest of the block is its body, in order). */
static bool repack_type(ob_type t, size_t *dpos) {
    switch (t) {
    case OB_TYPE_Q6_K: *dpos = 208; return true;
    case OB_TYPE_TQ2_0: *dpos = 64; return true;
    case OB_TYPE_Q1_0:
    case OB_TYPE_Q8_0: *dpos = 0; return true;
    default: return false;
    }
}

/* n groups of 8 blocks of ts bytes (d at dpos), plain -> repacked (pack) or back. */
static void repack_groups(uint8_t *dst, const uint8_t *src, size_t n, size_t ts, size_t dpos, bool pack) {
    const size_t body = ts - 2, gb = GROUP * ts;
    for (size_t g = 0; g < n; g++) {
        const uint8_t *s = src + g * gb;
        uint8_t *d = dst + g * gb;
        for (size_t j = 0; j < GROUP; j++) {
            if (pack) { /* s plain, d repacked */
                memcpy(d + j * body, s + j * ts, dpos);
                memcpy(d + j * body + dpos, s + j * ts + dpos + 2, body - dpos);
                memcpy(d + GROUP * body + 2 * j, s + j * ts + dpos, 2);
            } else { /* s repacked, d plain */
                memcpy(d + j * ts, s + j * body, dpos);
                memcpy(d + j * ts + dpos + 2, s + j * body + dpos, body - dpos);
                memcpy(d + j * ts + dpos, s + GROUP * body + 2 * j, 2);
            }
        }
    }
}

/* The first range that ends after address a (n_rp: none). Ranges are sorted and apart. */
static int first_after(const ob_vk *vk, uint64_t a) {
    int lo = 0, hi = vk->n_rp;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (vk->rp[mid].hi <= a) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static ob_status add_range(ob_vk *vk, uint64_t lo, uint64_t hi, ob_type t, char *err, size_t err_len) {
    ob_vk_repack_forget(vk, lo, hi); /* a weight uploaded again over an old one */
    if (vk->n_rp == vk->cap_rp) {
        const int cap = vk->cap_rp ? 2 * vk->cap_rp : 64;
        ob_vk_rp *r = realloc(vk->rp, sizeof(*r) * (size_t)cap);
        if (!r) return ob_fail(err, err_len, OB_ERR_NOMEM, "vulkan: out of memory keeping repacked weights");
        vk->rp = r;
        vk->cap_rp = cap;
    }
    int i = vk->n_rp++;
    for (; i > 0 && vk->rp[i - 1].lo > lo; i--) vk->rp[i] = vk->rp[i - 1];
    vk->rp[i] = (ob_vk_rp){lo, hi, t};
    return OB_OK;
}

void ob_vk_repack_forget(ob_vk *vk, uint64_t lo, uint64_t hi) {
    const int i0 = first_after(vk, lo);
    int i1 = i0;
    while (i1 < vk->n_rp && vk->rp[i1].lo < hi) i1++;
    if (i1 == i0) return;
    memmove(vk->rp + i0, vk->rp + i1, sizeof(*vk->rp) * (size_t)(vk->n_rp - i1));
    vk->n_rp -= i1 - i0;
}

ob_status ob_vk_upload_weight(ob_vk *vk, void *dst, const void *src, size_t size, ob_type type, int64_t ne0,
                              char *err, size_t err_len) {
    const uint64_t d0 = (uint64_t)(uintptr_t)dst;
    size_t dpos = 0;
    const ob_type_traits *tr = ob_type_traits_get(type);
    const size_t rs = tr ? ob_row_size(type, ne0) : 0, gb = tr ? GROUP * tr->type_size : 0;
    if (!vk->repack || !repack_type(type, &dpos) || !rs || rs % gb != 0 || size % rs != 0 || d0 % 16 != 0) {
        ob_vk_repack_forget(vk, d0, d0 + size);
        return ob_vk_copy(vk, dst, src, size, true, err, err_len);
    }
    /* in pieces of whole groups, through one host buffer of at most ~16 MiB */
    const size_t piece = (((size_t)16 << 20) / gb + 1) * gb;
    uint8_t *tmp = malloc(size < piece ? size : piece);
    if (!tmp) return ob_fail(err, err_len, OB_ERR_NOMEM, "vulkan: out of memory repacking a weight");
    ob_status st = OB_OK;
    for (size_t done = 0; done < size && !st; done += piece) {
        const size_t n = size - done < piece ? size - done : piece;
        repack_groups(tmp, (const uint8_t *)src + done, n / gb, tr->type_size, dpos, true);
        st = ob_vk_copy(vk, (uint8_t *)dst + done, tmp, n, true, err, err_len);
    }
    free(tmp);
    return st ? st : add_range(vk, d0, d0 + size, type, err, err_len);
}

ob_type ob_vk_wtype(const ob_vk *vk, const ob_tensor *w) {
    const uint64_t a = (uint64_t)(uintptr_t)w->data;
    const int i = first_after(vk, a);
    /* a view of a weight starts at a whole row, so at a whole group */
    if (i == vk->n_rp || vk->rp[i].lo > a || vk->rp[i].type != w->type || a + ob_nbytes(w) > vk->rp[i].hi ||
        (a - vk->rp[i].lo) % (GROUP * ob_type_traits_get(w->type)->type_size) != 0)
        return w->type;
    return (ob_type)((unsigned)w->type | OB_VK_RP);
}

ob_status ob_vk_repack_download(ob_vk *vk, void *dst, uint64_t src, size_t size, char *err, size_t err_len) {
    for (int i = first_after(vk, src); i < vk->n_rp && vk->rp[i].lo < src + size; i++) {
        const ob_vk_rp *r = &vk->rp[i];
        size_t dpos = 0;
        (void)repack_type(r->type, &dpos);
        const size_t ts = ob_type_traits_get(r->type)->type_size, gb = GROUP * ts;
        /* the whole groups covering the overlap, down again and put back */
        const uint64_t lo = src > r->lo ? src : r->lo, hi = src + size < r->hi ? src + size : r->hi;
        const uint64_t g0 = r->lo + (lo - r->lo) / gb * gb, g1 = r->lo + (hi - r->lo + gb - 1) / gb * gb;
        const size_t n = (size_t)(g1 - g0);
        uint8_t *tmp = malloc(2 * n);
        if (!tmp) return ob_fail(err, err_len, OB_ERR_NOMEM, "vulkan: out of memory reading a repacked weight");
        ob_vk_alloc *a = ob_vk_find(vk, g0, n);
        ob_status st = a ? ob_vk_copy_at(vk, a, (size_t)(g0 - a->addr), tmp, n, false, err, err_len)
                         : ob_fail(err, err_len, OB_ERR_ARG, "vulkan: a repacked weight outside any buffer");
        if (!st) {
            repack_groups(tmp + n, tmp, n / gb, ts, dpos, false);
            memcpy((uint8_t *)dst + (lo - src), tmp + n + (lo - g0), (size_t)(hi - lo));
        }
        free(tmp);
        if (st) return st;
    }
    return OB_OK;
}
