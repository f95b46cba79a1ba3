/* Router mode: the state, the model list and the lifecycle (router.h).
 *
 * The list comes from three sources, as llama-server reads them: the Hugging Face cache
 * (the hooks' listing: one model per repo and quantization, "org/name:TAG"), --models-dir
 * (a GGUF file is a model named after the file; a folder of GGUFs is one named after the
 * folder: its first split part or its model file, projectors left out) and --models-preset
 * (an INI file: a section per model, keys are serve's flags without their dashes). A
 * models-dir model wins over a cached one of the same name; a preset section of the same
 * name adds its options to it. Precedence of the flags a child gets: the preset's [*]
 * section, then the model's section, then the router's own command line. */
#include "server/router.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/common.h"

#define RT_STOP_TIMEOUT_S 10     /* llama-server's default stop-timeout */
#define RT_PRESET_MAX (1u << 20) /* a preset file larger than this is not one */
#define RT_MODELS_MAX 100000     /* entries of a source */

bool ob_rt_strv_add(ob_rt_strv *s, const char *x) {
    if (s->n + 1 >= s->cap) {
        int cap = s->cap ? s->cap * 2 : 16;
        char **v = realloc(s->v, (size_t)cap * sizeof *v);
        if (!v) return false;
        s->v = v;
        s->cap = cap;
    }
    char *d = strdup(x);
    if (!d) return false;
    s->v[s->n++] = d;
    s->v[s->n] = NULL; /* an argv */
    return true;
}

void ob_rt_strv_free(ob_rt_strv *s) {
    for (int i = 0; i < s->n; i++) free(s->v[i]);
    free(s->v);
    memset(s, 0, sizeof *s);
}

static bool strv_equal(const ob_rt_strv *a, const ob_rt_strv *b) {
    if (a->n != b->n) return false;
    for (int i = 0; i < a->n; i++)
        if (strcmp(a->v[i], b->v[i])) return false;
    return true;
}

const char *ob_rt_status_name(ob_rt_status s) {
    switch (s) {
    case OB_RT_LOADING: return "loading";
    case OB_RT_LOADED: return "loaded";
    case OB_RT_DOWNLOADING: return "downloading";
    default: return "unloaded";
    }
}

void ob_rt_model_free(ob_rt_model *m) {
    if (!m) return;
    free(m->id);
    json_decref(m->aliases);
    json_decref(m->tags);
    free(m->path);
    free(m->preset_ini);
    ob_rt_strv_free(&m->opts);
    ob_rt_strv_free(&m->args);
    json_decref(m->info);
    free(m);
}

static ob_rt_model *model_new(const char *id, ob_rt_source src) {
    ob_rt_model *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->id = strdup(id);
    m->aliases = json_array();
    m->tags = json_array();
    m->source = src;
    m->stop_timeout_s = RT_STOP_TIMEOUT_S;
    m->proc.pid = -1;
    m->proc.in = m->proc.out = -1;
    if (!m->id || !m->aliases || !m->tags) {
        ob_rt_model_free(m);
        return NULL;
    }
    return m;
}

ob_rt_model *ob_rt_find(ob_router *rt, const char *id) {
    if (!id) return NULL;
    for (int i = 0; i < rt->n_models; i++)
        if (!strcmp(rt->models[i]->id, id)) return rt->models[i];
    for (int i = 0; i < rt->n_models; i++) {
        size_t k;
        json_t *a;
        json_array_foreach(rt->models[i]->aliases, k, a) if (!strcmp(json_string_value(a), id)) return rt->models[i];
    }
    return NULL;
}

static int by_id(const void *a, const void *b) {
    return strcmp((*(ob_rt_model *const *)a)->id, (*(ob_rt_model *const *)b)->id);
}

bool ob_rt_add(ob_router *rt, ob_rt_model *m) {
    if (rt->n_models == rt->cap_models) {
        int cap = rt->cap_models ? rt->cap_models * 2 : 16;
        ob_rt_model **v = realloc(rt->models, (size_t)cap * sizeof *v);
        if (!v) return false;
        rt->models = v;
        rt->cap_models = cap;
    }
    rt->models[rt->n_models++] = m;
    qsort(rt->models, (size_t)rt->n_models, sizeof *rt->models, by_id);
    return true;
}

