// Shared by attention.comp and attn_dec.comp: the split scratch's ticket area, the buffer
// views both use, and the ALiBi slope.
#define TICKET_BYTES 4096 // OB_VK_TICKET_BYTES
// partials of other workgroups: read and written coherent (L2)
layout(buffer_reference, std430, buffer_reference_align = 4) coherent buffer BCF { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer BTK { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer BK4 { uvec4 v[]; };

const float NEG_INF = -1.0 / 0.0;

// ALiBi slope of head h of H for max bias pc.f[2] (0 = none: 0), as ob_alibi_slope in
// src/graph/graph.h; n2 is the largest power of two <= H.
float alibi_slope(uint h, uint H) {
    if (!(pc.f[2] > 0.0)) return 0.0;
    float n2 = float(1u << findMSB(H));
    return float(h) < n2 ? exp2(-pc.f[2] / n2 * float(h + 1u)) : exp2(-pc.f[2] / (2.0 * n2) * (2.0 * (float(h) - n2) + 1.0));
}
