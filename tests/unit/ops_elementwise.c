/* Element-wise and row ops: ADD, MUL, SCALE, ACT and GLU (every activation), SOFTMAX,
 * RMS_NORM and LAYER_NORM. Shapes: the three old harnesses' (67 x 5 x 3, 300 x 5, 1003 x 7,
 * norm.comp's register and loop widths 4096, 8192, 8196, 1002) and odd ones (one element,
 * one long row). Special rows where an op must carry them: NaN, infinities and -0 through
 * ADD, MUL and SCALE (bit for bit on the CPU and Vulkan); -inf logits (masked) in SOFTMAX;
 * an all-zero row (zeros out, not NaN) and a NaN row through the norms; saturating inputs
 * and -0 through the activations. */
#include "ops_cases.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

/* Value recipes. */
enum {
    EW_SPECIAL = 1, /* NaN, +-inf and -0 in rows of both operands (ADD MUL SCALE) */
    EW_SATURATE = 2, /* 60, -60, 1e-3, -0.1, 0.13, -0 at the start (ACT GLU: tanh's small-|x| branch and its edge) */
    EW_BIG = 4,      /* a 90 (SOFTMAX: exp overflows without the max subtracted) */
    EW_MASKED = 8,   /* -inf logits in every other element of row 1, one row of all but one (SOFTMAX) */
    EW_ZERO_NAN = 16, /* row 1 all zeros, row 2 with a NaN (norms) */
};

typedef struct ew_row {
    ob_op op;
    int64_t ne[3];
    int variant; /* ADD/MUL: 1 = b one row broadcast; norms: 0 weight + bias, 1 weight, 2 none */
    int act;     /* ACT, GLU */
    float scale; /* of the input draws (norm inputs also shifted by 0.5: a non-zero mean) */
    float param; /* SCALE's factor; the norms' eps */
    unsigned recipe;
} ew_row;

static const char *const g_act_names[] = {"silu", "gelu", "gelu_erf", "relu", "tanh", "softplus", "sigmoid"};
_Static_assert(OB_ARRAY_LEN(g_act_names) == OB_ACT_COUNT, "g_act_names needs one name per ob_act");

static const char *act_name(int act) { return act >= 0 && act < OB_ACT_COUNT ? g_act_names[act] : "?"; }

/* Per op and backend (the old harnesses' tolerances; CUDA's relative to the largest output). */
static void ew_tol(ops_build *b, ob_op op) {
    switch (op) {
    case OB_OP_ADD:
    case OB_OP_MUL:
    case OB_OP_SCALE: /* one IEEE operation: the same bits, -0 included */
        ops_tol_on(b, OPS_BIT(OPS_CPU) | OPS_BIT(OPS_VK), OPS_BITS);
        ops_tol_on(b, OPS_BIT(OPS_CUDA), OPS_MREL(2e-6));
        break;
    case OB_OP_SOFTMAX:
        ops_tol_on(b, OPS_BIT(OPS_CPU), OPS_TOL(1e-7, 1e-5));
        ops_tol_on(b, OPS_BIT(OPS_VK), OPS_TOL(1e-8, 1e-5));
        ops_tol_on(b, OPS_BIT(OPS_CUDA), OPS_MREL(2e-6));
        break;
    case OB_OP_RMS_NORM:
    case OB_OP_LAYER_NORM:
        ops_tol_on(b, OPS_BIT(OPS_CPU), OPS_TOL(1e-5, 1e-5));
        ops_tol_on(b, OPS_BIT(OPS_VK), OPS_TOL(1e-5, 1e-4));
        ops_tol_on(b, OPS_BIT(OPS_CUDA), OPS_MREL(2e-6));
        break;
    default: /* ACT, GLU */
        ops_tol_on(b, OPS_BIT(OPS_CPU) | OPS_BIT(OPS_VK), OPS_TOL(1e-6, 1e-5));
        ops_tol_on(b, OPS_BIT(OPS_CUDA), OPS_MREL(2e-6));
        break;
    }
}

