// The quantized KV cache types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL: blocks of 32) as
// kv_store.comp writes them and attention.comp reads them, the type a run-time value (a
// dispatch's K and V caches may differ). The encoders give the bytes of the C reference
// quantizers (src/format/quant.c, quant_small.c) bit for bit: every operation `precise`
// (no fused multiply-add), divisions rounded as IEEE's (kvq_div), the f16 scales rounded
// by integers (kvq_f16), NaN treated as fminf / fmaxf / the reference's casts treat it.
// Block sizes in bytes are the C type table's, from the push constants (vk_ops.c); the
// offsets inside a block are the layouts of src/format/quant.h. Needs common.glsl.
#ifndef OB_VK_KVQ_GLSL
#define OB_VK_KVQ_GLSL
#include "types.glsl"

bool kvq_block_type(uint ty) {
    return ty == T_Q8_0 || ty == T_Q4_0 || ty == T_Q4_1 || ty == T_Q5_0 || ty == T_Q5_1 || ty == T_IQ4_NL;
}

// f32 -> f16 bits, round to nearest even, integers only: ob_f32_to_f16 (src/core/common.h),
// whatever the device's packHalf2x16 does with ties and subnormals.
uint kvq_f16(float f) {
    uint x = floatBitsToUint(f), sgn = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return sgn | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u);
    if (ax >= 0x477ff000u) return sgn | 0x7c00u;
    if (ax < 0x38800000u) {
        if (ax < 0x33000000u) return sgn;
        uint e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, sh = 126u - e;
        uint q = m >> sh, rem = m & ((1u << sh) - 1u), hf = 1u << (sh - 1u);
        if (rem > hf || (rem == hf && (q & 1u) != 0u)) q++;
        return sgn | q;
    }
    uint q = (ax >> 13) - (112u << 10), rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u) != 0u)) q++;
    return sgn | q;
}

// a - q b, exact where q is within an ulp or so of a / b (two_prod's exact product, and
// a difference of nearby floats).
float kvq_res(float a, float b, float q) {
    vec2 p = two_prod(q, b);
    precise float r = (a - p.x) - p.y;
    return r;
}

// a / b rounded to nearest, as C's division: a device's division may be a few ulps off
// (Vulkan allows 2.5). From its quotient, step an ulp toward a / b while the residual
// shrinks; the quotient with the smallest residual is the nearest (no quotient of two
// floats lies exactly halfway between two).
float kvq_div(float a, float b) {
    precise float q = a / b;
    if (isnan(q) || isinf(q) || q == 0.0 || isinf(b)) return q;
    float r = kvq_res(a, b, q);
    for (uint i = 0u; i < 4u && r != 0.0; i++) {
        bool up = (r > 0.0) == (b > 0.0); // a / b = q + r / b lies above q
        float n = uintBitsToFloat(floatBitsToUint(q) + (up == (q > 0.0) ? 1u : 0xffffffffu));
        float rn = kvq_res(a, b, n);
        if (!(abs(rn) < abs(r))) break;
        q = n;
        r = rn;
    }
    return q;
}

// roundf: halves away from zero.
float kvq_round(float x) {
    float t = trunc(x);
    precise float f = x - t;
    return abs(f) >= 0.5 ? t + sign(x) : t;
}
float kvq_fmin(float a, float b) { return isnan(a) ? b : isnan(b) ? a : min(a, b); }
float kvq_fmax(float a, float b) { return isnan(a) ? b : isnan(b) ? a : max(a, b); }
// ob_trunc_code: a 4/5-bit code by truncation, NaN and negatives 0, at most qmax.
uint kvq_trunc(float v, float qmax) { return !(v > 0.0) ? 0u : v >= qmax ? uint(qmax) : uint(v); }

