/* RoPE as the file carries it, and llama-server's run-time overrides.
 *
 * Every variant ends as one ROPE op (graph.h): pair i turns by
 *     theta_i = pos * freq_scale * base^(-2i/n_rot) / factor_i
 * and its two outputs are multiplied by mscale. The variants differ only in how the host
 * fills those:
 * - none / linear: factor 1, freq_scale 1 / rope.scaling.factor;
 * - llama3 (Llama 3.1+): the converter writes no scaling key, only rope_freqs.weight
 *   [n_rot/2], the per-pair divisors, which the op reads as its factors (ggml's rope_ext);
 * - YaRN: each pair mixes the interpolated angle (freq_scale * theta) with the
 *   extrapolated one (theta) by a ramp over the pair index between the correction dims
 *   of beta_fast and beta_slow (as ggml's rope_yarn). The mix is linear in theta, so the
 *   host folds it into the factors, factor_i = rope_freqs_i / (fs (1 - r_i) + r_i), and the
 *   op's freq_scale becomes 1; mscale is YaRN's attention factor. The correction dims are
 *   floored and ceiled (llama.cpp, transformers' default) unless the family keeps them
 *   exact (ob_rope_meta.yarn_exact_range: gpt-oss, trained with truncate = false).
 * - LongRoPE (phi3, minicpm): the file's two factor tables, rope_factors_short and _long
 *   [n_rot/2], as the op's factors; the long one where a sequence's context passes the
 *   original one (rope.scaling.original_context_length, else the trained context), as
 *   llama.cpp chooses per context (transformers chooses per forward pass by its longest
 *   position, which a context that long reaches). mscale is the file's
 *   rope.scaling.attn_factor. Only a family that sets ob_rope_meta.longrope reads them. */
#include "arch/arch.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static const char *const scaling_names[] = {"none", "linear", "yarn", "longrope"};

ob_status ob_rope_meta_load(const ob_gguf *g, const char *a, ob_rope_meta *m, char *err, size_t err_len) {
    char key[160];
    snprintf(key, sizeof(key), "%s.rope.scaling.type", a);
    const char *stype = ob_gguf_get_str(g, key);
    m->type = OB_ROPE_SCALING_LINEAR; /* llama.cpp's default: with no factor it scales nothing */
    if (stype) {
        m->type = OB_ROPE_SCALING_UNSPECIFIED;
        for (int i = 0; i < (int)OB_ARRAY_LEN(scaling_names); i++)
            if (!strcmp(stype, scaling_names[i])) m->type = i;
        if (m->type == OB_ROPE_SCALING_UNSPECIFIED)
            return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "model: rope scaling '%s' is not supported", stype);
    }
    /* the old key name first, the current one over it */
    if (!ob_hp_f32(g, a, "rope.scale_linear", &m->factor)) m->factor = 0.0f;
    float f;
    if (ob_hp_f32(g, a, "rope.scaling.factor", &f)) m->factor = f;
    if (!(m->factor >= 0.0f) || !isfinite(m->factor))
        return ob_fail(err, err_len, OB_ERR_FORMAT, "model: bad rope scaling factor %g", m->factor);
    uint32_t v;
    m->yarn_exact_range = m->longrope = false;
    m->n_ctx_orig = ob_hp_u32(g, a, "rope.scaling.original_context_length", &v) ? (int)v : 0;
    struct { const char *suffix; float *dst, def; } fl[] = {
        {"rope.scaling.yarn_ext_factor", &m->ext_factor, -1.0f},
        {"rope.scaling.yarn_attn_factor", &m->yarn_attn_factor, -1.0f},
        {"rope.scaling.yarn_beta_fast", &m->beta_fast, -1.0f},
        {"rope.scaling.yarn_beta_slow", &m->beta_slow, -1.0f},
        {"rope.scaling.yarn_log_multiplier", &m->log_mul, 0.0f},
        {"rope.scaling.attn_factor", &m->attn_factor, 1.0f},
    };
    for (size_t i = 0; i < OB_ARRAY_LEN(fl); i++) {
        if (!ob_hp_f32(g, a, fl[i].suffix, fl[i].dst)) *fl[i].dst = fl[i].def;
        if (!isfinite(*fl[i].dst))
            return ob_fail(err, err_len, OB_ERR_FORMAT, "model: %s.%s is not finite", a, fl[i].suffix);
    }
    return OB_OK;
}

