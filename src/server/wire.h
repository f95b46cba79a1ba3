/* Translating between the OpenAI chat and the Anthropic Messages wire formats (wire.c):
 * requests, whole replies, streamed replies (SSE to SSE) and error bodies. The cloud
 * passthrough (cloud.c) uses it when a client's format differs from its upstream's. */
#ifndef OB_SERVER_WIRE_H
#define OB_SERVER_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#include "server/server.h"

typedef enum ob_wire_fmt { OB_WIRE_OPENAI = 0, OB_WIRE_ANTHROPIC = 1 } ob_wire_fmt;

/* anthropic.c: Anthropic messages (+ system) as OpenAI chat messages, and Anthropic tools
 * as OpenAI function tools; NULL with a 400 in r when malformed. */
json_t *ob_anth_chat_messages(json_t *body, ob_resp *r);
json_t *ob_anth_tools_openai(json_t *tools, ob_resp *r);

/* An error body in fmt's shape: OpenAI {"error":{"code","message","type"}} or Anthropic
 * {"type":"error","error":{"type","message"}}. */
void ob_wire_error(ob_resp *r, ob_wire_fmt fmt, int status, const char *fmt_str, ...)
    __attribute__((format(printf, 4, 5)));

/* A request body of one format as the other's, naming model upstream; NULL with a 400 in
 * r when the body cannot be translated. Borrowed body, new reference returned. A streamed
 * OpenAI request asks for usage (stream_options.include_usage). */
json_t *ob_wire_req_to_anthropic(json_t *body, const char *model, ob_resp *r);
json_t *ob_wire_req_to_openai(json_t *body, const char *model, ob_resp *r);

/* A whole reply of the upstream's format in the client's (to), naming model. */
json_t *ob_wire_reply(json_t *reply, ob_wire_fmt to, const char *model);

/* A streamed reply translated as it comes: bytes of the upstream's SSE in, the client's
 * SSE out. include_usage: an OpenAI client asked for the usage chunk. */
typedef struct ob_wire_sse ob_wire_sse;
ob_wire_sse *ob_wire_sse_new(ob_wire_fmt to, const char *model, bool include_usage);
/* Appends to *out what the bytes complete (events may be cut anywhere between calls);
 * at_end: the upstream's stream ended, and one that ended before its last event gives the
 * client an error event in its format. */
void ob_wire_sse_feed(ob_wire_sse *w, const char *data, size_t n, bool at_end, char **out, size_t *out_len);
void ob_wire_sse_free(ob_wire_sse *w);

#endif
