/* GGUF reader (mmap, every count/offset checked) and writer (versions 2 and 3). */
#ifndef OB_FORMAT_GGUF_H
#define OB_FORMAT_GGUF_H

#include "core/common.h"

typedef enum ob_gguf_type {
    OB_GGUF_UINT8 = 0, OB_GGUF_INT8 = 1, OB_GGUF_UINT16 = 2, OB_GGUF_INT16 = 3,
    OB_GGUF_UINT32 = 4, OB_GGUF_INT32 = 5, OB_GGUF_FLOAT32 = 6, OB_GGUF_BOOL = 7,
    OB_GGUF_STRING = 8, OB_GGUF_ARRAY = 9, OB_GGUF_UINT64 = 10, OB_GGUF_INT64 = 11,
    OB_GGUF_FLOAT64 = 12,
} ob_gguf_type;

/* A string: owned copy, NUL-terminated, but may contain NUL bytes (use len). */
typedef struct ob_gguf_str { char *p; uint64_t len; } ob_gguf_str;

typedef struct ob_gguf_kv {
    ob_gguf_str key;
    ob_gguf_type type;
    ob_gguf_type arr_type;   /* element type when type == OB_GGUF_ARRAY */
    uint64_t n;              /* number of array elements (1 for a scalar) */
    union {                  /* scalar value (integers widened, floats as double) */
        uint64_t u64; int64_t i64; double f64; bool b; ob_gguf_str str;
    } v;
    const void *arr;         /* numeric array: n packed little-endian elements (may be unaligned) */
    ob_gguf_str *arr_str;    /* string array: n strings */
} ob_gguf_kv;

typedef struct ob_gguf_tensor {
    ob_gguf_str name;
    ob_type type;
    int n_dims;
    int64_t ne[4];           /* ne[0] is the innermost (contiguous) dimension; unused = 1 */
    uint64_t offset;         /* relative to the start of the data section */
    size_t size;             /* bytes */
    const void *data;        /* points into the mapping */
} ob_gguf_tensor;

typedef struct ob_gguf ob_gguf;

/* Opens and validates a file (mmap). On error returns non-OK and one line in err. */
ob_status ob_gguf_open(const char *path, ob_gguf **out, char *err, size_t err_len);
/* Same on a buffer the caller keeps alive (fuzzing, tests). */
ob_status ob_gguf_open_mem(const void *buf, size_t len, ob_gguf **out, char *err, size_t err_len);
void ob_gguf_close(ob_gguf *g);

uint32_t ob_gguf_version(const ob_gguf *g);
size_t ob_gguf_alignment(const ob_gguf *g);
uint64_t ob_gguf_file_size(const ob_gguf *g);
int64_t ob_gguf_n_kv(const ob_gguf *g);
const ob_gguf_kv *ob_gguf_kv_at(const ob_gguf *g, int64_t i);
const ob_gguf_kv *ob_gguf_find_kv(const ob_gguf *g, const char *key);
int64_t ob_gguf_n_tensors(const ob_gguf *g);
const ob_gguf_tensor *ob_gguf_tensor_at(const ob_gguf *g, int64_t i);
const ob_gguf_tensor *ob_gguf_find_tensor(const ob_gguf *g, const char *name);

/* Typed getters: true if the key exists with a compatible type and the value fits. */
bool ob_gguf_get_u32(const ob_gguf *g, const char *key, uint32_t *out);
bool ob_gguf_get_i64(const ob_gguf *g, const char *key, int64_t *out);
bool ob_gguf_get_f32(const ob_gguf *g, const char *key, float *out);
bool ob_gguf_get_bool(const ob_gguf *g, const char *key, bool *out);
const char *ob_gguf_get_str(const ob_gguf *g, const char *key); /* NULL if absent/not a string */
/* Array element as an integer / float (numeric arrays only). */
bool ob_gguf_arr_i64(const ob_gguf_kv *kv, uint64_t i, int64_t *out);
bool ob_gguf_arr_f32(const ob_gguf_kv *kv, uint64_t i, float *out);

/* ---- writer ---- */
typedef struct ob_gguf_writer ob_gguf_writer;
ob_gguf_writer *ob_gguf_writer_new(uint32_t version /* 2 or 3 */, size_t alignment /* 0 = 32 */);
void ob_gguf_writer_free(ob_gguf_writer *w);
/* Setters replace an existing key of the same name. Values are copied. */
void ob_gguf_set_u8(ob_gguf_writer *w, const char *key, uint8_t v);
void ob_gguf_set_i8(ob_gguf_writer *w, const char *key, int8_t v);
void ob_gguf_set_u16(ob_gguf_writer *w, const char *key, uint16_t v);
void ob_gguf_set_i16(ob_gguf_writer *w, const char *key, int16_t v);
void ob_gguf_set_u32(ob_gguf_writer *w, const char *key, uint32_t v);
void ob_gguf_set_i32(ob_gguf_writer *w, const char *key, int32_t v);
void ob_gguf_set_u64(ob_gguf_writer *w, const char *key, uint64_t v);
void ob_gguf_set_i64(ob_gguf_writer *w, const char *key, int64_t v);
void ob_gguf_set_f32(ob_gguf_writer *w, const char *key, float v);
void ob_gguf_set_f64(ob_gguf_writer *w, const char *key, double v);
void ob_gguf_set_bool(ob_gguf_writer *w, const char *key, bool v);
void ob_gguf_set_str(ob_gguf_writer *w, const char *key, const char *v);
void ob_gguf_set_strn(ob_gguf_writer *w, const char *key, const char *v, uint64_t len);
/* Numeric array of n elements of elem_type (packed little-endian, as in the file). */
void ob_gguf_set_arr(ob_gguf_writer *w, const char *key, ob_gguf_type elem_type, const void *data, uint64_t n);
/* String array; lens may be NULL (then strlen). */
void ob_gguf_set_arr_str(ob_gguf_writer *w, const char *key, const char *const *strs, const uint64_t *lens, uint64_t n);
/* Copies every key of a reader's file (for rewriting files). */
void ob_gguf_copy_kv(ob_gguf_writer *w, const ob_gguf *g);
/* Adds a tensor; data (ob_row_size(type, ne[0]) * rows bytes) is borrowed until
 * ob_gguf_writer_write returns. Fails if ne[0] is not a multiple of the block size. */
ob_status ob_gguf_add_tensor(ob_gguf_writer *w, const char *name, ob_type type, int n_dims,
                             const int64_t *ne, const void *data, char *err, size_t err_len);
/* Same, but the bytes are produced at write time by fill(ctx, index, buf, size), one tensor
 * at a time, so files larger than memory can be written. fill returns false to abort. */
typedef bool (*ob_gguf_fill_fn)(void *ctx, int64_t index, void *buf, size_t size);
ob_status ob_gguf_add_tensor_fn(ob_gguf_writer *w, const char *name, ob_type type, int n_dims,
                                const int64_t *ne, ob_gguf_fill_fn fill, void *ctx,
                                char *err, size_t err_len);
/* Writes the file (to path.tmp, then renamed: nothing half-written is left). */
ob_status ob_gguf_writer_write(ob_gguf_writer *w, const char *path, char *err, size_t err_len);

#endif