/* YaRN's correction dim: the (fractional) pair index whose wavelength fits `rot` full
 * turns into the original context (as transformers' find_correction_dim). */
static double corr_dim(int n_rot, int n_ctx_orig, double rot, double base) {
    const double two_pi = 6.283185307179586;
    return n_rot * log(n_ctx_orig / (rot * two_pi)) / (2.0 * log(base));
}

static double yarn_mscale(double factor, double mscale) {
    return factor <= 1.0 ? 1.0 : 0.1 * mscale * log(factor) + 1.0;
}

/* LongRoPE's two tables into hp->rope (see the top of the file); refuses a file that has one
 * of them, a rope_freqs beside them, YaRN over them, or a 'longrope' type without them. */
static ob_status longrope_tables(ob_model_view *mv, ob_hparams *hp, int type, float ext, char *err, size_t err_len) {
    ob_rope_cfg *r = &hp->rope;
    r->factors_long = NULL;
    r->n_ctx_orig = 0;
    const ob_weight *ts = NULL, *tl = NULL;
    if (hp->rope_meta.longrope) {
        const int64_t ne[1] = {hp->n_rot / 2};
        ts = ob_mv_weight(mv, "rope_factors_short.weight", 1, ne, false, err, err_len);
        if (!ts && ob_mv_failed(mv)) return OB_ERR_FORMAT;
        tl = ob_mv_weight(mv, "rope_factors_long.weight", 1, ne, false, err, err_len);
        if (!tl && ob_mv_failed(mv)) return OB_ERR_FORMAT;
    }
    if (!ts && !tl) {
        if (type == OB_ROPE_SCALING_LONGROPE)
            return hp->rope_meta.longrope
                       ? ob_fail(err, err_len, OB_ERR_FORMAT,
                                 "model: rope scaling 'longrope' without rope_factors_short/_long.weight")
                       : ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "model: rope scaling 'longrope' is not supported for %s",
                                 hp->arch);
        return OB_OK;
    }
    if (!ts || !tl)
        return ob_fail(err, err_len, OB_ERR_FORMAT, "model: %s.weight without %s.weight",
                       ts ? "rope_factors_short" : "rope_factors_long", ts ? "rope_factors_long" : "rope_factors_short");
    if (ts->type != OB_TYPE_F32 || tl->type != OB_TYPE_F32)
        return ob_fail(err, err_len, OB_ERR_FORMAT, "model: rope_factors_short/_long.weight must be F32");
    if (r->factors)
        return ob_fail(err, err_len, OB_ERR_FORMAT, "model: rope_freqs.weight beside LongRoPE's factors");
    if (type == OB_ROPE_SCALING_YARN || ext != 0)
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "model: YaRN over LongRoPE's factors is not supported");
    r->factors = ts;
    r->factors_long = tl;
    r->n_ctx_orig = hp->rope_meta.n_ctx_orig > 0 ? hp->rope_meta.n_ctx_orig : hp->n_ctx_train;
    return OB_OK;
}

const ob_weight *ob_rope_factors(const ob_rope_cfg *r, int cells_per_seq) {
    return r->factors_long && cells_per_seq > r->n_ctx_orig ? r->factors_long : r->factors;
}