void ob_rt_remove(ob_router *rt, ob_rt_model *m) {
    for (int i = 0; i < rt->n_models; i++) {
        if (rt->models[i] != m) continue;
        memmove(rt->models + i, rt->models + i + 1, (size_t)(rt->n_models - i - 1) * sizeof *rt->models);
        rt->n_models--;
        break;
    }
    ob_rt_model_free(m);
}

/* ---- the child's command line -------------------------------------------------------- */

/* The router's flags that are its own (with a value, then without): the children listen on
 * 127.0.0.1 without a key, under the name the router gives them. */
static const char *const g_own_valued[] = {"--host", "--port", "--api-key", "--api-key-file", "--models-dir", "--models-preset",
                                           "--models-max", "-a", "--alias", "--tags", "--cors-origins", "--tools",
                                           "--mcp-servers-json", "--mcp-servers-config", "--models-config", NULL};
static const char *const g_own_switches[] = {"--models-autoload", "--no-models-autoload", "--ui-mcp-proxy",
                                             "--webui-mcp-proxy", "--no-ui-mcp-proxy", "--no-webui-mcp-proxy",
                                             "-ag", "--agent", "-no-ag", "--no-agent", "--exit-with-stdin", NULL};

static bool in_list(const char *a, const char *const *names) {
    for (; *names; names++)
        if (!strcmp(a, *names)) return true;
    return false;
}

/* A flag as serve reads it: '_' in a long flag is '-'. */
static void norm_flag(const char *a, char *out, size_t cap) {
    snprintf(out, cap, "%s", a);
    if (!strncmp(out, "--", 2))
        for (char *p = out; *p; p++)
            if (*p == '_') *p = '-';
}

static bool base_flags(const ob_srv_config *cfg, ob_rt_strv *out) {
    for (int i = 1; i < cfg->router_argc; i++) {
        char a[64];
        norm_flag(cfg->router_argv[i], a, sizeof a);
        if (in_list(a, g_own_valued)) {
            i++;
            continue;
        }
        if (in_list(a, g_own_switches)) continue;
        if (!ob_rt_strv_add(out, cfg->router_argv[i])) return false;
    }
    return true;
}

bool ob_rt_child_args(ob_router *rt, const ob_rt_model *m, int port, ob_rt_strv *out) {
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    const char *head[] = {rt->exe, "serve", "--exit-with-stdin"};
    const char *tail[] = {"--host", "127.0.0.1", "--port", ps, "--alias", m->id};
    bool ok = true;
    for (size_t i = 0; ok && i < OB_ARRAY_LEN(head); i++) ok = ob_rt_strv_add(out, head[i]);
    for (int i = 0; ok && i < m->opts.n; i++) ok = ob_rt_strv_add(out, m->opts.v[i]);
    for (int i = 0; ok && i < rt->base.n; i++) ok = ob_rt_strv_add(out, rt->base.v[i]);
    for (size_t i = 0; ok && i < OB_ARRAY_LEN(tail); i++) ok = ob_rt_strv_add(out, tail[i]);
    return ok;
}

/* ---- --models-preset: INI ---------------------------------------------------------- */

typedef struct ini_kv {
    char *key, *value;
} ini_kv;

typedef struct ini_section {
    char *name;
    ini_kv *kv;
    int n, cap;
} ini_section;

typedef struct ini {
    ini_section global; /* [*] and keys before any section */
    ini_section *s;
    int n, cap;
} ini;

static void section_free(ini_section *s) {
    for (int i = 0; i < s->n; i++) {
        free(s->kv[i].key);
        free(s->kv[i].value);
    }
    free(s->kv);
    free(s->name);
}

static void ini_free(ini *f) {
    section_free(&f->global);
    for (int i = 0; i < f->n; i++) section_free(&f->s[i]);
    free(f->s);
    memset(f, 0, sizeof *f);
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
    return s;
}

/* Sets key in s (a key given twice: the later value). */
static bool section_set(ini_section *s, const char *key, const char *value) {
    for (int i = 0; i < s->n; i++) {
        if (strcmp(s->kv[i].key, key)) continue;
        char *v = strdup(value);
        if (!v) return false;
        free(s->kv[i].value);
        s->kv[i].value = v;
        return true;
    }
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 8;
        ini_kv *kv = realloc(s->kv, (size_t)cap * sizeof *kv);
        if (!kv) return false;
        s->kv = kv;
        s->cap = cap;
    }
    s->kv[s->n].key = strdup(key);
    s->kv[s->n].value = strdup(value);
    if (!s->kv[s->n].key || !s->kv[s->n].value) {
        free(s->kv[s->n].key);
        free(s->kv[s->n].value);
        return false;
    }
    s->n++;
    return true;
}

