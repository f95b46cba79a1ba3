/* Loading a model: GGUF -> architecture -> hyperparameters -> weights on a device. */
#include "engine/model_internal.h"
#include "tokenizer/tokenizer.h"
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

ob_model_params ob_model_default_params(void) {
    ob_model_params p = {0};
    p.device = OB_DEVICE_AUTO;
    p.strict_device = true;
    p.rope_scaling = OB_ROPE_SCALING_UNSPECIFIED;
    p.yarn_ext_factor = p.yarn_attn_factor = p.yarn_beta_fast = p.yarn_beta_slow = -1.0f;
    return p;
}

const ob_weight *ob_mv_weight(ob_model_view *mv, const char *name, int n_dims, const int64_t *ne,
                              bool required, char *err, size_t err_len) {
    ob_model *m = mv->m;
    for (int64_t i = 0; i < m->n_weights; i++) {
        ob_weight *w = &m->weights[i];
        if (strcmp(w->name, name)) continue;
        bool ok = w->n_dims <= n_dims;
        for (int d = 0; d < 4 && ok; d++) {
            int64_t want = d < n_dims ? ne[d] : 1;
            if (want >= 0 && w->ne[d] != want) ok = false;
        }
        m->bound[i] = true;
        if (!ok) {
            mv->failed = true;
            /* every expected dimension (-1: any), so a 3-D expert tensor's count shows */
            char want[96];
            int at = snprintf(want, sizeof(want), "[");
            for (int d = 0; d < n_dims && d < 4 && at > 0 && at < (int)sizeof(want); d++)
                at += snprintf(want + at, sizeof(want) - (size_t)at, ne[d] < 0 ? "%s*" : "%s%lld", d ? ", " : "",
                               (long long)ne[d]);
            ob_fail(err, err_len, OB_ERR_FORMAT, "model: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected %s]",
                    name, (long long)w->ne[0], (long long)w->ne[1], (long long)w->ne[2], (long long)w->ne[3], want);
            return NULL;
        }
        return w;
    }
    if (required) {
        mv->failed = true;
        ob_fail(err, err_len, OB_ERR_FORMAT, "model: tensor '%s' is missing", name);
    }
    return NULL;
}

bool ob_mv_failed(const ob_model_view *mv) { return mv->failed; }

const void *ob_mv_host_data(ob_model_view *mv, const ob_weight *w) {
    const ob_gguf_tensor *t = ob_gguf_find_tensor(mv->m->gguf, w->name);
    return t ? t->data : NULL;
}

const ob_weight *ob_mv_new_weight(ob_model_view *mv, const char *name, const float *data, int64_t n, char *err,
                                  size_t err_len) {
    return ob_mv_new_weight_nd(mv, name, data, 1, &n, err, err_len);
}

const ob_weight *ob_mv_new_weight_nd(ob_model_view *mv, const char *name, const float *data, int n_dims,
                                     const int64_t *ne, char *err, size_t err_len) {
    ob_model *m = mv->m;
    int64_t n = 1;
    for (int d = 0; d < n_dims; d++) n *= ne[d];
    const ob_backend_iface *bi = m->backend->iface;
    if (m->n_made >= OB_MODEL_MAX_MADE) {
        ob_fail(err, err_len, OB_ERR_NOMEM, "model: too many made weights");
        return NULL;
    }
    ob_weight *w = calloc(1, sizeof(*w));
    size_t bytes = sizeof(float) * (size_t)n;
    void *buf = w ? bi->alloc(m->backend, bytes) : NULL;
    if (!buf || bi->upload(m->backend, buf, data, bytes)) {
        if (buf) bi->free_buf(m->backend, buf);
        free(w);
        ob_fail(err, err_len, OB_ERR_NOMEM, "model: cannot place '%s' on %s", name, bi->name);
        return NULL;
    }
    w->name = name;
    w->type = OB_TYPE_F32;
    w->n_dims = n_dims;
    for (int d = 0; d < 4; d++) w->ne[d] = d < n_dims ? ne[d] : 1;
    w->data = buf;
    m->made[m->n_made++] = w;
    ob_model_mem_add(m, (int64_t)bytes);
    return w;
}

