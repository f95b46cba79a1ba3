// Loads from 2-aligned addresses (blocks of 34, 18, 66 and 210 bytes in 4-aligned rows): 32-bit
// words are read at the aligned address below and shifted together, never past a word that
// holds a byte of the data, so no read leaves the tensor's allocation. Needs BU32 and RP
// (dequant.glsl).
// Inside a block body of repacked weights (dequant.glsl's RP: 16-aligned bodies, the
// offsets the readers use 16-, 8- or 4-aligned within them) the same loads are whole ones.
layout(buffer_reference, std430, buffer_reference_align = 16) buffer BL4 { uvec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer BL2 { uvec2 v[]; };

// 4 bytes.
uint ld4(uint64_t p) {
    if (RP) return BU32(p).v[0];
    uint64_t a = p & ~3ul;
    bool m = (p & 2ul) != 0ul;
    uint w0 = BU32(a).v[0], w1 = BU32(m ? a + 4ul : a).v[0];
    return m ? (w0 >> 16) | (w1 << 16) : w0;
}
// 8 bytes.
uvec2 ld8(uint64_t p) {
    if (RP) return BL2(p).v[0];
    uint64_t a = p & ~3ul;
    bool m = (p & 2ul) != 0ul;
    uint w0 = BU32(a).v[0], w1 = BU32(a + 4ul).v[0], w2 = BU32(m ? a + 8ul : a + 4ul).v[0];
    return m ? uvec2((w0 >> 16) | (w1 << 16), (w1 >> 16) | (w2 << 16)) : uvec2(w0, w1);
}
// 16 and 32 bytes as words: N words from N + 1 (GLSL has no array-length-generic
// function, so one macro defines both).
#define LD_WORDS(NAME, N)                                                              \
    void NAME(uint64_t p, out uint w[N]) {                                             \
        if (RP) {                                                                      \
            for (uint i = 0; i < N / 4; i++) {                                         \
                uvec4 q = BL4(p + 16 * i).v[0];                                        \
                for (uint k = 0; k < 4; k++) w[4 * i + k] = q[k];                      \
            }                                                                          \
            return;                                                                    \
        }                                                                              \
        uint64_t a = p & ~3ul;                                                         \
        bool m = (p & 2ul) != 0ul;                                                     \
        uint v[N + 1];                                                                 \
        for (uint i = 0; i < N; i++) v[i] = BU32(a + 4 * i).v[0];                     \
        v[N] = BU32(m ? a + 4 * N : a + 4 * N - 4).v[0];                               \
        for (uint i = 0; i < N; i++) w[i] = m ? (v[i] >> 16) | (v[i + 1] << 16) : v[i]; \
    }
LD_WORDS(ld16, 4)
LD_WORDS(ld32, 8)
// f16.
float ldh2(uint64_t p) { return unpackHalf2x16(BU32(p & ~3ul).v[0] >> (8u * uint(p & 2ul))).x; }

