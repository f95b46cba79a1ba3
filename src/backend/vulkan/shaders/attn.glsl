// Shared by attention.comp and attn_dec.comp: the split scratch's ticket area, the buffer
// views both use, the ALiBi slope and the attention sinks.
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

// The factor that turns head h's unnormalised output (its values weighted by exp(score - m),
// their weights' sum l) into the output: 1 / l, or with attention sinks (graph.h's ATTENTION
// src6, gpt-oss: at `sinks`, F32 [H]; 0: none) the head's sink joins the denominator as one
// more logit with no value, and where it is the larger the factor also carries the output
// from m to it. As the reference: a sink that is -inf or NaN adds nothing.
float attn_inv(uint64_t sinks, uint h, float m, float l) {
    if (sinks != 0ul) {
        const float s = BF32(sinks).v[h];
        if (s > m) { // m = -inf (no cell seen) included
            const float c = m == NEG_INF ? 0.0 : exp(m - s);
            return c / (l * c + 1.0);
        }
        if (s > NEG_INF) l += exp(s - m);
    }
    return l > 0.0 ? 1.0 / l : 0.0;
}
