/* A Jinja2 interpreter for chat templates, matching how Hugging Face transformers renders
 * them: ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the
 * loopcontrols extension, its tojson override (ensure_ascii=False, no key sorting) and
 * the raise_exception / strftime_now globals.
 *
 * Data comes in as a jansson object whose members become the template's variables.
 * Anything we cannot render exactly is an error naming the construct, never output that
 * differs from jinja2. Every render is bounded: output bytes, working memory, evaluation
 * steps and nesting depth. */
#ifndef OB_CHAT_JINJA_H
#define OB_CHAT_JINJA_H

#include <jansson.h>
#include "core/common.h"

typedef struct ob_jinja_limits {
    size_t max_output;  /* bytes of rendered text; 0 = 16 MiB */
    size_t max_memory;  /* bytes of parse tree + values; 0 = 256 MiB */
    uint64_t max_steps; /* evaluated nodes + loop iterations; 0 = 20 million */
    int max_depth;      /* nesting of parsed expressions/blocks and macro calls; 0 = 200 */
} ob_jinja_limits;

/* Renders tmpl with the members of context (a JSON object, may be NULL) as variables.
 * On success *out is a malloc'd NUL-terminated string (free() it). On failure *out is
 * NULL and err holds one line: a template error, raise_exception's message, or a limit. */
ob_status ob_jinja_render(const char *tmpl, size_t tmpl_len, const json_t *context, char **out,
                          char *err, size_t err_len);
/* Same with explicit limits (NULL = defaults); out_len (may be NULL) receives the length,
 * since rendered text may contain NUL bytes. */
ob_status ob_jinja_render_ex(const char *tmpl, size_t tmpl_len, const json_t *context,
                             const ob_jinja_limits *lim, char **out, size_t *out_len, char *err,
                             size_t err_len);

#endif
