/* Plain single-threaded references of every op: the oracle that the CPU kernels and every
 * other backend are tested against. Written for obviousness, not speed: double
 * accumulation, whole rows dequantized through the type table, two-pass softmax.
 * Scratch comes from malloc; on allocation failure the output is left as it was (the
 * tests poison outputs, so that shows as a failure). */
#include "backend/cpu/cpu.h"
#include <math.h>
#include <stdlib.h>

static double act_ref(int act, double x) {
    switch (act) {
    case OB_ACT_SILU: return x / (1.0 + exp(-x));
    case OB_ACT_GELU: return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case OB_ACT_GELU_ERF: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    case OB_ACT_TANH: return tanh(x);
    case OB_ACT_SOFTPLUS: return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
    case OB_ACT_SIGMOID: return 1.0 / (1.0 + exp(-x));
    default: return x > 0 ? x : 0;
    }
}

/* gpt-oss's clamped SwiGLU (graph.h, OB_GLU_SWIGLU_OAI): the clamps keep a NaN, as torch's. */
static float swiglu_oai_ref(float g, float u, double alpha, double limit) {
    const double x = g > limit ? limit : g, v = u > limit ? limit : u < -limit ? -limit : u;
    return (float)(x / (1.0 + exp(-alpha * x)) * (v + 1.0));
}