static void ew_build(ops_build *b, const void *p) {
    const ew_row *r = p;
    const int64_t n = r->ne[0] * r->ne[1] * r->ne[2], ne0 = r->ne[0], rows = n / ne0;
    float *a = ops_f32(b, n, r->scale), *c = ops_f32(b, n, 1.0f);
    if (r->recipe & EW_SPECIAL) {
        ops_special_row(a, ne0, rows > 1 ? 1 : 0);
        /* b's specials one element on: NaN + -0, inf + NaN, -inf + inf, -0 + -inf */
        for (int64_t i = 0; i < ne0 && i < 4; i++) {
            static const float sp[4] = {-0.0f, NAN, INFINITY, -INFINITY};
            c[(rows > 1 ? ne0 : 0) + i] = sp[i];
        }
        if (rows > 2)
            for (int64_t i = 0; i < ne0; i++) a[2 * ne0 + i] = c[2 * ne0 + i] = -0.0f; /* -0 + -0 = -0, -0 * -0 = +0 */
    }
    if (r->recipe & EW_SATURATE) {
        static const float sat[6] = {60.0f, -60.0f, 1e-3f, -0.1f, 0.13f, -0.0f};
        for (int64_t i = 0; i < 6 && i < n; i++) a[i] = sat[i];
    }
    if ((r->recipe & EW_BIG) && n > 5) a[5] = 90.0f;
    if (r->recipe & EW_MASKED) {
        for (int64_t i = 0; i < ne0; i += 2) a[(rows > 1 ? ne0 : 0) + i] = -INFINITY;
        if (rows > 2)
            for (int64_t i = 1; i < ne0; i++) a[2 * ne0 + i] = -INFINITY;
    }
    const bool norm = r->op == OB_OP_RMS_NORM || r->op == OB_OP_LAYER_NORM;
    if (norm) {
        for (int64_t i = 0; i < n; i++) a[i] += 0.5f;
        if (r->recipe & EW_ZERO_NAN) {
            for (int64_t i = 0; i < ne0 && rows > 1; i++) a[ne0 + i] = 0.0f;
            if (rows > 2) a[2 * ne0 + ne0 / 2] = NAN;
        }
    }
    const int64_t nb[3] = {r->ne[0], r->variant == 1 ? 1 : r->ne[1], r->variant == 1 ? 1 : r->ne[2]};
    ob_tensor *ta = ops_leaf(b, "a", OB_TYPE_F32, 3, r->ne, a), *o = NULL;
    switch (r->op) {
    case OB_OP_ADD:
    case OB_OP_MUL: {
        ob_tensor *tb = ops_leaf(b, "b", OB_TYPE_F32, 3, nb, c);
        o = r->op == OB_OP_ADD ? ob_add(b->g, ta, tb) : ob_mul(b->g, ta, tb);
        break;
    }
    case OB_OP_SCALE: o = ob_scale(b->g, ta, r->param); break;
    case OB_OP_ACT: o = ob_act_op(b->g, ta, (ob_act)r->act); break;
    case OB_OP_GLU: o = ob_glu(b->g, ta, ops_leaf(b, "up", OB_TYPE_F32, 3, r->ne, c), (ob_act)r->act); break;
    case OB_OP_SOFTMAX: o = ob_softmax(b->g, ta); break;
    default: {
        const int64_t nw[1] = {ne0};
        ob_tensor *w = r->variant < 2 ? ops_leaf_f32(b, "w", 1, nw, 1.0f) : NULL;
        ob_tensor *bias = r->variant < 1 && r->op == OB_OP_LAYER_NORM ? ops_leaf_f32(b, "bias", 1, nw, 1.0f) : NULL;
        o = r->op == OB_OP_RMS_NORM ? ob_rms_norm(b->g, ta, w, r->param) : ob_layer_norm(b->g, ta, w, bias, r->param);
        break;
    }
    }
    ops_check(b, o, OPS_EXACT);
    ew_tol(b, r->op);
}

