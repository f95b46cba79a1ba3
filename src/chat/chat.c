/* Chat template lookup and rendering (see chat.h). */
#include "chat/chat.h"
#include "chat/jinja.h"
#include "format/gguf.h"
#include <stdio.h>
#include <stdlib.h>

/* A special token in tokenizer_config.json is a string or an AddedToken object. */
static char *token_str(const json_t *j) {
    if (json_is_string(j)) return strdup(json_string_value(j));
    if (json_is_object(j)) {
        const json_t *c = json_object_get(j, "content");
        if (json_is_string(c)) return strdup(json_string_value(c));
    }
    return NULL;
}

static ob_status load_config(const char *path, bool want_tools, ob_chat_template *out, char *err, size_t err_len) {
    json_error_t je;
    /* model_max_length can exceed 64 bits; we only read strings from this file */
    json_t *root = json_load_file(path, JSON_DECODE_INT_AS_REAL, &je);
    if (!root) return ob_fail(err, err_len, OB_ERR_FORMAT, "%s: line %d: %s", path, je.line, je.text);
    ob_status st = OB_OK;
    const json_t *ct = json_object_get(root, "chat_template");
    const char *src = NULL;
    if (json_is_string(ct)) src = json_string_value(ct);
    else if (json_is_array(ct)) {
        size_t i;
        json_t *e;
        const char *def = NULL, *tool = NULL;
        json_array_foreach(ct, i, e) {
            const char *name = json_string_value(json_object_get(e, "name"));
            const char *t = json_string_value(json_object_get(e, "template"));
            if (!name || !t) continue;
            if (!strcmp(name, "default")) def = t;
            if (!strcmp(name, "tool_use")) tool = t;
        }
        src = want_tools && tool ? tool : def;
        if (!src) st = ob_fail(err, err_len, OB_ERR_FORMAT, "%s: chat_template list has no \"default\" template", path);
    } else {
        st = ob_fail(err, err_len, OB_ERR_FORMAT, "%s: no chat_template", path);
    }
    if (st == OB_OK) {
        out->source = strdup(src);
        out->bos_token = token_str(json_object_get(root, "bos_token"));
        out->eos_token = token_str(json_object_get(root, "eos_token"));
        if (!out->source) st = ob_fail(err, err_len, OB_ERR_NOMEM, "out of memory");
    }
    json_decref(root);
    return st;
}

static char *gguf_token(const ob_gguf *g, const char *id_key) {
    uint32_t id;
    if (!ob_gguf_get_u32(g, id_key, &id)) return NULL;
    const ob_gguf_kv *kv = ob_gguf_find_kv(g, "tokenizer.ggml.tokens");
    if (!kv || kv->type != OB_GGUF_ARRAY || kv->arr_type != OB_GGUF_STRING || id >= kv->n) return NULL;
    return strdup(kv->arr_str[id].p);
}

static ob_status load_gguf(const char *path, ob_chat_template *out, char *err, size_t err_len) {
    ob_gguf *g;
    ob_status st = ob_gguf_open(path, &g, err, err_len);
    if (st != OB_OK) return st;
    const char *src = ob_gguf_get_str(g, "tokenizer.chat_template");
    if (!src) st = ob_fail(err, err_len, OB_ERR_FORMAT, "%s: the model has no chat template (tokenizer.chat_template)", path);
    else {
        out->source = strdup(src);
        out->bos_token = gguf_token(g, "tokenizer.ggml.bos_token_id");
        out->eos_token = gguf_token(g, "tokenizer.ggml.eos_token_id");
        if (!out->source) st = ob_fail(err, err_len, OB_ERR_NOMEM, "out of memory");
    }
    ob_gguf_close(g);
    return st;
}

ob_status ob_chat_template_load(const char *path, bool want_tools, ob_chat_template *out, char *err, size_t err_len) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return ob_fail(err, err_len, OB_ERR_IO, "cannot open %s", path);
    char magic[4] = {0};
    size_t k = fread(magic, 1, 4, f);
    fclose(f);
    ob_status st = (k == 4 && !memcmp(magic, "GGUF", 4)) ? load_gguf(path, out, err, err_len)
                                                         : load_config(path, want_tools, out, err, err_len);
    if (st != OB_OK) ob_chat_template_free(out);
    return st;
}

void ob_chat_template_free(ob_chat_template *t) {
    if (!t) return;
    free(t->source);
    free(t->bos_token);
    free(t->eos_token);
    memset(t, 0, sizeof *t);
}

ob_status ob_chat_render(const char *tmpl, const ob_chat_params *p, char **out, char *err, size_t err_len) {
    if (!tmpl || !p || !out) return ob_fail(err, err_len, OB_ERR_ARG, "chat: missing template or parameters");
    if (!json_is_array(p->messages)) return ob_fail(err, err_len, OB_ERR_ARG, "chat: messages must be a JSON array");
    if (p->tools && !json_is_array(p->tools) && !json_is_null(p->tools))
        return ob_fail(err, err_len, OB_ERR_ARG, "chat: tools must be a JSON array");
    json_t *ctx = json_object();
    json_object_set(ctx, "messages", (json_t *)p->messages);
    json_object_set_new(ctx, "tools", p->tools ? json_incref((json_t *)p->tools) : json_null());
    json_object_set_new(ctx, "documents", json_null());
    json_object_set_new(ctx, "add_generation_prompt", json_boolean(p->add_generation_prompt));
    if (p->bos_token) json_object_set_new(ctx, "bos_token", json_string(p->bos_token));
    if (p->eos_token) json_object_set_new(ctx, "eos_token", json_string(p->eos_token));
    if (p->enable_thinking >= 0) json_object_set_new(ctx, "enable_thinking", json_boolean(p->enable_thinking));
    if (json_is_object(p->extra)) json_object_update(ctx, (json_t *)p->extra);
    ob_status st = ob_jinja_render(tmpl, strlen(tmpl), ctx, out, err, err_len);
    json_decref(ctx);
    return st;
}

ob_status ob_chat_render_json(const char *tmpl, const char *context_json, char **out, char *err, size_t err_len) {
    if (out) *out = NULL;
    if (!tmpl || !context_json || !out) return ob_fail(err, err_len, OB_ERR_ARG, "chat: missing argument");
    json_error_t je;
    json_t *ctx = json_loads(context_json, JSON_ALLOW_NUL, &je);
    if (!ctx) return ob_fail(err, err_len, OB_ERR_FORMAT, "context JSON: line %d: %s", je.line, je.text);
    ob_status st = ob_jinja_render(tmpl, strlen(tmpl), ctx, out, err, err_len);
    json_decref(ctx);
    return st;
}

void ob_chat_free(void *p) { free(p); }
