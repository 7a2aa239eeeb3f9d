/* The client's side of a connection (see peer.h). */
#define _GNU_SOURCE /* POLLRDHUP */
#include "server/peer.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

enum peer_state peer_state(int fd)
{
    if (fd < 0)
        return PEER_STATE_OPEN;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) <= 0)
        return PEER_STATE_OPEN;
    if (p.revents & (POLLHUP | POLLERR | POLLNVAL))
        return PEER_STATE_GONE;
    return p.revents & POLLRDHUP ? PEER_STATE_HALF_CLOSED : PEER_STATE_OPEN;
}

bool peer_probe_interim(int fd)
{
    static const char msg[] = "HTTP/1.1 100 Continue\r\n\r\n";
    ssize_t w;
    do
        w = send(fd, msg, sizeof msg - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (w < 0 && errno == EINTR);
    return w == (ssize_t)(sizeof msg - 1);
}
