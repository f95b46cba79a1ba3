/* The conversation of `1bit run` (see run_chat.h). Each turn renders the whole
 * conversation, keeps the KV cells of the longest token prefix it shares with what the
 * cache holds (the last prompt and the reply as sampled) and decodes only the rest. When
 * the conversation outgrows the context, the oldest turns go (a system prompt stays) and
 * the prompt is rebuilt; a reply that fills the context mid-way goes on the same way. */
#include "app/run_chat.h"
#include "app/line_edit.h"
#include "core/common.h"
#include "engine/chat_model.h"
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <utf8proc.h>

/* Set by SIGINT while a reply streams. A signal handler can reach nothing else, so this
 * one flag is process-wide; only the chat installs the handler, and only for its run. */
static volatile sig_atomic_t g_interrupted;

static void on_sigint(int sig) {
    (void)sig;
    g_interrupted = 1;
}

typedef struct chat {
    ob_run_gen *g;
    const ob_run_chat_opts *o;
    json_t *msgs;            /* [{role, content}]; a system message only first */
    int n_ctx;
    bool tty;                /* lines come through the line editor */
    ob_line_edit le;
} chat;

static const char k_help[] =
    "  /clear         forget the conversation (a system prompt stays)\n"
    "  /save FILE     write the conversation to FILE as JSON messages\n"
    "  /load FILE     continue the conversation saved in FILE\n"
    "  /exit, /quit   leave (also Ctrl-D, or Ctrl-C twice at an empty prompt)\n"
    "  /help          this list\n"
    "  Ctrl-C stops a reply; a line ending in \\ goes on on the next line; // sends a line\n"
    "  that starts with /\n";

static bool is_role(const json_t *m, const char *role) {
    const char *r = json_string_value(json_object_get(m, "role"));
    return r && !strcmp(r, role);
}

/* {role, content}; bytes of content that are not UTF-8 become '?' (JSON holds text only). */
static json_t *message(const char *role, const char *content) {
    json_t *s = json_string(content);
    if (!s) {
        char *t = strdup(content);
        if (!t) return NULL;
        for (size_t i = 0, n = strlen(t); i < n;) {
            utf8proc_int32_t cp;
            utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)t + i, (utf8proc_ssize_t)(n - i), &cp);
            if (k > 0) i += (size_t)k;
            else t[i++] = '?';
        }
        s = json_string(t);
        free(t);
    }
    json_t *m = s ? json_pack("{s:s,s:o}", "role", role, "content", s) : NULL;
    return m;
}

/* The conversation as one text for a model without a template: the system prompt, then
 * each message; a message of the user starts on a new line, a reply goes on where the
 * text stopped (it is the model's continuation). */
static char *completion_text(const json_t *msgs) {
    size_t cap = 256, len = 0, i;
    char *t = malloc(cap);
    if (!t) return NULL;
    t[0] = 0;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        const char *s = json_string_value(json_object_get(m, "content"));
        size_t n = s ? strlen(s) : 0;
        bool sep = !is_role(m, "assistant") && len && t[len - 1] != '\n';
        if (len + n + 2 > cap) {
            cap = (len + n + 2) * 2;
            char *r = realloc(t, cap);
            if (!r) { free(t); return NULL; }
            t = r;
        }
        if (sep) t[len++] = '\n';
        memcpy(t + len, s ? s : "", n);
        len += n;
        t[len] = 0;
    }
    return t;
}

/* The tokens of msgs as the model sees them; NULL with the reason printed. */
static int32_t *prompt_ids(const chat *c, const json_t *msgs, int *n) {
    char err[512];
    char *text = NULL;
    if (c->o->tmpl) {
        if (ob_chat_render_model_with(c->g->m, c->o->tmpl, msgs, c->o->template_kwargs, true, &text, err, sizeof(err))) {
            fprintf(stderr, "1bit: %s\n", err);
            return NULL;
        }
    } else if (!(text = completion_text(msgs))) {
        fprintf(stderr, "1bit: out of memory\n");
        return NULL;
    }
    int32_t *ids = ob_run_tokenize(c->g->tok, text, true, n);
    free(text);
    if (!ids) fprintf(stderr, "1bit: the conversation could not be tokenized\n");
    return ids;
}

static size_t first_turn(const json_t *msgs) {
    return json_array_size(msgs) && is_role(json_array_get(msgs, 0), "system") ? 1 : 0;
}

/* Drops the oldest turn (a user message and the reply after it), never the system prompt
 * nor the last message (the one being answered). Returns the messages dropped. */
