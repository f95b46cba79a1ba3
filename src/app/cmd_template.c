/* `1bit template`: renders a model's chat template for a conversation and prints the
 * prompt exactly (no trailing newline added), as transformers' apply_chat_template(
 * tokenize=False) would. */
#include "app/commands.h"
#include "chat/chat.h"
#include <stdio.h>
#include <stdlib.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: 1bit template [-m MODEL.gguf|tokenizer_config.json] --messages FILE.json [options]\n\n"
            "  -m, --model PATH        GGUF model or tokenizer_config.json (default: the default model)\n"
            "  --messages FILE         JSON array of messages, or an object with \"messages\" (and \"tools\")\n"
            "  --tools FILE            JSON array of tool definitions\n"
            "  --no-generation-prompt  do not append the assistant turn opener\n"
            "  --enable-thinking B     pass enable_thinking=true|false to the template\n"
            "  --vars FILE             JSON object of extra template variables\n");
}

static json_t *load_json(const char *path, const char *what) {
    json_error_t je;
    json_t *j = json_load_file(path, JSON_ALLOW_NUL, &je);
    if (!j) fprintf(stderr, "1bit template: %s %s: line %d: %s\n", what, path, je.line, je.text);
    return j;
}

int ob_cmd_template(int argc, char **argv) {
    const char *model = NULL, *msgs_path = NULL, *tools_path = NULL, *vars_path = NULL;
    bool gen_prompt = true;
    int thinking = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has_val) model = argv[++i];
        else if (!strcmp(a, "--messages") && has_val) msgs_path = argv[++i];
        else if (!strcmp(a, "--tools") && has_val) tools_path = argv[++i];
        else if (!strcmp(a, "--vars") && has_val) vars_path = argv[++i];
        else if (!strcmp(a, "--no-generation-prompt")) gen_prompt = false;
        else if (!strcmp(a, "--enable-thinking") && has_val) {
            const char *v = argv[++i];
            if (!strcmp(v, "true") || !strcmp(v, "1")) thinking = 1;
            else if (!strcmp(v, "false") || !strcmp(v, "0")) thinking = 0;
            else { fprintf(stderr, "1bit template: --enable-thinking takes true or false\n"); return 2; }
        } else {
            fprintf(stderr, "1bit template: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!msgs_path) { fprintf(stderr, "1bit template: --messages is required\n"); usage(stderr); return 2; }

    char err[1024];
    char *model_alloc = NULL;
    if (!model) {
        model_alloc = ob_default_model_path(err, sizeof err);
        if (!model_alloc) { fprintf(stderr, "1bit template: %s\n", err); return 1; }
        model = model_alloc;
    }
    int rc = 1;
    json_t *msgs = NULL, *tools = NULL, *vars = NULL;
    ob_chat_template t = {0};
    char *out = NULL;
    json_t *doc = load_json(msgs_path, "messages");
    if (!doc) goto done;
    if (json_is_array(doc)) msgs = json_incref(doc);
    else if (json_is_object(doc) && json_is_array(json_object_get(doc, "messages"))) {
        msgs = json_incref(json_object_get(doc, "messages"));
        if (json_object_get(doc, "tools")) tools = json_incref(json_object_get(doc, "tools"));
    } else {
        fprintf(stderr, "1bit template: %s: expected an array of messages or an object with \"messages\"\n", msgs_path);
        goto done;
    }
    if (tools_path) {
        json_decref(tools);
        if (!(tools = load_json(tools_path, "tools"))) goto done;
    }
    if (vars_path && !(vars = load_json(vars_path, "vars"))) goto done;
    if (json_is_null(tools)) { json_decref(tools); tools = NULL; }
    if (ob_chat_template_load(model, tools != NULL, &t, err, sizeof err) != OB_OK) {
        fprintf(stderr, "1bit template: %s\n", err);
        goto done;
    }
    ob_chat_params p = {
        .messages = msgs, .tools = tools, .add_generation_prompt = gen_prompt, .enable_thinking = thinking,
        .bos_token = t.bos_token, .eos_token = t.eos_token, .extra = vars,
    };
    if (ob_chat_render(t.source, &p, &out, err, sizeof err) != OB_OK) {
        fprintf(stderr, "1bit template: %s\n", err);
        goto done;
    }
    fwrite(out, 1, strlen(out), stdout);
    fflush(stdout);
    rc = 0;
done:
    free(out);
    ob_chat_template_free(&t);
    json_decref(doc);
    json_decref(msgs);
    json_decref(tools);
    json_decref(vars);
    free(model_alloc);
    return rc;
}
