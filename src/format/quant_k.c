/* K-quants: 256-element super-blocks split into 16- or 32-element sub-blocks, each with
 * its own small integer scale (and min) multiplying one or two f16 super-scales.
 *
 * Dequantize is bit-exact with the gguf Python package (float32, same operation order:
 * (d * sc) * q - (dmin * m)). Quantize is our own reference: a least-squares search for
 * each sub-block's scale (and min), then the scales themselves are quantized and the
 * codes recomputed against the scales the file will actually hold. */
#include "format/quant.h"
#include <math.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

_Static_assert(sizeof(ob_block_q2_k) == 84, "q2_k layout");
_Static_assert(sizeof(ob_block_q3_k) == 110, "q3_k layout");
_Static_assert(sizeof(ob_block_q4_k) == 144, "q4_k layout");
_Static_assert(sizeof(ob_block_q5_k) == 176, "q5_k layout");
_Static_assert(sizeof(ob_block_q6_k) == 210, "q6_k layout");
_Static_assert(sizeof(ob_block_q8_k) == 292, "q8_k layout");

/* ---- dequantize ------------------------------------------------------------------------ */

/* Q2_K element e (0..255): code in qs[(e/128)*32 + e%32] at bits 2*((e%128)/32);
 * sub-block e/16 has scale = low nibble, min = high nibble of scales[e/16]. */
