/* Reference quantizers without Python: round-trip error bounds for every type that has a
 * quantizer, hand-built blocks with known values (catches layout slips), Q1_0 exact cases,
 * and the type table. The bit-exact comparison with the gguf package lives in
 * tests/integration/test_quant.py. */
#include "testutil.h"
#include "format/quant.h"
#include <math.h>
#include <string.h>

/* Relative RMSE bounds on N(0,1) data: measured value + ~20% (see test_quant.py for the
 * reasoning: a b-bit uniform grid over a 32-wide Gaussian block gives ~4.1/(2^b-1)/sqrt(12);
 * Q1_0 is sign-only with the mean |x| scale: sqrt(1 - 2/pi) = 0.603). */
static const struct { ob_type t; double bound; } rt_bounds[] = {
    {OB_TYPE_F16, 3.0e-4},   {OB_TYPE_BF16, 2.4e-3},  {OB_TYPE_Q4_0, 0.100},
    {OB_TYPE_Q4_1, 0.095},   {OB_TYPE_Q5_0, 0.052},   {OB_TYPE_Q5_1, 0.046},
    {OB_TYPE_Q8_0, 0.0070},  {OB_TYPE_Q8_1, 0.0070},  {OB_TYPE_Q2_K, 0.32},
    {OB_TYPE_Q3_K, 0.17},    {OB_TYPE_Q4_K, 0.088},   {OB_TYPE_Q5_K, 0.045},
    {OB_TYPE_Q6_K, 0.022},   {OB_TYPE_Q8_K, 0.0090},  {OB_TYPE_IQ4_NL, 0.090},
    {OB_TYPE_IQ4_XS, 0.090}, {OB_TYPE_MXFP4, 0.14},   {OB_TYPE_Q1_0, 0.615},
    {OB_TYPE_IQ3_S, 0.16},   {OB_TYPE_IQ3_XXS, 0.22}, {OB_TYPE_IQ2_S, 0.29},
    {OB_TYPE_IQ2_XS, 0.34},  {OB_TYPE_IQ2_XXS, 0.40}, {OB_TYPE_IQ1_M, 0.50},
    {OB_TYPE_IQ1_S, 0.54},
};

#define N_RT (256 * 64)

static double rel_rmse(const float *x, const float *y, int64_t n) {
    double e = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        e += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        s += (double)x[i] * x[i];
    }
    return sqrt(e / s);
}

/* Quantize + dequantize n values; returns relative RMSE, or -1 on a size mismatch. */
static double round_trip(ob_type t, const float *x, float *y, uint8_t *q, int64_t n) {
    size_t want = ob_row_size(t, n);
    size_t got = ob_quantize(t, x, q, n);
    CHECKF(got == want, "%s: quantize wrote %zu, row size %zu", ob_type_name(t), got, want);
    if (got != want) return -1;
    CHECK(ob_dequantize(t, q, y, n) == OB_OK);
    return rel_rmse(x, y, n);
}

static void test_round_trips(void) {
    static float x[N_RT], xs[N_RT], y[N_RT];
    static uint8_t q[N_RT * 4 + 64];
    ob_rng r;
    for (size_t k = 0; k < OB_ARRAY_LEN(rt_bounds); k++) {
        const ob_type t = rt_bounds[k].t;
        const ob_type_traits *tr = ob_type_traits_get(t);
        CHECK(tr != NULL);
        if (!tr || !tr->from_float) {
            fprintf(stderr, "note: %s has no quantizer\n", ob_type_name(t));
            continue;
        }
        ob_rng_seed(&r, 100 + (uint64_t)t);
        ob_rng_fill_normal(&r, x, N_RT, 1.0f);
        double err = round_trip(t, x, y, q, N_RT);
        CHECKF(err >= 0 && err < rt_bounds[k].bound, "%s: relative RMSE %.5f (bound %.5f)",
               ob_type_name(t), err, rt_bounds[k].bound);
        /* at typical weight scale and at a large one: no absolute epsilons in the searches */
        const float scales[2] = {0.02f, 1000.0f};
        for (int s = 0; s < 2; s++) {
            for (int i = 0; i < N_RT; i++) xs[i] = x[i] * scales[s];
            err = round_trip(t, xs, y, q, N_RT);
            CHECKF(err >= 0 && err < rt_bounds[k].bound, "%s at x%g: relative RMSE %.5f",
                   ob_type_name(t), (double)scales[s], err);
        }
        /* a zero block in the middle of data decodes to exact zeros, never NaN */
        const int64_t bs = tr->block_size > 1 ? tr->block_size : 256;
        memcpy(xs, x, sizeof(float) * 4 * (size_t)bs);
        memset(xs + bs, 0, sizeof(float) * (size_t)bs);
        if (ob_quantize(t, xs, q, 4 * bs) == ob_row_size(t, 4 * bs)) {
            CHECK(ob_dequantize(t, q, y, 4 * bs) == OB_OK);
            int bad = 0;
            for (int64_t i = 0; i < 4 * bs; i++)
                if (!isfinite(y[i]) || (i >= bs && i < 2 * bs && y[i] != 0.0f)) bad++;
            CHECKF(bad == 0, "%s: %d bad values around a zero block", ob_type_name(t), bad);
        }
    }
}

