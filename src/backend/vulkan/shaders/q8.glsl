// int8 activations as matvec_q8.comp reads them: per block of 32 elements (16 with
// q8_vec4_16), d = max|x| / 127 and q = roundEven(x / d) in [-127, 127] (d = 0: q = 0); qx
// holds the q as bytes, dx the pair (d, d * sum(q)) per block. quant_x.comp does it for a
// whole x; q8_vec4 lets a shader that holds x four elements per invocation quantize as it
// writes.
layout(buffer_reference, std430, buffer_reference_align = 4) buffer BQ8W { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer BQ8D { vec2 v[]; };

// The scale of a block whose largest |x| is amax is amax / 127; q8_id gives 1 / scale
// (0 for an all-zero block) and q8_round the codes of four of its elements.
float q8_id(float amax) { return amax > 0.0 ? 127.0 / amax : 0.0; }
ivec4 q8_round(vec4 x, float id) { return clamp(ivec4(roundEven(x * id)), ivec4(-127), ivec4(127)); }

uint q8_pack(ivec4 q) {
    return (uint(q.x) & 255u) | ((uint(q.y) & 255u) << 8) | ((uint(q.z) & 255u) << 16) | (uint(q.w) << 24);
}

// One whole block held by one invocation: its 8 words of qx at qx, its dx pair at dx.
void q8_block(float x[32], uint64_t qx, uint64_t dx) {
    float am = 0.0;
    for (uint i = 0; i < 32; i++) am = max(am, abs(x[i]));
    float id = q8_id(am);
    int s = 0;
    for (uint w = 0; w < 8; w++) {
        ivec4 q = q8_round(vec4(x[4 * w], x[4 * w + 1], x[4 * w + 2], x[4 * w + 3]), id);
        s += q.x + q.y + q.z + q.w;
        BQ8W(qx).v[w] = q8_pack(q);
    }
    float d = am / 127.0;
    BQ8D(dx).v[0] = vec2(d, d * float(s));
}

#ifdef Q8_SHUFFLE
layout(buffer_reference, std430, buffer_reference_align = 4) buffer BQ8F { float v[]; };
// X16's order of the scales (a float per 16-element block): block c of 256-element block
// b = c / 16 (its half g, 32-run r and 16-half h: c % 16 = 8g + 2r + h) at 16b + 8g + 4h +
// r, the order the TQ2_0 and Q6_K units read them, so a unit's four are one vec4.
uint x16_slot(uint c) { return (c & ~15u) | (c & 8u) | ((c & 1u) << 2) | ((c >> 1) & 3u); }

// Elements 4i .. 4i + 3 of a row, y, held by invocation lane of a subgroup where the L
// invocations of one block (L 8: 32 elements; L 4: X16's 16) are lanes Lj .. Lj + L - 1
// (i % L == lane % L). Every invocation of the subgroup must call this (shuffles); live:
// whether i is in the row. Writes word i of qx (at qx) and, from the block's first lane,
// its scale: L 8 the pair (d, d * sum(q)) of block i / 8 at dx, L 4 d at x16_slot(i / 4).
void q8_vec4_l(vec4 y, bool live, uint i, uint64_t qx, uint64_t dx, uint L) {
    vec4 a = abs(y);
    float am = max(max(a.x, a.y), max(a.z, a.w));
    for (uint m = 1u; m < L; m <<= 1) am = max(am, subgroupShuffleXor(am, m));
    float d = am / 127.0;
    ivec4 q = q8_round(y, q8_id(am));
    int s = q.x + q.y + q.z + q.w;
    for (uint m = 1u; m < L; m <<= 1) s += subgroupShuffleXor(s, m);
    if (live) {
        BQ8W(qx).v[i] = q8_pack(q);
        if (L == 8u && (i & 7u) == 0u) BQ8D(dx).v[i / 8] = vec2(d, d * float(s));
        if (L == 4u && (i & 3u) == 0u) BQ8F(dx).v[x16_slot(i / 4)] = d;
    }
}
void q8_vec4(vec4 y, bool live, uint i, uint64_t qx, uint64_t dx) { q8_vec4_l(y, live, i, qx, dx, 8u); }
void q8_vec4_16(vec4 y, bool live, uint i, uint64_t qx, uint64_t dx) { q8_vec4_l(y, live, i, qx, dx, 4u); }
#endif
