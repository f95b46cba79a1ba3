/* 1bit convert HF_FOLDER -o FILE.gguf [--type F32|F16|BF16|Q8_0|...] [--name NAME]
 * Turns a Hugging Face model folder into a GGUF file, in C (no Python). */
#include <stdio.h>
#include <string.h>
#include "app/commands.h"
#include "convert/convert.h"

static void usage(FILE *f) {
    fprintf(f, "usage: 1bit convert HF_FOLDER -o FILE.gguf [--type F32|F16|BF16|Q8_0|...] [--name NAME]\n"
               "  reads config.json, *.safetensors (or pytorch_model.bin) and tokenizer.json / vocab.txt;\n"
               "  2-D weights get --type (default F16), 1-D tensors and norms stay F32\n");
}

int ob_cmd_convert(int argc, char **argv) {
    const char *dir = NULL, *out = NULL;
    ob_convert_opts o = {OB_TYPE_F16, NULL};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if ((!strcmp(a, "-o") || !strcmp(a, "--outfile")) && i + 1 < argc) out = argv[++i];
        else if ((!strcmp(a, "--type") || !strcmp(a, "--outtype")) && i + 1 < argc) {
            if (!ob_type_from_name(argv[++i], &o.type)) {
                fprintf(stderr, "convert: unknown type '%s'\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--name") && i + 1 < argc) o.name = argv[++i];
        else if (a[0] == '-') { fprintf(stderr, "convert: unknown option '%s'\n", a); usage(stderr); return 2; }
        else if (!dir) dir = a;
        else { fprintf(stderr, "convert: more than one folder given\n"); return 2; }
    }
    if (!dir || !out) { usage(stderr); return 2; }
    char err[1024];
    double t0 = ob_time_s();
    ob_status st = ob_convert_hf(dir, out, &o, err, sizeof(err));
    if (st) { fprintf(stderr, "convert: %s\n", err); return 1; }
    fprintf(stderr, "convert: wrote %s (%s) in %.1f s\n", out, ob_type_name(o.type), ob_time_s() - t0);
    return 0;
}
