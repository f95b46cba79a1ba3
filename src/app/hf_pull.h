/* Models from the Hugging Face Hub into its cache (docs/pull.md): `1bit pull` and the
 * -hf flags of run and serve. A spec names a repo and, optionally, a quantization or a
 * file: org/name, org/name:Q4_K_M, org/name/path/file.gguf. The Hub is $HF_ENDPOINT
 * (default https://huggingface.co); the token $HF_TOKEN or huggingface_hub's token file;
 * the cache hf_cache.h's. */
#ifndef OB_APP_HF_PULL_H
#define OB_APP_HF_PULL_H

#include <stdbool.h>
#include <stdint.h>

#include "onebit.h"

typedef struct ob_hf_opts {
    const char *spec;   /* org/name[:QUANT] or org/name/path/file.gguf */
    const char *file;   /* a file of the repo (-hff), over the spec's quantization */
    const char *token;  /* -hft; NULL: $HF_TOKEN, else the token file */
    int64_t limit_rate; /* bytes/s, 0: no limit */
    bool offline;       /* the cache only (also $HF_HUB_OFFLINE=1) */
    /* the download's progress, file by file (ob_hf_http's on_progress); NULL: none */
    void (*on_progress)(void *ud, const char *label, int64_t have, int64_t size);
    void *progress_ud;
    const volatile int *cancel; /* once set, the pull gives up */
} ob_hf_opts;

/* Makes the model's files present in the cache, downloading what is missing, and gives
 * the local path of its (first) file, malloc'd, and its number of files (a split GGUF
 * has several). Without the network (unreachable, or offline), a cached copy is used with
 * a notice on stderr. */
ob_status ob_hf_pull(const ob_hf_opts *o, char **path, int *n_files, char *err, size_t err_len);

/* llama-server's Hugging Face flags: -hf/-hfr/--hf-repo, -hff/--hf-file, -hft/--hf-token,
 * -hfd/-hfrd/--hf-repo-draft, --offline. */
typedef struct ob_hf_flags {
    const char *repo, *file, *token, *draft_repo;
    bool offline;
} ob_hf_flags;

/* If a is one of those flags, takes it (and its value v) into f: returns 2 (flag and
 * value), 1 (--offline, no value), 0 if a is not one, -1 (err written) if v is missing. */
int ob_hf_parse_flag(const char *a, const char *v, ob_hf_flags *f, char *err, size_t err_len);
/* Takes those flags out of argv (in place; *argc shrinks), keeping --offline there for
 * the command's own parser. Returns -1 (err written) on a flag without its value. */
int ob_hf_take_flags(int *argc, char **argv, ob_hf_flags *f, char *err, size_t err_len);
/* The model (draft false) or draft model (true) the flags name, as a local path
 * (malloc'd); for a split GGUF, its first part. */
ob_status ob_hf_resolve(const ob_hf_flags *f, bool draft, char **path, char *err, size_t err_len);

#endif
