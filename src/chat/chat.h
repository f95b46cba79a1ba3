/* Chat templates: find a model's template (tokenizer_config.json or GGUF metadata) and
 * render it for a conversation the way transformers' apply_chat_template does: variables
 * messages, tools (None when absent), documents (None), add_generation_prompt, bos_token /
 * eos_token (only when the model has them), enable_thinking (only when given), plus any
 * extra keyword variables. */
#ifndef OB_CHAT_CHAT_H
#define OB_CHAT_CHAT_H

#include <jansson.h>
#include "core/common.h"

typedef struct ob_chat_template {
    char *source;               /* Jinja source */
    char *bos_token, *eos_token; /* NULL when the model defines none */
} ob_chat_template;

/* path: a tokenizer_config.json (its "chat_template" may be a string or a list of named
 * templates: "tool_use" is taken when want_tools and present, else "default") or a GGUF
 * file (tokenizer.chat_template; bos/eos from the token ids). */
ob_status ob_chat_template_load(const char *path, bool want_tools, ob_chat_template *out,
                                char *err, size_t err_len);
void ob_chat_template_free(ob_chat_template *t);

typedef struct ob_chat_params {
    const json_t *messages;     /* array of message objects */
    const json_t *tools;        /* array, or NULL: the template sees tools = None */
    bool add_generation_prompt;
    int enable_thinking;        /* -1: not passed (undefined in the template); 0 / 1 */
    const char *bos_token, *eos_token; /* NULL: left undefined */
    const json_t *extra;        /* object of further variables (override the above), or NULL */
} ob_chat_params;

/* Renders tmpl; *out is malloc'd (free()). A template that calls raise_exception fails
 * with its message in err. */
ob_status ob_chat_render(const char *tmpl, const ob_chat_params *p, char **out, char *err,
                         size_t err_len);

/* For ctypes callers: the context is a whole JSON object text. Free *out with ob_chat_free. */
ob_status ob_chat_render_json(const char *tmpl, const char *context_json, char **out, char *err,
                              size_t err_len);
void ob_chat_free(void *p);

#endif
