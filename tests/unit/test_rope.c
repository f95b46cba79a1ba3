/* RoPE as files carry it: what the loader makes of each variant's keys and tensors, the
 * run-time overrides, and the refusals (an unknown scaling type, LongRoPE in a family that
 * does not read its tables, a tensor the architecture does not read). The logits of each variant against transformers
 * are test_models' job; this checks the resolved op parameters against formulas written
 * here in transformers' own form (inv_freq mixed by a linear ramp), not ggml's. */
#include "testutil.h"
#include "engine/model_internal.h"
#include "format/gguf.h"
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define FIX "tests/fixtures/models/"

typedef struct edit {
    const char *key, *str; /* str NULL: f32 value */
    float f;
    bool u32;
} edit;

/* Rewrites src into dst with the edits applied over its keys and, when extra is set, one
 * more F32 tensor of that name. */
static bool rewrite(const char *src, const char *dst, const edit *e, int n_e, const char *extra) {
    char err[256];
    ob_gguf *g = NULL;
    if (ob_gguf_open(src, &g, err, sizeof(err))) { CHECKF(0, "%s", err); return false; }
    ob_gguf_writer *w = ob_gguf_writer_new(3, 0);
    ob_gguf_copy_kv(w, g);
    for (int i = 0; i < n_e; i++) {
        if (e[i].str) ob_gguf_set_str(w, e[i].key, e[i].str);
        else if (e[i].u32) ob_gguf_set_u32(w, e[i].key, (uint32_t)e[i].f);
        else ob_gguf_set_f32(w, e[i].key, e[i].f);
    }
    bool ok = true;
    for (int64_t i = 0; i < ob_gguf_n_tensors(g) && ok; i++) {
        const ob_gguf_tensor *t = ob_gguf_tensor_at(g, i);
        ok = ob_gguf_add_tensor(w, t->name.p, t->type, t->n_dims, t->ne, t->data, err, sizeof(err)) == OB_OK;
    }
    float extra_data[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    int64_t ne[1] = {16};
    if (ok && extra) ok = ob_gguf_add_tensor(w, extra, OB_TYPE_F32, 1, ne, extra_data, err, sizeof(err)) == OB_OK;
    if (ok) ok = ob_gguf_writer_write(w, dst, err, sizeof(err)) == OB_OK;
    CHECKF(ok, "rewrite %s: %s", src, err);
    ob_gguf_writer_free(w);
    ob_gguf_close(g);
    return ok;
}

static ob_model *load(const char *path, const ob_model_params *mp, char *err, size_t err_len) {
    ob_model_params p = mp ? *mp : ob_model_default_params();
    p.device = OB_DEVICE_CPU;
    p.n_threads = 1;
    ob_model *m = NULL;
    if (ob_model_load(path, &p, &m, err, err_len)) return NULL;
    return m;
}

/* transformers' YaRN (modeling_rope_utils): inv_freq = interp * (1 - e) + extrap * e with
 * e = 1 - linear_ramp(low, high) over the pair index; the op's angle for pair i is
 * base^(-2i/d) * fs / factor_i, so factor_i must be extrap_i / inv_freq_i. */
static void check_yarn(const ob_model *m, double factor, int orig, double beta_fast, double beta_slow, double attn) {
    const ob_hparams *hp = &m->hp;
    const int d = hp->n_rot, half = d / 2;
    double base = hp->rope.base;
    double low = floor(d * log(orig / (beta_fast * 2 * M_PI)) / (2 * log(base)));
    double high = ceil(d * log(orig / (beta_slow * 2 * M_PI)) / (2 * log(base)));
    if (low < 0) low = 0;
    if (high > d - 1) high = d - 1;
    if (low == high) high += 0.001;
    CHECK(hp->rope.factors != NULL && hp->rope.factors->ne[0] == half && hp->rope.freq_scale == 1.0f);
    if (!hp->rope.factors) return;
    float tab[512];
    CHECK(m->backend->iface->download(m->backend, tab, hp->rope.factors->data, sizeof(float) * (size_t)half) == OB_OK);
    double worst = 0;
    for (int i = 0; i < half; i++) {
        double extrap = pow(base, -2.0 * i / d), interp = extrap / factor;
        double ramp = (i - low) / (high - low);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        double e = 1 - ramp, inv = interp * (1 - e) + extrap * e;
        double got = extrap / tab[i];
        worst = fmax(worst, fabs(got - inv) / inv);
    }
    CHECKF(worst < 1e-6, "yarn factors: rel err %.3g", worst);
    CHECKF(fabs(hp->rope.mscale - attn) < 1e-6, "yarn mscale %.7g, want %.7g", hp->rope.mscale, attn);
}

int main(void) {
    char err[512], tmp[128], tmp2[128];
    snprintf(tmp, sizeof(tmp), "/tmp/ob_rope_%d.gguf", (int)getpid());
    snprintf(tmp2, sizeof(tmp2), "/tmp/ob_rope2_%d.gguf", (int)getpid());

    /* plain files: no factors, no mscale */
    ob_model *m = load(FIX "llama.gguf", NULL, err, sizeof(err));
    CHECKF(m != NULL, "%s", err);
    if (m) {
        CHECK(m->hp.rope.factors == NULL && m->hp.rope.freq_scale == 1.0f && m->hp.rope.mscale == 1.0f);
        ob_model_free(m);
    }

    /* a tensor the architecture does not read: refused, named */
    if (rewrite(FIX "llama.gguf", tmp, NULL, 0, "blk.0.attn_extra.weight")) {
        err[0] = 0;
        m = load(tmp, NULL, err, sizeof(err));
        CHECKF(m == NULL && strstr(err, "blk.0.attn_extra.weight") && strstr(err, "does not read"), "extra tensor: %s",
               err);
        printf("extra tensor: %s\n", err);
        ob_model_free(m);
    }

    /* unknown scaling types and LongRoPE are refused with one line naming them */
    const char *bad[] = {"dynamic", "longrope", "su"};
    for (int i = 0; i < 3; i++) {
        edit e[1] = {{"qwen3.rope.scaling.type", bad[i], 0, false}};
        if (!rewrite(FIX "qwen3.gguf", tmp, e, 1, NULL)) continue;
        err[0] = 0;
        m = load(tmp, NULL, err, sizeof(err));
        CHECKF(m == NULL && strstr(err, bad[i]) && !strchr(err, '\n'), "type %s: %s", bad[i], err);
        printf("type %s: %s\n", bad[i], err);
        ob_model_free(m);
    }

    /* linear: freq_scale 1/factor; --rope-scaling none turns it off; --rope-freq-scale wins */
    {
        edit e[2] = {{"qwen3.rope.scaling.type", "linear", 0, false}, {"qwen3.rope.scaling.factor", NULL, 4.0f, false}};
        if (rewrite(FIX "qwen3.gguf", tmp, e, 2, NULL)) {
            m = load(tmp, NULL, err, sizeof(err));
            CHECKF(m && m->hp.rope.freq_scale == 0.25f && !m->hp.rope.factors && m->hp.rope.mscale == 1.0f, "linear: %s",
                   m ? "wrong values" : err);
            ob_model_free(m);
            ob_model_params p = ob_model_default_params();
            p.rope_scaling = OB_ROPE_SCALING_NONE;
            m = load(tmp, &p, err, sizeof(err));
            CHECK(m && m->hp.rope.freq_scale == 1.0f);
            ob_model_free(m);
            p = ob_model_default_params();
            p.rope_freq_scale = 0.125f;
            p.rope_freq_base = 5000.0f;
            m = load(tmp, &p, err, sizeof(err));
            CHECK(m && m->hp.rope.freq_scale == 0.125f && m->hp.rope.base == 5000.0f);
            ob_model_free(m);
        }
    }

    /* YaRN from the file's keys (Qwen3's model card form: factor 4 from 32768), the
     * defaults beta_fast 32, beta_slow 1 and attention factor 0.1 ln 4 + 1 */
    {
        edit e[3] = {{"qwen3.rope.scaling.type", "yarn", 0, false},
                     {"qwen3.rope.scaling.factor", NULL, 4.0f, false},
                     {"qwen3.rope.scaling.original_context_length", NULL, 32768, true}};
        if (rewrite(FIX "qwen3.gguf", tmp, e, 3, NULL)) {
            m = load(tmp, NULL, err, sizeof(err));
            CHECKF(m != NULL, "yarn: %s", err);
            if (m) check_yarn(m, 4.0, 32768, 32, 1, 0.1 * log(4.0) + 1);
            ob_model_free(m);
            /* the file's yarn keys and the run-time overrides over them */
            edit e2[6] = {e[0], e[1], e[2], {"qwen3.rope.scaling.yarn_beta_fast", NULL, 16.0f, false},
                          {"qwen3.rope.scaling.yarn_beta_slow", NULL, 2.0f, false},
                          {"qwen3.rope.scaling.yarn_attn_factor", NULL, 1.25f, false}};
            if (rewrite(FIX "qwen3.gguf", tmp2, e2, 6, NULL)) {
                m = load(tmp2, NULL, err, sizeof(err));
                if (m) check_yarn(m, 4.0, 32768, 16, 2, 1.25);
                else CHECKF(0, "%s", err);
                ob_model_free(m);
                ob_model_params p = ob_model_default_params();
                p.yarn_beta_fast = 24;
                p.yarn_beta_slow = 0.5f;
                p.yarn_attn_factor = 1.5f;
                p.yarn_orig_ctx = 4096;
                p.rope_freq_scale = 0.5f;
                m = load(tmp2, &p, err, sizeof(err));
                if (m) check_yarn(m, 2.0, 4096, 24, 0.5, 1.5);
                else CHECKF(0, "%s", err);
                ob_model_free(m);
            }
            /* --yarn-ext-factor 0: plain interpolation, no factors */
            ob_model_params p = ob_model_default_params();
            p.yarn_ext_factor = 0;
            m = load(tmp, &p, err, sizeof(err));
            CHECK(m && !m->hp.rope.factors && m->hp.rope.freq_scale == 0.25f && m->hp.rope.mscale == 1.0f);
            ob_model_free(m);
        }
        /* --rope-scaling yarn on a plain file, with --rope-scale and --yarn-orig-ctx */
        ob_model_params p = ob_model_default_params();
        p.rope_scaling = OB_ROPE_SCALING_YARN;
        p.rope_freq_scale = 1.0f / 8;
        p.yarn_orig_ctx = 2048;
        m = load(FIX "qwen3.gguf", &p, err, sizeof(err));
        CHECKF(m != NULL, "%s", err);
        if (m) {
            check_yarn(m, 8.0, 2048, 32, 1, 0.1 * log(8.0) + 1);
            CHECKF(m->hp.n_ctx_limit == 16384, "n_ctx_limit %d", m->hp.n_ctx_limit);
        }
        ob_model_free(m);
    }

    /* LongRoPE (phi3): the short table, the long one past the fixture's original context, and
     * the file's attention factor (transformers' default for the fixture's stretch); a table in
     * a family that does not read them is refused like any unread tensor */
    m = load(FIX "phi3.gguf", NULL, err, sizeof(err));
    CHECKF(m != NULL, "phi3: %s", err);
    if (m) {
        const ob_rope_cfg *r = &m->hp.rope;
        CHECK(r->factors && r->factors_long && !strcmp(r->factors->name, "rope_factors_short.weight") &&
              !strcmp(r->factors_long->name, "rope_factors_long.weight") && r->n_ctx_orig == 1024);
        CHECK(ob_rope_factors(r, 1024) == r->factors && ob_rope_factors(r, 1025) == r->factors_long);
        CHECKF(fabs(r->mscale - sqrt(1 + log(4.0) / log(1024.0))) < 1e-6 && r->freq_scale == 1.0f, "phi3 mscale %.7g",
               r->mscale);
        ob_model_free(m);
    }
    if (rewrite(FIX "qwen3.gguf", tmp, NULL, 0, "rope_factors_long.weight")) {
        err[0] = 0;
        m = load(tmp, NULL, err, sizeof(err));
        CHECKF(m == NULL && strstr(err, "rope_factors_long.weight"), "qwen3 with a LongRoPE table: %s", err);
        printf("qwen3 with a LongRoPE table: %s\n", err);
        ob_model_free(m);
    }
    unlink(tmp);
    unlink(tmp2);
    return ob_test_done("test_rope");
}