static int drop_oldest(json_t *msgs) {
    size_t n = json_array_size(msgs), i = first_turn(msgs);
    if (i + 1 >= n) return 0;
    json_array_remove(msgs, i);
    if (i + 1 < n - 1 && is_role(json_array_get(msgs, i), "assistant")) {
        json_array_remove(msgs, i);
        return 2;
    }
    return 1;
}

/* The prompt's tokens, with the oldest turns dropped when extra more tokens and room for
 * the reply do not fit the context, or until nothing more can go. Once some must go, a
 * quarter of the context is freed besides, so that the prompt is not rebuilt (the cells
 * after the system prompt decoded again) on every turn from then on. *dropped counts the
 * messages. */
static int32_t *fit(chat *c, int extra, int room, int *n, int *dropped) {
    int limit = c->n_ctx;
    for (;;) {
        int32_t *ids = prompt_ids(c, c->msgs, n);
        if (!ids || *n + extra + room <= limit) return ids;
        limit = c->n_ctx - c->n_ctx / 4;
        int k = drop_oldest(c->msgs);
        if (!k) return ids;
        free(ids);
        *dropped += k;
    }
}

static void say_dropped(const chat *c, int k) {
    fprintf(stderr, "1bit: the conversation outgrew the context (%d tokens): dropped the %d oldest message%s%s\n",
            c->n_ctx, k, k == 1 ? "" : "s", first_turn(c->msgs) ? ", kept the system prompt" : "");
}

/* Keeps sequence 0's cells for the prefix ids share with them; returns its length (less
 * than n: the last token is decoded again for its logits). A model with recurrent layers
 * resumes at its latest state checkpoint in that prefix, or at 0 (ob_seq_truncate), and keeps
 * one where this prompt ends, for the next turn. */
static int reuse_prefix(ob_run_gen *g, const int32_t *ids, int n) {
    int keep = 0;
    while (keep < g->n_past && keep < n - 1 && g->hist[keep] == ids[keep]) keep++;
    ob_seq_truncate(g->c, 0, keep);
    g->n_past = ob_seq_len(g->c, 0);
    ob_seq_checkpoint_at(g->c, 0, n - 1);
    return g->n_past;
}

/* Room kept for a reply when old turns are dropped. */
static int reply_room(const chat *c, int left) { return OB_MIN(left, c->n_ctx / 4); }

/* Answers the message just appended to c->msgs. Returns how the reply ended, or
 * OB_RUN_END_EOG having refused the message (removed again, the reason printed). */
static ob_run_end answer(chat *c) {
    ob_run_gen *g = c->g;
    int cap = c->o->n_predict, n = 0;
    /* a message the context cannot hold with the system prompt alone is refused */
    json_t *alone = json_array();
    if (first_turn(c->msgs)) json_array_append(alone, json_array_get(c->msgs, 0));
    json_array_append(alone, json_array_get(c->msgs, json_array_size(c->msgs) - 1));
    int32_t *ids = prompt_ids(c, alone, &n);
    bool ok = ids != NULL;
    json_decref(alone);
    free(ids);
    if (!ok || n >= c->n_ctx) {
        if (ok)
            fprintf(stderr, "1bit: that message is %d tokens%s, more than the context holds (%d, -c): not sent\n", n,
                    first_turn(c->msgs) ? " with the system prompt" : "", c->n_ctx);
        json_array_remove(c->msgs, json_array_size(c->msgs) - 1);
        return OB_RUN_END_EOG;
    }
    int dropped = 0;
    ids = fit(c, 0, reply_room(c, cap >= 0 ? cap : c->n_ctx), &n, &dropped);
    if (!ids) {
        json_array_remove(c->msgs, json_array_size(c->msgs) - 1);
        return OB_RUN_END_EOG;
    }
    if (dropped) say_dropped(c, dropped);
    int keep = reuse_prefix(g, ids, n);
    ob_run_reply r = {0};
    ob_run_end end;
    for (;;) {
        end = cap < 0 || r.n_ids < cap ? ob_run_gen_reply(g, ids + keep, n - keep, cap < 0 ? INT_MAX : cap - r.n_ids, &r)
                                       : OB_RUN_END_CAP;
        if (end != OB_RUN_END_CTX) break;
        /* The reply filled the context: drop old turns and go on after the reply so far
         * (the prompt rendered again, then the reply's own tokens). */
        free(ids);
        int d = 0;
        ids = fit(c, r.n_ids, reply_room(c, cap < 0 ? c->n_ctx : cap - r.n_ids), &n, &d);
        if (!ids) { end = OB_RUN_END_ERROR; break; }
        if (!d || n + r.n_ids + 1 >= c->n_ctx) {
            fprintf(stderr, "\n1bit: the reply filled the context (%d tokens, -c)", c->n_ctx);
            break;
        }
        fputc('\n', stderr);
        say_dropped(c, d);
        int32_t *all = realloc(ids, sizeof(int32_t) * (size_t)(n + r.n_ids));
        if (!all) { end = OB_RUN_END_ERROR; break; }
        ids = all;
        memcpy(ids + n, r.ids, sizeof(int32_t) * (size_t)r.n_ids);
        n += r.n_ids;
        keep = reuse_prefix(g, ids, n);
    }
    free(ids);
    ob_run_reply_flush(&r);
    fputc('\n', stdout);
    fflush(stdout);
    fprintf(stderr, "[prompt: %d tokens, %.1f tok/s | generation: %d tokens, %.1f tok/s]\n", r.n_prompt,
            r.t_prompt > 0 ? r.n_prompt / r.t_prompt : 0.0, r.n_ids, r.t_gen > 0 ? r.n_ids / r.t_gen : 0.0);
    /* stopped before a token came: the message was never answered, so it goes */
    if (end == OB_RUN_END_STOP && !r.n_ids) json_array_remove(c->msgs, json_array_size(c->msgs) - 1);
    else json_array_append_new(c->msgs, message("assistant", r.text ? r.text : ""));
    ob_run_reply_free(&r);
    return end;
}