static ob_status ini_read(const char *path, ini *f, char *err, size_t err_len) {
    memset(f, 0, sizeof *f);
    FILE *fp = fopen(path, "rb");
    if (!fp) return ob_fail(err, err_len, OB_ERR_IO, "--models-preset: cannot open %s: %s", path, strerror(errno));
    char *text = malloc(RT_PRESET_MAX + 1);
    size_t n = text ? fread(text, 1, RT_PRESET_MAX + 1, fp) : 0;
    fclose(fp);
    if (!text) return ob_fail(err, err_len, OB_ERR_NOMEM, "out of memory");
    if (n > RT_PRESET_MAX) {
        free(text);
        return ob_fail(err, err_len, OB_ERR_FORMAT, "--models-preset: %s is larger than 1 MiB", path);
    }
    text[n] = 0;
    ob_status st = OB_OK;
    ini_section *cur = &f->global;
    int lineno = 0;
    for (char *line = text, *next; line && !st; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        lineno++;
        char *l = trim(line);
        if (!*l || *l == ';' || *l == '#') continue;
        if (*l == '[') {
            char *end = strchr(l, ']');
            if (!end || trim(end + 1)[0]) {
                st = ob_fail(err, err_len, OB_ERR_FORMAT, "%s:%d: a section is [name]", path, lineno);
                break;
            }
            *end = 0;
            char *name = trim(l + 1);
            if (!*name) {
                st = ob_fail(err, err_len, OB_ERR_FORMAT, "%s:%d: a section needs a name", path, lineno);
                break;
            }
            if (!strcmp(name, "*")) {
                cur = &f->global;
                continue;
            }
            for (int i = 0; i < f->n; i++)
                if (!strcmp(f->s[i].name, name))
                    st = ob_fail(err, err_len, OB_ERR_FORMAT, "%s:%d: [%s] appears twice", path, lineno, name);
            if (st) break;
            if (f->n == f->cap) {
                int cap = f->cap ? f->cap * 2 : 8;
                ini_section *s = cap <= RT_MODELS_MAX ? realloc(f->s, (size_t)cap * sizeof *s) : NULL;
                if (!s) {
                    st = ob_fail(err, err_len, OB_ERR_NOMEM, "%s: too many sections", path);
                    break;
                }
                f->s = s;
                f->cap = cap;
            }
            cur = &f->s[f->n];
            memset(cur, 0, sizeof *cur);
            cur->name = strdup(name);
            if (!cur->name) st = ob_fail(err, err_len, OB_ERR_NOMEM, "out of memory");
            else f->n++;
            continue;
        }
        char *eq = strchr(l, '=');
        if (!eq) {
            st = ob_fail(err, err_len, OB_ERR_FORMAT, "%s:%d: expected key = value", path, lineno);
            break;
        }
        *eq = 0;
        char *key = trim(l), *value = trim(eq + 1);
        size_t vl = strlen(value);
        if (vl >= 2 && (value[0] == '"' || value[0] == '\'') && value[vl - 1] == value[0]) {
            value[vl - 1] = 0;
            value++;
        }
        if (!*key) st = ob_fail(err, err_len, OB_ERR_FORMAT, "%s:%d: a key is missing", path, lineno);
        else if (cur == &f->global && !strcmp(key, "version")) continue;
        else if (!section_set(cur, key, value)) st = ob_fail(err, err_len, OB_ERR_NOMEM, "out of memory");
    }
    free(text);
    if (st) ini_free(f);
    return st;
}

/* serve's flags that are written with one dash (a preset key may be one of them). */
static const char *const g_short_flags[] = {"m", "c", "np", "b", "ub", "ctk", "ctv", "fa", "ngl", "t", "dev", "n",
                                            "md", "cd", "ngld", "devd", "ctkd", "ctvd", "v", "s", "kvu", "no-kvu",
                                            "rea", "to", "hf", "hfr", "hff", "hft", "hfd", "hfrd", "cram", "bs",
                                            NULL};

/* A preset key as the flag it stands for, without dashes: LLAMA_ARG_CTX_SIZE is ctx-size,
 * '_' is '-'. */
