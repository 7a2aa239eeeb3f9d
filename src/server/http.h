/* HTTP/1.1 over libmicrohttpd behind gate.c (which listens and hands over connections
 * whose first request head is in): a thread per connection (keep-alive), request bodies up
 * to a limit (413 beyond), API keys (401), routes (404/405), and SSE streaming through a
 * content callback that waits for engine events in the connection's own thread, so a
 * slow client only ever slows itself.  A client that hangs up has its job cancelled. */
#ifndef HEARTH_SERVER_HTTP_H
#define HEARTH_SERVER_HTTP_H

#include "base/status.h"

struct server;
struct http;

/* Starts listening on host:port (port 0: any free port). */
enum hr_status http_start(struct http **out, struct server *s, const char *host, int port, int connection_limit,
                          int idle_timeout_s, int keepalive_timeout_s, char *err, size_t errlen);
int http_port(const struct http *h);
/* Stops accepting new connections; those open keep being served. */
void http_quiesce(struct http *h);
/* Closes every connection (waiting for their threads) and frees. */
void http_stop(struct http *h);

#endif
