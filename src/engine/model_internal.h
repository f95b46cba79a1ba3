/* Engine internals shared by model.c and context.c. */
#ifndef OB_ENGINE_MODEL_INTERNAL_H
#define OB_ENGINE_MODEL_INTERNAL_H

#include "arch/arch.h"
#include "backend/backend.h"
#include "format/quant.h"

#define OB_MODEL_MAX_MADE (2 * OB_MAX_LAYERS + 4) /* YaRN's factors; deepseek2's k_b and v_b of old files */

struct ob_model {
    ob_gguf *gguf;           /* owns the mapping the CPU weights point into */
    ob_backend *backend;
    const ob_arch *arch;
    ob_hparams hp;
    void *arch_priv;         /* family-private weight pointers */
    ob_weight *weights;      /* [n_weights], one per GGUF tensor */
    int64_t n_weights;
    bool *bound;             /* [n_weights]: looked up by the family (or the rope setup) */
    /* weights the file does not hold (ob_mv_new_weight), each in a buffer of its own (data) */
    ob_weight *made[OB_MODEL_MAX_MADE];
    int n_made;
    void *weight_buf;        /* device copy of all weights (NULL when borrowed from the mmap) */
    ob_tokenizer *tok;
    char *chat_template;
    char *path;
    char name[128];
    uint64_t weight_bytes;
    int64_t n_params;
    ob_model_params params;
    /* device bytes held for the model now and at most (ob_model_memory); contexts may come
     * and go on several threads, so both are updated atomically */
    uint64_t mem_now, mem_peak;
};

/* Adds delta (negative: freed) to the model's device bytes, raising the peak. */
void ob_model_mem_add(ob_model *m, int64_t delta);

struct ob_model_view {
    ob_model *m;
    bool failed;
};

#endif
