/* The conversation of `1bit run` without -p: lines from the terminal (through the line
 * editor) or from piped stdin, as chat turns through a template or, for a model without
 * one, as text that the model continues. */
#ifndef OB_APP_RUN_CHAT_H
#define OB_APP_RUN_CHAT_H
#include "app/run_gen.h"

typedef struct ob_run_chat_opts {
    const char *tmpl;        /* Jinja chat template; NULL: text completion */
    const char *system;      /* system prompt (-sys), or NULL */
    const json_t *template_kwargs; /* --chat-template-kwargs: more template variables, or NULL */
    int n_predict;           /* tokens a reply may have; -1: no cap */
} ob_run_chat_opts;

/* Runs the conversation until Ctrl-D, /exit or the end of stdin. Returns the exit code. */
int ob_run_chat(ob_run_gen *g, const ob_run_chat_opts *o);

#endif