// Q8_0's scale d and codes of 32 values (ob_quant_row_q8_0): d = amax / 127, codes
// roundf(x / d) in [-127, 127].
void kvq_q8_0(float v[32], out float d, out int q[32]) {
    float amax = 0.0;
    for (uint j = 0; j < 32; j++) amax = kvq_fmax(amax, abs(v[j]));
    d = kvq_div(amax, 127.0);
    float id = d != 0.0 ? kvq_div(1.0, d) : 0.0;
    for (uint j = 0; j < 32; j++) {
        precise float x = v[j] * id;
        q[j] = isnan(x) ? 0 : int(kvq_round(clamp(x, -127.0, 127.0)));
    }
}

// The value of largest magnitude, the first on ties.
float kvq_absmax(float v[32]) {
    float amax = 0.0, mx = 0.0;
    for (uint j = 0; j < 32; j++)
        if (abs(v[j]) > amax) {
            amax = abs(v[j]);
            mx = v[j];
        }
    return mx;
}

// Index of the IQ4_NL value nearest v, the first on ties (ob_iq4_nearest).
uint kvq_iq4_nearest(float v) {
    uint best = 0u;
    precise float berr = abs(v - float(IQ4NL[0]));
    for (uint k = 1u; k < 16u; k++) {
        precise float err = abs(v - float(IQ4NL[k]));
        if (err < berr) {
            berr = err;
            best = k;
        }
    }
    return best;
}

// ob_iq4_fit: the least-squares scale over 21 stretches of the grid.
float kvq_iq4_fit(float v[32]) {
    float amax = 0.0, mx = 0.0;
    for (uint j = 0; j < 32; j++)
        if (abs(v[j]) > amax) {
            amax = abs(v[j]);
            mx = v[j];
        }
    if (amax < 1e-30) return 0.0;
    float best_s = 0.0, best_score = -1.0;
    for (int k = -10; k <= 10; k++) {
        float id = kvq_div(float(IQ4NL[0] + k), mx);
        precise float sxv = 0.0, svv = 0.0;
        for (uint j = 0; j < 32; j++) {
            precise float t = id * v[j];
            float w = float(IQ4NL[kvq_iq4_nearest(t)]);
            precise float xw = v[j] * w, ww = w * w;
            sxv = sxv + xw;
            svv = svv + ww;
        }
        if (svv > 0.0) {
            precise float s2 = sxv * sxv;
            float score = kvq_div(s2, svv);
            if (score > best_score) {
                best_score = score;
                best_s = kvq_div(sxv, svv);
            }
        }
    }
    return best_s;
}

void kvq_put8(uint64_t p, uint x) { BU8(p).v[0] = uint8_t(x & 255u); }
void kvq_put16(uint64_t p, uint x) { BU16(p).v[0] = uint16_t(x & 0xffffu); }

