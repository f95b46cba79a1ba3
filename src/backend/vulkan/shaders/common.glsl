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

// The push constants: pc.glsl's fields, the same names and offsets as ob_vk_pc in C.
#include "pc.glsl"
layout(push_constant) uniform PC { OB_VK_PC_FIELDS(uint) } pc;

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

// Rope angles to double-like precision in float arithmetic. The reference computes
// theta = pos * fs * base^(-2i/n_rot) / ff[i] in double (ff: frequency factors, or none); float theta alone is off by up to an ulp
// of theta (3e-5 at 500 rad, 4e-3 at 40k) and the GPU's exp2/log2 add ~1e-7 relative,
// which on the H200 put outputs 1e-3 off at 511 positions. So: r = base^(-2/n_rot) comes
// from the host as a float pair (hi + lo, computed in double), r^i by squaring in
// float-float (exact products by Dekker splitting), times fs and pos, then reduced by 2*pi in
// three parts (Cody-Waite) before sin/cos, which are accurate near [-pi, pi].
// Exact product a * b = p + e (Dekker, with Veltkamp splits): plain multiplies and adds,
// all `precise`, since drivers may split or fold fma(a, b, -a*b) (Mesa's lavapipe does).
vec2 two_prod(float a, float b) {
    precise float p = a * b;
    precise float ca = 4097.0 * a, cb = 4097.0 * b;
    precise float ah = ca - (ca - a), bh = cb - (cb - b);
    precise float al = a - ah, bl = b - bh;
    precise float e = ((ah * bh - p) + ah * bl + al * bh) + al * bl;
    return vec2(p, e);
}
vec2 ff_mul(vec2 a, vec2 b) {
    vec2 t = two_prod(a.x, b.x);
    precise float e = t.y + (a.x * b.y + a.y * b.x);
    precise float s = t.x + e;
    precise float l = e - (s - t.x);
    return vec2(s, l);
}
// The scale of pair i, fs / ff[i] (ff: the rope's frequency factors, 0 for none), as a
// float pair: the quotient alone would put theta an ulp off again. Its remainder
// fs - q * ff[i] is exact (two_prod, and q * ff[i] lies within a few ulps of fs), so the
// pair holds where the division is not correctly rounded too.
vec2 rope_scale(float fs, uint64_t ff, uint i) {
    if (ff == 0ul) return vec2(fs, 0.0);
    float d = BF32(ff).v[i];
    precise float q = fs / d;
    vec2 m = two_prod(q, d);
    precise float r = (fs - m.x) - m.y;
    return vec2(q, r / d);
}
// cos and sin of pair i's angle, both times ms (the rope's mscale).
void rope_cos_sin(float pos, uint i, float fs, uint64_t ff, float ms, float r_hi, float r_lo, out float cs,
                  out float sn) {
    vec2 f = vec2(1.0, 0.0), b = vec2(r_hi, r_lo);
    for (uint e = i; e != 0u; e >>= 1) {
        if ((e & 1u) != 0u) f = ff_mul(f, b);
        b = ff_mul(b, b);
    }
    vec2 th = ff_mul(ff_mul(f, rope_scale(fs, ff, i)), vec2(pos, 0.0));
    float k = round(th.x * 0.15915494309189535);
    precise float t = th.x - k * 6.28125; // exact: 6.28125 has 8 significant bits, k < 2^16
    t = t + th.y;
    t = t - k * 0.0019353071693331003;
    t = t - k * 1.0253131677018246e-11;
    cs = cos(t) * ms;
    sn = sin(t) * ms;
}
