/* Deadlines for the requests that follow the first one on a keep-alive connection (the
 * gate sees only the first): a request line must become a whole head within the head
 * deadline, and a connection between requests may stay idle only for the keep-alive
 * timeout, however slowly bytes trickle in (libmicrohttpd's own timeout restarts with
 * every byte).  A thread checks a few times a second and shuts down (never closes: the
 * connection's thread does that) the sockets past their deadline.  When the connection
 * slots run short, the gate has the oldest idle keep-alive connection closed first
 * (watch_evict_idle), as nginx reuses its keep-alive connections. */
#ifndef HEARTH_SERVER_WATCH_H
#define HEARTH_SERVER_WATCH_H

#include <stdbool.h>

#include "base/status.h"

struct watch;
struct watch_conn;

enum hr_status watch_start(struct watch **out, int head_timeout_s, int keepalive_timeout_s, char *err, size_t errlen);
/* A new connection (idle from now); NULL when out of memory (it is then not watched). */
struct watch_conn *watch_add(struct watch *w, int fd);
/* Its reply went out and it waits for its next request with nothing of it sent yet: it
 * may be closed to make room (watch_evict_idle). */
void watch_keepalive(struct watch *w, struct watch_conn *c);
/* Closes (shuts down) the idle keep-alive connection that has waited longest and has
 * nothing to read; false when there is none. */
bool watch_evict_idle(struct watch *w);
/* Whether the watch has shut c down (past a deadline, or to make room). */
bool watch_is_shut(struct watch *w, struct watch_conn *c);
/* Its request line came: the head deadline runs. */
void watch_head_begins(struct watch *w, struct watch_conn *c);
/* Its head is in: a request is being served (no deadline). */
void watch_busy(struct watch *w, struct watch_conn *c);
/* Its request was answered: idle again. */
void watch_idle(struct watch *w, struct watch_conn *c);
/* It closed; frees c. */
void watch_remove(struct watch *w, struct watch_conn *c);
void watch_stop(struct watch *w);

#endif
