// Weight decoding for every supported type, chosen by a specialization constant so each
// pipeline is compiled for one type. Type ids are ggml's (see include/onebit.h).
// Plain types (F32/F16/BF16) decode one element at a time; block types decode a chunk of
// 32 consecutive elements (every block size here is a multiple of 32).
layout(constant_id = 0) const uint TYPE = 0;

const uint T_F32 = 0, T_F16 = 1, T_Q4_0 = 2, T_Q4_1 = 3, T_Q5_0 = 6, T_Q5_1 = 7, T_Q8_0 = 8,
           T_Q8_1 = 9, T_Q2_K = 10, T_Q3_K = 11, T_Q4_K = 12, T_Q5_K = 13, T_Q6_K = 14,
           T_Q8_K = 15, T_IQ4_NL = 20, T_IQ4_XS = 23, T_BF16 = 30, T_TQ1_0 = 34, T_TQ2_0 = 35,
           T_MXFP4 = 39, T_Q1_0 = 41;

const bool PLAIN = TYPE == T_F32 || TYPE == T_F16 || TYPE == T_BF16;

// Elements and bytes per block.
const uint BS = TYPE == T_Q2_K || TYPE == T_Q3_K || TYPE == T_Q4_K || TYPE == T_Q5_K ||
                TYPE == T_Q6_K || TYPE == T_Q8_K || TYPE == T_IQ4_XS || TYPE == T_TQ1_0 ||
                TYPE == T_TQ2_0 ? 256 : TYPE == T_Q1_0 ? 128 : PLAIN ? 1 : 32;
const uint TS = TYPE == T_F32 ? 4 : TYPE == T_F16 || TYPE == T_BF16 ? 2 :
                TYPE == T_Q4_0 ? 18 : TYPE == T_Q4_1 ? 20 : TYPE == T_Q5_0 ? 22 :
                TYPE == T_Q5_1 ? 24 : TYPE == T_Q8_0 ? 34 : TYPE == T_Q8_1 ? 36 :
                TYPE == T_Q2_K ? 84 : TYPE == T_Q3_K ? 110 : TYPE == T_Q4_K ? 144 :
                TYPE == T_Q5_K ? 176 : TYPE == T_Q6_K ? 210 : TYPE == T_Q8_K ? 292 :
                TYPE == T_IQ4_NL ? 18 : TYPE == T_IQ4_XS ? 136 : TYPE == T_TQ1_0 ? 54 :
                TYPE == T_TQ2_0 ? 66 : TYPE == T_MXFP4 ? 17 : TYPE == T_Q1_0 ? 18 : 0;

const int IQ4NL[16] = int[16](-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
const int MXFP4V[16] = int[16](0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
const uint POW3[5] = uint[5](1, 3, 9, 27, 81);

float dq_elem(uint64_t row, uint i) {
    if (TYPE == T_F32) return uintBitsToFloat(ld_u32(row + 4ul * i));
    if (TYPE == T_F16) return ld_f16(row + 2ul * i);
    return ld_bf16(row + 2ul * i);
}

// 6-bit scale and min of sub-block j of Q4_K / Q5_K (12 packed bytes at s).
void k4_scale_min(uint64_t s, uint j, out float sc, out float m) {
    if (j < 4) {
        sc = float(ld_u8(s + j) & 63u);
        m = float(ld_u8(s + j + 4) & 63u);
    } else {
        sc = float((ld_u8(s + j + 4) & 15u) | ((ld_u8(s + j - 4) >> 6) << 4));
        m = float((ld_u8(s + j + 4) >> 4) | ((ld_u8(s + j) >> 6) << 4));
    }
}

uint trit(uint byte, uint k) { return (((byte * POW3[k]) & 255u) * 3u) >> 8; }

// Chunk c (elements 32c .. 32c+31) of a row of a block type starting at address row.
void dq_chunk(uint64_t row, uint c, out float v[32]) {
    const uint per = BS / 32;
    uint64_t blk = row + uint64_t(c / per) * TS;
    uint s = c % per; // 32-element sub-block inside the block
    if (TYPE == T_Q4_0 || TYPE == T_IQ4_NL) {
        float d = ld_f16(blk);
        for (uint j = 0; j < 16; j++) {
            uint q = ld_u8(blk + 2 + j);
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
        float d = ld_f16(blk);
        uint64_t qs = blk + (TYPE == T_Q8_0 ? 2 : 4);
        for (uint j = 0; j < 32; j++) v[j] = d * float(ld_i8(qs + j));
    } else if (TYPE == T_Q8_K) {
        float d = uintBitsToFloat(ld_u32(blk));
        for (uint j = 0; j < 32; j++) v[j] = d * float(ld_i8(blk + 4 + 32 * s + j));
    } else if (TYPE == T_Q2_K) {
        float d = ld_f16(blk + 80), dmin = ld_f16(blk + 82);
        for (uint h = 0; h < 2; h++) {
            uint sc = ld_u8(blk + 2 * s + h);
            float dl = d * float(sc & 15u), ml = dmin * float(sc >> 4);
            for (uint j = 16 * h; j < 16 * h + 16; j++) {
                uint q = (ld_u8(blk + 16 + (s / 4) * 32 + j) >> (2 * (s % 4))) & 3u;
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
        float d = ld_f16(blk), dmin = ld_f16(blk + 2), sc, m;
        k4_scale_min(blk + 4, s, sc, m);
        float dl = d * sc, ml = dmin * m;
        uint64_t qs = blk + (five ? 48 : 16);
        for (uint j = 0; j < 32; j++) {
            uint q = (ld_u8(qs + (s / 2) * 32 + j) >> (4 * (s % 2))) & 15u;
            if (five) q |= ((ld_u8(blk + 16 + j) >> s) & 1u) << 4;
            v[j] = dl * float(q) - ml;
        }
    } else if (TYPE == T_Q6_K) {
        float d = ld_f16(blk + 208);
        uint g = s / 4;
        for (uint j = 0; j < 32; j++) {
            uint r = 32 * (s % 4) + j;
            uint lo = (ld_u8(blk + 64 * g + r % 64) >> (4 * (r / 64))) & 15u;
            uint hi = (ld_u8(blk + 128 + 32 * g + r % 32) >> (2 * (r / 32))) & 3u;
            v[j] = d * float(ld_i8(blk + 192 + 2 * s + j / 16)) * float(int(lo | (hi << 4)) - 32);
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
        float d = ld_f16(blk + 64);
        for (uint j = 0; j < 32; j++) {
            uint q = (ld_u8(blk + 32 * (s / 4) + j) >> (2 * (s % 4))) & 3u;
            v[j] = d * float(int(q) - 1);
        }
    } else if (TYPE == T_Q1_0) {
        float d = ld_f16(blk);
        for (uint j = 0; j < 32; j++) {
            uint e = 32 * s + j;
            v[j] = ((ld_u8(blk + 2 + e / 8) >> (e % 8)) & 1u) != 0u ? d : -d;
        }
    } else if (TYPE == T_MXFP4) {
        uint e = ld_u8(blk);
        float d = uintBitsToFloat(e < 2u ? (0x00200000u << e) : ((e - 1u) << 23));
        for (uint j = 0; j < 16; j++) {
            uint q = ld_u8(blk + 1 + j);
            v[j] = d * float(MXFP4V[q & 15u]);
            v[j + 16] = d * float(MXFP4V[q >> 4]);
        }
    } else {
        for (uint j = 0; j < 32; j++) v[j] = 0.0;
    }
}
