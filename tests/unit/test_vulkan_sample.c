/* SAMPLE on the Vulkan backend (sample.comp): exact tokens against the CPU kernel
 * (ob_cpu_sample_row, the host sampler's draw) on every backend of vk_testutil, for greedy
 * and sampled rows (temperature, top-k, top-p, min-p, the sampler's vocabulary), rows of
 * ties, NaN and -0, and vocabularies from 7 to 151,936. Runs on Mesa's lavapipe where there
 * is no GPU. */
#include "testutil.h"
#include <stdio.h>
#ifndef ONEBIT_VULKAN
int main(void) {
    printf("test_vulkan_sample: SKIPPED (built without -DONEBIT_VULKAN=ON)\n");
    return 77; /* SKIP_RETURN_CODE (CMakeLists.txt): ctest reports it skipped */
}
#else
#include "backend/cpu/cpu.h"
#include "backend/vulkan/vk_internal.h"
#include "testutil_sample.h"
#include "vk_testutil.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One SAMPLE graph of R rows of n logits (ob_test_sample_inputs, row 0 also with NaNs and
 * -0), off floats into its buffer (off 0: rows 16-byte aligned where n % 4 == 0, the greedy
 * pass's vec4 path; else its scalar one), on be; returns the rows that differ from the CPU
 * kernel. */
static int sample_case(ob_backend *be, int n, int R, int off, const char *what) {
    ob_graph *g = ob_graph_new(8);
    float *buf = malloc(sizeof(float) * ((size_t)n * R + (size_t)off)), *lg = buf + off;
    float *par = malloc(sizeof(float) * (size_t)R * OB_SAMPLE_NPARAM);
    ob_test_sample_inputs(n, R, true, &g_rng, lg, par);
    int64_t nel[2] = {n, R}, nep[2] = {OB_SAMPLE_NPARAM, R};
    ob_tensor *t = ob_sample(g, ob_leaf(g, "logits", OB_TYPE_F32, 2, nel, lg),
                             ob_leaf(g, "params", OB_TYPE_F32, 2, nep, par));
    CHECKF(be->iface->supports(be, t), "%s: Vulkan refuses SAMPLE", what);
    int32_t *got = calloc((size_t)R, sizeof(int32_t));
    char err[256] = "";
    ob_status st = run_on(be, g, t, got, err, sizeof(err));
    CHECKF(st == OB_OK, "%s: %s", what, err);
    const int bad = st == OB_OK ? ob_test_sample_check(lg, par, n, R, got, "vulkan", what) : R;
    ob_graph_free(g);
    free(got);
    free(buf);
    free(par);
    return bad;
}

static void test_sample_op(void) {
    static const struct { int n, R, off; } sz[] = {
        {151936, 12, 0}, {32001, 12, 1}, {1000, 24, 0}, {4099, 12, 3}, {7, 12, 0}, {4096, 12, 2},
    };
    for (int b = 0; b < N_BE; b++)
        for (size_t i = 0; i < OB_ARRAY_LEN(sz); i++) {
            char what[96];
            snprintf(what, sizeof(what), "sample vocab %d (%s%s)", sz[i].n, g_be_name[b], sz[i].off ? ", unaligned" : "");
            const int bad = sample_case(g_be[b], sz[i].n, sz[i].R, sz[i].off, what);
            printf("%s: %d/%d rows differ\n", what, bad, sz[i].R);
        }
    /* the fence polled before the blocking wait (by default only on a GPU) */
    const ob_vk *v0 = g_be[0]->ctx;
    CHECKF(v0->spin_us == (v0->info.type == VK_PHYSICAL_DEVICE_TYPE_CPU ? 0u : 20000u), "spin_us %u by default",
           v0->spin_us);
    ob_backend *spin = backend_with("ONEBIT_VK_SPIN_US", "3000");
    CHECK(spin != NULL);
    if (spin) {
        CHECK(((const ob_vk *)spin->ctx)->spin_us == 3000u);
        CHECK(sample_case(spin, 151936, 12, 0, "sample vocab 151936 (fence polled)") == 0);
        ob_backend_free(spin);
    }
    /* constant rows: every id ties, so the candidates are the k lowest ids */
    const int n = OB_TEST_SAMPLE_CONST_N, R = 4;
    float *lg = malloc(sizeof(float) * (size_t)n * R), par[4 * OB_SAMPLE_NPARAM];
    ob_test_sample_constant(lg, par);
    ob_graph *g = ob_graph_new(8);
    int64_t nel[2] = {n, R}, nep[2] = {OB_SAMPLE_NPARAM, R};
    ob_tensor *t = ob_sample(g, ob_leaf(g, "logits", OB_TYPE_F32, 2, nel, lg), ob_leaf(g, "params", OB_TYPE_F32, 2, nep, par));
    int32_t tk[4] = {-1, -1, -1, -1};
    char err[256] = "";
    CHECKF(run_on(g_be[0], g, t, tk, err, sizeof(err)) == OB_OK, "sample constant rows: %s", err);
    ob_test_sample_constant_check(tk, "vulkan");
    ob_graph_free(g);
    free(lg);
}

/* The double exp and log of sample.comp, through draws whose answer they decide: a row of
 * two logits whose probabilities put the boundary right next to u. Against the CPU kernel
 * on many temperatures and min-p values (min-p's cut is log(min_p) * temp). */
static void test_sample_math(void) {
    const int R = 256, n = 2;
    float *lg = malloc(sizeof(float) * n * R), *par = calloc((size_t)R * OB_SAMPLE_NPARAM, sizeof(float));
    for (int r = 0; r < R; r++) {
        float *p = par + (size_t)r * OB_SAMPLE_NPARAM;
        lg[n * r] = 0.0f;
        lg[n * r + 1] = -(float)(ob_rng_u64(&g_rng) >> 40) * 0x1p-24f * 12.0f;
        p[OB_SAMPLE_TEMP] = 0.05f + (float)(ob_rng_u64(&g_rng) >> 40) * 0x1p-24f * 3.0f;
        p[OB_SAMPLE_TOP_K] = 2;
        p[OB_SAMPLE_TOP_P] = 1.0f;
        p[OB_SAMPLE_MIN_P] = r % 2 ? (float)(ob_rng_u64(&g_rng) >> 40) * 0x1p-24f * 0.5f : 0.0f;
        /* u just under the first token's probability */
        const double e1 = exp((double)lg[n * r + 1] / p[OB_SAMPLE_TEMP]);
        p[OB_SAMPLE_U] = (float)(1.0 / (1.0 + e1)) * (r % 3 == 0 ? 0.999999f : r % 3 == 1 ? 1.000001f : 0.5f);
        if (p[OB_SAMPLE_U] >= 1.0f) p[OB_SAMPLE_U] = 0.999f;
    }
    ob_graph *g = ob_graph_new(8);
    int64_t nel[2] = {n, R}, nep[2] = {OB_SAMPLE_NPARAM, R};
    ob_tensor *t = ob_sample(g, ob_leaf(g, "logits", OB_TYPE_F32, 2, nel, lg), ob_leaf(g, "params", OB_TYPE_F32, 2, nep, par));
    int32_t *got = calloc((size_t)R, sizeof(int32_t));
    char err[256] = "";
    CHECKF(run_on(g_be[0], g, t, got, err, sizeof(err)) == OB_OK, "sample math: %s", err);
    int bad = 0, ones = 0;
    for (int r = 0; r < R; r++) {
        const int32_t want = ob_cpu_sample_row(lg + n * r, n, par + (size_t)r * OB_SAMPLE_NPARAM);
        ones += want == 1;
        if (got[r] != want && bad++ < 8) CHECKF(0, "sample math row %d: vulkan %d, cpu %d", r, got[r], want);
    }
    /* both tokens come up: the draws sit on both sides of the boundary */
    CHECKF(ones > 0 && ones < R, "sample math: token 1 drawn %d of %d times", ones, R);
    printf("sample math: %d/%d rows differ, token 1 drawn %d times\n", bad, R, ones);
    ob_graph_free(g);
    free(got);
    free(lg);
    free(par);
}

int main(void) {
    if (!vkt_begin("test_vulkan_sample")) return ob_test_failures ? ob_test_done("test_vulkan_sample") : 77; /* no device: skipped */
    ob_rng_seed(&g_rng, 0x5a3b1eu);
    test_sample_op();
    test_sample_math();
    static const char *const arches[] = {"llama", "qwen2", "qwen3", "gemma3"};
    for (size_t i = 0; i < OB_ARRAY_LEN(arches); i++) ob_test_sample_decode(arches[i], OB_DEVICE_VULKAN, "vulkan");
    vkt_end();
    return ob_test_done("test_vulkan_sample");
}
#endif
