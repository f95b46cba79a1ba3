/* Small-table quants: IQ4_NL / IQ4_XS (a fixed non-linear 16-level table), the ternary
 * TQ1_0 / TQ2_0, the sign-only Q1_0, and MXFP4 (E2M1 values with a power-of-two scale).
 *
 * Dequantize is bit-exact with the gguf Python package; TQ1_0, TQ2_0 and MXFP4 quantize
 * byte-exact with it (float32, same operation order). IQ4_* quantize is our own
 * least-squares search; Q1_0 quantize follows ggml's reference (see below). */
#include "format/quant.h"
#include <math.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

_Static_assert(sizeof(ob_block_iq4_nl) == 18, "iq4_nl layout");
_Static_assert(sizeof(ob_block_iq4_xs) == 136, "iq4_xs layout");
_Static_assert(sizeof(ob_block_tq1_0) == 54, "tq1_0 layout");
_Static_assert(sizeof(ob_block_tq2_0) == 66, "tq2_0 layout");
_Static_assert(sizeof(ob_block_q1_0) == 18, "q1_0 layout");
_Static_assert(sizeof(ob_block_mxfp4) == 17, "mxfp4 layout");

const int8_t ob_iq4nl_values[16] = {OB_IQ4NL_VALUES};
/* E2M1 magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6} doubled to integers; bit 3 is the sign.
 * The block scale is correspondingly halved (see ob_e8m0_half). */
const int8_t ob_mxfp4_values[16] = {
    0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,
};

static int ob_clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ---- IQ4_NL / IQ4_XS ---------------------------------------------------------------------
 * Nibble order as in Q4_0: within a 32-element group, byte j holds elements j and j+16. */

void ob_dequant_row_iq4_nl(const void *x, float *y, int64_t n) {
    const uint8_t *p = x;
    for (int64_t i = 0; i < n / 32; i++, p += sizeof(ob_block_iq4_nl), y += 32) {
        ob_block_iq4_nl b; memcpy(&b, p, sizeof b);
        const float d = ob_f16_to_f32(b.d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)ob_iq4nl_values[b.qs[j] & 0xf];
            y[j + 16] = d * (float)ob_iq4nl_values[b.qs[j] >> 4];
        }
    }
}

/* Sub-block ib (0..7) scale: low nibble ib%2 of scales_l[ib/2], high 2 bits at 2*ib of
 * scales_h, offset 32. */
void ob_dequant_row_iq4_xs(const void *x, float *y, int64_t n) {
    const uint8_t *p = x;
    for (int64_t i = 0; i < n / OB_QK_K; i++, p += sizeof(ob_block_iq4_xs), y += OB_QK_K) {
        ob_block_iq4_xs b; memcpy(&b, p, sizeof b);
        const float d = ob_f16_to_f32(b.d);
        for (int ib = 0; ib < 8; ib++) {
            const int lo = (b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf;
            const int hi = (b.scales_h >> (2 * ib)) & 3;
            const float dl = d * (float)((lo | hi << 4) - 32);
            const uint8_t *qs = b.qs + 16 * ib;
            for (int j = 0; j < 16; j++) {
                y[32 * ib + j] = dl * (float)ob_iq4nl_values[qs[j] & 0xf];
                y[32 * ib + j + 16] = dl * (float)ob_iq4nl_values[qs[j] >> 4];
            }
        }
    }
}

/* Index of the table value nearest v (the first one on a tie). */
static int ob_iq4_nearest(float v) {
    int best = 0;
    float berr = fabsf(v - (float)ob_iq4nl_values[0]);
    for (int k = 1; k < 16; k++) {
        const float err = fabsf(v - (float)ob_iq4nl_values[k]);
        if (err < berr) { berr = err; best = k; }
    }
    return best;
}

/* Best scale s for x[0..32) ~ s * table[idx], minimising squared error: the extreme value
 * maps near table[0] = -127 (so s takes its sign); 21 stretches of that grid are tried,
 * each with its closed-form optimal s. Returns s (0 for a zero block). */
static float ob_iq4_fit(const float *x) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++)
        if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
    if (amax < 1e-30f) return 0.0f;
    float best_s = 0.0f, best_score = -1.0f;
    for (int k = -10; k <= 10; k++) {
        const float id = ((float)ob_iq4nl_values[0] + (float)k) / max;
        float sxv = 0.0f, svv = 0.0f;
        for (int j = 0; j < 32; j++) {
            const float v = (float)ob_iq4nl_values[ob_iq4_nearest(id * x[j])];
            sxv += x[j] * v; svv += v * v;
        }
        if (svv > 0.0f && sxv * sxv / svv > best_score) {
            best_score = sxv * sxv / svv;
            best_s = sxv / svv;
        }
    }
    return best_s;
}

