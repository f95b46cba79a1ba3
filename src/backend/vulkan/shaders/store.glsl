// Writes 32 floats (chunk c of a row) in a destination type: 0 F32, 1 F16, 30 BF16, 8 Q8_0.
// Q8_0 quantizes as the CPU reference does, bit for bit (kvq.glsl).
#include "kvq.glsl"
void store_chunk(uint dtype, uint64_t row, uint c, float v[32], uint nvalid) {
    if (dtype == 8u) {
        kvq_store(T_Q8_0, row + uint64_t(c) * 34, v);
        return;
    }
    for (uint j = 0; j < nvalid; j++) {
        uint e = 32 * c + j;
        if (dtype == 0u) BF32(row).v[e] = v[j];
        else if (dtype == 1u) BU16(row).v[e] = uint16_t(packHalf2x16(vec2(v[j], 0.0)) & 0xffffu);
        else {
            uint b = floatBitsToUint(v[j]);
            uint h = (b & 0x7fffffffu) > 0x7f800000u ? ((b >> 16) | 64u) : ((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
            BU16(row).v[e] = uint16_t(h);
        }
    }
}