#define A3 {67, 5, 3}
#define B2 {300, 5, 1}
#define ONE {1, 1, 1}
#define LONG {4097, 1, 1}
static const ew_row g_binary[] = {
    {OB_OP_ADD, A3, 0, 0, 1, 0, EW_SPECIAL}, {OB_OP_ADD, A3, 1, 0, 1, 0, EW_SPECIAL}, {OB_OP_ADD, B2, 0, 0, 2, 0, 0},
    {OB_OP_ADD, B2, 1, 0, 2, 0, 0},          {OB_OP_ADD, ONE, 0, 0, 1, 0, 0},          {OB_OP_ADD, LONG, 1, 0, 1, 0, 0},
    {OB_OP_MUL, A3, 0, 0, 1, 0, EW_SPECIAL}, {OB_OP_MUL, A3, 1, 0, 1, 0, EW_SPECIAL}, {OB_OP_MUL, B2, 1, 0, 2, 0, 0},
    {OB_OP_MUL, ONE, 1, 0, 1, 0, 0},         {OB_OP_MUL, LONG, 0, 0, 1, 0, 0},
    {OB_OP_SCALE, A3, 0, 0, 1, -0.37f, EW_SPECIAL}, {OB_OP_SCALE, B2, 0, 0, 2, 0.37f, 0},
    {OB_OP_SCALE, ONE, 0, 0, 1, 3.0f, 0},    {OB_OP_SCALE, LONG, 0, 0, 1, -1.0f, 0},
};

/* ACT and GLU rows per activation: test_cpu_ops' (scale 3), test_vulkan_ops' (scale 4,
 * saturating), test_cuda_ops' (300 x 5, scale 2; and 4 saturating, as its tanh check), odd. */
static const struct { int64_t ne[3]; float scale; unsigned recipe; } g_act_shapes[] = {
    {A3, 3, 0}, {A3, 4, EW_SATURATE}, {B2, 2, 0}, {B2, 4, EW_SATURATE}, {ONE, 1, 0}, {LONG, 2, 0},
};

static const ew_row g_softmax[] = {
    {OB_OP_SOFTMAX, A3, 0, 0, 4, 0, 0},          {OB_OP_SOFTMAX, {1001, 6, 1}, 0, 0, 8, 0, EW_BIG},
    {OB_OP_SOFTMAX, B2, 0, 0, 2, 0, EW_MASKED}, {OB_OP_SOFTMAX, {1, 3, 1}, 0, 0, 1, 0, 0},
    {OB_OP_SOFTMAX, LONG, 0, 0, 4, 0, 0},
};

/* norm.comp's register path (whole vec4s up to 8192) and its loop (8196, 1002). */
static const int64_t g_norm_widths[] = {1003, 300, 4096, 8192, 8196, 1002, 1};

/* Known values, independent of the reference: silu(1) = 1/(1+e^-1), gelu_tanh(1) per HF
 * gelu_pytorch_tanh, gelu_erf(1) = 0.5(1+erf(1/sqrt 2)), relu(1), tanh(1), softplus(1) =
 * log(1+e), sigmoid(1) = 1/(1+e^-1). */
static const float g_act_at_1[] = {0.7310585786f, 0.8411920071f, 0.8413447461f, 1.0f, 0.7615941560f, 1.3132616875f,
                                   0.7310585786f};
_Static_assert(OB_ARRAY_LEN(g_act_at_1) == OB_ACT_COUNT, "g_act_at_1 needs one value per ob_act");

static void act_value_ref(ops_build *b, const void *p) {
    const float *want = g_act_at_1;
    const ew_row *r = p;
    const float *y = b->chk[0]->data;
    CHECKF(fabsf(y[0] - want[r->act]) < 1e-6f, "%s: act(1) = %.9g, want %.9g", b->name, y[0], want[r->act]);
}

static void act_value_build(ops_build *b, const void *p) {
    const ew_row *r = p;
    float *x = ops_own(b, sizeof(float) * 2);
    x[0] = 1.0f;
    x[1] = -2.0f;
    const int64_t ne[1] = {2};
    ops_check(b, ob_act_op(b->g, ops_leaf(b, "x", OB_TYPE_F32, 1, ne, x), (ob_act)r->act), OPS_EXACT);
    ew_tol(b, OB_OP_ACT);
    b->ref_check = act_value_ref;
}