/* Ternary types are exact (up to the f16 scale) on ternary data plus small noise. */
static void test_ternary(void) {
    static float x[N_RT], y[N_RT];
    static uint8_t q[N_RT];
    ob_rng r;
    ob_rng_seed(&r, 7);
    for (int i = 0; i < N_RT; i++) {
        const int t = (int)(ob_rng_u64(&r) % 3) - 1;
        x[i] = 0.5f * (float)t + 0.005f * ob_rng_normal(&r);
    }
    const ob_type types[2] = {OB_TYPE_TQ1_0, OB_TYPE_TQ2_0};
    for (int k = 0; k < 2; k++) {
        double err = round_trip(types[k], x, y, q, N_RT);
        CHECKF(err >= 0 && err < 0.03, "%s on ternary data: %.5f", ob_type_name(types[k]), err);
    }
}

/* Blocks built by hand from the documented layouts, decoded to known values. */
static void test_known_blocks(void) {
    float y[256];
    {   /* Q4_0: d = 0.5; byte j = (j & 15) | (15 - j) << 4 -> y[j] = (j-8)/2, y[j+16] = (7-j)/2 */
        ob_block_q4_0 b = {.d = 0x3800};
        for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | (15 - j) << 4);
        CHECK(ob_dequantize(OB_TYPE_Q4_0, &b, y, 32) == OB_OK);
        int bad = 0;
        for (int j = 0; j < 16; j++)
            bad += y[j] != 0.5f * (float)(j - 8) || y[j + 16] != 0.5f * (float)(7 - j);
        CHECK(bad == 0);
    }
    {   /* Q5_0, d = 1: element 17 = high nibble of qs[1] plus qh bit 17 -> (5 | 16) - 16 */
        ob_block_q5_0 b = {.d = 0x3c00};
        memset(b.qs, 0, sizeof b.qs);
        memset(b.qh, 0, sizeof b.qh);
        b.qh[2] = 0x02; /* bit 17 */
        b.qs[1] = 0x50; /* element 17 low nibble 5 */
        CHECK(ob_dequantize(OB_TYPE_Q5_0, &b, y, 32) == OB_OK);
        CHECK(y[17] == 5.0f && y[1] == -16.0f && y[16] == -16.0f);
    }
    {   /* Q8_0 with d = -2: y = -2 * qs */
        ob_block_q8_0 b = {.d = 0xc000};
        for (int j = 0; j < 32; j++) b.qs[j] = (int8_t)(j * 8 - 128);
        CHECK(ob_dequantize(OB_TYPE_Q8_0, &b, y, 32) == OB_OK);
        CHECK(y[0] == 256.0f && y[31] == -2.0f * (float)(31 * 8 - 128));
    }
    {   /* TQ2_0: element 128 + 32*3 + 5 is bits 6..7 of qs[32 + 5] */
        ob_block_tq2_0 b;
        memset(b.qs, 0x55, sizeof b.qs); /* code 1 everywhere -> 0 */
        b.qs[37] = (uint8_t)((b.qs[37] & 0x3f) | 2 << 6);
        b.d = 0x4200; /* 3.0 */
        CHECK(ob_dequantize(OB_TYPE_TQ2_0, &b, y, 256) == OB_OK);
        int nz = 0;
        for (int j = 0; j < 256; j++) nz += y[j] != 0.0f;
        CHECK(nz == 1 && y[128 + 96 + 5] == 3.0f);
    }
    {   /* MXFP4: e = 128 -> d = 2^(128-128) = 1, so y is the doubled table itself */
        ob_block_mxfp4 b = {.e = 128};
        for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | (15 - j) << 4);
        CHECK(ob_dequantize(OB_TYPE_MXFP4, &b, y, 32) == OB_OK);
        CHECK(y[7] == 12.0f && y[5] == 6.0f && y[16] == -12.0f && y[16 + 6] == -1.0f);
    }
}

