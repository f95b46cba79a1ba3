/* 1bit pull: a model from the Hugging Face Hub into its cache (hf_pull.c); prints the
 * local path of the model's file on stdout, so that scripts can use it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/commands.h"
#include "app/hf_pull.h"
#include "app/opts.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: 1bit pull ORG/NAME[:QUANT] | ORG/NAME/FILE.gguf [options]\n"
            "  Downloads a GGUF model from the Hugging Face Hub into its cache (the one huggingface_hub\n"
            "  uses) and prints the local path of the model's file. Without a quantization: Q4_K_M,\n"
            "  else Q8_0, else the first GGUF. A split model (name-00001-of-0000N.gguf) comes whole;\n"
            "  the path printed is its first part.\n"
            "  -hff, --hf-file FILE   this file of the repo\n"
            "  --limit-rate RATE      at most RATE bytes a second (500K, 10M, ...)\n"
            "  -hft, --hf-token TOK   access token (default: $HF_TOKEN, else huggingface_hub's saved one)\n"
            "  --offline              the cache only: no network\n"
            "environment: HF_ENDPOINT (default https://huggingface.co), HF_TOKEN, HF_HOME, HF_HUB_CACHE,\n"
            "HF_HUB_OFFLINE=1. An interrupted download resumes where it stopped.\n");
}

int ob_cmd_pull(int argc, char **argv) {
    ob_hf_opts o = {0};
    ob_hf_flags fl = {0};
    char err[1024];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        int r = ob_hf_parse_flag(a, v, &fl, err, sizeof err);
        if (r < 0) {
            fprintf(stderr, "1bit pull: %s\n", err);
            return 2;
        }
        if (r > 0) {
            i += r - 1;
            continue;
        }
        if (!strcmp(a, "--limit-rate")) {
            size_t rate;
            if (!v || !ob_parse_size(v, &rate) || rate == 0) {
                fprintf(stderr, "1bit pull: --limit-rate needs a rate in bytes a second (such as 500K or 10M)\n");
                return 2;
            }
            o.limit_rate = (int64_t)rate;
            i++;
        } else if (a[0] == '-' || o.spec) {
            fprintf(stderr, "1bit pull: unexpected '%s' (see 1bit pull --help)\n", a);
            return 2;
        } else {
            o.spec = a;
        }
    }
    if (!o.spec) o.spec = fl.repo;
    if (!o.spec) {
        usage(stderr);
        return 2;
    }
    o.file = fl.file;
    o.token = fl.token;
    o.offline = fl.offline;
    char *path = NULL;
    if (ob_hf_pull(&o, &path, NULL, err, sizeof err)) {
        fprintf(stderr, "1bit pull: %s\n", err);
        return 1;
    }
    printf("%s\n", path);
    free(path);
    return 0;
}