static void save(const chat *c, const char *path) {
    if (json_dump_file(c->msgs, path, JSON_INDENT(2)) != 0)
        fprintf(stderr, "1bit: /save: cannot write %s: %s\n", path, strerror(errno));
    else
        fprintf(stderr, "1bit: saved %zu messages to %s\n", json_array_size(c->msgs), path);
}

/* Reads a conversation: a JSON array of {role, content} messages (or an object with one
 * under "messages"), roles system (first only), user and assistant, contents strings. */
static void load(chat *c, const char *path) {
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) {
        fprintf(stderr, "1bit: /load: %s: %s (line %d)\n", path, je.text, je.line);
        return;
    }
    const json_t *arr = json_is_object(root) ? json_object_get(root, "messages") : root;
    json_t *msgs = json_array();
    const char *bad = json_is_array(arr) ? NULL : "not an array of messages";
    size_t i;
    json_t *m;
    if (!bad) json_array_foreach(arr, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        const char *content = json_string_value(json_object_get(m, "content"));
        if (!role || !content) { bad = "a message without a string role and content"; break; }
        if (strcmp(role, "user") && strcmp(role, "assistant") && (strcmp(role, "system") || i)) {
            bad = "roles are user and assistant, and system for the first message only";
            break;
        }
        json_array_append_new(msgs, message(role, content));
    }
    json_decref(root);
    if (bad) {
        fprintf(stderr, "1bit: /load: %s: %s\n", path, bad);
        json_decref(msgs);
        return;
    }
    json_decref(c->msgs);
    c->msgs = msgs;
    fprintf(stderr, "1bit: loaded %zu messages from %s\n", json_array_size(msgs), path);
}

/* A /command; returns false for /exit. */
static bool command(chat *c, const char *line) {
    size_t k = strcspn(line, " \t");
    const char *arg = line + k;
    while (*arg == ' ' || *arg == '\t') arg++;
    char *file = strdup(arg);
    if (!file) return true;
    for (size_t n = strlen(file); n && (file[n - 1] == ' ' || file[n - 1] == '\t'); n--) file[n - 1] = 0;
#define IS(name) (k == strlen(name) && !strncmp(line, name, k))
    bool go_on = true;
    if (IS("/exit") || IS("/quit")) go_on = false;
    else if (IS("/help")) fputs(k_help, stderr);
    else if (IS("/clear")) {
        while (json_array_size(c->msgs) > first_turn(c->msgs)) json_array_remove(c->msgs, first_turn(c->msgs));
        fprintf(stderr, "1bit: the conversation is forgotten\n");
    } else if ((IS("/save") || IS("/load")) && !file[0]) fprintf(stderr, "1bit: %.*s needs a file name\n", (int)k, line);
    else if (IS("/save")) save(c, file);
    else if (IS("/load")) load(c, file);
    else fprintf(stderr, "1bit: unknown command %.*s (/help lists them; // starts a message with /)\n", (int)k, line);
#undef IS
    free(file);
    return go_on;
}

