/* A grammar as llama.cpp's command lines give it (grammar.h): the flags of `1bit serve`
 * (the server-wide grammar) and `1bit run` read and checked in one place. */
#include "grammar/grammar.h"
#include "core/common.h"

#include <stdlib.h>
#include <string.h>

/* GBNF or schema text of at most this many bytes from a file */
#define FLAGS_FILE_MAX (16u << 20)

const char *ob_grammar_flags_help =
    "  --grammar GBNF            constrain generation to this GBNF grammar (llama.cpp's)\n"
    "  --grammar-file FILE       the same, read from FILE\n"
    "  -j, --json-schema SCHEMA  constrain generation to JSON that follows this JSON schema\n"
    "  --json-schema-file FILE   the same, read from FILE\n";

int ob_grammar_flags_parse(const char *a, const char *v, ob_grammar_flags *f, char *err, size_t err_len) {
    const char **slot = !strcmp(a, "--grammar")                           ? &f->gbnf
                        : !strcmp(a, "--grammar-file")                    ? &f->gbnf_file
                        : !strcmp(a, "-j") || !strcmp(a, "--json-schema") ? &f->schema
                        : !strcmp(a, "--json-schema-file")                ? &f->schema_file
                                                                          : NULL;
    if (!slot) return 0;
    if (!v) {
        ob_fail(err, err_len, OB_ERR_ARG, "%s needs a value", a);
        return -1;
    }
    *slot = v;
    return 2;
}

ob_status ob_grammar_flags_gbnf(const ob_grammar_flags *f, char **out, char *err, size_t err_len) {
    *out = NULL;
    const int given = !!f->gbnf + !!f->gbnf_file + !!f->schema + !!f->schema_file;
    if (given == 0) return OB_OK;
    if (given > 1)
        return ob_fail(err, err_len, OB_ERR_ARG, "give one of --grammar, --grammar-file, --json-schema, --json-schema-file");
    const char *file = f->gbnf_file ? f->gbnf_file : f->schema_file;
    const char *flag = f->gbnf ? "--grammar" : f->gbnf_file ? "--grammar-file" : f->schema ? "--json-schema"
                                                                                           : "--json-schema-file";
    char *text = file ? ob_read_text_file(file, FLAGS_FILE_MAX, NULL) : strdup(f->gbnf ? f->gbnf : f->schema);
    if (!text)
        return ob_fail(err, err_len, OB_ERR_IO, "%s: cannot read '%s' as text (16 MiB at most)", flag, file ? file : "");
    char e2[256] = "";
    ob_status st = OB_OK;
    if (f->schema || f->schema_file) {
        json_error_t je;
        json_t *schema = json_loads(text, JSON_DECODE_ANY, &je);
        free(text);
        text = NULL;
        if (!schema) return ob_fail(err, err_len, OB_ERR_ARG, "%s: not JSON: %s", flag, je.text);
        st = ob_grammar_from_schema(schema, &text, e2, sizeof e2);
        json_decref(schema);
        if (st) return ob_fail(err, err_len, st, "%s: %s", flag, e2);
    }
    ob_grammar *g = NULL;
    st = ob_grammar_parse(text, strlen(text), &g, e2, sizeof e2);
    ob_grammar_free(g);
    if (st) {
        free(text);
        return ob_fail(err, err_len, st, "%s: failed to parse grammar: %s", flag, e2);
    }
    *out = text;
    return OB_OK;
}
