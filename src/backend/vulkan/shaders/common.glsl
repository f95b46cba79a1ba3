// Shared by every shader: tensors are reached through buffer device addresses (the
// backend's "pointers" are device addresses, so the engine's pointer arithmetic holds),
// and every dispatch gets the same push-constant block.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(buffer_reference, std430, buffer_reference_align = 4) buffer BF32 { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer BI32 { int v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer BU16 { uint16_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 1) buffer BU8 { uint8_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 1) buffer BI8 { int8_t v[]; };

// a..e: source addresses, o: destination; u/f: per-op integer and float parameters.
// Mirrors ob_vk_pc in vk_internal.h (112 bytes).
layout(push_constant) uniform PC {
    uint64_t a, b, c, d, e, o;
    uint u[12];
    float f[4];
} pc;

// Workgroups beyond 65535 are laid out in 2D; u[11] is always the x extent.
uint group_id() { return gl_WorkGroupID.y * pc.u[11] + gl_WorkGroupID.x; }

uint ld_u8(uint64_t p) { return uint(BU8(p).v[0]); }
int ld_i8(uint64_t p) { return int(BI8(p).v[0]); }
uint ld_u16(uint64_t p) { return ld_u8(p) | (ld_u8(p + 1) << 8); }
uint ld_u32(uint64_t p) { return ld_u16(p) | (ld_u16(p + 2) << 16); }
float ld_f16(uint64_t p) { return unpackHalf2x16(ld_u16(p)).x; }
float ld_bf16(uint64_t p) { return uintBitsToFloat(ld_u16(p) << 16); }

// Sum / max over the whole workgroup: subgroup op, then one value per subgroup in shared
// memory. Every invocation must call these (they contain barriers).
#define OB_MAX_SG 64
shared float ob_red[OB_MAX_SG];
float wg_sum(float v) {
    v = subgroupAdd(v);
    if (subgroupElect()) ob_red[gl_SubgroupID] = v;
    barrier();
    float s = 0.0;
    for (uint i = 0; i < gl_NumSubgroups; i++) s += ob_red[i];
    barrier();
    return s;
}
float wg_max(float v) {
    v = subgroupMax(v);
    if (subgroupElect()) ob_red[gl_SubgroupID] = v;
    barrier();
    float s = ob_red[0];
    for (uint i = 1; i < gl_NumSubgroups; i++) s = max(s, ob_red[i]);
    barrier();
    return s;
}

// cos and sin of a rope angle (up to ~1e5 rad at long contexts). GPU sin/cos are accurate
// near [-pi, pi] but reduce large arguments coarsely (NVIDIA's driver: ~1e-4 at 511 rad),
// so the angle is reduced first by 2*pi in two parts (Cody-Waite: the high part has 8
// significant bits, so k * hi is exact for k < 2^16), leaving ~1e-6 rad of error.
void rope_cos_sin(float th, out float cs, out float sn) {
    float k = round(th * 0.15915494309189535);
    float r = fma(-k, 6.28125, th);
    r = fma(-k, 1.9353071795864769e-3, r);
    cs = cos(r);
    sn = sin(r);
}
