/* Prometheus text for /metrics, with llama-server's metric names. */
#include <stdio.h>
#include <stdlib.h>

#include "server/gen.h"

char *ob_srv_metrics_text(ob_server_state *s) {
    ob_sched_stats st = {0};
    if (s->sched) {
        ob_sched_get_stats(s->sched, &st);
    } else if (s->embd) {
        /* embedding mode: every input token is a prompt token; one request at a time */
        ob_srv_embd_stats es;
        ob_srv_embd_get_stats(s->embd, &es);
        st.prompt_tokens = es.tokens;
        st.prompt_s = es.seconds;
        st.requests_done = es.requests;
        st.n_decode_calls = es.n_decode;
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
#define COUNTER(name, help, val) fprintf(f, "# HELP llamacpp:%s %s\n# TYPE llamacpp:%s counter\nllamacpp:%s %.17g\n", name, help, name, name, (double)(val))
#define GAUGE(name, help, val) fprintf(f, "# HELP llamacpp:%s %s\n# TYPE llamacpp:%s gauge\nllamacpp:%s %.17g\n", name, help, name, name, (double)(val))
    COUNTER("prompt_tokens_total", "Number of prompt tokens processed.", st.prompt_tokens);
    COUNTER("prompt_seconds_total", "Prompt process time", st.prompt_s);
    COUNTER("tokens_predicted_total", "Number of generation tokens processed.", st.gen_tokens);
    COUNTER("tokens_predicted_seconds_total", "Predict process time", st.gen_s);
    COUNTER("n_decode_total", "Total number of llama_decode() calls", st.n_decode_calls);
    COUNTER("requests_total", "Number of finished requests.", st.requests_done);
    GAUGE("n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call",
          st.n_decode_calls ? (double)st.n_decode_tokens / (double)st.n_decode_calls : 0.0);
    GAUGE("prompt_tokens_seconds", "Average prompt throughput in tokens/s.", st.prompt_s > 0 ? st.prompt_tokens / st.prompt_s : 0.0);
    GAUGE("predicted_tokens_seconds", "Average generation throughput in tokens/s.", st.gen_s > 0 ? st.gen_tokens / st.gen_s : 0.0);
    GAUGE("kv_cache_usage_ratio", "KV-cache usage. 1 means 100 percent usage.", st.kv_total ? (double)st.kv_used / (double)st.kv_total : 0.0);
    GAUGE("kv_cache_tokens", "KV-cache tokens.", st.kv_used);
    GAUGE("requests_processing", "Number of requests processing.", st.processing);
    GAUGE("requests_deferred", "Number of requests deferred.", st.deferred);
#undef COUNTER
#undef GAUGE
    fclose(f);
    return buf;
}
