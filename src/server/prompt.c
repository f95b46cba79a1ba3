/* Chat messages to prompt text through the model's template (or --chat-template). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja.h"
#include "core/common.h"
#include "engine/chat_model.h"
#include "server/gen.h"

/* Checks roles and flattens OpenAI/Anthropic content parts to one string, since
 * templates differ in what they accept. Returns a new array or NULL with r filled. */
static json_t *normalize_messages(json_t *messages, ob_resp *r) {
    json_t *out = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        json_t *role = json_object_get(m, "role");
        if (!json_is_object(m) || !json_is_string(role)) {
            ob_srv_error(r, 400, NULL, "messages[%zu] must be an object with a string 'role'", i);
            goto fail;
        }
        json_t *c = json_object_get(m, "content");
        json_t *nm = json_deep_copy(m);
        if (json_is_array(c)) {
            char *text = NULL;
            size_t tl = 0, k;
            json_t *part;
            json_array_foreach(c, k, part) {
                json_t *t = json_object_get(part, "text");
                const char *ty = json_string_value(json_object_get(part, "type"));
                if (!json_is_object(part) || (ty && strcmp(ty, "text") && strcmp(ty, "input_text"))) {
                    free(text);
                    json_decref(nm);
                    ob_srv_error(r, 400, NULL, "messages[%zu].content[%zu]: only text parts are supported", i, k);
                    goto fail;
                }
                if (!json_is_string(t)) {
                    free(text);
                    json_decref(nm);
                    ob_srv_error(r, 400, NULL, "messages[%zu].content[%zu].text must be a string", i, k);
                    goto fail;
                }
                if (tl) ob_srv_buf_add(&text, &tl, "\n", 1);
                ob_srv_buf_add(&text, &tl, json_string_value(t), json_string_length(t));
            }
            json_object_set_new(nm, "content", json_stringn(text ? text : "", tl));
            free(text);
        } else if (c && !json_is_string(c) && !json_is_null(c)) {
            json_decref(nm);
            ob_srv_error(r, 400, NULL, "messages[%zu].content must be a string or an array of parts", i);
            goto fail;
        } else if (!c || json_is_null(c)) {
            json_object_set_new(nm, "content", json_string(""));
        }
        json_array_append_new(out, nm);
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}

char *ob_gen_render_chat(ob_server_state *s, json_t *messages, bool add_generation_prompt, ob_resp *r) {
    json_t *msgs = normalize_messages(messages, r);
    if (!msgs) return NULL;
    char err[512];
    char *out = NULL;
    ob_status st;
    if (s->cfg->chat_template) {
        size_t pl = 0;
        const char *bos = ob_token_piece(s->tok, ob_token_bos(s->tok), &pl);
        size_t el = 0;
        const char *eos = ob_token_piece(s->tok, ob_token_eos(s->tok), &el);
        json_t *ctx = json_pack("{s:O,s:b,s:s%,s:s%}", "messages", msgs, "add_generation_prompt", add_generation_prompt,
                                "bos_token", bos ? bos : "", bos ? pl : 0, "eos_token", eos ? eos : "", eos ? el : 0);
        st = ctx ? ob_jinja_render(s->cfg->chat_template, strlen(s->cfg->chat_template), ctx, &out, err, sizeof err)
                 : ob_fail(err, sizeof err, OB_ERR_FORMAT, "bad token text");
        json_decref(ctx);
    } else {
        st = ob_chat_render_model(s->model, msgs, add_generation_prompt, &out, err, sizeof err);
    }
    json_decref(msgs);
    if (st != OB_OK) {
        ob_srv_error(r, 400, NULL, "chat template: %s", err);
        return NULL;
    }
    return out;
}
