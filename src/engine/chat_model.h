/* A model's chat template applied to a conversation: the template from the GGUF
 * metadata, or a built-in one for its architecture when the file has none. */
#ifndef OB_ENGINE_CHAT_MODEL_H
#define OB_ENGINE_CHAT_MODEL_H
#include "onebit.h"
#include <jansson.h>

/* The template text the model uses (metadata or built-in), or NULL if none is known. */
const char *ob_model_template_or_builtin(const ob_model *m);
/* Renders messages (a JSON array of {role, content, ...}); *out is malloc'd. */
ob_status ob_chat_render_model(const ob_model *m, const json_t *messages, bool add_generation_prompt,
                               char **out, char *err, size_t err_len);
/* The same with template text tmpl (--chat-template-file) instead of the model's, and
 * vars (a JSON object, or NULL: --chat-template-kwargs) as more template variables. */
ob_status ob_chat_render_model_with(const ob_model *m, const char *tmpl, const json_t *messages, const json_t *vars,
                                    bool add_generation_prompt, char **out, char *err, size_t err_len);
#endif