/* Codes of 32 values against a stored scale dl, packed two per byte. */
static void ob_iq4_encode(const float *x, float dl, uint8_t *qs) {
    const float id = dl != 0.0f ? 1.0f / dl : 0.0f;
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)(ob_iq4_nearest(id * x[j]) | ob_iq4_nearest(id * x[j + 16]) << 4);
}

size_t ob_quant_row_iq4_nl(const float *x, void *y, int64_t n) {
    uint8_t *p = y;
    for (int64_t i = 0; i < n / 32; i++, x += 32, p += sizeof(ob_block_iq4_nl)) {
        ob_block_iq4_nl b;
        b.d = ob_f32_to_f16(ob_iq4_fit(x));
        ob_iq4_encode(x, ob_f16_to_f32(b.d), b.qs);
        memcpy(p, &b, sizeof b);
    }
    return (size_t)(n / 32) * sizeof(ob_block_iq4_nl);
}

size_t ob_quant_row_iq4_xs(const float *x, void *y, int64_t n) {
    uint8_t *p = y;
    for (int64_t i = 0; i < n / OB_QK_K; i++, x += OB_QK_K, p += sizeof(ob_block_iq4_xs)) {
        float s[8], amax = 0.0f, max = 0.0f;
        for (int ib = 0; ib < 8; ib++) {
            s[ib] = ob_iq4_fit(x + 32 * ib);
            if (fabsf(s[ib]) > amax) { amax = fabsf(s[ib]); max = s[ib]; }
        }
        ob_block_iq4_xs b;
        memset(&b, 0, sizeof b);
        /* the largest sub-scale maps to code -32, the long end of [-32, 31] */
        const float d = -max / 32.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b.d = ob_f32_to_f16(d);
        const float d16 = ob_f16_to_f32(b.d);
        for (int ib = 0; ib < 8; ib++) {
            const float v = id * s[ib];
            const int l = (v == v) ? ob_clampi((int)lrintf(fminf(fmaxf(v, -64.0f), 64.0f)), -32, 31) : 0;
            b.scales_l[ib / 2] |= (uint8_t)(((l + 32) & 0xf) << (4 * (ib % 2)));
            b.scales_h |= (uint16_t)(((l + 32) >> 4) << (2 * ib));
            ob_iq4_encode(x + 32 * ib, d16 * (float)l, b.qs + 16 * ib);
        }
        memcpy(p, &b, sizeof b);
    }
    return (size_t)(n / OB_QK_K) * sizeof(ob_block_iq4_xs);
}

/* ---- TQ1_0 / TQ2_0: ternary {-1, 0, +1} * d, d = max |x| of 256 ---------------------------
 * TQ1_0 packs 5 trits per byte as a base-3 fraction: byte = ceil(v * 256 / 243) where
 * v = sum t_k 3^(4-k); trit k is recovered as the top trit of (byte * 3^k mod 256) * 3
 * >> 8. Element order: bytes 0..31 hold elements k*32+j (k = 0..4), bytes 32..47 hold
 * 160 + k*16 + j, and qh[0..3] holds 4 trits each: 240 + k*4 + j. */

static const uint8_t ob_pow3[5] = {1, 3, 9, 27, 81};

static int ob_trit(uint8_t byte, int k) { return (((uint8_t)(byte * ob_pow3[k])) * 3) >> 8; }