// Writes 32 values as one block of cache type ty (kvq_block_type) at blk (2-aligned).
void kvq_store(uint ty, uint64_t blk, float v[32]) {
    if (ty == T_Q8_0) {
        float d;
        int q[32];
        kvq_q8_0(v, d, q);
        kvq_put16(blk, kvq_f16(d));
        for (uint j = 0; j < 32; j++) kvq_put8(blk + 2 + j, uint(q[j]));
        return;
    }
    if (ty == T_IQ4_NL) {
        uint dh = kvq_f16(kvq_iq4_fit(v));
        float dl = unpackHalf2x16(dh).x, id = dl != 0.0 ? kvq_div(1.0, dl) : 0.0;
        kvq_put16(blk, dh);
        for (uint j = 0; j < 16; j++) {
            precise float a = id * v[j], b = id * v[j + 16];
            kvq_put8(blk + 2 + j, kvq_iq4_nearest(a) | (kvq_iq4_nearest(b) << 4));
        }
        return;
    }
    // Q4_0 / Q5_0: the extreme value maps to -8 (-16); Q4_1 / Q5_1: [min, max] over 15 (31) steps
    bool five = ty == T_Q5_0 || ty == T_Q5_1, minv = ty == T_Q4_1 || ty == T_Q5_1;
    float qmax = five ? 31.0 : 15.0, d, mn = 0.0, off;
    if (minv) {
        float mx = v[0];
        mn = v[0];
        for (uint j = 1; j < 32; j++) {
            mn = kvq_fmin(mn, v[j]);
            mx = kvq_fmax(mx, v[j]);
        }
        precise float span = mx - mn;
        d = kvq_div(span, qmax);
        off = 0.5;
    } else {
        d = kvq_div(kvq_absmax(v), five ? -16.0 : -8.0);
        off = five ? 16.5 : 8.5;
    }
    float id = d != 0.0 ? kvq_div(1.0, d) : 0.0;
    kvq_put16(blk, kvq_f16(d));
    if (minv) kvq_put16(blk + 2, kvq_f16(mn));
    uint64_t qs = blk + (minv ? 4 : 2) + (five ? 4 : 0);
    uint qh = 0u;
    for (uint j = 0; j < 16; j++) {
        precise float x0 = minv ? (v[j] - mn) * id : v[j] * id, x1 = minv ? (v[j + 16] - mn) * id : v[j + 16] * id;
        precise float y0 = x0 + off, y1 = x1 + off;
        uint q0 = kvq_trunc(y0, qmax), q1 = kvq_trunc(y1, qmax);
        kvq_put8(qs + j, (q0 & 15u) | ((q1 & 15u) << 4));
        qh |= ((q0 >> 4) << j) | ((q1 >> 4) << (j + 16u));
    }
    if (five)
        for (uint k = 0; k < 4; k++) kvq_put8(qs - 4 + k, qh >> (8u * k));
}

// The 32 values of a block of type ty at blk, as the C reference dequantizes them.
void kvq_load(uint ty, uint64_t blk, out float v[32]) {
    float d = ld_f16(blk);
    if (ty == T_Q8_0) {
        for (uint j = 0; j < 32; j++) v[j] = float(ld_i8(blk + 2 + j)) * d;
        return;
    }
    bool five = ty == T_Q5_0 || ty == T_Q5_1, minv = ty == T_Q4_1 || ty == T_Q5_1;
    float m = minv ? ld_f16(blk + 2) : 0.0;
    uint64_t qs = blk + (minv ? 4 : 2) + (five ? 4 : 0);
    uint qh = five ? ld_u32(qs - 4) : 0u;
    for (uint j = 0; j < 16; j++) {
        uint b = ld_u8(qs + j), lo = (b & 15u) | (((qh >> j) & 1u) << 4), hi = (b >> 4) | (((qh >> (j + 16u)) & 1u) << 4);
        if (ty == T_IQ4_NL) {
            v[j] = d * float(IQ4NL[lo]);
            v[j + 16] = d * float(IQ4NL[hi]);
        } else if (minv) {
            precise float a = d * float(lo) + m, c = d * float(hi) + m;
            v[j] = a;
            v[j + 16] = c;
        } else {
            v[j] = d * float(int(lo) - (five ? 16 : 8));
            v[j + 16] = d * float(int(hi) - (five ? 16 : 8));
        }
    }
}

// Value j (< 32) of the block of type ty at blk (kvq_load's).
float kvq_at(uint ty, uint64_t blk, uint j) {
    float d = ld_f16(blk);
    if (ty == T_Q8_0) return float(ld_i8(blk + 2 + j)) * d;
    bool five = ty == T_Q5_0 || ty == T_Q5_1, minv = ty == T_Q4_1 || ty == T_Q5_1;
    uint64_t qs = blk + (minv ? 4 : 2) + (five ? 4 : 0);
    uint b = ld_u8(qs + j % 16u), q = j < 16u ? b & 15u : b >> 4;
    if (five) q |= ((ld_u32(qs - 4) >> j) & 1u) << 4;
    if (ty == T_IQ4_NL) return d * float(IQ4NL[q]);
    if (!minv) return d * float(int(q) - (five ? 16 : 8));
    precise float r = d * float(q) + ld_f16(blk + 2);
    return r;
}
#endif
