// Activations by ob_act kind: 0 silu, 1 gelu (tanh), 2 gelu (erf), 3 relu, 4 tanh, 5 softplus,
// 6 sigmoid.
float act(uint kind, float x) {
    if (kind == 0u) return x / (1.0 + exp(-x));
    if (kind == 1u) {
        // tanh(z) written through exp(-2|z|) so large |z| cannot overflow to inf/inf.
        float z = 0.7978845608028654 * (x + 0.044715 * x * x * x);
        float t = exp(-2.0 * abs(z));
        return 0.5 * x * (1.0 + sign(z) * (1.0 - t) / (1.0 + t));
    }
    if (kind == 2u) {
        // erf via Abramowitz-Stegun 7.1.26 is 1.5e-7 absolute: enough for f32 activations.
        float z = abs(x) * 0.7071067811865476;
        float t = 1.0 / (1.0 + 0.3275911 * z);
        float y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * exp(-z * z);
        return 0.5 * x * (1.0 + sign(x) * y);
    }
    if (kind == 4u) {
        // The same exp(-2|x|) form as GELU's tanh (the builtin may overflow to inf/inf);
        // near 0 it cancels, so small |x| takes the odd Taylor series (error < 1e-9 rel).
        float x2 = x * x;
        if (abs(x) < 0.125) return x * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 - x2 * (17.0 / 315.0))));
        float t = exp(-2.0 * abs(x));
        return sign(x) * (1.0 - t) / (1.0 + t);
    }
    if (kind == 5u) {
        // max(x, 0) + log(1 + e^-|x|): no overflow; GLSL has no log1p, so a small e^-|x|
        // takes log1p's series (relative error < 1e-8 there)
        float t = exp(-abs(x));
        float l = t < 1e-3 ? t * (1.0 - t * (0.5 - t / 3.0)) : log(1.0 + t);
        return max(x, 0.0) + l;
    }
    if (kind == 6u) return 1.0 / (1.0 + exp(-x));
    return max(x, 0.0);
}

// GLU's product for kind `kind`: act(kind, g) * u, or for GLU_SWIGLU_OAI (graph.h's
// OB_GLU_SWIGLU_OAI, gpt-oss) the clamped SwiGLU with alpha al and limit lim: g clamped above
// at lim, u to [-lim, lim], g sigmoid(al g) (u + 1). A NaN stays a NaN, as in the reference
// (GLSL's min and max may drop it, and NVIDIA's compiler turns the comparisons into them).
const uint GLU_SWIGLU_OAI = 16u; // vk_ops.c: VK_GLU_SWIGLU_OAI
float glu(uint kind, float g, float u, float al, float lim) {
    if (kind != GLU_SWIGLU_OAI) return act(kind, g) * u;
    if (isnan(g) || isnan(u)) return g + u;
    const float x = g > lim ? lim : g, v = u > lim ? lim : u < -lim ? -lim : u;
    return x / (1.0 + exp(-al * x)) * (v + 1.0);
}
vec4 glu4(uint kind, vec4 g, vec4 u, float al, float lim) {
    return vec4(glu(kind, g.x, u.x, al, lim), glu(kind, g.y, u.y, al, lim), glu(kind, g.z, u.z, al, lim),
                glu(kind, g.w, u.w, al, lim));
}
