/* Local retrieval: an embedder (an embedding or rank model with its context), chunking of
 * text and markdown, and an SQLite index of chunks with their vectors. */
#ifndef OB_RAG_RAG_H
#define OB_RAG_RAG_H

#include "core/common.h"

/* ---- embedder.c ---------------------------------------------------------------------- */

typedef struct ob_embedder ob_embedder;

/* Loads an embedding model (pooling from the model; vectors L2-normalised) or, with rank,
 * a cross-encoder. n_threads 0 = all cores; device as in ob_model_params. */
ob_status ob_embedder_new(const char *path, const ob_model_params *mp, bool rank, ob_embedder **out,
                          char *err, size_t err_len);
void ob_embedder_free(ob_embedder *e);
int ob_embedder_dim(const ob_embedder *e);
/* Longest input in tokens (longer texts are cut there, as sentence-transformers does). */
int ob_embedder_max_tokens(const ob_embedder *e);
/* Embeds n texts into out [n, dim]; several texts share each batch. Empty text is an error. */
ob_status ob_embedder_embed(ob_embedder *e, int n, const char *const *texts, float *out, char *err, size_t err_len);
/* Scores n (query, doc) pairs with a cross-encoder into scores [n]. */
ob_status ob_embedder_rank(ob_embedder *e, const char *query, int n, const char *const *docs, float *scores,
                           char *err, size_t err_len);

/* ---- chunk.c ------------------------------------------------------------------------- */

typedef struct ob_rag_chunk {
    char *text;              /* owned */
    int line;                /* first line of the chunk in its file (1-based) */
} ob_rag_chunk;

/* Splits text into chunks of about max_words words along paragraph and heading breaks
 * (markdown headings start a new chunk and are repeated as its first line); a longer
 * paragraph is cut at sentence ends, else at max_words. Appends to *chunks. */
ob_status ob_rag_chunk_text(const char *text, size_t len, int max_words, ob_rag_chunk **chunks, int *n,
                            char *err, size_t err_len);
void ob_rag_chunks_free(ob_rag_chunk *c, int n);

/* ---- index.c ------------------------------------------------------------------------- */

typedef struct ob_rag_index_opts {
    int max_words;           /* chunk size; 0 = 120 */
    bool verbose;
} ob_rag_index_opts;

/* Walks dir for .txt / .md / .markdown files, chunks and embeds them, writes out_path
 * (SQLite; built in a temporary file and renamed, so a failure leaves nothing). */
ob_status ob_rag_index_build(const char *dir, ob_embedder *e, const char *embed_name, const char *out_path,
                             const ob_rag_index_opts *o, int *n_chunks, char *err, size_t err_len);

typedef struct ob_rag_hit {
    int64_t id;
    char *path;              /* owned */
    int line;
    char *text;              /* owned */
    float score;             /* cosine, or the reranker's score after ob_rag_rerank */
} ob_rag_hit;

/* The k chunks nearest to the query vector q [dim] (cosine), best first. */
ob_status ob_rag_search(const char *index_path, const float *q, int dim, int k, ob_rag_hit **hits, int *n_hits,
                        char *err, size_t err_len);
void ob_rag_hits_free(ob_rag_hit *h, int n);

#endif