static void key_name(const char *key, char *out, size_t cap) {
    bool env = !strncmp(key, "LLAMA_ARG_", 10);
    snprintf(out, cap, "%s", env ? key + 10 : key);
    for (char *p = out; *p; p++) {
        if (*p == '_') *p = '-';
        else if (env) *p = (char)tolower((unsigned char)*p);
    }
}

/* A switch's value: true or false (other words, 1, on, are values of flags that take one). */
static bool is_bool(const char *v) { return !strcasecmp(v, "true") || !strcasecmp(v, "false"); }

static void split_list(json_t *arr, const char *v) {
    json_array_clear(arr);
    for (const char *p = v; *p;) {
        size_t n = strcspn(p, ",");
        while (n && *p == ' ') p++, n--;
        size_t k = n;
        while (k && p[k - 1] == ' ') k--;
        if (k) json_array_append_new(arr, json_stringn(p, k));
        p += n;
        if (*p) p++;
    }
}

/* The options of one section into m: special keys into fields, the others into flags
 * (a value true/false: the switch itself or its --no- form). */
static ob_status section_apply(ob_rt_model *m, const ini_section *s, bool *has_model, char *err, size_t err_len) {
    static const char *const reserved[] = {"host", "port", "api-key", "api-key-file", "models-dir", "models-preset", "models-max",
                                           "models-autoload", "no-models-autoload", "exit-with-stdin", NULL};
    for (int i = 0; i < s->n; i++) {
        char k[128], flag[136];
        key_name(s->kv[i].key, k, sizeof k);
        const char *v = s->kv[i].value;
        if (!strcmp(k, "load-on-startup")) {
            m->load_on_startup = !strcasecmp(v, "true") || !strcmp(v, "1") || !strcasecmp(v, "on");
        } else if (!strcmp(k, "stop-timeout")) {
            char *end;
            long t = strtol(v, &end, 10);
            if (end == v || *end || t < 0 || t > 3600)
                return ob_fail(err, err_len, OB_ERR_ARG, "[%s] stop-timeout: '%s' is not a number of seconds", m->id, v);
            m->stop_timeout_s = (int)t;
        } else if (!strcmp(k, "alias") || !strcmp(k, "a")) {
            split_list(m->aliases, v);
        } else if (!strcmp(k, "tags")) {
            split_list(m->tags, v);
        } else if (in_list(k, reserved)) {
            ob_log(OB_LOG_WARN, "router: [%s] %s is the router's own setting; left out", m->id, s->kv[i].key);
        } else {
            bool short_flag = in_list(k, g_short_flags);
            if (!strcmp(k, "m") || !strcmp(k, "model") || !strcmp(k, "hf") || !strcmp(k, "hfr") ||
                !strcmp(k, "hf-repo"))
                *has_model = true;
            bool ok;
            if (is_bool(v)) {
                bool on = !strcasecmp(v, "true");
                snprintf(flag, sizeof flag, "%s%s%s", short_flag ? "-" : "--", on ? "" : "no-", k);
                ok = ob_rt_strv_add(&m->opts, flag);
            } else {
                snprintf(flag, sizeof flag, "%s%s", short_flag ? "-" : "--", k);
                ok = ob_rt_strv_add(&m->opts, flag) && ob_rt_strv_add(&m->opts, v);
            }
            if (!ok) return ob_fail(err, err_len, OB_ERR_NOMEM, "out of memory");
        }
    }
    return OB_OK;
}

/* The section as INI text (the listing's "preset"). */
static char *section_text(const char *name, const ini_section *g, const ini_section *s) {
    char *buf = NULL;
    size_t len = 0;
    ob_srv_buf_add(&buf, &len, "[", 1);
    ob_srv_buf_add(&buf, &len, name, strlen(name));
    ob_srv_buf_add(&buf, &len, "]\n", 2);
    const ini_section *both[2] = {g, s};
    for (int k = 0; k < 2; k++) {
        for (int i = 0; both[k] && i < both[k]->n; i++) {
            /* a [*] key the model's section sets again is shown once, with its value */
            bool again = false;
            for (int j = 0; k == 0 && s && j < s->n; j++) again |= !strcmp(s->kv[j].key, both[k]->kv[i].key);
            if (again) continue;
            const ini_kv *kv = &both[k]->kv[i];
            ob_srv_buf_add(&buf, &len, kv->key, strlen(kv->key));
            ob_srv_buf_add(&buf, &len, " = ", 3);
            ob_srv_buf_add(&buf, &len, kv->value, strlen(kv->value));
            ob_srv_buf_add(&buf, &len, "\n", 1);
        }
    }
    return buf;
}

