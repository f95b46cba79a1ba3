/* The Hugging Face hub cache on disk, laid out as huggingface_hub lays it out, so that a
 * file either of us fetched is found by the other (docs/pull.md):
 *
 *   <root>/models--<org>--<name>/blobs/<etag>              the file's bytes; etag: the LFS
 *                                                          sha256, or the git blob id
 *                                blobs/<etag>.incomplete   a download under way (resumed)
 *                                snapshots/<commit>/<path> -> ../../blobs/<etag>
 *                                refs/main                 the commit main pointed at
 *   <root>/.locks/models--<org>--<name>/<etag>.lock        flock: one writer per blob
 *
 * root: $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, else
 * $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub. Names that reach a path
 * (repo ids, file paths, etags, commits) are checked first: they come from the network. */
#ifndef OB_APP_HF_CACHE_H
#define OB_APP_HF_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "onebit.h"

#define OB_HF_PATH_MAX 4096

typedef struct ob_hf_cache {
    char root[OB_HF_PATH_MAX]; /* the hub cache folder */
    char repo[OB_HF_PATH_MAX]; /* root/models--org--name */
    char name[256];            /* models--org--name */
} ob_hf_cache;

/* A file of a repository as a listing gives it (the Hub's, or the cache's offline). */
typedef struct ob_hf_file {
    char *path;   /* relative path in the repo ("Q4_K_M/x-00001-of-00002.gguf") */
    char *oid;    /* git blob id (the etag of a file not in LFS), or NULL */
    char *sha256; /* LFS sha256 (the etag of an LFS file), or NULL */
    int64_t size; /* bytes; -1: not known */
} ob_hf_file;

typedef struct ob_hf_listing {
    char commit[72]; /* the commit the listing is of ("" if the Hub gave none) */
    ob_hf_file *files;
    int n, cap;
} ob_hf_listing;

void ob_hf_listing_free(ob_hf_listing *l);
/* Appends a file (strings copied; oid / sha256 may be NULL). */
ob_status ob_hf_listing_add(ob_hf_listing *l, const char *path, const char *oid, const char *sha256, int64_t size);

/* "org/name": one slash, each part 1-96 of [A-Za-z0-9._-], not starting or ending in
 * '.' or '-', no "--" or "..", as the Hub allows. */
bool ob_hf_repo_valid(const char *repo);
/* A relative path in a repo: no empty, "." or ".." parts, no leading '/', no '\\' or
 * control characters, at most 1024 bytes. */
bool ob_hf_file_valid(const char *path);
/* An etag or commit as a file name: 1-128 of [A-Za-z0-9_-]. */
bool ob_hf_oid_valid(const char *oid);

/* Finds the cache folder and the repo's folder in it (creates nothing). */
ob_status ob_hf_cache_init(ob_hf_cache *c, const char *repo, char *err, size_t err_len);
/* blobs/<etag><suffix> */
ob_status ob_hf_blob_path(const ob_hf_cache *c, const char *etag, const char *suffix, char *out, size_t cap,
                          char *err, size_t err_len);
/* snapshots/<commit>/<file> */
ob_status ob_hf_snapshot_path(const ob_hf_cache *c, const char *commit, const char *file, char *out, size_t cap,
                              char *err, size_t err_len);
/* Creates the folders above path (mkdir -p of its parent). */
ob_status ob_hf_mkdirs(const char *path, char *err, size_t err_len);
/* True when snapshots/<commit>/<file> is there and reads as a regular file; with etag,
 * also when it is a link to blobs/<etag> (a link to another blob: false). */
bool ob_hf_cache_has(const ob_hf_cache *c, const char *commit, const char *file, const char *etag);
/* Points snapshots/<commit>/<file> at blobs/<etag> (a relative link, replaced atomically). */
ob_status ob_hf_cache_link(const ob_hf_cache *c, const char *commit, const char *file, const char *etag,
                           char *err, size_t err_len);
/* refs/<ref> holds commit (written whole, then renamed into place). */
ob_status ob_hf_cache_set_ref(const ob_hf_cache *c, const char *ref, const char *commit, char *err, size_t err_len);
/* The commit refs/<ref> holds; false if none or not a valid commit. */
bool ob_hf_cache_get_ref(const ob_hf_cache *c, const char *ref, char *commit, size_t cap);
/* The files of snapshots/<commit> (regular files or links to present blobs), sorted. */
ob_status ob_hf_cache_list(const ob_hf_cache *c, const char *commit, ob_hf_listing *out, char *err, size_t err_len);
/* Takes the blob's lock (huggingface_hub's lock file, so its downloads and ours wait for
 * each other). Returns the descriptor to close, or -1 with err. */
int ob_hf_cache_lock(const ob_hf_cache *c, const char *etag, char *err, size_t err_len);

#endif
