// Weight decoding for every supported type, chosen by a specialization constant so each
// pipeline is compiled for one type. Type ids are ggml's (see include/onebit.h).
// Plain types (F32/F16/BF16) decode one element at a time; block types decode a chunk of
// 32 consecutive elements (every block size here is a multiple of 32).
layout(constant_id = 0) const uint TYPE = 0;

#include "types.glsl"

const bool PLAIN = TYPE == T_F32 || TYPE == T_F16 || TYPE == T_BF16;

const bool IQ = TYPE == T_IQ2_XXS || TYPE == T_IQ2_XS || TYPE == T_IQ2_S || TYPE == T_IQ3_XXS ||
                TYPE == T_IQ3_S || TYPE == T_IQ1_S || TYPE == T_IQ1_M;
// Elements and bytes per block: the C type table's (src/format/quant.c), which the host
// gives every pipeline as specialization constants 10 and 11 (vk_backend.c, pipeline()).
layout(constant_id = 10) const uint BS = 1;
layout(constant_id = 11) const uint TS = 4;

layout(buffer_reference, std430, buffer_reference_align = 4) buffer BU32 { uint v[]; };

// Repacked weights (specialization constant 7; vk_repack.c): the Vulkan backend stores the
// model weights of Q6_K, TQ2_0, Q1_0 and Q8_0 whose rows hold a multiple of 8 blocks in
// groups of 8 blocks: the 8 blocks less their f16 d ("bodies", in order), then the 8 d's.
// A group keeps 8 * TS bytes, so rows start where they did, and the bodies (208, 64, 16 and
// 32 bytes) are 16-aligned. wblk(row, b) is the address from which block b's other bytes
// keep their offsets (its body, or 2 bytes before it where d came first), wd(row, b) its d.
layout(constant_id = 7) const bool RP = false;
const uint DPOS = TYPE == T_Q6_K ? 208 : TYPE == T_TQ2_0 ? 64 : 0; // d in a plain block
uint64_t wblk(uint64_t row, uint b) {
    if (!RP) return row + uint64_t(b) * TS;
    return row + uint64_t(b / 8) * (8 * TS) + uint64_t((b % 8) * (TS - 2)) - (DPOS == 0 ? 2ul : 0ul);
}
uint64_t wd(uint64_t row, uint b) {
    if (!RP) return row + uint64_t(b) * TS + DPOS;
    return row + uint64_t(b / 8) * (8 * TS) + uint64_t(8 * (TS - 2) + 2 * (b % 8));
}

// Wide loads. Weight rows start at 256-byte aligned tensors and blocks are whole, so a
// block starts 4-aligned when its size is a multiple of 4 and 2-aligned otherwise (every
// type decoded through these has an even block size). One 32-bit load per 4 bytes where
// that alignment allows, else two 16-bit loads; the byte loads of common.glsl cost one
// load instruction per byte.
const bool W4 = TS % 4 == 0 || RP; // repacked bodies are 16-aligned
uint ld_w(uint64_t p) {
    if (W4) return BU32(p).v[0];
    BU16 h = BU16(p);
    return uint(h.v[0]) | (uint(h.v[1]) << 16);
}
float ld_h(uint64_t p) { return unpackHalf2x16(uint(BU16(p).v[0])).x; }
// Byte i (unsigned / signed) of little-endian words w.
#define WB(w, i) ((w[(i) >> 2] >> (8u * ((i) & 3u))) & 255u)
#define WSB(w, i) bitfieldExtract(int(w[(i) >> 2]), int(8u * ((i) & 3u)), 8)