/* ---- the sources --------------------------------------------------------------------- */

typedef struct scan_list {
    ob_rt_model **v;
    int n, cap;
} scan_list;

static void scan_free(scan_list *l) {
    for (int i = 0; i < l->n; i++) ob_rt_model_free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static ob_rt_model *scan_find(scan_list *l, const char *id) {
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->v[i]->id, id)) return l->v[i];
    return NULL;
}

/* Adds a model found at path (a models-dir or cache one); one of the same name is
 * replaced. */
static ob_status scan_add_file(scan_list *l, const char *id, const char *path, ob_rt_source src, char *err,
                               size_t err_len) {
    ob_rt_model *m = model_new(id, src);
    if (!m || !(m->path = strdup(path)) || !ob_rt_strv_add(&m->opts, "-m") || !ob_rt_strv_add(&m->opts, path)) {
        ob_rt_model_free(m);
        return ob_fail(err, err_len, OB_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < l->n; i++) {
        if (strcmp(l->v[i]->id, id)) continue;
        ob_rt_model_free(l->v[i]);
        l->v[i] = m;
        return OB_OK;
    }
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 16;
        ob_rt_model **v = cap <= 2 * RT_MODELS_MAX ? realloc(l->v, (size_t)cap * sizeof *v) : NULL;
        if (!v) {
            ob_rt_model_free(m);
            return ob_fail(err, err_len, OB_ERR_NOMEM, "too many models");
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = m;
    return OB_OK;
}

static bool ends_with_ci(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcasecmp(s + n - k, suffix);
}

/* "x-00002-of-00005.gguf": the part (2), and the name's length before "-00002". */
static bool split_part(const char *name, size_t *stem, int *index) {
    size_t n = strlen(name);
    static const size_t tail = sizeof("-00001-of-00005.gguf") - 1;
    if (n <= tail || !ends_with_ci(name, ".gguf")) return false;
    const char *t = name + n - tail;
    if (t[0] != '-' || strncmp(t + 6, "-of-", 4)) return false;
    for (int i = 0; i < 5; i++)
        if (!isdigit((unsigned char)t[1 + i]) || !isdigit((unsigned char)t[10 + i])) return false;
    *index = atoi(t + 1);
    *stem = (size_t)(t - name);
    return true;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The names in a folder, sorted (NULL when it cannot be read). */
static char **list_dir(const char *dir, int *n) {
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return NULL;
    char **v = NULL;
    int cap = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL && *n < RT_MODELS_MAX;) {
        if (e->d_name[0] == '.') continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 32;
            char **nv = realloc(v, (size_t)cap * sizeof *nv);
            if (!nv) break;
            v = nv;
        }
        if ((v[*n] = strdup(e->d_name)) != NULL) (*n)++;
    }
    closedir(d);
    if (*n > 1) qsort(v, (size_t)*n, sizeof *v, by_name);
    return v ? v : calloc(1, sizeof *v);
}

static void free_names(char **v, int n) {
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

/* A folder of a models dir: its first split part, else its model GGUF (projectors and
 * importance matrices left out). */
static bool folder_model(const char *dir, char *out, size_t cap) {
    int n;
    char **names = list_dir(dir, &n);
    if (!names) return false;
    const char *pick = NULL;
    for (int i = 0; i < n; i++) {
        const char *f = names[i];
        size_t stem;
        int idx;
        if (!ends_with_ci(f, ".gguf") || strcasestr(f, "mmproj") || strcasestr(f, "imatrix")) continue;
        if (split_part(f, &stem, &idx)) {
            if (idx == 1) pick = f;
        } else if (!pick) {
            pick = f;
        }
    }
    bool ok = pick && snprintf(out, cap, "%s/%s", dir, pick) < (int)cap;
    free_names(names, n);
    return ok;
}

static ob_status scan_models_dir(const char *dir, scan_list *l, char *err, size_t err_len) {
    struct stat sb;
    if (stat(dir, &sb) || !S_ISDIR(sb.st_mode))
        return ob_fail(err, err_len, OB_ERR_IO, "--models-dir: '%s' does not exist or is not a folder", dir);
    int n;
    char **names = list_dir(dir, &n);
    if (!names) return ob_fail(err, err_len, OB_ERR_IO, "--models-dir: cannot read '%s': %s", dir, strerror(errno));
    ob_status st = OB_OK;
    for (int i = 0; i < n && !st; i++) {
        char p[4096], model[4096 + 256];
        if (snprintf(p, sizeof p, "%s/%s", dir, names[i]) >= (int)sizeof p || stat(p, &sb)) continue;
        if (S_ISDIR(sb.st_mode)) {
            if (folder_model(p, model, sizeof model)) st = scan_add_file(l, names[i], model, OB_RT_SRC_DIR, err, err_len);
            continue;
        }
        const char *f = names[i];
        if (!S_ISREG(sb.st_mode) || !ends_with_ci(f, ".gguf") || strcasestr(f, "mmproj") || strcasestr(f, "imatrix"))
            continue;
        /* a split model in the folder itself: one model, named without the part */
        size_t stem = strlen(f) - 5;
        int idx;
        if (split_part(f, &stem, &idx) && idx != 1) continue;
        char id[1024];
        snprintf(id, sizeof id, "%.*s", (int)stem, f);
        st = scan_add_file(l, id, p, OB_RT_SRC_DIR, err, err_len);
    }
    free_names(names, n);
    return st;
}

static ob_status scan_preset(const char *path, scan_list *l, char *err, size_t err_len) {
    ini f;
    ob_status st = ini_read(path, &f, err, err_len);
    if (st) return st;
    for (int i = 0; i < f.n && !st; i++) {
        const ini_section *s = &f.s[i];
        ob_rt_model *known = scan_find(l, s->name);
        ob_rt_model *m = known ? known : model_new(s->name, OB_RT_SRC_PRESET);
        if (!m) {
            st = ob_fail(err, err_len, OB_ERR_NOMEM, "out of memory");
            break;
        }
        m->source = OB_RT_SRC_PRESET;
        bool has_model = known != NULL;
        st = section_apply(m, &f.global, &has_model, err, err_len);
        if (!st) st = section_apply(m, s, &has_model, err, err_len);
        if (!st && !has_model)
            st = ob_fail(err, err_len, OB_ERR_ARG, "--models-preset: [%s] names no model (model = FILE or "
                         "hf-repo = ORG/NAME[:QUANT])", s->name);
        if (!st && !(m->preset_ini = section_text(s->name, &f.global, s)))
            st = ob_fail(err, err_len, OB_ERR_NOMEM, "out of memory");
        if (known) continue;
        if (!st) {
            /* the list grows through scan_add_file's path: add m itself */
            if (l->n == l->cap) {
                int cap = l->cap ? l->cap * 2 : 16;
                ob_rt_model **v = realloc(l->v, (size_t)cap * sizeof *v);
                if (!v) st = ob_fail(err, err_len, OB_ERR_NOMEM, "out of memory");
                else l->v = v, l->cap = cap;
            }
            if (!st) l->v[l->n++] = m;
            else ob_rt_model_free(m);
        } else {
            ob_rt_model_free(m);
        }
    }
    ini_free(&f);
    return st;
}

/* Every source, in precedence order (cache, models dir, preset), each model's flags
 * checked as the child will read them. */
static ob_status scan(ob_router *rt, scan_list *l, char *err, size_t err_len) {
    memset(l, 0, sizeof *l);
    ob_status st = OB_OK;
    if (rt->hooks && rt->hooks->cache_list) {
        char e2[512] = "";
        json_t *cached = rt->hooks->cache_list(rt->hooks->ud, e2, sizeof e2);
        if (!cached) ob_log(OB_LOG_WARN, "router: the Hugging Face cache is not listed: %s", e2);
        size_t i;
        json_t *c;
        json_array_foreach(cached, i, c) {
            const char *id = json_string_value(json_object_get(c, "id"));
            const char *path = json_string_value(json_object_get(c, "path"));
            if (id && path && (st = scan_add_file(l, id, path, OB_RT_SRC_CACHE, err, err_len))) break;
        }
        json_decref(cached);
    }
    if (!st && rt->cfg->models_dir) st = scan_models_dir(rt->cfg->models_dir, l, err, err_len);
    if (!st && rt->cfg->models_preset) st = scan_preset(rt->cfg->models_preset, l, err, err_len);
    for (int i = 0; !st && rt->hooks && rt->hooks->check_args && i < l->n; i++) {
        ob_rt_strv a = {0};
        char e2[512];
        if (!ob_rt_child_args(rt, l->v[i], 0, &a)) st = ob_fail(err, err_len, OB_ERR_NOMEM, "out of memory");
        /* argv[0] of serve is its name: skip the binary */
        else if (rt->hooks->check_args(a.n - 1, a.v + 1, e2, sizeof e2))
            st = ob_fail(err, err_len, OB_ERR_ARG, "model '%s': %s", l->v[i]->id, e2);
        ob_rt_strv_free(&a);
    }
    if (st) scan_free(l);
    return st;
}

ob_status ob_router_reload(ob_router *rt, char *err, size_t err_len) {
    scan_list l;
    ob_status st = scan(rt, &l, err, err_len);
    if (st) return st;
    pthread_mutex_lock(&rt->mu);
    bool waits = false;
    /* models of the list: kept (new settings), dropped, or unloaded to restart with new flags */
    for (int i = rt->n_models - 1; i >= 0; i--) {
        ob_rt_model *m = rt->models[i];
        if (m->status == OB_RT_DOWNLOADING) continue;
        ob_rt_model *s = NULL;
        int si = 0;
        for (; si < l.n; si++)
            if (l.v[si] && !strcmp(l.v[si]->id, m->id)) {
                s = l.v[si];
                break;
            }
        if (!s) {
            if (m->proc.pid > 0) { /* dropped once its child has exited */
                ob_log(OB_LOG_INFO, "router: %s is gone from its source; unloading it", m->id);
                m->gone = true;
                m->restart = true;
                waits = true;
                ob_rt_request_unload(rt, m);
            } else {
                m->want_load = false;
                ob_rt_remove(rt, m);
                pthread_cond_broadcast(&rt->cv); /* a request waiting for it finds it gone */
            }
            continue;
        }
        /* a child started with other flags exits; a load not started yet takes the new ones */
        if (m->proc.pid > 0 && !strv_equal(&m->opts, &s->opts)) {
            ob_log(OB_LOG_INFO, "router: the flags of %s changed; unloading it", m->id);
            m->restart = true;
            waits = true;
            ob_rt_request_unload(rt, m);
        }
        /* the settings move over (the old ones leave with s); the instance stays */
        json_t *aliases = m->aliases, *tags = m->tags;
        char *path = m->path, *ini_text = m->preset_ini;
        ob_rt_strv opts = m->opts;
        m->aliases = s->aliases, s->aliases = aliases;
        m->tags = s->tags, s->tags = tags;
        m->path = s->path, s->path = path;
        m->preset_ini = s->preset_ini, s->preset_ini = ini_text;
        m->opts = s->opts, s->opts = opts;
        m->source = s->source;
        m->load_on_startup = s->load_on_startup;
        m->stop_timeout_s = s->stop_timeout_s;
        m->gone = false;
        if (!ob_rt_running(m)) m->failed = false, m->exit_code = 0;
        ob_rt_model_free(s);
        l.v[si] = NULL;
    }
    for (int i = 0; i < l.n && !st; i++) {
        if (!l.v[i]) continue;
        if (ob_rt_find(rt, l.v[i]->id)) { /* an alias of another model: the model wins */
            ob_log(OB_LOG_WARN, "router: '%s' is already an alias of another model; left out", l.v[i]->id);
            continue;
        }
        if (!ob_rt_add(rt, l.v[i])) {
            st = ob_fail(err, err_len, OB_ERR_NOMEM, "out of memory");
            break;
        }
        if (l.v[i]->load_on_startup) ob_rt_request_load(rt, l.v[i]);
        l.v[i] = NULL;
    }
    /* as llama-server, the reload returns once the models it unloads have exited */
    ob_rt_wake(rt);
    while (waits && !rt->stop) {
        waits = false;
        for (int i = 0; i < rt->n_models; i++) {
            ob_rt_model *m = rt->models[i];
            if (m->restart && ob_rt_running(m)) waits = true;
            else m->restart = false;
        }
        if (waits) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 200 * 1000000L;
            ts.tv_sec += ts.tv_nsec / 1000000000L;
            ts.tv_nsec %= 1000000000L;
            pthread_cond_timedwait(&rt->cv, &rt->mu, &ts);
        }
    }
    if (rt->listed) ob_rt_event(rt, "models_reload", "*", NULL);
    rt->listed = true;
    pthread_mutex_unlock(&rt->mu);
    scan_free(&l);
    ob_rt_wake(rt);
    return st;
}

ob_status ob_router_new(const ob_srv_config *cfg, ob_router **out, char *err, size_t err_len) {
    *out = NULL;
#if !defined(ONEBIT_HAVE_CURL)
    return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "router mode needs libcurl (libcurl4-openssl-dev): this build "
                   "has none");
#endif
    ob_router *rt = calloc(1, sizeof *rt);
    if (!rt) return ob_fail(err, err_len, OB_ERR_NOMEM, "out of memory");
    rt->cfg = cfg;
    rt->hooks = cfg->router_hooks;
    rt->wake[0] = rt->wake[1] = -1;
    pthread_mutex_init(&rt->mu, NULL);
    pthread_cond_init(&rt->cv, NULL);
    ssize_t n = readlink("/proc/self/exe", rt->exe, sizeof rt->exe - 1);
    ob_status st = OB_OK;
    if (n <= 0 || (size_t)n >= sizeof rt->exe - 1)
        st = ob_fail(err, err_len, OB_ERR_IO, "router: cannot find this program (/proc/self/exe)");
    else rt->exe[n] = 0;
    if (!st && pipe2(rt->wake, O_CLOEXEC | O_NONBLOCK))
        st = ob_fail(err, err_len, OB_ERR_IO, "router: pipe: %s", strerror(errno));
    if (!st && !base_flags(cfg, &rt->base)) st = ob_fail(err, err_len, OB_ERR_NOMEM, "out of memory");
    if (!st && !(st = ob_srv_proxy_init(err, err_len))) rt->curl = true;
    if (!st) st = ob_router_reload(rt, err, err_len);
    int on_start = 0;
    for (int i = 0; !st && i < rt->n_models; i++) on_start += rt->models[i]->load_on_startup;
    if (!st && cfg->models_max > 0 && on_start > cfg->models_max)
        st = ob_fail(err, err_len, OB_ERR_ARG, "%d models load on startup, more than --models-max %d", on_start,
                     cfg->models_max);
    if (!st) {
        if (pthread_create(&rt->monitor, NULL, ob_rt_monitor_main, rt))
            st = ob_fail(err, err_len, OB_ERR_IO, "router: cannot start its monitor thread");
        else rt->monitor_started = true;
    }
    if (st) {
        ob_router_free(rt);
        return st;
    }
    ob_log(OB_LOG_INFO, "router: %d model(s), up to %d at once%s", rt->n_models, cfg->models_max,
           cfg->models_autoload ? ", loaded on demand" : "");
    for (int i = 0; i < rt->n_models; i++)
        ob_log(OB_LOG_INFO, "router:   %s (%s)", rt->models[i]->id,
               rt->models[i]->source == OB_RT_SRC_PRESET ? "preset"
               : rt->models[i]->source == OB_RT_SRC_DIR  ? "models dir"
                                                         : "cache");
    *out = rt;
    return OB_OK;
}

void ob_router_stop(ob_router *rt) {
    if (!rt) return;
    pthread_mutex_lock(&rt->mu);
    rt->stop = 1;
    for (int i = 0; i < rt->n_models; i++) rt->models[i]->cancel = 1;
    pthread_cond_broadcast(&rt->cv);
    pthread_mutex_unlock(&rt->mu);
    ob_rt_wake(rt);
}

void ob_router_free(ob_router *rt) {
    if (!rt) return;
    ob_router_stop(rt);
    if (rt->monitor_started) pthread_join(rt->monitor, NULL); /* every child is reaped */
    ob_rt_routes_free(rt);
    for (int i = 0; i < rt->n_models; i++) {
        ob_subproc_kill(&rt->models[i]->proc);
        ob_rt_model_free(rt->models[i]);
    }
    free(rt->models);
    ob_rt_strv_free(&rt->base);
    if (rt->wake[0] >= 0) close(rt->wake[0]);
    if (rt->wake[1] >= 0) close(rt->wake[1]);
    if (rt->curl) ob_srv_proxy_cleanup();
    pthread_cond_destroy(&rt->cv);
    pthread_mutex_destroy(&rt->mu);
    free(rt);
}