void ob_dequant_row_q2_k(const void *x, float *y, int64_t n) {
    const uint8_t *p = x;
    for (int64_t i = 0; i < n / OB_QK_K; i++, p += sizeof(ob_block_q2_k), y += OB_QK_K) {
        ob_block_q2_k b; memcpy(&b, p, sizeof b);
        const float d = ob_f16_to_f32(b.d), dmin = ob_f16_to_f32(b.dmin);
        for (int e = 0; e < OB_QK_K; e++) {
            const int sb = e / 16;
            const float dl = d * (float)(b.scales[sb] & 0xf);
            const float ml = dmin * (float)(b.scales[sb] >> 4);
            const int q = (b.qs[(e / 128) * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3;
            y[e] = dl * (float)q - ml;
        }
    }
}

/* 6-bit signed scale i (0..15) of Q3_K: low 4 bits in scales[i % 8] (nibble i / 8),
 * high 2 bits in scales[8 + i % 4] at bit 2 * (i / 4); stored with +32 offset. */
static int ob_q3k_scale(const uint8_t *s, int i) {
    const int lo = (s[i % 8] >> (4 * (i / 8))) & 0xf;
    const int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
    return (lo | hi << 4) - 32;
}

/* Q3_K element e: low 2 bits as in Q2_K; hmask[e % 32] bit e / 32 set means "no -4". */
void ob_dequant_row_q3_k(const void *x, float *y, int64_t n) {
    const uint8_t *p = x;
    for (int64_t i = 0; i < n / OB_QK_K; i++, p += sizeof(ob_block_q3_k), y += OB_QK_K) {
        ob_block_q3_k b; memcpy(&b, p, sizeof b);
        const float d = ob_f16_to_f32(b.d);
        for (int e = 0; e < OB_QK_K; e++) {
            const float dl = d * (float)ob_q3k_scale(b.scales, e / 16);
            const int lo = (b.qs[(e / 128) * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3;
            const int hbit = (b.hmask[e % 32] >> (e / 32)) & 1;
            y[e] = dl * (float)(lo - (hbit ? 0 : 4));
        }
    }
}

/* 6-bit scale and min of sub-block j (0..7) in the 12 packed bytes of Q4_K / Q5_K:
 * j < 4 : sc = s[j] & 63, m = s[j+4] & 63;
 * j >= 4: low nibbles in s[j+4], top 2 bits in the top bits of s[j-4] (sc) and s[j] (m). */
static void ob_k4_scale_min(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xf) | (s[j - 4] >> 6) << 4;
        *m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

static void ob_k4_pack_scale_min(uint8_t *s, const uint8_t *sc, const uint8_t *m) {
    memset(s, 0, 12);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            s[j] |= sc[j];
            s[j + 4] |= m[j];
        } else {
            s[j + 4] = (uint8_t)((sc[j] & 0xf) | (m[j] & 0xf) << 4);
            s[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
            s[j] |= (uint8_t)((m[j] >> 4) << 6);
        }
    }
}

/* Q4_K element e: sub-block e/32; nibble (e/32)%2 of qs[(e/64)*32 + e%32]. */
void ob_dequant_row_q4_k(const void *x, float *y, int64_t n) {
    const uint8_t *p = x;
    for (int64_t i = 0; i < n / OB_QK_K; i++, p += sizeof(ob_block_q4_k), y += OB_QK_K) {
        ob_block_q4_k b; memcpy(&b, p, sizeof b);
        const float d = ob_f16_to_f32(b.d), dmin = ob_f16_to_f32(b.dmin);
        for (int sb = 0; sb < 8; sb++) {
            int sc, m;
            ob_k4_scale_min(b.scales, sb, &sc, &m);
            const float dl = d * (float)sc, ml = dmin * (float)m;
            for (int j = 0; j < 32; j++) {
                const int q = (b.qs[(sb / 2) * 32 + j] >> (4 * (sb % 2))) & 0xf;
                y[sb * 32 + j] = dl * (float)q - ml;
            }
        }
    }
}

/* Q5_K: as Q4_K plus a fifth bit: qh[e%32] bit e/32. */
void ob_dequant_row_q5_k(const void *x, float *y, int64_t n) {
    const uint8_t *p = x;
    for (int64_t i = 0; i < n / OB_QK_K; i++, p += sizeof(ob_block_q5_k), y += OB_QK_K) {
        ob_block_q5_k b; memcpy(&b, p, sizeof b);
        const float d = ob_f16_to_f32(b.d), dmin = ob_f16_to_f32(b.dmin);
        for (int sb = 0; sb < 8; sb++) {
            int sc, m;
            ob_k4_scale_min(b.scales, sb, &sc, &m);
            const float dl = d * (float)sc, ml = dmin * (float)m;
            for (int j = 0; j < 32; j++) {
                const int q = ((b.qs[(sb / 2) * 32 + j] >> (4 * (sb % 2))) & 0xf) |
                              ((b.qh[j] >> sb) & 1) << 4;
                y[sb * 32 + j] = dl * (float)q - ml;
            }
        }
    }
}

/* Q6_K element e = 128*g + r: low 4 bits from ql[64*g + r%64] nibble r/64, high 2 bits
 * from qh[32*g + r%32] at bit 2*(r/32); offset 32; int8 scale per 16 elements. */
void ob_dequant_row_q6_k(const void *x, float *y, int64_t n) {
    const uint8_t *p = x;
    for (int64_t i = 0; i < n / OB_QK_K; i++, p += sizeof(ob_block_q6_k), y += OB_QK_K) {
        ob_block_q6_k b; memcpy(&b, p, sizeof b);
        const float d = ob_f16_to_f32(b.d);
        for (int e = 0; e < OB_QK_K; e++) {
            const int g = e / 128, r = e % 128;
            const int lo = (b.ql[64 * g + r % 64] >> (4 * (r / 64))) & 0xf;
            const int hi = (b.qh[32 * g + r % 32] >> (2 * (r / 32))) & 3;
            y[e] = (d * (float)b.scales[e / 16]) * (float)((lo | hi << 4) - 32);
        }
    }
}

void ob_dequant_row_q8_k(const void *x, float *y, int64_t n) {
    const uint8_t *p = x;
    for (int64_t i = 0; i < n / OB_QK_K; i++, p += sizeof(ob_block_q8_k), y += OB_QK_K) {
        ob_block_q8_k b; memcpy(&b, p, sizeof b);
        for (int j = 0; j < OB_QK_K; j++) y[j] = b.d * (float)b.qs[j];
    }
}

/* ---- quantize -------------------------------------------------------------------------- */

/* Round to nearest; NaN and huge values are pinned so the int conversion is defined. */
static int ob_nearest(float v) {
    if (!(v == v)) return 0;
    v = fminf(fmaxf(v, -1e6f), 1e6f);
    return (int)lrintf(v);
}

static int ob_clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Value of largest magnitude (keeps its sign). */
static float ob_k_signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
    }
    return max;
}

/* Fits x[0..n) ~ s*L - m with codes L in [0, nmax], s >= 0, m >= 0 (the file stores the
 * min as an unsigned subtrahend, so the offset can only go down), minimising the
 * w-weighted squared error. Tries nstep+1 code grids (inverse scales stretched around
 * nmax/(max-min)) and, for each grid, the closed-form least-squares (s, offset).
 * Returns s; writes m and the best codes to L. */
static float ob_fit_affine(int n, int nmax, const float *x, const float *w, uint8_t *L,
                           float *m, float rmin, float rdelta, int nstep) {
    float lo = x[0], hi = x[0];
    for (int j = 1; j < n; j++) { lo = fminf(lo, x[j]); hi = fmaxf(hi, x[j]); }
    if (lo > 0.0f) lo = 0.0f;
    if (!(hi > lo)) { /* constant non-positive block: all offset, no scale */
        memset(L, 0, (size_t)n);
        *m = -lo;
        return 0.0f;
    }
    float best_s = (hi - lo) / (float)nmax, best_b = lo, best_err = 0.0f;
    for (int j = 0; j < n; j++) {
        L[j] = (uint8_t)ob_clampi(ob_nearest((x[j] - lo) / best_s), 0, nmax);
        const float diff = best_s * (float)L[j] + lo - x[j];
        best_err += w[j] * diff * diff;
    }
    uint8_t cand[32];
    for (int k = 0; k <= nstep; k++) {
        const float is = (rmin + rdelta * (float)k + (float)nmax) / (hi - lo);
        float sw = 0, sl = 0, sll = 0, sx = 0, slx = 0;
        for (int j = 0; j < n; j++) {
            const int l = ob_clampi(ob_nearest(is * (x[j] - lo)), 0, nmax);
            cand[j] = (uint8_t)l;
            sw += w[j]; sl += w[j] * (float)l; sll += w[j] * (float)(l * l);
            sx += w[j] * x[j]; slx += w[j] * (float)l * x[j];
        }
        const float det = sw * sll - sl * sl;
        if (!(det > 0.0f)) continue;
        float s = (sw * slx - sl * sx) / det, b = (sll * sx - sl * slx) / det;
        if (b > 0.0f) { b = 0.0f; s = slx / sll; }
        if (!(s > 0.0f)) continue;
        float err = 0.0f;
        for (int j = 0; j < n; j++) {
            const float diff = s * (float)cand[j] + b - x[j];
            err += w[j] * diff * diff;
        }
        if (err < best_err) {
            best_err = err; best_s = s; best_b = b;
            memcpy(L, cand, (size_t)n);
        }
    }
    *m = -best_b;
    return best_s;
}

/* Fits x[0..n) ~ s*L with codes L in [-nmax, nmax-1] minimising squared error. The
 * extreme value maps near -nmax (so the scale takes its sign and the longer half of the
 * code range covers it); 19 stretches of that grid are tried with the optimal s each. */
static float ob_fit_signed(int n, int nmax, const float *x) {
    const float max = ob_k_signed_absmax(x, n);
    if (fabsf(max) < 1e-30f) return 0.0f;
    float best_s = 0.0f, best_score = -1.0f;
    for (int k = -9; k <= 9; k++) {
        const float is = -((float)nmax + 0.1f * (float)k) / max;
        float sxl = 0, sll = 0;
        for (int j = 0; j < n; j++) {
            const int l = ob_clampi(ob_nearest(is * x[j]), -nmax, nmax - 1);
            sxl += x[j] * (float)l; sll += (float)(l * l);
        }
        /* error = sum x^2 - sxl^2 / sll, so maximise sxl^2 / sll */
        if (sll > 0.0f && sxl * sxl / sll > best_score) {
            best_score = sxl * sxl / sll;
            best_s = sxl / sll;
        }
    }
    return best_s;
}

/* Weights for the affine fits: every element counts, larger ones more (an error on an
 * outlier weight costs more in a dot product than one on a near-zero weight). */
static void ob_k_weights(const float *x, int n, float *w) {
    float sum2 = 0.0f;
    for (int j = 0; j < n; j++) sum2 += x[j] * x[j];
    const float av = sqrtf(sum2 / (float)n);
    for (int j = 0; j < n; j++) w[j] = av + fabsf(x[j]);
}

/* Quantizes a non-negative per-sub-block value v[0..nsub) to [0, qmax] codes times one
 * f16 super-scale; returns that scale as stored. */
static float ob_k_quant_scales(const float *v, int nsub, int qmax, uint8_t *codes, uint16_t *d16) {
    float vmax = 0.0f;
    for (int j = 0; j < nsub; j++) vmax = fmaxf(vmax, v[j]);
    const float d = vmax / (float)qmax;
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < nsub; j++) codes[j] = (uint8_t)ob_clampi(ob_nearest(id * v[j]), 0, qmax);
    *d16 = ob_f32_to_f16(d);
    return ob_f16_to_f32(*d16);
}

