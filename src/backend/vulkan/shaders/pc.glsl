// The push-constant block of every dispatch, declared once for both languages: the host
// (vk_internal.h: struct ob_vk_pc { OB_VK_PC_FIELDS(uint32_t) }) and every shader
// (common.glsl: uniform PC { OB_VK_PC_FIELDS(uint) } pc), so a slot has one name and one
// offset on both sides: a..p at 0..48, u at 56, f at 104, 128 bytes in all (the least
// every device takes; vk_internal.h asserts the offsets).
// a..e, p: source addresses, o: destination; u, f: per-op integer and float parameters.
// u[10] is set by the dispatcher to the number of workgroups, u[11] to the x extent of the
// 2D grid. p and f[4..5] serve the shaders whose other slots are taken (the rope's
// frequency factors and mscale in norm_rope.comp, the attention sinks in the attention
// shaders, the clamped SwiGLU's alpha and limit in matvec_q8.glsl's gate/up/GLU mode).
#ifndef OB_VK_PC_GLSL
#define OB_VK_PC_GLSL
#define OB_VK_PC_FIELDS(U32) \
    uint64_t a, b, c, d, e, o, p; \
    U32 u[12]; \
    float f[6];
#endif
