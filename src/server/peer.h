/* What became of the client of a connection, seen without blocking.  A client that only
 * half-closed (shut its sending side after the request) still reads the reply, as nginx
 * serves it; one that closed or reset is gone.  The two look alike until something is
 * written: the kernel of a client that closed answers data with a reset. */
#ifndef HEARTH_SERVER_PEER_H
#define HEARTH_SERVER_PEER_H

#include <stdbool.h>

enum peer_state {
    PEER_STATE_OPEN,
    PEER_STATE_HALF_CLOSED,     /* end of its data seen: half-closed, or closed (probe to know) */
    PEER_STATE_GONE,            /* reset, or the socket failed */
};

enum peer_state peer_state(int fd);
/* Writes an interim "100 Continue" (HTTP/1.1 lets a server send it at any time before
 * the final response, and every client skips it), so that a client that closed resets the
 * connection and shows as gone.  Only before any byte of the response went out.  False
 * when the write failed (the client is gone). */
bool peer_probe_interim(int fd);

#endif