/* Codes of one sub-block against the stored (scale, min). */
static void ob_k_recode_affine(const float *x, int n, int nmax, float dl, float ml, uint8_t *L) {
    for (int j = 0; j < n; j++)
        L[j] = dl > 0.0f ? (uint8_t)ob_clampi(ob_nearest((x[j] + ml) / dl), 0, nmax) : 0;
}

size_t ob_quant_row_q2_k(const float *x, void *y, int64_t n) {
    uint8_t *p = y;
    for (int64_t i = 0; i < n / OB_QK_K; i++, x += OB_QK_K, p += sizeof(ob_block_q2_k)) {
        uint8_t L[OB_QK_K], sc[16], mc[16];
        float w[16], s[16], m[16];
        for (int sb = 0; sb < 16; sb++) {
            ob_k_weights(x + 16 * sb, 16, w);
            s[sb] = ob_fit_affine(16, 3, x + 16 * sb, w, L + 16 * sb, &m[sb], -0.5f, 0.1f, 15);
        }
        ob_block_q2_k b;
        const float d = ob_k_quant_scales(s, 16, 15, sc, &b.d);
        const float dmin = ob_k_quant_scales(m, 16, 15, mc, &b.dmin);
        for (int sb = 0; sb < 16; sb++) {
            b.scales[sb] = (uint8_t)(sc[sb] | mc[sb] << 4);
            ob_k_recode_affine(x + 16 * sb, 16, 3, d * (float)sc[sb], dmin * (float)mc[sb], L + 16 * sb);
        }
        memset(b.qs, 0, sizeof b.qs);
        for (int e = 0; e < OB_QK_K; e++)
            b.qs[(e / 128) * 32 + e % 32] |= (uint8_t)(L[e] << (2 * ((e % 128) / 32)));
        memcpy(p, &b, sizeof b);
    }
    return (size_t)(n / OB_QK_K) * sizeof(ob_block_q2_k);
}