/* Every tensor of the file must be read by the family: one that is not would be a variant
 * computed wrongly without a word (Llama 3.1's rope_freqs was). */
static ob_status check_all_bound(const ob_model *m, char *err, size_t err_len) {
    int64_t n = 0;
    for (int64_t i = 0; i < m->n_weights; i++) n += !m->bound[i];
    if (!n) return OB_OK;
    char list[400];
    size_t len = 0;
    list[0] = 0;
    for (int64_t i = 0, k = 0; i < m->n_weights; i++) {
        if (m->bound[i]) continue;
        int w = snprintf(list + len, sizeof(list) - len, "%s%s", k++ ? ", " : "", m->weights[i].name);
        if (w < 0 || (size_t)w >= sizeof(list) - len) {
            snprintf(list + (len < sizeof(list) - 5 ? len : sizeof(list) - 5), 5, ", ..");
            break;
        }
        len += (size_t)w;
    }
    return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "model: %lld tensor%s that architecture '%s' does not read: %s",
                   (long long)n, n > 1 ? "s" : "", m->hp.arch, list);
}

ob_tensor *ob_weight_leaf(ob_graph *g, const ob_weight *w) {
    return ob_leaf(g, w->name, w->type, w->n_dims, w->ne, w->data);
}

static ob_backend *make_backend(const ob_model_params *p, char *err, size_t err_len) {
    bool fallback = !p->strict_device;
    switch (p->device) {
    case OB_DEVICE_AUTO: {
        /* The first GPU backend that starts, else the CPU. */
#ifdef ONEBIT_CUDA
        ob_backend *g = ob_backend_cuda_new(p->device_index, fallback, err, err_len);
        if (g) return g;
        ob_log(OB_LOG_INFO, "no CUDA device (%s), trying the next backend", err);
#endif
#ifdef ONEBIT_VULKAN
        ob_backend *v = ob_backend_vulkan_new(p->device_index, fallback, err, err_len);
        if (v) return v;
        ob_log(OB_LOG_INFO, "no Vulkan device (%s), using the CPU", err);
#endif
        (void)fallback;
    } /* fall through */
    case OB_DEVICE_CPU: {
        ob_backend *b = ob_backend_cpu_new(p->n_threads);
        if (!b) ob_fail(err, err_len, OB_ERR_NOMEM, "model: cannot start the CPU backend");
        return b;
    }
    case OB_DEVICE_CUDA:
#ifdef ONEBIT_CUDA
        return ob_backend_cuda_new(p->device_index, fallback, err, err_len);
#else
        ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "model: this build has no CUDA backend (build with -DONEBIT_CUDA=ON)");
        return NULL;
#endif
    case OB_DEVICE_VULKAN:
#ifdef ONEBIT_VULKAN
        return ob_backend_vulkan_new(p->device_index, fallback, err, err_len);
#else
        ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "model: this build has no Vulkan backend (build with -DONEBIT_VULKAN=ON)");
        return NULL;
#endif
    }
    ob_fail(err, err_len, OB_ERR_ARG, "model: unknown device");
    return NULL;
}

void ob_model_free(ob_model *m) {
    if (!m) return;
    if (m->arch && m->arch_priv) m->arch->free_priv(m->arch_priv);
    for (int i = 0; i < m->n_made; i++) {
        if (m->backend) m->backend->iface->free_buf(m->backend, m->made[i]->data);
        free(m->made[i]);
    }
    if (m->backend) {
        if (m->weight_buf) m->backend->iface->free_buf(m->backend, m->weight_buf);
        ob_backend_free(m->backend);
    }
    if (m->tok) ob_tokenizer_free(m->tok);
    free(m->weights);
    free(m->bound);
    free(m->chat_template);
    free(m->path);
    ob_gguf_close(m->gguf);
    free(m);
}