const int MXFP4V[16] = int[16](0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
const uint POW3[5] = uint[5](1, 3, 9, 27, 81);

float dq_elem(uint64_t row, uint i) {
    if (TYPE == T_F32) return BF32(row).v[i];
    uint h = uint(BU16(row).v[i]);
    return TYPE == T_F16 ? unpackHalf2x16(h).x : uintBitsToFloat(h << 16);
}

// IQ lattices. vk_iq.c packs the tables of src/format/quant_iq_grids.h into one device
// buffer (address in pc.e) in this order and layout:
//   IQ2 grids  one point = 2 words, byte j of the pair is coordinate j
//   IQ3 grids  one point = 1 word
//   IQ1 grid   one point = 16 bits (2-bit codes, coordinate + 1), two points per word
// They come through a buffer, not GLSL constant arrays: lavapipe took up to 80 s to build
// one pipeline holding a 2048-word constant array. Each workgroup copies its type's table
// into shared memory once; the array is sized by TYPE, so other types pay one word.
const uint IQ_TAB_N = TYPE == T_IQ2_XXS ? 512 : TYPE == T_IQ2_XS ? 1024 : TYPE == T_IQ2_S ? 2048 :
                      TYPE == T_IQ3_XXS ? 256 : TYPE == T_IQ3_S ? 512 :
                      TYPE == T_IQ1_S || TYPE == T_IQ1_M ? 1024 : 1;
const uint IQ_TAB_OFF = TYPE == T_IQ2_XXS ? 0 : TYPE == T_IQ2_XS ? 512 : TYPE == T_IQ2_S ? 1536 :
                        TYPE == T_IQ3_XXS ? 3584 : TYPE == T_IQ3_S ? 3840 : 4352; // words
shared uint iq_tab[IQ_TAB_N];

// Every invocation of the workgroup must call this before dq_chunk (it has a barrier).
void iq_init(uint tid, uint nthreads) {
    if (!IQ) return;
    BU32 src = BU32(pc.e + 4ul * IQ_TAB_OFF);
    for (uint i = tid; i < IQ_TAB_N; i += nthreads) iq_tab[i] = src.v[i];
    barrier();
}

// 7 stored sign bits plus the parity bit that makes the count of minus signs even.
uint iq_signs(uint s7) { return s7 | ((bitCount(s7) & 1u) << 7); }
float iq_sgn(uint signs, uint j) { return ((signs >> j) & 1u) != 0u ? -1.0 : 1.0; }
// Coordinate j (0..7) of point k of an IQ2 grid; j (0..3) of an IQ3 grid.
float iq2_at(uint k, uint j) { return float((iq_tab[2 * k + j / 4] >> (8 * (j % 4))) & 255u); }
float iq3_at(uint k, uint j) { return float((iq_tab[k] >> (8 * j)) & 255u); }
// Coordinate j of point k of the IQ1 grid, -1 / 0 / 1.
float iq1_at(uint k, uint j) { return float(int((iq_tab[k / 2] >> (16 * (k % 2) + 2 * j)) & 3u) - 1); }

uint trit(uint byte, uint k) { return (((byte * POW3[k]) & 255u) * 3u) >> 8; }

// Chunk c (elements 32c .. 32c+31) of a row of a block type starting at address row.
void dq_chunk(uint64_t row, uint c, out float v[32]) {
    const uint per = BS / 32;
    const uint bi = c / per;
    uint64_t blk = wblk(row, bi);
    uint s = c % per; // 32-element sub-block inside the block
    if (TYPE == T_Q4_0 || TYPE == T_IQ4_NL) {
        float d = ld_h(blk);
        uint w[4];
        for (uint i = 0; i < 4; i++) w[i] = ld_w(blk + 2 + 4 * i);
        for (uint j = 0; j < 16; j++) {
            uint q = WB(w, j);
            if (TYPE == T_Q4_0) { v[j] = d * float(int(q & 15u) - 8); v[j + 16] = d * float(int(q >> 4) - 8); }
            else { v[j] = d * float(IQ4NL[q & 15u]); v[j + 16] = d * float(IQ4NL[q >> 4]); }
        }
    } else if (TYPE == T_Q4_1) {
        float d = ld_f16(blk), m = ld_f16(blk + 2);
        for (uint j = 0; j < 16; j++) {
            uint q = ld_u8(blk + 4 + j);
            v[j] = d * float(q & 15u) + m;
            v[j + 16] = d * float(q >> 4) + m;
        }
    } else if (TYPE == T_Q5_0 || TYPE == T_Q5_1) {
        bool one = TYPE == T_Q5_1;
        float d = ld_f16(blk), m = one ? ld_f16(blk + 2) : 0.0;
        uint qh = ld_u32(blk + (one ? 4 : 2));
        uint64_t qs = blk + (one ? 8 : 6);
        for (uint j = 0; j < 16; j++) {
            uint q = ld_u8(qs + j);
            uint lo = (q & 15u) | (((qh >> j) & 1u) << 4), hi = (q >> 4) | (((qh >> (j + 16)) & 1u) << 4);
            if (one) { v[j] = d * float(lo) + m; v[j + 16] = d * float(hi) + m; }
            else { v[j] = d * float(int(lo) - 16); v[j + 16] = d * float(int(hi) - 16); }
        }
    } else if (TYPE == T_Q8_0 || TYPE == T_Q8_1) {
        float d = ld_h(wd(row, bi));
        uint64_t qs = blk + (TYPE == T_Q8_0 ? 2 : 4);
        uint w[8];
        for (uint i = 0; i < 8; i++) w[i] = ld_w(qs + 4 * i);
        for (uint j = 0; j < 32; j++) v[j] = d * float(WSB(w, j));
    } else if (TYPE == T_Q8_K) {
        float d = uintBitsToFloat(ld_u32(blk));
        for (uint j = 0; j < 32; j++) v[j] = d * float(ld_i8(blk + 4 + 32 * s + j));
    } else if (TYPE == T_Q2_K) {
        vec2 dm = unpackHalf2x16(ld_w(blk + 80));
        float d = dm.x, dmin = dm.y;
        uint w[8];
        for (uint i = 0; i < 8; i++) w[i] = ld_w(blk + 16 + (s / 4) * 32 + 4 * i);
        uint scw = ld_w(blk + 4 * (s / 2)) >> (16 * (s % 2));
        for (uint h = 0; h < 2; h++) {
            uint sc = (scw >> (8 * h)) & 255u;
            float dl = d * float(sc & 15u), ml = dmin * float(sc >> 4);
            for (uint j = 16 * h; j < 16 * h + 16; j++) {
                uint q = (WB(w, j) >> (2 * (s % 4))) & 3u;
                v[j] = dl * float(q) - ml;
            }
        }
    } else if (TYPE == T_Q3_K) {
        float d = ld_f16(blk + 108);
        for (uint h = 0; h < 2; h++) {
            uint i = 2 * s + h;
            uint lo = (ld_u8(blk + 96 + i % 8) >> (4 * (i / 8))) & 15u;
            uint hi = (ld_u8(blk + 96 + 8 + i % 4) >> (2 * (i / 4))) & 3u;
            float dl = d * float(int(lo | (hi << 4)) - 32);
            for (uint j = 16 * h; j < 16 * h + 16; j++) {
                uint q = (ld_u8(blk + 32 + (s / 4) * 32 + j) >> (2 * (s % 4))) & 3u;
                uint hb = (ld_u8(blk + j) >> s) & 1u;
                v[j] = dl * float(int(q) - (hb != 0u ? 0 : 4));
            }
        }
    } else if (TYPE == T_Q4_K || TYPE == T_Q5_K) {
        bool five = TYPE == T_Q5_K;
        vec2 dm = unpackHalf2x16(ld_w(blk));
        uint sw[3];
        for (uint i = 0; i < 3; i++) sw[i] = ld_w(blk + 4 + 4 * i);
        // 6-bit scale and min of sub-block s from the 12 packed bytes
        float sc, m;
        if (s < 4) {
            sc = float(WB(sw, s) & 63u);
            m = float(WB(sw, s + 4) & 63u);
        } else {
            sc = float((WB(sw, s + 4) & 15u) | ((WB(sw, s - 4) >> 6) << 4));
            m = float((WB(sw, s + 4) >> 4) | ((WB(sw, s) >> 6) << 4));
        }
        float dl = dm.x * sc, ml = dm.y * m;
        uint64_t qs = blk + (five ? 48 : 16) + (s / 2) * 32;
        uint w[8], hw[8];
        for (uint i = 0; i < 8; i++) w[i] = ld_w(qs + 4 * i);
        if (five) for (uint i = 0; i < 8; i++) hw[i] = ld_w(blk + 16 + 4 * i);
        for (uint j = 0; j < 32; j++) {
            uint q = (WB(w, j) >> (4 * (s % 2))) & 15u;
            if (five) q |= ((WB(hw, j) >> s) & 1u) << 4;
            v[j] = dl * float(q) - ml;
        }
    } else if (TYPE == T_Q6_K) {
        // sub-block s: low nibbles from 32 bytes of ql, 2 high bits from 32 bytes of qh
        float d = ld_h(wd(row, bi));
        uint g = s / 4, lw[8], hw[8];
        for (uint i = 0; i < 8; i++) lw[i] = ld_w(blk + 64 * g + 32 * (s % 2) + 4 * i);
        for (uint i = 0; i < 8; i++) hw[i] = ld_w(blk + 128 + 32 * g + 4 * i);
        uint scw = uint(BU16(blk + 192 + 2 * s).v[0]);
        float d0 = d * float(bitfieldExtract(int(scw), 0, 8)), d1 = d * float(bitfieldExtract(int(scw), 8, 8));
        for (uint j = 0; j < 32; j++) {
            uint lo = (WB(lw, j) >> (4 * ((s % 4) / 2))) & 15u;
            uint hi = (WB(hw, j) >> (2 * (s % 4))) & 3u;
            v[j] = (j < 16 ? d0 : d1) * float(int(lo | (hi << 4)) - 32);
        }
    } else if (TYPE == T_IQ4_XS) {
        float d = ld_f16(blk);
        uint lo = (ld_u8(blk + 4 + s / 2) >> (4 * (s % 2))) & 15u;
        uint hi = (ld_u16(blk + 2) >> (2 * s)) & 3u;
        float dl = d * float(int(lo | (hi << 4)) - 32);
        for (uint j = 0; j < 16; j++) {
            uint q = ld_u8(blk + 8 + 16 * s + j);
            v[j] = dl * float(IQ4NL[q & 15u]);
            v[j + 16] = dl * float(IQ4NL[q >> 4]);
        }
    } else if (TYPE == T_TQ1_0) {
        float d = ld_f16(blk + 52);
        for (uint j = 0; j < 32; j++) {
            uint e = 32 * s + j, t;
            if (e < 160) t = trit(ld_u8(blk + e % 32), e / 32);
            else if (e < 240) t = trit(ld_u8(blk + 32 + (e - 160) % 16), (e - 160) / 16);
            else t = trit(ld_u8(blk + 48 + (e - 240) % 4), (e - 240) / 4);
            v[j] = d * float(int(t) - 1);
        }
    } else if (TYPE == T_TQ2_0) {
        float d = ld_h(wd(row, bi));
        uint w[8];
        for (uint i = 0; i < 8; i++) w[i] = ld_w(blk + 32 * (s / 4) + 4 * i);
        for (uint j = 0; j < 32; j++) {
            uint q = (WB(w, j) >> (2 * (s % 4))) & 3u;
            v[j] = d * float(int(q) - 1);
        }
    } else if (TYPE == T_Q1_0) {
        float d = ld_h(wd(row, bi));
        uint bits = ld_w(blk + 2 + 4 * s);
        for (uint j = 0; j < 32; j++) v[j] = ((bits >> j) & 1u) != 0u ? d : -d;
    } else if (TYPE == T_MXFP4) {
        uint e = ld_u8(blk);
        float d = uintBitsToFloat(e < 2u ? (0x00200000u << e) : ((e - 1u) << 23));
        for (uint j = 0; j < 16; j++) {
            uint q = ld_u8(blk + 1 + j);
            v[j] = d * float(MXFP4V[q & 15u]);
            v[j + 16] = d * float(MXFP4V[q >> 4]);
        }
    } else if (TYPE == T_IQ2_XXS || TYPE == T_IQ3_XXS) {
        // 8 bytes of point indices (IQ3: 8 points of 4), then a u32: 4x7 sign bits, 4-bit scale
        bool two = TYPE == T_IQ2_XXS;
        float d = ld_f16(blk);
        uint aux = ld_u32(blk + (two ? 2 + 8 * s + 4 : 2 + 64 + 4 * s));
        float db = d * (0.5 + float(aux >> 28)) * (two ? 0.25 : 0.5);
        for (uint l = 0; l < 4; l++) {
            uint sg = iq_signs((aux >> (7 * l)) & 127u);
            for (uint j = 0; j < 8; j++) {
                float g = two ? iq2_at(ld_u8(blk + 2 + 8 * s + l), j) : iq3_at(ld_u8(blk + 2 + 8 * s + 2 * l + j / 4), j % 4);
                v[8 * l + j] = db * g * iq_sgn(sg, j);
            }
        }
    } else if (TYPE == T_IQ2_XS || TYPE == T_IQ2_S) {
        // 4 groups of 8: a 9- or 10-bit point index and 8 signs each; a 4-bit scale per 16
        float d = ld_f16(blk);
        uint sc = ld_u8(blk + (TYPE == T_IQ2_XS ? 66 : 74) + s);
        for (uint l = 0; l < 4; l++) {
            uint g = 4 * s + l, k, sg;
            if (TYPE == T_IQ2_XS) {
                uint q = ld_u16(blk + 2 + 2 * g);
                k = q & 511u;
                sg = iq_signs(q >> 9);
            } else {
                k = ld_u8(blk + 2 + g) | (((ld_u8(blk + 66 + s) >> (2 * l)) & 3u) << 8);
                sg = ld_u8(blk + 34 + g);
            }
            float db = d * (0.5 + float((sc >> (4 * (l / 2))) & 15u)) * 0.25;
            for (uint j = 0; j < 8; j++) v[8 * l + j] = db * iq2_at(k, j) * iq_sgn(sg, j);
        }
    } else if (TYPE == T_IQ3_S) {
        // 8 groups of 4: 8 low index bits + 1 high bit, one sign byte per 8 values
        float d = ld_f16(blk);
        float db = d * float(1u + 2u * ((ld_u8(blk + 106 + s / 2) >> (4 * (s % 2))) & 15u));
        uint qh = ld_u8(blk + 66 + s);
        for (uint l = 0; l < 8; l++) {
            uint k = ld_u8(blk + 2 + 8 * s + l) | (((qh >> l) & 1u) << 8);
            uint sg = ld_u8(blk + 74 + 4 * s + l / 2) >> (4 * (l % 2));
            for (uint j = 0; j < 4; j++) v[4 * l + j] = db * iq3_at(k, j) * iq_sgn(sg, j);
        }
    } else if (TYPE == T_IQ1_S) {
        // qh: 4x3 high index bits, a 3-bit scale, the delta's sign in the top bit
        float d = ld_f16(blk);
        uint qh = ld_u16(blk + 34 + 2 * s);
        float dl = d * float(2u * ((qh >> 12) & 7u) + 1u), delta = (qh & 0x8000u) != 0u ? -0.125 : 0.125;
        for (uint l = 0; l < 4; l++) {
            uint k = ld_u8(blk + 2 + 4 * s + l) | (((qh >> (3 * l)) & 7u) << 8);
            for (uint j = 0; j < 8; j++) v[8 * l + j] = dl * (iq1_at(k, j) + delta);
        }
    } else if (TYPE == T_IQ1_M) {
        // The f16 block scale lives in the top nibbles of the four scale words; a 3-bit
        // scale per 16 values; one qh nibble per 8 (3 index bits, delta sign).
        uint s0 = ld_u16(blk + 48), s1 = ld_u16(blk + 50), s2 = ld_u16(blk + 52), s3 = ld_u16(blk + 54);
        float d = unpackHalf2x16((s0 >> 12) | ((s1 >> 8) & 0xf0u) | ((s2 >> 4) & 0xf00u) | (s3 & 0xf000u)).x;
        uint sw = ld_u16(blk + 48 + 2 * (s / 2));
        for (uint l = 0; l < 4; l++) {
            uint g = 4 * s + l, jj = g / 2;
            float dl = d * float(2u * ((sw >> (3 * (jj % 4))) & 7u) + 1u);
            uint nib = (ld_u8(blk + 32 + g / 2) >> (4 * (g % 2))) & 15u;
            float delta = (nib & 8u) != 0u ? -0.125 : 0.125;
            uint k = ld_u8(blk + g) | ((nib & 7u) << 8);
            for (uint j = 0; j < 8; j++) v[8 * l + j] = dl * (iq1_at(k, j) + delta);
        }
    } else {
        for (uint j = 0; j < 32; j++) v[j] = 0.0;
    }
}