/* Shared by Q4_K / Q5_K: 8 sub-blocks of 32, 6-bit scales and mins. Fills scales, d, dmin
 * and the codes L[256] in [0, nmax]. */
static void ob_quant_k4_common(const float *x, int nmax, float rmin, int nstep, uint8_t *L,
                               uint8_t *scales, uint16_t *d16, uint16_t *dmin16) {
    uint8_t sc[8], mc[8];
    float w[32], s[8], m[8];
    for (int sb = 0; sb < 8; sb++) {
        ob_k_weights(x + 32 * sb, 32, w);
        s[sb] = ob_fit_affine(32, nmax, x + 32 * sb, w, L + 32 * sb, &m[sb], rmin, 0.1f, nstep);
    }
    const float d = ob_k_quant_scales(s, 8, 63, sc, d16);
    const float dmin = ob_k_quant_scales(m, 8, 63, mc, dmin16);
    ob_k4_pack_scale_min(scales, sc, mc);
    for (int sb = 0; sb < 8; sb++)
        ob_k_recode_affine(x + 32 * sb, 32, nmax, d * (float)sc[sb], dmin * (float)mc[sb], L + 32 * sb);
}

size_t ob_quant_row_q4_k(const float *x, void *y, int64_t n) {
    uint8_t *p = y;
    for (int64_t i = 0; i < n / OB_QK_K; i++, x += OB_QK_K, p += sizeof(ob_block_q4_k)) {
        ob_block_q4_k b;
        uint8_t L[OB_QK_K];
        ob_quant_k4_common(x, 15, -1.0f, 20, L, b.scales, &b.d, &b.dmin);
        for (int g = 0; g < 4; g++)
            for (int j = 0; j < 32; j++)
                b.qs[32 * g + j] = (uint8_t)(L[64 * g + j] | L[64 * g + 32 + j] << 4);
        memcpy(p, &b, sizeof b);
    }
    return (size_t)(n / OB_QK_K) * sizeof(ob_block_q4_k);
}

