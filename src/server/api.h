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
};

struct api_route_info {
    const char *path;
    const char *method;
    enum api_route route;
    bool open;                   /* no API key needed (/health, /metrics) */
    enum metrics_endpoint ep;    /* label in the request counter */
};

/* The route of (path, method).  NULL when there is none: *allow then names the method
 * the path takes (405), or is NULL when the path is unknown (404). */
const struct api_route_info *api_route_find(const char *path, const char *method, const char **allow);

struct api_call {
    const struct api_route_info *route;
    const char *body;            /* [body_len] */
    size_t body_len;
    int key_index;               /* the API key presented (-1: none / auth off) */
    int client_fd;               /* the connection's socket: a client that hangs up is noticed */
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
/* An error reply in OpenAI's envelope. */
void api_error(struct api_reply *out, int status, const char *message, const char *param, const char *code);
void api_reply_free(struct api_reply *r);
/* The peer closed or reset the connection (checked without blocking). */
bool api_client_gone(int fd);

#endif
