/* 1bit run: complete a prompt (-p), or converse in the terminal (run_chat.c): the model's
 * chat template, or text completion for a model without one. */
#include "app/commands.h"
#include "app/opts.h"
#include "app/run_chat.h"
#include "chat/chat.h"
#include "core/common.h"
#include "engine/chat_model.h"
#include "grammar/grammar.h"
#include "server/server.h"
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tokens a reply may have unless -n says otherwise: a base model rarely ends a text by
 * itself, so the completion and the chat stop here. */
#define OB_RUN_N_PREDICT 256

static void print_timings(int n_prompt, double t_prompt, int n_gen, double t_gen) {
    fprintf(stderr, "\n[prompt: %d tokens, %.1f tok/s | generation: %d tokens, %.1f tok/s]\n", n_prompt,
            t_prompt > 0 ? n_prompt / t_prompt : 0.0, n_gen, t_gen > 0 ? n_gen / t_gen : 0.0);
}

/* The chat template a GGUF or a tokenizer_config.json carries; NULL with the reason printed. */
static char *template_in(const char *path) {
    ob_chat_template ct;
    char err[512];
    if (ob_chat_template_load(path, false, &ct, err, sizeof(err))) {
        fprintf(stderr, "1bit run: --chat-template-file: %s\n", err);
        return NULL;
    }
    char *src = ct.source;
    ct.source = NULL;
    ob_chat_template_free(&ct);
    return src;
}

/* A template file as llama-server takes it (Jinja text), or the template in a GGUF or a
 * tokenizer_config.json. Returns malloc'd text, or NULL with the reason printed. */
static char *read_template_file(const char *path) {
    FILE *f = fopen(path, "rb");
    char magic[4];
    if (f && fread(magic, 1, 4, f) == 4 && !memcmp(magic, "GGUF", 4)) {
        fclose(f);
        return template_in(path);
    }
    if (f) fclose(f);
    size_t n = 0;
    char *t = ob_read_text_file(path, 16u << 20, &n);
    if (!t || !n) {
        fprintf(stderr, "1bit run: --chat-template-file: cannot read '%s' as a template (16 MiB of text at most)\n", path);
        free(t);
        return NULL;
    }
    /* a JSON object whose first key is quoted, where a Jinja text opens with {{, {% or {# */
    size_t i = strspn(t, " \t\r\n");
    if (t[i] == '{' && t[i + 1 + strspn(t + i + 1, " \t\r\n")] == '"') {
        free(t);
        return template_in(path);
    }
    return t;
}

/* The chat's template: --chat-template-file, --chat-template (a llama-server name or the
 * text), the model's own; with -cnv and none of these, the family's built-in one. NULL:
 * text completion. *owned is what to free; *bad is set when a flag's template is unusable. */
static const char *pick_template(const ob_model *m, const char *file, const char *named, int cnv, char **owned,
                                 bool *bad) {
    *owned = NULL;
    *bad = false;
    if (cnv < 0) return NULL;
    if (file) {
        *owned = read_template_file(file);
        *bad = !*owned;
        return *owned;
    }
    if (named) {
        bool known;
        const char *src = ob_srv_named_template(named, &known);
        if (known && !src) {
            fprintf(stderr, "1bit run: --chat-template %s: this built-in template is not available here; pass its "
                    "Jinja text with --chat-template-file\n", named);
            *bad = true;
        }
        return known ? src : named;
    }
    if (ob_model_chat_template(m)) return ob_model_chat_template(m);
    if (cnv <= 0) return NULL;
    const char *builtin = ob_model_template_or_builtin(m);
    bool known;
    return builtin ? builtin : ob_srv_named_template("chatml", &known);
}