/* Q1_0: signs in LSB-first bits, d = mean |x|, x >= 0 (including -0.0) maps to +d. */
static void test_q1_0_exact(void) {
    float x[256], y[256];
    ob_block_q1_0 b[2];
    /* block 0: alternating +1 / -3 -> mean |x| = 2, every even element positive */
    for (int j = 0; j < 128; j++) x[j] = (j % 2 == 0) ? 1.0f : -3.0f;
    /* block 1: +-0.25 with element 0 = -0.0 and element 1 = +0.0, negatives at j%8 == 3 */
    for (int j = 0; j < 128; j++) x[128 + j] = (j % 8 == 3) ? -0.25f : 0.25f;
    x[128] = -0.0f;
    x[129] = 0.0f;
    CHECK(ob_quantize(OB_TYPE_Q1_0, x, b, 256) == 36);
    CHECK(b[0].d == 0x4000); /* 2.0 */
    int bad = 0;
    for (int k = 0; k < 16; k++) bad += b[0].qs[k] != 0x55 || b[1].qs[k] != 0xf7;
    CHECK(bad == 0);
    /* mean |x| of block 1 = (126 * 0.25) / 128 */
    CHECK(b[1].d == ob_f32_to_f16(126.0f * 0.25f / 128.0f));
    CHECK(ob_dequantize(OB_TYPE_Q1_0, b, y, 256) == OB_OK);
    CHECK(y[0] == 2.0f && y[1] == -2.0f && y[127] == -2.0f);
    const float d1 = ob_f16_to_f32(b[1].d);
    CHECK(y[128] == d1 && y[129] == d1 && y[131] == -d1 && y[139] == -d1 && y[140] == d1);
    /* a hand-built block: d = -1 flips the meaning of the bits */
    ob_block_q1_0 h = {.d = 0xbc00};
    memset(h.qs, 0, sizeof h.qs);
    h.qs[15] = 0x80; /* element 127 */
    CHECK(ob_dequantize(OB_TYPE_Q1_0, &h, y, 128) == OB_OK);
    CHECK(y[127] == -1.0f && y[0] == 1.0f && y[126] == 1.0f);
}

static void test_table(void) {
    int n_types = 0;
    for (int t = 0; t < OB_TYPE_COUNT; t++) {
        const ob_type_traits *tr = ob_type_traits_get((ob_type)t);
        if (!tr) continue;
        n_types++;
        CHECK(tr->block_size >= 1 && tr->type_size >= 1);
        CHECK(tr->is_quantized == (tr->block_size > 1));
        ob_type back;
        CHECKF(ob_type_from_name(tr->name, &back) && back == (ob_type)t, "%s", tr->name);
        char lower[16];
        size_t len = strlen(tr->name);
        CHECK(len < sizeof lower);
        for (size_t i = 0; i <= len && i < sizeof lower; i++)
            lower[i] = (char)(tr->name[i] >= 'A' && tr->name[i] <= 'Z' ? tr->name[i] + 32 : tr->name[i]);
        CHECKF(ob_type_from_name(lower, &back) && back == (ob_type)t, "%s", lower);
        CHECK(ob_row_size((ob_type)t, tr->block_size * 3) == tr->type_size * 3);
        if (tr->block_size > 1) CHECK(ob_row_size((ob_type)t, tr->block_size + 1) == 0);
    }
    CHECK(n_types == 33);
    ob_type t;
    CHECK(ob_type_from_name("q4_k", &t) && t == OB_TYPE_Q4_K);
    CHECK(ob_type_from_name("Iq2_Xxs", &t) && t == OB_TYPE_IQ2_XXS);
    CHECK(!ob_type_from_name("q4_k_m", &t) && !ob_type_from_name("", &t) && !ob_type_from_name(NULL, &t));
    CHECK(ob_type_name((ob_type)4) == NULL && ob_type_name((ob_type)OB_TYPE_COUNT) == NULL);
    CHECK(ob_type_block_size(OB_TYPE_Q1_0) == 128 && ob_type_row_size(OB_TYPE_Q1_0, 256) == 36);
    CHECK(ob_row_size(OB_TYPE_Q4_0, -32) == 0);
    CHECK(ob_row_size(OB_TYPE_F32, INT64_MAX) == 0); /* overflows size_t math: refused */
    float f[32];
    uint8_t buf[64] = {0};
    CHECK(ob_dequantize(OB_TYPE_Q4_0, buf, f, 31) == OB_ERR_ARG);
    CHECK(ob_dequantize((ob_type)5, buf, f, 32) == OB_ERR_ARG);
    CHECK(ob_quantize(OB_TYPE_I32, f, buf, 4) == 0);
    CHECK(strcmp(ob_status_str(OB_OK), "ok") == 0);
}

int main(void) {
    test_table();
    test_known_blocks();
    test_q1_0_exact();
    test_ternary();
    test_round_trips();
    return ob_test_done("test_quant_roundtrip");
}
