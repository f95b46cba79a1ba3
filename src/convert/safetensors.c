/* safetensors: u64 little-endian header length, a JSON header {name: {dtype, shape,
 * data_offsets: [begin, end]}, "__metadata__": {...}}, then the data. Files are mmapped;
 * every offset and shape is checked against the file before a pointer is formed. */
#include "convert/convert.h"
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define OB_ST_MAX_HEADER (100u << 20)

ob_status ob_src_keep_map(ob_src_set *s, void *map, size_t len, char *err, size_t err_len) {
    void **m = realloc(s->maps, sizeof(void *) * (size_t)(s->n_maps + 1));
    if (!m) return ob_fail(err, err_len, OB_ERR_NOMEM, "convert: out of memory");
    s->maps = m;
    size_t *l = realloc(s->map_len, sizeof(size_t) * (size_t)(s->n_maps + 1));
    if (!l) return ob_fail(err, err_len, OB_ERR_NOMEM, "convert: out of memory");
    s->map_len = l;
    s->maps[s->n_maps] = map;
    s->map_len[s->n_maps++] = len;
    return OB_OK;
}

static ob_type dtype_type(const char *d) {
    if (!strcmp(d, "F32")) return OB_TYPE_F32;
    if (!strcmp(d, "F16")) return OB_TYPE_F16;
    if (!strcmp(d, "BF16")) return OB_TYPE_BF16;
    return OB_TYPE_COUNT;
}

static size_t dtype_size(const char *d) {
    static const struct { const char *n; size_t s; } t[] = {
        {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2},
        {"I8", 1}, {"U8", 1}, {"BOOL", 1}, {"U16", 2}, {"U32", 4}, {"U64", 8},
        {"F8_E4M3", 1}, {"F8_E5M2", 1},
    };
    for (size_t i = 0; i < OB_ARRAY_LEN(t); i++) if (!strcmp(t[i].n, d)) return t[i].s;
    return 0;
}

ob_status ob_src_add(ob_src_set *s, const char *name, size_t name_len, const char *dtype, int n_dims,
                     const int64_t *shape, const void *data, size_t size, char *err, size_t err_len) {
    if (n_dims < 0 || n_dims > 4)
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "convert: tensor '%.*s' has %d dimensions (at most 4)",
                       (int)OB_MIN(name_len, 200), name, n_dims);
    if (s->n == s->cap) {
        int64_t cap = s->cap ? s->cap * 2 : 256;
        ob_src_tensor *t = realloc(s->t, sizeof(*t) * (size_t)cap);
        if (!t) return ob_fail(err, err_len, OB_ERR_NOMEM, "convert: out of memory");
        s->t = t; s->cap = cap;
    }
    ob_src_tensor *t = &s->t[s->n];
    memset(t, 0, sizeof(*t));
    t->name = strndup(name, name_len);
    if (!t->name) return ob_fail(err, err_len, OB_ERR_NOMEM, "convert: out of memory");
    snprintf(t->dtype, sizeof(t->dtype), "%s", dtype);
    t->type = dtype_type(dtype);
    t->n_dims = n_dims;
    for (int i = 0; i < 4; i++) t->shape[i] = i < n_dims ? shape[i] : 1;
    t->data = data;
    t->size = size;
    if (ob_src_find(s, t->name)) {
        ob_status st = ob_fail(err, err_len, OB_ERR_FORMAT, "convert: tensor '%s' appears twice", t->name);
        free(t->name);
        return st;
    }
    s->n++;
    return OB_OK;
}

const ob_src_tensor *ob_src_find(const ob_src_set *s, const char *name) {
    for (int64_t i = 0; i < s->n; i++) if (!strcmp(s->t[i].name, name)) return &s->t[i];
    return NULL;
}

void ob_src_free(ob_src_set *s) {
    for (int64_t i = 0; i < s->n; i++) free(s->t[i].name);
    free(s->t);
    for (int i = 0; i < s->n_maps; i++) munmap(s->maps[i], s->map_len[i]);
    free(s->maps);
    free(s->map_len);
    memset(s, 0, sizeof(*s));
}

ob_status ob_st_load(ob_src_set *s, const char *path, char *err, size_t err_len) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return ob_fail(err, err_len, OB_ERR_IO, "%s: cannot open", path);
    struct stat sb;
    if (fstat(fd, &sb) || sb.st_size < 8) { close(fd); return ob_fail(err, err_len, OB_ERR_FORMAT, "%s: too short for safetensors", path); }
    size_t len = (size_t)sb.st_size;
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return ob_fail(err, err_len, OB_ERR_IO, "%s: cannot map", path);
    ob_status st = ob_src_keep_map(s, map, len, err, err_len);
    if (st) { munmap(map, len); return st; }
    const unsigned char *b = map;
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | b[i];
    if (hl == 0 || hl > OB_ST_MAX_HEADER || hl > len - 8)
        return ob_fail(err, err_len, OB_ERR_FORMAT, "%s: bad safetensors header length %llu", path, (unsigned long long)hl);
    json_error_t je;
    json_t *h = json_loadb((const char *)b + 8, (size_t)hl, JSON_REJECT_DUPLICATES, &je);
    if (!h || !json_is_object(h)) {
        json_decref(h);
        return ob_fail(err, err_len, OB_ERR_FORMAT, "%s: safetensors header is not a JSON object (%s)", path, je.text);
    }
    const unsigned char *data = b + 8 + hl;
    size_t data_len = len - 8 - (size_t)hl;
    const char *key;
    json_t *v;
    json_object_foreach(h, key, v) {
        if (!strcmp(key, "__metadata__")) continue;
        json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"), *jo = json_object_get(v, "data_offsets");
        if (!json_is_string(jd) || !json_is_array(js) || !json_is_array(jo) || json_array_size(jo) != 2 ||
            json_array_size(js) > 4) {
            st = ob_fail(err, err_len, OB_ERR_FORMAT, "%s: tensor '%.200s' has a malformed entry", path, key);
            break;
        }
        const char *dt = json_string_value(jd);
        size_t es = dtype_size(dt);
        int n_dims = (int)json_array_size(js);
        int64_t shape[4] = {1, 1, 1, 1};
        size_t count = 1;
        bool ok = es > 0;
        for (int i = 0; i < n_dims && ok; i++) {
            json_t *d = json_array_get(js, (size_t)i);
            if (!json_is_integer(d) || json_integer_value(d) < 0) ok = false;
            else { shape[i] = json_integer_value(d); ok = ob_mul_ok(count, (size_t)shape[i], &count); }
        }
        json_t *o0 = json_array_get(jo, 0), *o1 = json_array_get(jo, 1);
        size_t bytes = 0;
        ok = ok && ob_mul_ok(count, es, &bytes) && json_is_integer(o0) && json_is_integer(o1);
        json_int_t a = ok ? json_integer_value(o0) : 0, e = ok ? json_integer_value(o1) : 0;
        if (!ok || a < 0 || e < a || (uint64_t)e > data_len || (size_t)(e - a) != bytes) {
            st = ob_fail(err, err_len, OB_ERR_FORMAT, "%s: tensor '%.200s' (%s) has bad shape or offsets", path, key,
                         es ? dt : "unknown dtype");
            break;
        }
        st = ob_src_add(s, key, strlen(key), dt, n_dims, shape, data + a, bytes, err, err_len);
        if (st) break;
    }
    json_decref(h);
    return st;
}
