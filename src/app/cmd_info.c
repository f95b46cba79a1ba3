/* 1bit info: the model's hyperparameters and the compute devices this build has; with
 * --env, every environment switch of the backends built in. */
#include "app/commands.h"
#include "app/opts.h"
#include "core/env.h"
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#ifdef ONEBIT_CUDA
#include "backend/cuda/cuda_env.h"
#endif
#ifdef ONEBIT_VULKAN
#include "backend/vulkan/vulkan.h"
#endif

/* Each backend's table, then the switches they share; a backend not built says so. */
static void list_env(void) {
    size_t n = 0;
    const ob_env_var *t = NULL;
    (void)n, (void)t;
#ifdef ONEBIT_CUDA
    t = ob_cuda_env(&n);
    ob_env_list(stdout, "cuda", t, n);
#else
    printf("cuda: not built (-DONEBIT_CUDA=ON)\n");
#endif
#ifdef ONEBIT_VULKAN
    t = ob_vulkan_env(&n);
    ob_env_list(stdout, "vulkan", t, n);
#else
    printf("vulkan: not built (-DONEBIT_VULKAN=ON)\n");
#endif
    ob_env_list(stdout, "tests", ob_env_shared, ob_env_shared_n);
}

int ob_cmd_info(int argc, char **argv) {
    ob_common_opts o;
    ob_opts_init(&o);
    bool want_model = false, want_env = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--env")) {
            want_env = true;
            continue;
        }
        int r = ob_opts_parse(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) { want_model = want_model || o.model; continue; }
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: 1bit info [-m FILE] [--env]\n"
                   "  --env  the environment switches of every backend built in: value (or default) and meaning\n");
            return 0;
        }
        fprintf(stderr, "1bit info: unknown option '%s'\n", argv[i]);
        return 2;
    }
    if (want_env) {
        list_env();
        if (!want_model) return 0;
    }
    printf("devices:\n  cpu: %ld cores\n", sysconf(_SC_NPROCESSORS_ONLN));
#ifdef ONEBIT_CUDA
    printf("  cuda: built in (use --device cuda[:N])\n");
#endif
#ifdef ONEBIT_VULKAN
    ob_vulkan_list_devices(stdout);
#else
    printf("  vulkan: not built (-DONEBIT_VULKAN=ON)\n");
#endif
    if (!want_model) return 0;
    ob_model *m = NULL;
    if (ob_opts_load_model(&o, &m)) return 1;
    ob_model_info in;
    ob_model_get_info(m, &in);
    printf("model: %s\n  architecture: %s\n  parameters: %.3f B\n  file: %.2f MiB\n  vocab %d, embd %d, layers %d, heads %d/%d, head dim %d, train ctx %d\n  backend: %s\n",
           in.name, in.arch, in.n_params / 1e9, in.file_size / 1048576.0, in.n_vocab, in.n_embd, in.n_layer, in.n_head,
           in.n_head_kv, in.head_dim, in.n_ctx_train, in.backend);
    ob_model_free(m);
    return 0;
}