ob_status ob_rope_resolve(ob_model_view *mv, ob_hparams *hp, const ob_model_params *p, char *err, size_t err_len) {
    const ob_rope_meta *m = &hp->rope_meta;
    ob_rope_cfg *r = &hp->rope;
    const int half = hp->n_rot / 2;
    int type = p->rope_scaling == OB_ROPE_SCALING_UNSPECIFIED ? m->type : p->rope_scaling;
    if (type < OB_ROPE_SCALING_NONE || type > OB_ROPE_SCALING_LONGROPE)
        return ob_fail(err, err_len, OB_ERR_ARG, "model: rope scaling type out of range");
    if (p->rope_freq_base > 0) r->base = p->rope_freq_base;
    float fs = m->factor > 0 ? 1.0f / m->factor : 1.0f;
    if (p->rope_freq_scale > 0) fs = p->rope_freq_scale;
    if (type == OB_ROPE_SCALING_NONE || (type == OB_ROPE_SCALING_LONGROPE && !(p->rope_freq_scale > 0)))
        fs = 1.0f;
    if (!(r->base > 0) || !isfinite(r->base) || !(fs > 0) || !isfinite(fs))
        return ob_fail(err, err_len, OB_ERR_ARG, "model: bad rope base %g or frequency scale %g", r->base, fs);
    /* the context a run-time scaling stretches the model to, for the warning past it */
    hp->n_ctx_limit = hp->n_ctx_train;
    if (p->rope_freq_scale > 0 || p->rope_scaling > OB_ROPE_SCALING_NONE) {
        int orig = p->yarn_orig_ctx > 0 ? p->yarn_orig_ctx : m->n_ctx_orig > 0 ? m->n_ctx_orig : hp->n_ctx_train;
        if (orig > 0 && orig / fs > hp->n_ctx_limit) hp->n_ctx_limit = (int)fmin(orig / fs, 1 << 30);
    }
    float ext = p->yarn_ext_factor >= 0 ? p->yarn_ext_factor : m->ext_factor;
    if (type != OB_ROPE_SCALING_YARN) ext = p->yarn_ext_factor >= 0 ? p->yarn_ext_factor : 0.0f;
    else if (ext < 0) ext = 1.0f;
    hp->yarn_factor = ext != 0 ? 1.0f / fs : 1.0f;

    /* rope_freqs.weight: llama3's divisors, as llama.cpp reads them whatever the type */
    int64_t ne[1] = {half};
    const ob_weight *ff = ob_mv_weight(mv, "rope_freqs.weight", 1, ne, false, err, err_len);
    if (!ff && ob_mv_failed(mv)) return OB_ERR_FORMAT;
    if (ff && ff->type != OB_TYPE_F32)
        return ob_fail(err, err_len, OB_ERR_FORMAT, "model: rope_freqs.weight must be F32, not %s", ob_type_name(ff->type));
    r->factors = ff;
    r->freq_scale = fs;
    ob_status st = longrope_tables(mv, hp, type, ext, err, err_len);
    if (st) return st;

    /* mscale: YaRN's attention factor (transformers' get_mscale: 0.1 ln(factor) + 1, or the
     * ratio of two with yarn_log_multiplier) unless the file or the caller gives it; then
     * the file's rope.scaling.attn_factor on top */
    double ms;
    if (p->yarn_attn_factor >= 0) ms = p->yarn_attn_factor;
    else if (m->yarn_attn_factor >= 0) ms = m->yarn_attn_factor;
    else if (ext != 0) ms = m->log_mul != 0 ? yarn_mscale(1.0 / fs, 1.0) / yarn_mscale(1.0 / fs, m->log_mul)
                                            : yarn_mscale(1.0 / fs, 1.0);
    else ms = 1.0;
    r->mscale = (float)(ms * m->attn_factor);
    if (ext == 0) return OB_OK;

    /* YaRN: fold the ramp into the factors, so the op's freq_scale is 1 */
    int n_orig = p->yarn_orig_ctx > 0 ? p->yarn_orig_ctx : m->n_ctx_orig > 0 ? m->n_ctx_orig : hp->n_ctx_train;
    if (n_orig <= 0) return ob_fail(err, err_len, OB_ERR_FORMAT, "model: YaRN needs the original context length");
    double bf = p->yarn_beta_fast >= 0 ? p->yarn_beta_fast : m->beta_fast >= 0 ? m->beta_fast : 32.0;
    double bs = p->yarn_beta_slow >= 0 ? p->yarn_beta_slow : m->beta_slow >= 0 ? m->beta_slow : 1.0;
    double lo = corr_dim(hp->n_rot, n_orig, bf, r->base), hi = corr_dim(hp->n_rot, n_orig, bs, r->base);
    if (!m->yarn_exact_range) lo = floor(lo), hi = ceil(hi);
    lo = fmax(0.0, lo);
    hi = fmin(hp->n_rot - 1.0, hi);
    float *tab = malloc(sizeof(float) * (size_t)half);
    if (!tab) return ob_fail(err, err_len, OB_ERR_NOMEM, "model: out of memory");
    const float *src = NULL;
    if (ff) src = ob_mv_host_data(mv, ff);
    for (int i = 0; i < half; i++) {
        double y = (i - lo) / fmax(0.001, hi - lo);
        double ramp = (1.0 - fmin(1.0, fmax(0.0, y))) * ext;
        double mix = fs * (1.0 - ramp) + ramp;
        tab[i] = (float)((src ? src[i] : 1.0) / mix);
    }
    r->factors = ob_mv_new_weight(mv, "rope_yarn_factors", tab, half, err, err_len);
    free(tab);
    if (!r->factors) return OB_ERR_NOMEM;
    r->freq_scale = 1.0f;
    return OB_OK;
}