size_t ob_quant_row_q5_k(const float *x, void *y, int64_t n) {
    uint8_t *p = y;
    for (int64_t i = 0; i < n / OB_QK_K; i++, x += OB_QK_K, p += sizeof(ob_block_q5_k)) {
        ob_block_q5_k b;
        uint8_t L[OB_QK_K];
        ob_quant_k4_common(x, 31, -0.5f, 15, L, b.scales, &b.d, &b.dmin);
        memset(b.qh, 0, sizeof b.qh);
        for (int g = 0; g < 4; g++)
            for (int j = 0; j < 32; j++) {
                const int l0 = L[64 * g + j], l1 = L[64 * g + 32 + j];
                b.qs[32 * g + j] = (uint8_t)((l0 & 0xf) | (l1 & 0xf) << 4);
                b.qh[j] |= (uint8_t)((l0 >> 4) << (2 * g) | (l1 >> 4) << (2 * g + 1));
            }
        memcpy(p, &b, sizeof b);
    }
    return (size_t)(n / OB_QK_K) * sizeof(ob_block_q5_k);
}

/* Signed sub-block scales s[0..nsub) -> codes in [-qmax, qmax-1] times one super-scale;
 * the largest-magnitude scale maps to -qmax. Returns the stored super-scale. */
static float ob_k_quant_signed_scales(const float *s, int nsub, int qmax, int *codes, uint16_t *d16) {
    const float max = ob_k_signed_absmax(s, nsub);
    if (max == 0.0f) {
        for (int j = 0; j < nsub; j++) codes[j] = 0;
        *d16 = 0;
        return 0.0f;
    }
    const float is = -(float)qmax / max;
    for (int j = 0; j < nsub; j++) codes[j] = ob_clampi(ob_nearest(is * s[j]), -qmax, qmax - 1);
    *d16 = ob_f32_to_f16(1.0f / is);
    return ob_f16_to_f32(*d16);
}