/* One line from the terminal or from stdin; *line is malloc'd. */
static ob_line_result read_line(chat *c, const char *prompt, char **line) {
    if (c->tty) return ob_line_read(&c->le, prompt, line);
    fputs(prompt, stderr);
    fflush(stderr);
    size_t cap = 0;
    *line = NULL;
    if (getline(line, &cap, stdin) < 0) {
        free(*line);
        *line = NULL;
        return OB_LINE_EOF;
    }
    (*line)[strcspn(*line, "\r\n")] = 0;
    return OB_LINE_OK;
}

/* A message: lines ending in a backslash go on on the next one. *typed says whether
 * anything had been typed when it ends otherwise than OB_LINE_OK (Ctrl-C). */
static ob_line_result read_message(chat *c, char **msg, bool *typed) {
    *msg = NULL;
    *typed = false;
    size_t len = 0;
    for (;;) {
        char *line;
        ob_line_result res = read_line(c, *msg ? "... " : "> ", &line);
        if (res != OB_LINE_OK) {
            *typed = *msg || (line && line[0]);
            free(*msg);
            free(line);
            *msg = NULL;
            return res;
        }
        size_t n = strlen(line);
        bool more = n && line[n - 1] == '\\';
        if (more) line[--n] = 0;
        char *t = realloc(*msg, len + n + 2);
        if (!t) {
            free(line);
            return OB_LINE_ERROR;
        }
        *msg = t;
        if (len) t[len++] = '\n';
        memcpy(t + len, line, n + 1);
        len += n;
        free(line);
        if (!more) return OB_LINE_OK;
    }
}

int ob_run_chat(ob_run_gen *g, const ob_run_chat_opts *o) {
    chat c = {.g = g, .o = o, .msgs = json_array(), .n_ctx = ob_context_n_ctx(g->c)};
    if (o->system && o->system[0]) json_array_append_new(c.msgs, message("system", o->system));
    int out_fd = isatty(STDOUT_FILENO) ? STDOUT_FILENO : STDERR_FILENO;
    c.tty = ob_line_edit_usable(STDIN_FILENO, out_fd);
    if (c.tty) ob_line_edit_init(&c.le, STDIN_FILENO, out_fd);
    struct sigaction sa = {0}, old;
    sa.sa_handler = on_sigint;
    sa.sa_flags = SA_RESTART; /* a write to the terminal cut short would lose reply text */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old);
    g->stop = &g_interrupted;

    ob_model_info info;
    ob_model_get_info(g->m, &info);
    if (o->tmpl) fprintf(stderr, "1bit: chatting with %s\n", info.name);
    else
        fprintf(stderr, "1bit: %s has no chat template: text completion, each message continues the text "
                "(-cnv or --chat-template-file F to chat)\n", info.name);
    if (o->n_predict >= 0) fprintf(stderr, "1bit: replies stop at %d tokens (-n N to change)\n", o->n_predict);
    else fprintf(stderr, "1bit: replies have no length cap (-n N sets one)\n");
    fprintf(stderr, "1bit: Ctrl-C stops a reply, /help lists the commands, Ctrl-D or /exit quits\n");

    int rc = 0;
    bool armed = false; /* the last thing was a Ctrl-C: one more at an empty prompt quits */
    for (;;) {
        char *msg;
        bool typed;
        ob_line_result res = read_message(&c, &msg, &typed);
        if (res == OB_LINE_INTR) {
            if (typed) { armed = false; continue; }
            if (armed) break;
            fprintf(stderr, "1bit: Ctrl-C again, Ctrl-D or /exit quits\n");
            armed = true;
            continue;
        }
        if (res != OB_LINE_OK) {
            if (res == OB_LINE_ERROR) { fprintf(stderr, "1bit: cannot read the terminal\n"); rc = 1; }
            break;
        }
        armed = false;
        if (!msg[0]) { free(msg); continue; }
        if (c.tty) ob_line_history_add(&c.le, msg);
        if (msg[0] == '/' && msg[1] != '/') {
            bool go_on = command(&c, msg);
            free(msg);
            if (!go_on) break;
            continue;
        }
        json_t *m = message("user", msg + (msg[0] == '/'));
        free(msg);
        if (!m || json_array_append_new(c.msgs, m)) { fprintf(stderr, "1bit: out of memory\n"); rc = 1; break; }
        g_interrupted = 0; /* from here a Ctrl-C stops this message's reply */
        ob_run_end end = answer(&c);
        if (end == OB_RUN_END_ERROR) { rc = 1; break; }
        armed = end == OB_RUN_END_STOP;
    }
    g->stop = NULL;
    sigaction(SIGINT, &old, NULL);
    if (c.tty) ob_line_edit_free(&c.le);
    json_decref(c.msgs);
    return rc;
}