static ob_status load_weights(ob_model *m, char *err, size_t err_len) {
    int64_t n = ob_gguf_n_tensors(m->gguf);
    m->weights = calloc((size_t)(n ? n : 1), sizeof(ob_weight));
    m->bound = calloc((size_t)(n ? n : 1), sizeof(bool));
    if (!m->weights || !m->bound) return ob_fail(err, err_len, OB_ERR_NOMEM, "model: out of memory");
    m->n_weights = n;
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        const ob_gguf_tensor *t = ob_gguf_tensor_at(m->gguf, i);
        const ob_type_traits *tr = ob_type_traits_get(t->type);
        if (!tr || !tr->to_float)
            return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "model: tensor '%s' has unsupported type %s",
                           t->name.p, tr ? tr->name : "?");
        ob_weight *w = &m->weights[i];
        w->name = t->name.p;
        w->type = t->type;
        w->n_dims = t->n_dims;
        for (int d = 0; d < 4; d++) w->ne[d] = t->ne[d];
        w->data = (void *)t->data;
        total += (t->size + 255) & ~(size_t)255;
        int64_t ne = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        m->n_params += ne;
        m->weight_bytes += t->size;
    }
    if (!m->params.mem_budget && m->backend->iface->free_memory) {
        /* No --mem-budget: the device's free memory, less room for the runtime's own
         * allocations (BLAS workspace, captured graphs). */
        const size_t fr = m->backend->iface->free_memory(m->backend), keep = (size_t)512 << 20;
        if (fr) m->params.mem_budget = fr > 2 * keep ? fr - keep : fr;
    }
    if (m->params.mem_budget && m->weight_bytes > m->params.mem_budget)
        return ob_fail(err, err_len, OB_ERR_NOMEM, "model: weights need %.1f MiB, over the memory budget of %.1f MiB",
                       m->weight_bytes / 1048576.0, m->params.mem_budget / 1048576.0);
    if (m->backend->iface->host_memory) { /* borrow the mapping: its tensors take memory all the same */
        ob_model_mem_add(m, (int64_t)m->weight_bytes);
        return OB_OK;
    }
    m->weight_buf = m->backend->iface->alloc(m->backend, total);
    if (!m->weight_buf)
        return ob_fail(err, err_len, OB_ERR_NOMEM, "model: cannot allocate %.1f MiB of weights on %s",
                       total / 1048576.0, m->backend->iface->name);
    size_t off = 0;
    for (int64_t i = 0; i < n; i++) {
        const ob_gguf_tensor *t = ob_gguf_tensor_at(m->gguf, i);
        ob_weight *w = &m->weights[i];
        w->data = (char *)m->weight_buf + off;
        const ob_backend_iface *bi = m->backend->iface;
        ob_status st = bi->upload_weight ? bi->upload_weight(m->backend, w->data, t->data, t->size, t->type, t->ne[0])
                                         : bi->upload(m->backend, w->data, t->data, t->size);
        if (st) return ob_fail(err, err_len, st, "model: uploading '%s' failed", w->name);
        off += (t->size + 255) & ~(size_t)255;
    }
    ob_model_mem_add(m, (int64_t)total);
    return OB_OK;
}

