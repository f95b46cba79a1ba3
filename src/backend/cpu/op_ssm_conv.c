/* SSM_CONV on the CPU (graph.h): the depthwise causal convolution of a recurrent layer (LFM2's
 * short conv, the conv before Qwen3.5's delta rule) with its rolling state, and its plain-C
 * reference. Threads split the channels; each walks every token of the batch in order for
 * its channels, so a sequence's tokens see the inputs before them and its state ends holding
 * its last K-1 inputs. A token's output is its K inputs times the taps summed in one order
 * (tap 0 first), whatever else shares its batch. */
#include "backend/cpu/cpu.h"
#include <math.h>
#include <string.h>

/* The state row of token t's sequence, or NULL when the sequence has none (check_indices
 * refuses such a graph before it runs; the reference skips the token). */
static float *state_row(const ob_tensor *dst, int64_t t) {
    const ob_tensor *st = dst->src[2];
    const int32_t s = ((const int32_t *)dst->src[4]->data)[t];
    if (s < 0 || s >= ob_nrows(st)) return NULL;
    return (float *)st->data + (int64_t)s * st->ne[0];
}

/* Channels [c0, c1) of every token. */
static void conv_channels(ob_tensor *dst, int64_t c0, int64_t c1) {
    const ob_tensor *x = dst->src[0], *w = dst->src[1];
    const int64_t C = x->ne[0], K = w->ne[0], T = ob_nrows(x);
    const int32_t *pos = dst->src[3]->data;
    const float *taps = w->data;
    for (int64_t t = 0; t < T; t++) {
        const float *xt = (const float *)x->data + t * C;
        float *y = (float *)dst->data + t * C, *st = state_row(dst, t);
        if (!st) {
            for (int64_t c = c0; c < c1; c++) y[c] = 0.0f;
            continue;
        }
        if (pos[t] == 0) /* a new sequence: nothing before it */
            for (int64_t k = 0; k < K - 1; k++) memset(st + k * C + c0, 0, sizeof(float) * (size_t)(c1 - c0));
        for (int64_t c = c0; c < c1; c++) {
            const float *wc = taps + c * K;
            float acc = 0.0f;
            for (int64_t k = 0; k < K - 1; k++) acc += wc[k] * st[k * C + c];
            acc += wc[K - 1] * xt[c];
            y[c] = dst->ip[0] ? acc / (1.0f + expf(-acc)) : acc;
            for (int64_t k = 0; k + 2 < K; k++) st[k * C + c] = st[(k + 1) * C + c];
            st[(K - 2) * C + c] = xt[c];
        }
    }
}

void ob_cpu_op_ssm_conv(ob_tensor *dst, const ob_cpu_op_ctx *c) {
    int64_t c0, c1;
    ob_cpu_split(dst->ne[0], c->ith, c->nth, &c0, &c1);
    if (c0 < c1) conv_channels(dst, c0, c1);
}

/* In double, one token at a time; an out-of-range sequence gives zeros and touches nothing. */
void ob_cpu_ref_ssm_conv(ob_tensor *dst) {
    const ob_tensor *x = dst->src[0], *w = dst->src[1];
    const int64_t C = x->ne[0], K = w->ne[0], T = ob_nrows(x);
    const int32_t *pos = dst->src[3]->data;
    for (int64_t t = 0; t < T; t++) {
        const float *xt = (const float *)x->data + t * C;
        float *y = (float *)dst->data + t * C, *st = state_row(dst, t);
        if (!st) {
            for (int64_t c = 0; c < C; c++) y[c] = 0.0f;
            continue;
        }
        if (pos[t] == 0)
            for (int64_t i = 0; i < (K - 1) * C; i++) st[i] = 0.0f;
        for (int64_t c = 0; c < C; c++) {
            const float *wc = (const float *)w->data + c * K;
            double acc = (double)wc[K - 1] * xt[c];
            for (int64_t k = 0; k < K - 1; k++) acc += (double)wc[k] * st[k * C + c];
            y[c] = (float)(dst->ip[0] ? acc / (1.0 + exp(-acc)) : acc);
        }
        for (int64_t k = 0; k + 2 < K; k++) memcpy(st + k * C, st + (k + 1) * C, sizeof(float) * (size_t)C);
        memcpy(st + (K - 2) * C, xt, sizeof(float) * (size_t)C);
    }
}
