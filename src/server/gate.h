/* The front door of the HTTP server.  One thread accepts connections and holds each
 * until its first request's line and headers have arrived whole (peeked, not read, so
 * libmicrohttpd parses them as usual), within a deadline; only then is the connection
 * handed over, so slow or idle connections never take a connection thread or slot from
 * clients that send their request (and with every slot taken, an idle keep-alive
 * connection is closed to make room: make_room).  http.c checks the later heads of a
 * keep-alive connection with the same gate_head_check.  It bounds the connections of one client address
 * (pending and handed over), and answers as nginx does what the head already rules out:
 * a malformed request line or header (400), a bad or overflowing Content-Length (400),
 * a body above the limit (413, before any 100 Continue), an unknown Transfer-Encoding
 * (501), a head too large (431), a head too slow (408), too many connections (503). */
#ifndef HEARTH_SERVER_GATE_H
#define HEARTH_SERVER_GATE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "base/status.h"

struct gate;

struct gate_config {
    const char *host;
    int port;                   /* 0: any free port */
    int head_timeout_s;         /* the first request's head must be in within this */
    int max_per_client;         /* connections of one address at most (pending and handed over) */
    int max_pending;            /* connections waiting for their head at most */
    int max_active;             /* connections handed over at most */
    size_t max_body_bytes;      /* a Content-Length above it: 413 */
    /* With every active slot taken: close one idle keep-alive connection (its slot comes
     * back when its close is reported) and return true, or false when there is none.
     * NULL: fresh clients get 503 while the slots are full.  Called with gate_start's ctx. */
    bool (*make_room)(void *ctx);
};

/* Active connections beyond max_active while closed idle ones are still reporting their close. */
#define GATE_EVICT_SLACK 64

#define GATE_MAX_HEAD_BYTES 16384 /* request line and headers at most (431 beyond) */

/* What a head says (gate_head_check). */
struct gate_verdict {
    int status;                 /* 0: hand it over; else the error status to answer */
    const char *message;        /* static text for the error */
    const char *code;           /* the error envelope's code */
};

/* Checks one request head: head[0..len) ends with its blank line. */
void gate_head_check(const char *head, size_t len, size_t max_body_bytes, struct gate_verdict *v);
/* The length of the head in buf[0..n) including its blank line, or 0 when it is not complete. */
size_t gate_head_length(const char *buf, size_t n);

/* For a later request of a keep-alive connection, which the gate does not see: answers
 * the verdict's error on fd (blocking), then reads and drops what the client still sends
 * until it closes or a couple of seconds pass, so that it sees the answer, not a reset;
 * leaves fd shut down both ways (the caller closes it). */
void gate_refuse_fd(int fd, const struct gate_verdict *v);

/* Listens on host:port and starts the accepting thread.  handoff takes a connection
 * whose head is in; it returns false when it could not (the socket is then closed). */
enum hr_status gate_start(struct gate **out, const struct gate_config *cfg,
                          bool (*handoff)(void *ctx, int fd, const struct sockaddr *addr, socklen_t addrlen),
                          void *ctx, char *err, size_t errlen);
int gate_port(const struct gate *g);
/* A handed-over connection from addr has closed. */
void gate_conn_closed(struct gate *g, const struct sockaddr *addr);
/* Stops accepting (the listening socket closes); connections handed over keep going. */
void gate_close_listener(struct gate *g);
/* Stops the thread and closes every connection still waiting for its head. */
void gate_stop(struct gate *g);

#endif
