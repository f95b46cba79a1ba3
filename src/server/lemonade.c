/* Lemonade's API under /api/v1 for the one loaded model: health, models, chat and text
 * completions (the OpenAI handlers), embeddings and reranking (embeddings.c), stats, system-info, load and unload. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "core/common.h"
#include "server/gen.h"

bool ob_oai_ready(ob_server_state *s, ob_resp *r);

/* Lemonade's label for what the model does: "llm", "embeddings" or "reranking". */
static const char *model_type(ob_server_state *s) {
    const ob_srv_config *c = s->cfg;
    if (s->embd) return ob_srv_embd_ranks(s->embd) ? "reranking" : "embeddings";
    if (__atomic_load_n(&s->ready, __ATOMIC_ACQUIRE) != 1) return c->reranking ? "reranking" : c->embeddings ? "embeddings" : "llm";
    return "llm";
}

static json_t *model_entry(ob_server_state *s) {
    return json_pack("{s:s,s:s,s:I,s:s,s:s,s:s,s:b,s:b,s:[s]}", "id", s->model_id, "object", "model", "created",
                     (json_int_t)time(NULL), "owned_by", "lemonade", "checkpoint", s->cfg->model_path, "recipe",
                     "onebit", "downloaded", 1, "suggested", 1, "labels", model_type(s));
}

static json_t *system_info(void) {
    struct utsname u;
    char os[320] = "unknown", cpu[256] = "unknown";
    if (uname(&u) == 0) snprintf(os, sizeof os, "%s %s %s", u.sysname, u.release, u.machine);
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        if (!strncmp(line, "model name", 10)) {
            char *c = strchr(line, ':');
            if (c) {
                c++;
                while (*c == ' ') c++;
                c[strcspn(c, "\n")] = 0;
                snprintf(cpu, sizeof cpu, "%s", c);
            }
            break;
        }
    }
    if (f) fclose(f);
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGE_SIZE);
    char mem[64];
    snprintf(mem, sizeof mem, "%.1f GB", pages > 0 && psz > 0 ? (double)pages * (double)psz / 1e9 : 0.0);
    return json_pack("{s:s,s:s,s:s,s:i,s:{s:{s:s,s:b}}}", "OS Version", os, "Processor", cpu, "Physical Memory", mem,
                     "CPU Cores", (int)sysconf(_SC_NPROCESSORS_ONLN), "devices", "cpu", "name", cpu, "available", 1);
}

/* load/unload name the one model this process serves; anything else is a clear error. */
static void load(ob_server_state *s, const ob_req *rq, ob_resp *r, bool unload) {
    json_t *body = rq->body_len ? ob_srv_parse_body(rq, r) : json_object();
    if (!body) return;
    const char *name = json_string_value(json_object_get(body, "model_name"));
    if (!name) name = json_string_value(json_object_get(body, "model"));
    if (!unload && !name) {
        ob_srv_error(r, 400, NULL, "'model_name' is required");
    } else if (name && strcmp(name, s->model_id) && strcmp(name, s->cfg->model_path)) {
        ob_srv_error(r, 404, "not_found_error", "model '%s' is not served here; this server serves '%s'", name, s->model_id);
    } else if (unload) {
        /* the weights stay mapped: one process serves one model; a supervisor restarts us
         * to change it. Generation answers 503 until the next load. */
        __atomic_store_n(&s->ready, 2, __ATOMIC_RELEASE);
        ob_srv_json(r, 200, json_pack("{s:s,s:s}", "status", "success", "message", "Model unloaded"));
    } else {
        int expect = 2;
        __atomic_compare_exchange_n(&s->ready, &expect, 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
        if (__atomic_load_n(&s->ready, __ATOMIC_ACQUIRE) == 1)
            ob_srv_json(r, 200, json_pack("{s:s,s:s}", "status", "success", "message", "Model loaded"));
        else
            ob_srv_error(r, 503, NULL, "Loading model");
    }
    json_decref(body);
}

bool ob_srv_route_lemonade(ob_server_state *s, const ob_req *rq, ob_resp *r) {
    if (strncmp(rq->path, "/api/v1/", 8) && strncmp(rq->path, "/api/v0/", 8)) return false;
    const char *p = rq->path + 7;
    bool get = !strcmp(rq->method, "GET"), post = !strcmp(rq->method, "POST");
    int st = __atomic_load_n(&s->ready, __ATOMIC_ACQUIRE);
    if (!strcmp(p, "/health")) {
        json_t *j = json_pack("{s:s}", "status", "ok");
        if (st == 1) {
            json_object_set_new(j, "model_loaded", json_string(s->model_id));
            json_object_set_new(j, "all_models_loaded",
                                json_pack("[{s:s,s:s,s:s,s:s}]", "model_name", s->model_id, "checkpoint",
                                          s->cfg->model_path, "type", model_type(s), "recipe", "onebit"));
        } else {
            json_object_set_new(j, "model_loaded", json_null());
            json_object_set_new(j, "all_models_loaded", json_array());
        }
        ob_srv_json(r, 200, j);
    } else if (!strcmp(p, "/models")) {
        ob_srv_json(r, 200, json_pack("{s:s,s:[o]}", "object", "list", "data", model_entry(s)));
    } else if (!strcmp(p, "/chat/completions") || !strcmp(p, "/completions")) {
        if (st == 2) {
            ob_srv_error(r, 503, NULL, "model unloaded; POST /api/v1/load first");
            return true;
        }
        ob_req sub = *rq;
        char path[64];
        snprintf(path, sizeof path, "/v1%s", p);
        sub.path = path;
        return ob_srv_route_openai(s, &sub, r);
    } else if (!strcmp(p, "/embeddings") || !strcmp(p, "/reranking") || !strcmp(p, "/rerank")) {
        ob_req sub = *rq;
        sub.path = p[1] == 'e' ? "/v1/embeddings" : "/v1/rerank";
        return ob_srv_route_embeddings(s, &sub, r);
    } else if (!strcmp(p, "/stats")) {
        if (!ob_oai_ready(s, r)) return true;
        ob_sched_stats ss = {0};
        if (s->sched) {
            ob_sched_get_stats(s->sched, &ss);
        } else if (s->embd) {
            ob_srv_embd_stats es;
            ob_srv_embd_get_stats(s->embd, &es);
            ss.last_prompt_tokens = es.last_tokens;
            ss.last_ttft_s = es.last_s;
        }
        ob_srv_json(r, 200, json_pack("{s:f,s:f,s:i,s:i,s:i,s:[]}", "time_to_first_token", ss.last_ttft_s,
                                      "tokens_per_second", ss.last_tps, "input_tokens", ss.last_prompt_tokens,
                                      "output_tokens", ss.last_gen_tokens, "prompt_tokens", ss.last_prompt_tokens,
                                      "decode_token_times"));
    } else if (!strcmp(p, "/system-info")) {
        ob_srv_json(r, 200, system_info());
    } else if (!strcmp(p, "/load") || !strcmp(p, "/unload")) {
        if (!post) ob_srv_error(r, 405, NULL, "use POST");
        else load(s, rq, r, p[1] == 'u');
    } else {
        ob_srv_error(r, 404, NULL, "no route for %s %s", rq->method, rq->path);
    }
    (void)get;
    return true;
}