ob_status ob_model_load(const char *path, const ob_model_params *params, ob_model **out, char *err, size_t err_len) {
    *out = NULL;
    ob_model *m = calloc(1, sizeof(*m));
    if (!m) return ob_fail(err, err_len, OB_ERR_NOMEM, "model: out of memory");
    m->params = params ? *params : ob_model_default_params();
    ob_status st = ob_gguf_open(path, &m->gguf, err, err_len);
    if (st) goto fail;
    m->path = strdup(path);
    const char *an = ob_gguf_get_str(m->gguf, "general.architecture");
    if (!an) { st = ob_fail(err, err_len, OB_ERR_FORMAT, "%s: general.architecture is missing", path); goto fail; }
    m->arch = ob_arch_find(an);
    if (!m->arch) {
        st = ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "%s: unknown architecture '%s' (supported: %s)", path, an,
                     ob_arch_supported_list());
        goto fail;
    }
    st = m->arch->load_hparams(m->gguf, &m->hp, err, err_len);
    if (st) goto fail;
    const ob_gguf_tensor *te = ob_gguf_find_tensor(m->gguf, "token_embd.weight");
    if (!te || te->n_dims != 2) { st = ob_fail(err, err_len, OB_ERR_FORMAT, "%s: token_embd.weight is missing", path); goto fail; }
    m->hp.n_vocab = (int)te->ne[1];
    const char *gn = ob_gguf_get_str(m->gguf, "general.name");
    if (gn) snprintf(m->name, sizeof(m->name), "%s", gn);
    else { const char *b = strrchr(path, '/'); snprintf(m->name, sizeof(m->name), "%s", b ? b + 1 : path); }
    const char *tmpl = ob_gguf_get_str(m->gguf, "tokenizer.chat_template");
    if (tmpl) m->chat_template = strdup(tmpl);

    st = ob_tokenizer_from_gguf(m->gguf, &m->tok, err, err_len);
    if (st) goto fail;
    if (ob_tokenizer_n_vocab(m->tok) > m->hp.n_vocab) {
        st = ob_fail(err, err_len, OB_ERR_FORMAT, "%s: tokenizer has %d tokens but the embedding only %d rows", path,
                     ob_tokenizer_n_vocab(m->tok), m->hp.n_vocab);
        goto fail;
    }
    m->backend = make_backend(&m->params, err, err_len);
    if (m->backend) m->backend->deterministic = m->params.deterministic;
    if (!m->backend) { st = OB_ERR_UNSUPPORTED; goto fail; }
    st = load_weights(m, err, err_len);
    if (st) goto fail;
    ob_model_view mv = {m, false};
    st = m->arch->bind(&mv, &m->hp, &m->arch_priv, err, err_len);
    if (st) goto fail;
    st = ob_rope_resolve(&mv, &m->hp, &m->params, err, err_len);
    if (st) goto fail;
    st = check_all_bound(m, err, err_len);
    if (st) goto fail;
    *out = m;
    return OB_OK;
fail:
    ob_model_free(m);
    return st ? st : OB_ERR_FORMAT;
}

void ob_model_get_info(const ob_model *m, ob_model_info *o) {
    memset(o, 0, sizeof(*o));
    o->arch = m->hp.arch;
    o->name = m->name;
    o->n_params = m->n_params;
    o->file_size = ob_gguf_file_size(m->gguf);
    o->weight_bytes = m->weight_bytes;
    o->n_vocab = m->hp.n_vocab;
    o->n_embd = m->hp.n_embd;
    o->n_layer = m->hp.n_layer;
    o->n_head = m->hp.n_head;
    o->n_head_kv = m->hp.n_head_kv;
    o->head_dim = m->hp.head_dim;
    o->n_ctx_train = m->hp.n_ctx_train;
    o->backend = m->backend->iface->name;
}

void ob_model_mem_add(ob_model *m, int64_t delta) {
    uint64_t now = __atomic_add_fetch(&m->mem_now, (uint64_t)delta, __ATOMIC_RELAXED);
    uint64_t peak = __atomic_load_n(&m->mem_peak, __ATOMIC_RELAXED);
    while (now > peak && !__atomic_compare_exchange_n(&m->mem_peak, &peak, now, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

void ob_model_memory(const ob_model *m, uint64_t *now, uint64_t *peak) {
    if (now) *now = __atomic_load_n(&m->mem_now, __ATOMIC_RELAXED);
    if (peak) *peak = __atomic_load_n(&m->mem_peak, __ATOMIC_RELAXED);
}

void ob_model_memory_reset_peak(ob_model *m) {
    __atomic_store_n(&m->mem_peak, __atomic_load_n(&m->mem_now, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
}

bool ob_model_has_recurrent_state(const ob_model *m) {
    for (int il = 0; il < m->hp.n_layer; il++)
        if (m->hp.layer_rec[il]) return true;
    return false;
}

const ob_tokenizer *ob_model_tokenizer(const ob_model *m) { return m->tok; }
const char *ob_model_chat_template(const ob_model *m) { return m->chat_template; }
