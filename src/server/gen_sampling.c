/* llama-server's other sampling fields of a generation request (issue #31): Mirostat,
 * typical-p, DRY and XTC (engine/sampler_ext.c), and repeat_last_n; their values in
 * generation_settings. Defaults and checks as llama-server's, plus a 400 for a value no
 * sampler can mean (a probability outside [0, 1], a negative length). */
#include "server/gen.h"

#include <string.h>

#include "core/common.h"

/* A -1 window (llama-server: the context size) is the slot's context. */
static int resolve_window(const ob_server_state *s, int n) { return n == -1 && s->n_ctx_slot > 0 ? s->n_ctx_slot : n; }

static bool parse_breakers(json_t *v, ob_gen_req *g, ob_resp *r) {
    if (!v || json_is_null(v)) return true;
    size_t n = json_is_array(v) ? json_array_size(v) : 0;
    for (size_t i = 0; i < n; i++)
        if (!json_is_string(json_array_get(v, i))) n = 0;
    if (n == 0) { /* llama-server's words */
        ob_srv_error(r, 400, NULL, "Error: dry_sequence_breakers must be a non-empty array of strings");
        return false;
    }
    if (n > OB_DRY_MAX_BREAKERS) {
        ob_srv_error(r, 400, NULL, "'dry_sequence_breakers' may hold at most %d strings", OB_DRY_MAX_BREAKERS);
        return false;
    }
    g->dry_breakers.set = true;
    g->dry_breakers.n = 0;
    for (size_t i = 0; i < n; i++) {
        const char *str = json_string_value(json_array_get(v, i));
        if (*str) g->dry_breakers.s[g->dry_breakers.n++] = str; /* empty ones are skipped, as llama.cpp does */
    }
    return true;
}

bool ob_gen_parse_samplers(ob_server_state *s, json_t *o, ob_gen_req *g, ob_resp *r) {
    ob_sampler_params *sp = &g->sp;
    g->dry_breakers = s->cfg->dry_breakers;
    long long ll;
    double d;
#define INT_FIELD(key, lo, hi, dst) do { ll = (dst); if (!ob_srv_get_int(o, key, lo, hi, &ll, r)) return false; \
        (dst) = (int)ll; } while (0)
#define NUM_FIELD(key, lo, hi, dst) do { d = (dst); if (!ob_srv_get_num(o, key, lo, hi, &d, r)) return false; \
        (dst) = (float)d; } while (0)
    INT_FIELD("repeat_last_n", -1, 1 << 30, sp->penalty_last_n);
    INT_FIELD("mirostat", 0, 2, sp->mirostat);
    NUM_FIELD("mirostat_tau", 0, 100, sp->mirostat_tau);
    NUM_FIELD("mirostat_eta", 0, 10, sp->mirostat_eta);
    NUM_FIELD("typical_p", 0, 1, sp->typical_p);
    NUM_FIELD("dry_multiplier", 0, 100, sp->dry_multiplier);
    NUM_FIELD("dry_base", 0, 1000, sp->dry_base);
    INT_FIELD("dry_allowed_length", 0, 1 << 20, sp->dry_allowed_length);
    INT_FIELD("dry_penalty_last_n", -1, 1 << 30, sp->dry_penalty_last_n);
    NUM_FIELD("xtc_probability", 0, 1, sp->xtc_probability);
    NUM_FIELD("xtc_threshold", 0, 1, sp->xtc_threshold);
#undef INT_FIELD
#undef NUM_FIELD
    if (sp->dry_base < 1.0f) sp->dry_base = 1.75f; /* llama-server puts its default in */
    sp->penalty_last_n = resolve_window(s, sp->penalty_last_n);
    sp->dry_penalty_last_n = resolve_window(s, sp->dry_penalty_last_n);
    return parse_breakers(json_object_get(o, "dry_sequence_breakers"), g, r);
}

void ob_gen_samplers_json(const ob_gen_req *g, json_t *j) {
    static const char *const defaults[] = {"\n", ":", "\"", "*"};
    const ob_sampler_params *sp = &g->sp;
    json_t *brk = json_array();
    int n = g->dry_breakers.set ? g->dry_breakers.n : (int)OB_ARRAY_LEN(defaults);
    for (int i = 0; i < n; i++) {
        const char *str = g->dry_breakers.set ? g->dry_breakers.s[i] : defaults[i];
        json_array_append_new(brk, ob_srv_jstr(str, strlen(str)));
    }
    json_t *x = json_pack("{s:i,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:i,s:i,s:o}", "mirostat", sp->mirostat, "mirostat_tau",
                          (double)sp->mirostat_tau, "mirostat_eta", (double)sp->mirostat_eta, "typical_p",
                          (double)sp->typical_p, "xtc_probability", (double)sp->xtc_probability, "xtc_threshold",
                          (double)sp->xtc_threshold, "dry_multiplier", (double)sp->dry_multiplier, "dry_base",
                          (double)sp->dry_base, "dry_allowed_length", sp->dry_allowed_length, "dry_penalty_last_n",
                          sp->dry_penalty_last_n, "dry_sequence_breakers", brk);
    json_object_update(j, x);
    json_decref(x);
}