static ew_row g_acts[2 * OB_ARRAY_LEN(g_act_shapes) * OB_ACT_COUNT];
static ew_row g_act_values[OB_ACT_COUNT];
static ew_row g_norms[2 * 3 * OB_ARRAY_LEN(g_norm_widths)];

void ops_add_elementwise(ops_list *l) {
    for (size_t i = 0; i < OB_ARRAY_LEN(g_binary); i++) {
        const ew_row *r = &g_binary[i];
        ops_add(l, ew_build, r, "%s %lldx%lldx%lld%s%s", ob_op_name(r->op), (long long)r->ne[0], (long long)r->ne[1],
                (long long)r->ne[2], r->variant == 1 ? " broadcast" : "", r->recipe & EW_SPECIAL ? " nan/inf/-0" : "");
    }
    int k = 0;
    for (int act = 0; act < OB_ACT_COUNT; act++)
        for (int glu = 0; glu < 2; glu++)
            for (size_t s = 0; s < OB_ARRAY_LEN(g_act_shapes); s++) {
                ew_row *r = &g_acts[k++];
                *r = (ew_row){glu ? OB_OP_GLU : OB_OP_ACT, {0, 0, 0}, 0, act, g_act_shapes[s].scale, 0, g_act_shapes[s].recipe};
                memcpy(r->ne, g_act_shapes[s].ne, sizeof(r->ne));
                ops_add(l, ew_build, r, "%s %s %lldx%lldx%lld scale %g%s", ob_op_name(r->op), act_name(act), (long long)r->ne[0],
                        (long long)r->ne[1], (long long)r->ne[2], r->scale, r->recipe & EW_SATURATE ? " saturating" : "");
            }
    for (int act = 0; act < OB_ACT_COUNT; act++) {
        g_act_values[act] = (ew_row){OB_OP_ACT, {2, 1, 1}, 0, act, 1, 0, 0};
        ops_add(l, act_value_build, &g_act_values[act], "ACT %s known value", act_name(act));
    }
    for (size_t i = 0; i < OB_ARRAY_LEN(g_softmax); i++) {
        const ew_row *r = &g_softmax[i];
        ops_add(l, ew_build, r, "SOFTMAX %lldx%lld scale %g%s%s", (long long)r->ne[0], (long long)r->ne[1], r->scale,
                r->recipe & EW_BIG ? " with 90" : "", r->recipe & EW_MASKED ? " -inf masked" : "");
    }
    k = 0;
    for (size_t w = 0; w < OB_ARRAY_LEN(g_norm_widths); w++)
        for (int layer = 0; layer < 2; layer++)
            for (int v = 0; v < 3; v++) {
                const int64_t n = g_norm_widths[w];
                /* the wide rows (norm.comp's paths) with weight and bias only, as test_vulkan_ops */
                if ((n >= 1002 && n != 1003 && v != 0) || (!layer && v == 1)) continue; /* RMS_NORM has no bias */
                ew_row *r = &g_norms[k++];
                const int64_t rows = n == 1003 ? 7 : n == 300 ? 5 : n == 1 ? 4 : 3;
                *r = (ew_row){layer ? OB_OP_LAYER_NORM : OB_OP_RMS_NORM, {n, rows, 1}, v, 0, n == 300 ? 2.0f : 3.0f,
                              layer || (n == 300 && v == 2) ? 1e-5f : 1e-6f, n == 1003 || n == 300 ? EW_ZERO_NAN : 0};
                static const char *const vn[3] = {"weight+bias", "weight", "none"};
                ops_add(l, ew_build, r, "%s %lldx%lld %s eps %g%s", ob_op_name(r->op), (long long)n, (long long)rows,
                        layer ? vn[v] : v == 2 ? "none" : "weight", r->param, r->recipe ? " zero/nan rows" : "");
            }
}