void ob_dequant_row_tq1_0(const void *x, float *y, int64_t n) {
    const uint8_t *p = x;
    for (int64_t i = 0; i < n / OB_QK_K; i++, p += sizeof(ob_block_tq1_0), y += OB_QK_K) {
        ob_block_tq1_0 b; memcpy(&b, p, sizeof b);
        const float d = ob_f16_to_f32(b.d);
        for (int k = 0; k < 5; k++) {
            for (int j = 0; j < 32; j++) y[k * 32 + j] = d * (float)(ob_trit(b.qs[j], k) - 1);
            for (int j = 0; j < 16; j++) y[160 + k * 16 + j] = d * (float)(ob_trit(b.qs[32 + j], k) - 1);
        }
        for (int k = 0; k < 4; k++)
            for (int j = 0; j < 4; j++) y[240 + k * 4 + j] = d * (float)(ob_trit(b.qh[j], k) - 1);
    }
}

/* Ternary codes t = round(x / amax) + 1 in {0, 1, 2}; returns the f16 scale. */
static uint16_t ob_ternary_codes(const float *x, uint8_t *t) {
    float d = 0.0f;
    for (int j = 0; j < OB_QK_K; j++) d = fmaxf(d, fabsf(x[j]));
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < OB_QK_K; j++) {
        const float v = x[j] * id;
        t[j] = (uint8_t)((v == v ? (int)roundf(fminf(fmaxf(v, -1.0f), 1.0f)) : 0) + 1);
    }
    return ob_f32_to_f16(d);
}

static uint8_t ob_pack_trits(const uint8_t *t, int count, int stride) {
    unsigned v = 0;
    for (int k = 0; k < count; k++) v = v * 3 + t[k * stride];
    for (int k = count; k < 5; k++) v *= 3; /* qh bytes carry 4 trits, left-aligned */
    return (uint8_t)((v * 256 + 242) / 243);
}

size_t ob_quant_row_tq1_0(const float *x, void *y, int64_t n) {
    uint8_t *p = y;
    for (int64_t i = 0; i < n / OB_QK_K; i++, x += OB_QK_K, p += sizeof(ob_block_tq1_0)) {
        uint8_t t[OB_QK_K];
        ob_block_tq1_0 b;
        b.d = ob_ternary_codes(x, t);
        for (int j = 0; j < 32; j++) b.qs[j] = ob_pack_trits(t + j, 5, 32);
        for (int j = 0; j < 16; j++) b.qs[32 + j] = ob_pack_trits(t + 160 + j, 5, 16);
        for (int j = 0; j < 4; j++) b.qh[j] = ob_pack_trits(t + 240 + j, 4, 4);
        memcpy(p, &b, sizeof b);
    }
    return (size_t)(n / OB_QK_K) * sizeof(ob_block_tq1_0);
}

