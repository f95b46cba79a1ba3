#include "arch/arch.h"
#include <stdio.h>

typedef struct { const char *gguf_name; const ob_arch *family; } ob_arch_entry;

static const ob_arch_entry g_arches[] = {
    {"llama", &ob_arch_llama},
    {"qwen2", &ob_arch_llama},
    {"qwen3", &ob_arch_llama},
    {"smollm3", &ob_arch_llama},
    {"phi3", &ob_arch_phi3},
    {"minicpm", &ob_arch_minicpm},
    {"qwen3moe", &ob_arch_qwen3moe},
    {"deepseek2", &ob_arch_deepseek2},
    {"gpt-oss", &ob_arch_gptoss},
    {"qwen35", &ob_arch_qwen35},
    {"qwen35moe", &ob_arch_qwen35moe},
    {"lfm2", &ob_arch_lfm2},
    {"gemma3", &ob_arch_gemma3},
    {"bert", &ob_arch_bert},
    {"nomic-bert", &ob_arch_bert},
    {"jina-bert-v2", &ob_arch_bert},
};

const ob_arch *ob_arch_find(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < OB_ARRAY_LEN(g_arches); i++)
        if (!strcmp(g_arches[i].gguf_name, name)) return g_arches[i].family;
    return NULL;
}

const char *ob_arch_supported_list(void) {
    return "llama, qwen2, qwen3, smollm3, phi3, minicpm, qwen3moe, deepseek2, gpt-oss, qwen35, qwen35moe, lfm2, gemma3, bert, nomic-bert, jina-bert-v2";
}

bool ob_hp_u32(const ob_gguf *g, const char *arch, const char *suffix, uint32_t *out) {
    char key[160];
    snprintf(key, sizeof(key), "%s.%s", arch, suffix);
    return ob_gguf_get_u32(g, key, out);
}

bool ob_hp_f32(const ob_gguf *g, const char *arch, const char *suffix, float *out) {
    char key[160];
    snprintf(key, sizeof(key), "%s.%s", arch, suffix);
    return ob_gguf_get_f32(g, key, out);
}
