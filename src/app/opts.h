/* Flags shared by the subcommands that load a model. */
#ifndef OB_APP_OPTS_H
#define OB_APP_OPTS_H
#include "app/hf_pull.h"
#include "onebit.h"
#include <jansson.h>

typedef struct ob_common_opts {
    const char *model;       /* -m; NULL: the default model */
    ob_hf_flags hf;          /* -hf ORG/NAME[:QUANT] and its flags: the model from the Hub's cache */
    ob_model_params mp;
    ob_context_params cp;
    ob_sampler_params sp;
    ob_dry_breaker_text dry; /* --dry-sequence-breaker: made into sp's token sequences by the command */
} ob_common_opts;

void ob_opts_init(ob_common_opts *o);
/* Tries to consume argv[*i] (and its value). Returns 1 if consumed, 0 if not a common
 * flag, -1 on a bad value (message printed). */
int ob_opts_parse(ob_common_opts *o, int argc, char **argv, int *i);
/* Usage text of the common flags. */
extern const char *ob_opts_help;
/* Parses a device name: cpu, cuda[:N], vulkan[:N], CUDA0, Vulkan0, none, auto. */
bool ob_parse_device(const char *s, ob_device_kind *kind, int *index);
bool ob_parse_kv_type(const char *s, ob_kv_type *t);
/* Parses sizes like 512M, 8G, 1048576. */
bool ob_parse_size(const char *s, size_t *out);

/* llama-server's RoPE flags (--rope-scaling, --rope-scale, --rope-freq-base,
 * --rope-freq-scale, --yarn-*): if a is one, takes its value v into mp and returns 2 (flag
 * and value consumed); 0 if a is not one; -1 (err written) if v is missing or bad. */
int ob_parse_rope_flag(const char *a, const char *v, ob_model_params *mp, char *err, size_t err_len);
/* The sampling flags (--temp, --top-k, --top-p, --min-p, --repeat-penalty,
 * --presence-penalty, --frequency-penalty, --repeat-last-n, -s/--seed, and llama-server's
 * --mirostat, --mirostat-lr, --mirostat-ent, --typical, --dry-*, --xtc-*), the same way;
 * seed -1 leaves the seed as it is and *seed_set (if given) false; --dry-sequence-breaker
 * goes into *dry (refused when dry is NULL). */
int ob_parse_sampling_flag(const char *a, const char *v, ob_sampler_params *sp, bool *seed_set,
                           ob_dry_breaker_text *dry, char *err, size_t err_len);
/* Usage lines of the RoPE flags, and of the samplers beyond top-k / top-p / min-p. */
extern const char *ob_rope_help;
extern const char *ob_sampler_ext_help;

/* --chat-template-kwargs (serve and run): v must be a JSON object, its enable_thinking (if
 * any) a boolean, as a request's chat_template_kwargs must be. The object (caller frees
 * it with json_decref), or NULL with err set to one line naming the flag. */
json_t *ob_parse_template_kwargs(const char *v, char *err, size_t err_len);

/* Loads the model named by o->model (or the default one, saying where it is). */
ob_status ob_opts_load_model(ob_common_opts *o, ob_model **m);
#endif