int ob_cmd_run(int argc, char **argv) {
    ob_common_opts o;
    ob_opts_init(&o);
    const char *prompt = NULL, *system = NULL, *draft_path = NULL, *tmpl_file = NULL, *tmpl_named = NULL;
    const char *kwargs_text = NULL;
    int n_predict = -2, cnv = 0; /* -2: not given; cnv: 1 -cnv, -1 -no-cnv */
    ob_spec_params spp = ob_spec_default_params();
    ob_grammar_flags gf = {0};
    char err[512];
    for (int i = 1; i < argc; i++) {
        int r = ob_opts_parse(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        const char *a = argv[i];
        if ((r = ob_grammar_flags_parse(a, i + 1 < argc ? argv[i + 1] : NULL, &gf, err, sizeof(err))) != 0) {
            if (r < 0) {
                fprintf(stderr, "1bit run: %s\n", err);
                return 2;
            }
            i++;
            continue;
        }
        if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && i + 1 < argc) prompt = argv[++i];
        else if ((!strcmp(a, "-n") || !strcmp(a, "--n-predict") || !strcmp(a, "--predict")) && i + 1 < argc) {
            char *end = NULL;
            long v = strtol(argv[++i], &end, 10);
            if (!*argv[i] || *end || v < -1 || v > 1 << 24) {
                fprintf(stderr, "1bit run: bad value for %s: '%s' (a token count, or -1 for no cap)\n", a, argv[i]);
                return 2;
            }
            n_predict = (int)v;
        }
        else if ((!strcmp(a, "-sys") || !strcmp(a, "--system") || !strcmp(a, "--system-prompt")) && i + 1 < argc) system = argv[++i];
        else if ((!strcmp(a, "-md") || !strcmp(a, "--model-draft")) && i + 1 < argc) draft_path = argv[++i];
        else if (!strcmp(a, "--chat-template-file") && i + 1 < argc) { tmpl_file = argv[++i]; tmpl_named = NULL; }
        else if (!strcmp(a, "--chat-template") && i + 1 < argc) { tmpl_named = argv[++i]; tmpl_file = NULL; }
        else if (!strcmp(a, "--chat-template-kwargs") && i + 1 < argc) kwargs_text = argv[++i];
        else if (!strcmp(a, "-cnv") || !strcmp(a, "--conversation")) cnv = 1;
        else if (!strcmp(a, "-no-cnv") || !strcmp(a, "--no-conversation")) cnv = -1;
        else if (!strcmp(a, "--jinja")) {} /* templates are always Jinja here */
        else if (!strcmp(a, "--draft-max") || !strcmp(a, "--draft") || !strcmp(a, "--draft-n") ||
                 !strcmp(a, "--draft-min") || !strcmp(a, "--draft-n-min") || !strcmp(a, "--draft-p-min")) {
            char *end = NULL;
            double v = i + 1 < argc ? strtod(argv[i + 1], &end) : -1;
            bool pmin = !strcmp(a, "--draft-p-min");
            if (!end || *end || end == argv[i + 1] || v < 0 || v > (pmin ? 1 : 1024) || (!pmin && v != (int)v)) {
                fprintf(stderr, "1bit run: bad value for %s (%s)\n", a, pmin ? "a probability in [0, 1]" : "an integer in [0, 1024]");
                return 2;
            }
            i++;
            if (pmin) spp.p_min = (float)v;
            else if (strstr(a, "min")) spp.n_min = (int)v;
            else spp.n_max = (int)v;
        }
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: 1bit run [-m FILE] [-p PROMPT] [-n N] [--system TEXT] [options]\n"
                   "  -p, --prompt TEXT        complete this text (no prompt: interactive chat)\n"
                   "  -n, --n-predict N        most tokens to generate, per reply in the chat (default: %d;\n"
                   "                           -1: until the end of generation or of the context)\n"
                   "  -sys, --system TEXT      system prompt for chat\n"
                   "  --chat-template-file F   chat with this Jinja template (or a GGUF's or a\n"
                   "                           tokenizer_config.json's) instead of the model's\n"
                   "  --chat-template NAME     a llama-server built-in template (chatml, llama3, gemma, ...)\n"
                   "  --chat-template-kwargs J a JSON object of more template variables\n"
                   "                           (e.g. '{\"enable_thinking\":false}')\n"
                   "  -cnv, --conversation     chat even when the model has no template (its family's\n"
                   "                           format, or chatml)\n"
                   "  -no-cnv                  text completion even when the model has a template\n"
                   "  -md, --model-draft FILE  speculative decoding with this draft model (same vocabulary)\n"
                   "  --draft-max N            most tokens drafted per step (default 16)\n"
                   "  --draft-min N            drop drafts shorter than N (default 0)\n"
                   "  --draft-p-min P          stop drafting below this draft probability (default 0.75)\n"
                   "%s%s"
                   "In the chat, Ctrl-C stops a reply and /help lists the commands (/clear, /save FILE,\n"
                   "/load FILE, /exit). A model without a chat template continues the text instead.\n",
                   OB_RUN_N_PREDICT, ob_grammar_flags_help, ob_opts_help);
            return 0;
        } else {
            fprintf(stderr, "1bit run: unknown option '%s' (see 1bit run --help)\n", a);
            return 2;
        }
    }
    /* the grammar read and checked before the model loads: a bad one is a flag error */
    char *gbnf = NULL;
    if (ob_grammar_flags_gbnf(&gf, &gbnf, err, sizeof(err))) {
        fprintf(stderr, "1bit run: %s\n", err);
        return 2;
    }
    /* the template's extra variables, checked as serve checks them (opts.c) */
    json_t *tmpl_kwargs = NULL;
    if (kwargs_text && !(tmpl_kwargs = ob_parse_template_kwargs(kwargs_text, err, sizeof(err)))) {
        fprintf(stderr, "1bit run: %s\n", err);
        free(gbnf);
        return 2;
    }
    ob_model *m = NULL;
    ob_context *c = NULL;
    if (ob_opts_load_model(&o, &m)) {
        json_decref(tmpl_kwargs);
        free(gbnf);
        return 1;
    }
    if (ob_context_new(m, &o.cp, &c, err, sizeof(err))) {
        fprintf(stderr, "1bit: %s\n", err);
        json_decref(tmpl_kwargs);
        free(gbnf);
        ob_model_free(m);
        return 1;
    }
    ob_run_gen g = {0};
    ob_model *dm = NULL;
    int rc = 0;
    /* DRY's breakers as this vocabulary's token sequences (the sampler keeps a copy) */
    ob_dry_breakers brk = {0};
    if (ob_sampler_dry_on(&o.sp) && ob_dry_breakers_tokenize(ob_model_tokenizer(m), &o.dry, &brk)) rc = 1;
    o.sp.n_dry_breakers = brk.n;
    o.sp.dry_breaker_len = brk.len;
    o.sp.dry_breaker_tok = brk.tok;
    if (rc || ob_run_gen_init(&g, m, c, &o.sp, o.cp.n_batch)) { fprintf(stderr, "1bit: out of memory\n"); rc = 1; }
    else if (gbnf && ob_run_gen_set_grammar(&g, gbnf, err, sizeof(err))) { fprintf(stderr, "1bit: %s\n", err); rc = 1; }
    else if (draft_path && (spp.n_max = OB_MIN(spp.n_max, o.cp.n_batch - 1)) > 0) {
        ob_status st = ob_model_load(draft_path, &o.mp, &dm, err, sizeof(err));
        if (!st) st = ob_run_gen_add_draft(&g, dm, &spp, err, sizeof(err));
        if (st) { fprintf(stderr, "1bit: %s\n", err); rc = 1; }
    }
    ob_dry_breakers_free(&brk);
    o.sp.n_dry_breakers = 0;
    o.sp.dry_breaker_len = o.sp.dry_breaker_tok = NULL;
    if (n_predict == -2) n_predict = OB_RUN_N_PREDICT;
    if (rc) {}
    else if (prompt) {
        int n = 0;
        int32_t *ids = ob_run_tokenize(g.tok, prompt, true, &n);
        if (!ids || n == 0) { fprintf(stderr, "1bit: the prompt could not be tokenized\n"); rc = 1; }
        else {
            ob_run_reply r = {0};
            ob_run_end end = ob_run_gen_reply(&g, ids, n, n_predict < 0 ? INT_MAX : n_predict, &r);
            ob_run_reply_flush(&r);
            if (end == OB_RUN_END_CTX) fprintf(stderr, "\n1bit: context full\n");
            if (end != OB_RUN_END_ERROR) {
                fputc('\n', stdout);
                print_timings(n, r.t_prompt, r.n_ids, r.t_gen);
            }
            rc = end == OB_RUN_END_ERROR ? 1 : 0;
            ob_run_reply_free(&r);
        }
        free(ids);
    } else {
        char *owned;
        bool bad;
        ob_run_chat_opts co = {.system = system, .n_predict = n_predict, .template_kwargs = tmpl_kwargs};
        co.tmpl = pick_template(m, tmpl_file, tmpl_named, cnv, &owned, &bad);
        rc = bad ? 2 : ob_run_chat(&g, &co);
        free(owned);
    }
    if (g.spec)
        fprintf(stderr, "[draft: %ld tokens proposed, %ld accepted (%.1f%%)]\n", g.n_drafted, g.n_accepted,
                g.n_drafted ? 100.0 * (double)g.n_accepted / (double)g.n_drafted : 0.0);
    ob_run_gen_free(&g);
    json_decref(tmpl_kwargs);
    free(gbnf);
    ob_model_free(dm);
    ob_context_free(c);
    ob_model_free(m);
    return rc;
}
