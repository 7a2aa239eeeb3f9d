/* The endpoints: routing, and what each answers.  http.c does the HTTP (connections,
 * bodies, authentication, streaming); this file turns one request into one reply. */
#ifndef HEARTH_SERVER_API_H
#define HEARTH_SERVER_API_H

#include <stdbool.h>
#include <stddef.h>

#include "server/access_log.h"
#include "server/job.h"
#include "server/metrics.h"
#include "server/server.h"

enum api_route {
    API_ROUTE_COMPLETIONS,
    API_ROUTE_CHAT,
    API_ROUTE_MODELS,
    API_ROUTE_HEALTH,
    API_ROUTE_METRICS,
    API_ROUTE_STATS,
    API_ROUTE_CACHE_RESET,
    API_ROUTE_RELOAD,
    API_ROUTE_MODEL,             /* GET /v1/models/{id} */
    API_ROUTE_TOKENIZE,
    API_ROUTE_DETOKENIZE,
    API_ROUTE_VERSION,
    API_ROUTE_RESPONSES,         /* POST /v1/responses */
};

struct api_route_info {
    const char *path;
    const char *method;
    enum api_route route;
    bool open;                   /* no API key needed (/health, /metrics) */
    enum metrics_endpoint ep;    /* label in the request counter */
};
/* A path ending in '/' is a prefix: the rest of the URL is the route's argument. */

/* The route of (path, method).  NULL when there is none: *allow then names the method
 * the path takes (405), or is NULL when the path is unknown (404). */
const struct api_route_info *api_route_find(const char *path, const char *method, const char **allow);

struct api_call {
    const struct api_route_info *route;
    const char *path;            /* the URL's path (a prefix route's argument follows route->path) */
    const char *body;            /* [body_len] */
    size_t body_len;
    int key_index;               /* the API key presented (-1: none / auth off) */
    int client_fd;               /* the connection's socket: a client that hangs up is noticed */
    bool http10;                 /* an HTTP/1.0 request (no interim responses) */
};

struct api_reply {
    int status;
    const char *content_type;    /* static string */
    char *body;                  /* [body_len] malloc'd */
    size_t body_len;
    struct job *stream;          /* SSE reply: http sends stream->out until stream->finished */
    int retry_after;             /* seconds for a Retry-After header (0: none) */
    const char *allow;           /* Allow header of a 405 */
    struct access_log_usage usage; /* a generation's tokens, for the access log (not set: none) */
};

void api_handle(struct server *s, const struct api_call *call, struct api_reply *out);

/* What another API built over a generation endpoint changes (/v1/responses over chat):
 * started runs once the job is submitted (before anything is sent: it may install the
 * job's out_filter); body makes the reply of a finished non-streamed job. */
struct api_hooks {
    void (*started)(struct job *j, void *ctx);
    json_t *(*body)(struct job *j, void *ctx);
    void *ctx;
};
/* Parses call->body for ep, runs the job, and replies (streams, or waits for it);
 * hooks may be NULL. */
void api_generate(struct server *s, const struct api_call *call, enum openai_endpoint ep,
                  const struct api_hooks *hooks, struct api_reply *out);
/* A JSON reply (takes body's reference; NULL or an oom gives a 500). */
void api_json(struct api_reply *out, int status, json_t *body);
/* An error reply in OpenAI's envelope. */
void api_error(struct api_reply *out, int status, const char *message, const char *param, const char *code);
void api_reply_free(struct api_reply *r);

#endif