size_t ob_quant_row_q3_k(const float *x, void *y, int64_t n) {
    uint8_t *p = y;
    for (int64_t i = 0; i < n / OB_QK_K; i++, x += OB_QK_K, p += sizeof(ob_block_q3_k)) {
        float s[16];
        int sc[16];
        for (int sb = 0; sb < 16; sb++) s[sb] = ob_fit_signed(16, 4, x + 16 * sb);
        ob_block_q3_k b;
        const float d = ob_k_quant_signed_scales(s, 16, 32, sc, &b.d);
        memset(b.scales, 0, sizeof b.scales);
        memset(b.hmask, 0, sizeof b.hmask);
        memset(b.qs, 0, sizeof b.qs);
        for (int sb = 0; sb < 16; sb++) {
            const int v = sc[sb] + 32;
            b.scales[sb % 8] |= (uint8_t)((v & 0xf) << (4 * (sb / 8)));
            b.scales[8 + sb % 4] |= (uint8_t)((v >> 4) << (2 * (sb / 4)));
        }
        for (int e = 0; e < OB_QK_K; e++) {
            const float dl = d * (float)sc[e / 16];
            const int l = dl != 0.0f ? ob_clampi(ob_nearest(x[e] / dl), -4, 3) : 0;
            const int q = l + 4; /* 0..7: bit 2 goes to hmask */
            b.qs[(e / 128) * 32 + e % 32] |= (uint8_t)((q & 3) << (2 * ((e % 128) / 32)));
            b.hmask[e % 32] |= (uint8_t)((q >> 2) << (e / 32));
        }
        memcpy(p, &b, sizeof b);
    }
    return (size_t)(n / OB_QK_K) * sizeof(ob_block_q3_k);
}

size_t ob_quant_row_q6_k(const float *x, void *y, int64_t n) {
    uint8_t *p = y;
    for (int64_t i = 0; i < n / OB_QK_K; i++, x += OB_QK_K, p += sizeof(ob_block_q6_k)) {
        float s[16];
        int sc[16];
        for (int sb = 0; sb < 16; sb++) s[sb] = ob_fit_signed(16, 32, x + 16 * sb);
        ob_block_q6_k b;
        const float d = ob_k_quant_signed_scales(s, 16, 128, sc, &b.d);
        memset(b.ql, 0, sizeof b.ql);
        memset(b.qh, 0, sizeof b.qh);
        for (int sb = 0; sb < 16; sb++) b.scales[sb] = (int8_t)sc[sb];
        for (int e = 0; e < OB_QK_K; e++) {
            const float dl = d * (float)sc[e / 16];
            const int q = (dl != 0.0f ? ob_clampi(ob_nearest(x[e] / dl), -32, 31) : 0) + 32;
            const int g = e / 128, r = e % 128;
            b.ql[64 * g + r % 64] |= (uint8_t)((q & 0xf) << (4 * (r / 64)));
            b.qh[32 * g + r % 32] |= (uint8_t)((q >> 4) << (2 * (r / 32)));
        }
        memcpy(p, &b, sizeof b);
    }
    return (size_t)(n / OB_QK_K) * sizeof(ob_block_q6_k);
}

/* Q8_K is the activation partner of the K-quants: float scale, and bsums (sums of each
 * 16 codes) so dot products can fold in the mins without touching every code. */
size_t ob_quant_row_q8_k(const float *x, void *y, int64_t n) {
    uint8_t *p = y;
    for (int64_t i = 0; i < n / OB_QK_K; i++, x += OB_QK_K, p += sizeof(ob_block_q8_k)) {
        ob_block_q8_k b;
        memset(&b, 0, sizeof b);
        const float max = ob_k_signed_absmax(x, OB_QK_K);
        if (max != 0.0f) {
            const float is = -127.0f / max;
            for (int j = 0; j < OB_QK_K; j++) {
                b.qs[j] = (int8_t)ob_clampi(ob_nearest(is * x[j]), -128, 127);
                b.bsums[j / 16] = (int16_t)(b.bsums[j / 16] + b.qs[j]);
            }
            b.d = 1.0f / is;
        }
        memcpy(p, &b, sizeof b);
    }
    return (size_t)(n / OB_QK_K) * sizeof(ob_block_q8_k);
}