static void ref_norm(ob_tensor *dst, bool layer) {
    const ob_tensor *src = dst->src[0];
    const float *w = dst->src[1] ? dst->src[1]->data : NULL;
    const float *b = layer && dst->src[2] ? dst->src[2]->data : NULL;
    int64_t n = src->ne[0];
    for (int64_t r = 0; r < ob_nrows(src); r++) {
        const float *x = (const float *)src->data + r * n;
        float *y = (float *)dst->data + r * n;
        double mean = 0, var = 0;
        if (layer) {
            for (int64_t i = 0; i < n; i++) mean += x[i];
            mean /= (double)n;
        }
        for (int64_t i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
        double s = 1.0 / sqrt(var / (double)n + dst->fp[0]);
        for (int64_t i = 0; i < n; i++) {
            double v = (x[i] - mean) * s;
            if (w) v *= w[i];
            if (b) v += b[i];
            y[i] = (float)v;
        }
    }
}

static void ref_rope(ob_tensor *dst) {
    const ob_tensor *src = dst->src[0];
    const int32_t *pos = dst->src[1]->data;
    int64_t hd = src->ne[0], n_head = src->ne[1], n_rot = dst->ip[0];
    const float *ff = dst->src[2] ? dst->src[2]->data : NULL;
    const double ms = dst->fp[2];
    for (int64_t r = 0; r < ob_nrows(src); r++) {
        const float *x = (const float *)src->data + r * hd;
        float *y = (float *)dst->data + r * hd;
        double p = pos[r / n_head];
        for (int64_t j = n_rot; j < hd; j++) y[j] = x[j];
        for (int64_t i = 0; i < n_rot / 2; i++) {
            double th = p * (double)dst->fp[1] * pow((double)dst->fp[0], -2.0 * (double)i / (double)n_rot);
            if (ff) th /= (double)ff[i];
            int64_t a = dst->ip[1] == 2 ? i : 2 * i, b = dst->ip[1] == 2 ? i + n_rot / 2 : 2 * i + 1;
            double x0 = x[a], x1 = x[b];
            y[a] = (float)((x0 * cos(th) - x1 * sin(th)) * ms);
            y[b] = (float)((x0 * sin(th) + x1 * cos(th)) * ms);
        }
    }
}

/* Is (pos, seq) a cell of the cache (cps cells per sequence, cells in all)? A token outside
 * it is not stored and attends to nothing, as on the GPU backends (graph.h). */
static bool in_cache(int64_t p, int64_t s, int64_t cps, int64_t cells) {
    return p >= 0 && p < cps && s >= 0 && s * cps + cps <= cells;
}

static void ref_kv_store(ob_tensor *dst) {
    const ob_tensor *x = dst->src[0], *cache = dst->src[1];
    const int32_t *pos = dst->src[2]->data, *seq = dst->src[3]->data;
    int64_t row = cache->ne[0], T = ob_nelements(x) / row;
    const ob_type_traits *tr = ob_type_traits_get(cache->type);
    size_t rb = ob_row_size(cache->type, row);
    for (int64_t t = 0; t < T; t++) {
        if (!in_cache(pos[t], seq[t], dst->ip[0], ob_nrows(cache))) continue;
        char *d = (char *)cache->data + (size_t)((int64_t)seq[t] * dst->ip[0] + pos[t]) * rb;
        if (cache->type == OB_TYPE_F32) memcpy(d, (const float *)x->data + t * row, rb);
        else tr->from_float((const float *)x->data + t * row, d, row);
    }
    *(float *)dst->data = 0.0f;
}

/* Two passes per (token, head): all logits in double, then softmax and the V sum. The
 * values are dv wide at a stride of sv per kv head in the V rows (graph.h). */
static void ref_attention(ob_tensor *dst) {
    const ob_tensor *q = dst->src[0], *kc = dst->src[1], *vc = dst->src[2];
    const int32_t *pos = dst->src[3]->data, *seq = dst->src[4]->data;
    int64_t hd = q->ne[0], H = q->ne[1], T = q->ne[2] * q->ne[3], n_kv = dst->ip[1], cps = dst->ip[0];
    int64_t row = hd * n_kv, w = dst->ip[2], dv = dst->ne[0] / H, vrow = vc->ne[0], sv = vrow / n_kv;
    bool causal = dst->ip[3] != 0;
    double scale = dst->fp[0], cap = dst->fp[1];
    const ob_type_traits *tk = ob_type_traits_get(kc->type), *tv = ob_type_traits_get(vc->type);
    size_t krb = ob_row_size(kc->type, row), vrb = ob_row_size(vc->type, vrow);
    float *kr = malloc(sizeof(float) * (size_t)row), *vr = malloc(sizeof(float) * (size_t)vrow);
    double *lg = malloc(sizeof(double) * (size_t)cps), *o = malloc(sizeof(double) * (size_t)dv);
    if (!kr || !vr || !lg || !o) goto done;
    for (int64_t t = 0; t < T; t++) {
        int64_t p = pos[t], s = seq[t], hi = p;
        if (!in_cache(p, s, cps, ob_nrows(kc))) {
            memset((float *)dst->data + t * H * dv, 0, sizeof(float) * (size_t)(H * dv));
            continue;
        }
        if (!causal)
            for (int64_t u = 0; u < T; u++)
                if (seq[u] == s && pos[u] > hi) hi = pos[u];
        if (hi > cps - 1) hi = cps - 1;
        for (int64_t h = 0; h < H; h++) {
            int64_t kh = h / (H / n_kv);
            const float *qh = (const float *)q->data + (t * H + h) * hd;
            double mx = -INFINITY;
            for (int64_t j = 0; j <= hi; j++) {
                bool in = w <= 0 || (causal ? p - j < w : llabs(p - j) < w);
                lg[j] = -INFINITY;
                if (!in) continue;
                tk->to_float((const char *)kc->data + (size_t)(s * cps + j) * krb, kr, row);
                double dot = 0;
                for (int64_t e = 0; e < hd; e++) dot += (double)qh[e] * kr[kh * hd + e];
                dot *= scale;
                if (cap > 0) dot = cap * tanh(dot / cap);
                if (dst->fp[2] > 0) dot -= (double)ob_alibi_slope((int)h, (int)H, dst->fp[2]) * (double)llabs(p - j);
                lg[j] = dot;
                if (dot > mx) mx = dot;
            }
            /* the head's sink (src6): one more logit in the denominator, with no value */
            const double sk = dst->src[6] ? (double)((const float *)dst->src[6]->data)[h] : -INFINITY;
            if (sk > mx) mx = sk;
            double sum = sk > -INFINITY ? exp(sk - mx) : 0;
            for (int64_t e = 0; e < dv; e++) o[e] = 0;
            for (int64_t j = 0; j <= hi; j++) {
                if (lg[j] == -INFINITY) continue;
                double pj = exp(lg[j] - mx);
                sum += pj;
                tv->to_float((const char *)vc->data + (size_t)(s * cps + j) * vrb, vr, vrow);
                for (int64_t e = 0; e < dv; e++) o[e] += pj * vr[kh * sv + e];
            }
            float *y = (float *)dst->data + (t * H + h) * dv;
            for (int64_t e = 0; e < dv; e++) y[e] = sum > 0 ? (float)(o[e] / sum) : 0.0f;
        }
    }
done:
    free(kr);
    free(vr);
    free(lg);
    free(o);
}

/* Row r of dst: a's row r, then b's (element by element, no memcpy: the oracle). */
static void ref_concat(ob_tensor *dst) {
    const ob_tensor *a = dst->src[0], *b = dst->src[1];
    const int64_t na = a->ne[0], nb = b->ne[0];
    float *y = dst->data;
    for (int64_t r = 0; r < ob_nrows(dst); r++) {
        for (int64_t i = 0; i < na; i++) y[r * (na + nb) + i] = ((const float *)a->data)[r * na + i];
        for (int64_t i = 0; i < nb; i++) y[r * (na + nb) + na + i] = ((const float *)b->data)[r * nb + i];
    }
}

static void ref_slice(ob_tensor *dst) {
    const ob_tensor *a = dst->src[0];
    const int64_t n = a->ne[0], len = dst->ne[0], off = dst->ip[0];
    for (int64_t r = 0; r < ob_nrows(dst); r++)
        for (int64_t i = 0; i < len; i++) ((float *)dst->data)[r * len + i] = ((const float *)a->data)[r * n + off + i];
}

static void ref_cpy(ob_tensor *dst) {
    const ob_tensor *src = dst->src[0];
    int64_t n = ob_nelements(src);
    float *tmp = malloc(sizeof(float) * (size_t)n);
    if (!tmp) return;
    ob_type_traits_get(src->type)->to_float(src->data, tmp, n);
    if (dst->type == OB_TYPE_F32) memcpy(dst->data, tmp, sizeof(float) * (size_t)n);
    else ob_type_traits_get(dst->type)->from_float(tmp, dst->data, n);
    free(tmp);
}

void ob_cpu_ref_op(ob_tensor *dst) {
    const ob_tensor *a = dst->src[0], *b = dst->src[1];
    float *y = dst->data;
    int64_t n = ob_nelements(dst);
    switch (dst->op) {
    case OB_OP_GET_ROWS: {
        size_t rb = ob_row_size(a->type, a->ne[0]);
        for (int64_t r = 0; r < ob_nrows(dst); r++)
            ob_type_traits_get(a->type)->to_float((const char *)a->data + (size_t)((const int32_t *)b->data)[r] * rb,
                                                  y + r * a->ne[0], a->ne[0]);
        break;
    }
    case OB_OP_RMS_NORM: ref_norm(dst, false); break;
    case OB_OP_LAYER_NORM: ref_norm(dst, true); break;
    case OB_OP_MATMUL: ob_cpu_ref_matmul(dst); break;
    case OB_OP_ADD:
    case OB_OP_MUL: {
        const float *x = a->data, *z = b->data;
        int64_t nb = ob_nelements(b);
        for (int64_t i = 0; i < n; i++) {
            float zb = z[i % nb];
            y[i] = dst->op == OB_OP_ADD ? x[i] + zb : x[i] * zb;
        }
        break;
    }
    case OB_OP_SCALE:
        for (int64_t i = 0; i < n; i++) y[i] = ((const float *)a->data)[i] * dst->fp[0];
        break;
    case OB_OP_ROPE: ref_rope(dst); break;
    case OB_OP_KV_STORE: ref_kv_store(dst); break;
    case OB_OP_ATTENTION: ref_attention(dst); break;
    case OB_OP_GLU:
        for (int64_t i = 0; i < n; i++)
            y[i] = dst->ip[1] == OB_GLU_SWIGLU_OAI
                       ? swiglu_oai_ref(((const float *)a->data)[i], ((const float *)b->data)[i], dst->fp[0], dst->fp[1])
                       : (float)(act_ref(dst->ip[0], ((const float *)a->data)[i]) * ((const float *)b->data)[i]);
        break;
    case OB_OP_ACT:
        for (int64_t i = 0; i < n; i++) y[i] = (float)act_ref(dst->ip[0], ((const float *)a->data)[i]);
        break;
    case OB_OP_SOFTMAX: {
        int64_t ne0 = a->ne[0];
        for (int64_t r = 0; r < ob_nrows(a); r++) {
            const float *x = (const float *)a->data + r * ne0;
            double mx = -INFINITY, sum = 0;
            for (int64_t i = 0; i < ne0; i++) mx = x[i] > mx ? x[i] : mx;
            for (int64_t i = 0; i < ne0; i++) sum += exp(x[i] - mx);
            for (int64_t i = 0; i < ne0; i++) y[r * ne0 + i] = (float)(exp(x[i] - mx) / sum);
        }
        break;
    }
    case OB_OP_CPY: ref_cpy(dst); break;
    case OB_OP_POOL: ob_cpu_ref_pool(dst); break;
    case OB_OP_SAMPLE: ob_cpu_ref_sample(dst); break;
    case OB_OP_MOE_GATE:
    case OB_OP_MATMUL_ID:
    case OB_OP_MOE_SUM: ob_cpu_ref_moe(dst); break;
    case OB_OP_CONCAT: ref_concat(dst); break;
    case OB_OP_SLICE: ref_slice(dst); break;
    case OB_OP_ADD_ID: ob_cpu_ref_add_id(dst); break;
    case OB_OP_SSM_CONV: ob_cpu_ref_ssm_conv(dst); break;
    case OB_OP_DELTA_NET: ob_cpu_ref_delta_net(dst); break;
    default: break;
    }
}