/* TQ2_0 element e = 128*g + 32*k + j: 2 bits at 2k of qs[32*g + j], value code - 1. */
void ob_dequant_row_tq2_0(const void *x, float *y, int64_t n) {
    const uint8_t *p = x;
    for (int64_t i = 0; i < n / OB_QK_K; i++, p += sizeof(ob_block_tq2_0), y += OB_QK_K) {
        ob_block_tq2_0 b; memcpy(&b, p, sizeof b);
        const float d = ob_f16_to_f32(b.d);
        for (int e = 0; e < OB_QK_K; e++) {
            const int q = (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
            y[e] = d * (float)(q - 1);
        }
    }
}

size_t ob_quant_row_tq2_0(const float *x, void *y, int64_t n) {
    uint8_t *p = y;
    for (int64_t i = 0; i < n / OB_QK_K; i++, x += OB_QK_K, p += sizeof(ob_block_tq2_0)) {
        uint8_t t[OB_QK_K];
        ob_block_tq2_0 b;
        b.d = ob_ternary_codes(x, t);
        memset(b.qs, 0, sizeof b.qs);
        for (int e = 0; e < OB_QK_K; e++)
            b.qs[32 * (e / 128) + e % 32] |= (uint8_t)(t[e] << (2 * ((e % 128) / 32)));
        memcpy(p, &b, sizeof b);
    }
    return (size_t)(n / OB_QK_K) * sizeof(ob_block_tq2_0);
}

/* ---- Q1_0 ------------------------------------------------------------------------------
 * Q1_0 (ggml type 41, from the PrismML llama.cpp fork, now in ggml-quants.c): 128
 * elements per 18-byte block { f16 d; uint8 qs[16] }. Bit j%8 of qs[j/8] (LSB first) is
 * element j's sign: 1 -> +d, 0 -> -d; there is no zero code. ggml's
 * quantize_row_q1_0_ref sets d = (sum of |x| over the block, summed in order in float)
 * / 128 (the mean magnitude, the L2-optimal scale for fixed signs) and sets the bit
 * when x >= 0 (so +0.0 and -0.0 both map to +d). dequantize_row_q1_0 returns +-d. */

void ob_dequant_row_q1_0(const void *x, float *y, int64_t n) {
    const uint8_t *p = x;
    for (int64_t i = 0; i < n / 128; i++, p += sizeof(ob_block_q1_0), y += 128) {
        ob_block_q1_0 b; memcpy(&b, p, sizeof b);
        const float d = ob_f16_to_f32(b.d);
        for (int j = 0; j < 128; j++) y[j] = ((b.qs[j / 8] >> (j % 8)) & 1) ? d : -d;
    }
}

size_t ob_quant_row_q1_0(const float *x, void *y, int64_t n) {
    uint8_t *p = y;
    for (int64_t i = 0; i < n / 128; i++, x += 128, p += sizeof(ob_block_q1_0)) {
        ob_block_q1_0 b;
        float sum = 0.0f;
        for (int j = 0; j < 128; j++) sum += fabsf(x[j]);
        b.d = ob_f32_to_f16(sum / 128.0f);
        memset(b.qs, 0, sizeof b.qs);
        for (int j = 0; j < 128; j++)
            if (x[j] >= 0.0f) b.qs[j / 8] |= (uint8_t)(1u << (j % 8));
        memcpy(p, &b, sizeof b);
    }
    return (size_t)(n / 128) * sizeof(ob_block_q1_0);
}

/* ---- MXFP4 -------------------------------------------------------------------------------
 * 32 elements { uint8 e (E8M0 exponent); uint8 qs[16] (E2M1 codes, byte j = elements j
 * and j+16) }. Value = 2^(e-127) * e2m1 = (2^(e-128)) * doubled-table value. */

void ob_dequant_row_mxfp4(const void *x, float *y, int64_t n) {
    const uint8_t *p = x;
    for (int64_t i = 0; i < n / 32; i++, p += sizeof(ob_block_mxfp4), y += 32) {
        ob_block_mxfp4 b; memcpy(&b, p, sizeof b);
        const float d = ob_mxfp4_scale(b.e);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)ob_mxfp4_values[b.qs[j] & 0xf];
            y[j + 16] = d * (float)ob_mxfp4_values[b.qs[j] >> 4];
        }
    }
}

/* Exponent: the largest magnitude lands in [4, 8) of the doubled table (floor(log2) - 2),
 * then each value takes the code of least |d*v - x| (first on ties), as gguf does. */
size_t ob_quant_row_mxfp4(const float *x, void *y, int64_t n) {
    uint8_t *p = y;
    for (int64_t i = 0; i < n / 32; i++, x += 32, p += sizeof(ob_block_mxfp4)) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        int e = 0;
        if (amax > 0.0f && isfinite(amax)) e = ob_clampi((int)(floorf(log2f(amax)) - 2.0f + 127.0f), 0, 255);
        ob_block_mxfp4 b;
        b.e = (uint8_t)e;
        const float d = ob_mxfp4_scale(b.e);
        uint8_t code[32];
        for (int j = 0; j < 32; j++) {
            int best = 0;
            float berr = fabsf(d * (float)ob_mxfp4_values[0] - x[j]);
            for (int k = 1; k < 16; k++) {
                const float err = fabsf(d * (float)ob_mxfp4_values[k] - x[j]);
                if (err < berr) { berr = err; best = k; }
            }
            code[j] = (uint8_t)best;
        }
        for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(code[j] | code[j + 16] << 4);
        memcpy(p, &b, sizeof b);
    }
    return (size_t)(n / 32) * sizeof(ob_block_mxfp4);
}
