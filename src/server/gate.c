/* The accepting thread and the first request's head (see gate.h). */
#define _GNU_SOURCE /* accept4 */
#include "server/gate.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"

/* ---------------------------------------------------------------- the head */

static bool gate_tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

size_t gate_head_length(const char *buf, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++) {
        if (buf[i] != '\n')
            continue;
        if (buf[i + 1] == '\n')
            return i + 2;
        if (buf[i + 1] == '\r' && i + 2 < n && buf[i + 2] == '\n')
            return i + 3;
    }
    return 0;
}

static void gate_fail(struct gate_verdict *v, int status, const char *message, const char *code)
{
    v->status = status;
    v->message = message;
    v->code = code;
}

/* value[0..n) with surrounding spaces and tabs dropped. */
static void gate_trim(const char **value, size_t *n)
{
    while (*n && (**value == ' ' || **value == '\t')) {
        (*value)++;
        (*n)--;
    }
    while (*n && ((*value)[*n - 1] == ' ' || (*value)[*n - 1] == '\t'))
        (*n)--;
}

void gate_head_check(const char *head, size_t len, size_t max_body_bytes, struct gate_verdict *v)
{
    memset(v, 0, sizeof *v);
    /* the request line: METHOD SP TARGET SP HTTP/1.x */
    const char *end = memchr(head, '\n', len);
    if (!end)
        return gate_fail(v, 400, "malformed request line", "bad_request");
    size_t ll = (size_t)(end - head);
    if (ll && head[ll - 1] == '\r')
        ll--;
    size_t i = 0;
    while (i < ll && gate_tchar((unsigned char)head[i]))
        i++;
    if (i == 0 || i >= ll || head[i] != ' ')
        return gate_fail(v, 400, "malformed request line", "bad_request");
    size_t t0 = ++i;
    while (i < ll && (unsigned char)head[i] > ' ' && head[i] != 0x7f)
        i++;
    if (i == t0 || i >= ll || head[i] != ' ')
        return gate_fail(v, 400, "malformed request line", "bad_request");
    i++;
    if (ll - i != 8 || memcmp(head + i, "HTTP/", 5) != 0 || head[i + 5] < '0' || head[i + 5] > '9' ||
        head[i + 6] != '.' || head[i + 7] < '0' || head[i + 7] > '9')
        return gate_fail(v, 400, "malformed request line", "bad_request");
    if (head[i + 5] != '1')
        return gate_fail(v, 505, "only HTTP/1.0 and HTTP/1.1 are served", "http_version_not_supported");
    bool http11 = head[i + 7] != '0';

    /* the header lines */
    bool has_cl = false, has_te = false, has_host = false;
    unsigned long long cl = 0;
    const char *p = end + 1, *stop = head + len;
    for (;;) {
        const char *e = memchr(p, '\n', (size_t)(stop - p));
        if (!e)
            return gate_fail(v, 400, "malformed header", "bad_request");
        size_t n = (size_t)(e - p);
        if (n && p[n - 1] == '\r')
            n--;
        if (n == 0)
            break; /* the blank line */
        if (p[0] == ' ' || p[0] == '\t')
            return gate_fail(v, 400, "folded header lines are not accepted", "bad_request");
        size_t k = 0;
        while (k < n && gate_tchar((unsigned char)p[k]))
            k++;
        if (k == 0 || k >= n || p[k] != ':')
            return gate_fail(v, 400, "malformed header", "bad_request");
        const char *val = p + k + 1;
        size_t vn = n - k - 1;
        gate_trim(&val, &vn);
        if (k == 14 && !strncasecmp(p, "Content-Length", 14)) {
            unsigned long long x = 0;
            if (vn == 0 || vn > 19)
                return gate_fail(v, 400, "invalid Content-Length", "bad_request");
            for (size_t q = 0; q < vn; q++) {
                if (val[q] < '0' || val[q] > '9')
                    return gate_fail(v, 400, "invalid Content-Length", "bad_request");
                x = x * 10 + (unsigned long long)(val[q] - '0');
            }
            if (x > (unsigned long long)INT64_MAX || (has_cl && x != cl))
                return gate_fail(v, 400, "invalid Content-Length", "bad_request");
            has_cl = true;
            cl = x;
        } else if (k == 17 && !strncasecmp(p, "Transfer-Encoding", 17)) {
            if (has_te || vn != 7 || strncasecmp(val, "chunked", 7) != 0)
                return gate_fail(v, 501, "unsupported Transfer-Encoding (only chunked)", "not_implemented");
            has_te = true;
        } else if (k == 6 && !strncasecmp(p, "Expect", 6)) {
            if (vn != 12 || strncasecmp(val, "100-continue", 12) != 0)
                return gate_fail(v, 417, "unsupported Expect (only 100-continue)", "expectation_failed");
        } else if (k == 4 && !strncasecmp(p, "Host", 4)) {
            if (has_host)
                return gate_fail(v, 400, "more than one Host header", "bad_request");
            has_host = true;
        }
        p = e + 1;
    }
    if (has_te && has_cl)
        return gate_fail(v, 400, "both Content-Length and Transfer-Encoding", "bad_request");
    if (has_te && !http11)
        return gate_fail(v, 400, "Transfer-Encoding in an HTTP/1.0 request", "bad_request");
    if (http11 && !has_host)
        return gate_fail(v, 400, "an HTTP/1.1 request needs a Host header", "bad_request");
    if (has_cl && cl > max_body_bytes)
        return gate_fail(v, 413, "the request body is larger than this server accepts", "request_too_large");
}

/* ---------------------------------------------------------------- connections */

enum gate_state {
    GATE_STATE_FREE,
    GATE_STATE_HEAD,    /* waiting for the head */
    GATE_STATE_LINGER,  /* answered; reading what the client still sends until it closes */
};

struct gate_conn {
    enum gate_state state;
    int fd;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    double deadline;            /* monotonic seconds */
};

/* Open connections of one client address. */
struct gate_client {
    unsigned char key[17];      /* family, then the address bytes */
    int n;
};

struct gate {
    struct gate_config cfg;
    int listen_fd, epoll_fd, wake_fd;
    int port;
    pthread_t thread;
    bool started;
    _Atomic bool stopping;
    _Atomic int listener;       /* 0 open, 1 to be closed, 2 closed */

    struct gate_conn *conns;    /* [cfg.max_pending] */
    int n_pending;

    pthread_mutex_t mu;         /* guards what follows (the connection threads report closes) */
    struct gate_client *clients; /* [n_clients] */
    int n_clients, cap_clients;
    int n_active;               /* handed over and not closed yet */

    bool (*handoff)(void *ctx, int fd, const struct sockaddr *addr, socklen_t addrlen);
    void *ctx;
};

#define GATE_LISTEN_TAG UINT64_MAX
#define GATE_WAKE_TAG (UINT64_MAX - 1)
#define GATE_LINGER_S 2.0

static double gate_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void gate_key(const struct sockaddr *a, unsigned char key[17])
{
    memset(key, 0, 17);
    key[0] = (unsigned char)a->sa_family;
    if (a->sa_family == AF_INET)
        memcpy(key + 1, &((const struct sockaddr_in *)a)->sin_addr, 4);
    else if (a->sa_family == AF_INET6)
        memcpy(key + 1, &((const struct sockaddr_in6 *)a)->sin6_addr, 16);
}

/* Counts one more connection of a's address; false (nothing counted) at the limit. */
static bool gate_client_add(struct gate *g, const struct sockaddr *a)
{
    unsigned char key[17];
    gate_key(a, key);
    bool ok = true;
    pthread_mutex_lock(&g->mu);
    int i = 0;
    while (i < g->n_clients && memcmp(g->clients[i].key, key, 17) != 0)
        i++;
    if (i < g->n_clients) {
        if (g->clients[i].n >= g->cfg.max_per_client)
            ok = false;
        else
            g->clients[i].n++;
    } else if (g->n_clients < g->cap_clients) {
        memcpy(g->clients[i].key, key, 17);
        g->clients[i].n = 1;
        g->n_clients++;
    } else {
        ok = false; /* as many addresses as connections: cannot happen */
    }
    pthread_mutex_unlock(&g->mu);
    return ok;
}

static void gate_client_remove_locked(struct gate *g, const struct sockaddr *a)
{
    unsigned char key[17];
    gate_key(a, key);
    for (int i = 0; i < g->n_clients; i++) {
        if (memcmp(g->clients[i].key, key, 17) != 0)
            continue;
        if (--g->clients[i].n <= 0)
            g->clients[i] = g->clients[--g->n_clients];
        return;
    }
}

static void gate_client_remove(struct gate *g, const struct sockaddr *a)
{
    pthread_mutex_lock(&g->mu);
    gate_client_remove_locked(g, a);
    pthread_mutex_unlock(&g->mu);
}

void gate_conn_closed(struct gate *g, const struct sockaddr *addr)
{
    if (!g || !addr)
        return;
    pthread_mutex_lock(&g->mu);
    gate_client_remove_locked(g, addr);
    if (g->n_active > 0)
        g->n_active--;
    pthread_mutex_unlock(&g->mu);
}

static const char *gate_reason(int status)
{
    switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 417: return "Expectation Failed";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    }
    return "Error";
}

/* Sends an error reply (best effort: the socket is non-blocking and the reply small). */
static void gate_reply(int fd, int status, const char *message, const char *code)
{
    char body[512], msg[1024];
    int bl = snprintf(body, sizeof body,
                      "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"param\":null,\"code\":\"%s\"}}", message,
                      status >= 500 ? "server_error" : "invalid_request_error", code);
    int ml = snprintf(msg, sizeof msg,
                      "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s"
                      "Connection: close\r\n\r\n%s",
                      status, gate_reason(status), bl, status == 503 ? "Retry-After: 1\r\n" : "", body);
    if (ml > 0 && (size_t)ml < sizeof msg) {
        ssize_t w = send(fd, msg, (size_t)ml, MSG_NOSIGNAL);
        (void)w;
    }
}

void gate_refuse_fd(int fd, const struct gate_verdict *v)
{
    gate_reply(fd, v->status, v->message, v->code);
    shutdown(fd, SHUT_WR);
    double until = gate_now() + GATE_LINGER_S;
    char buf[4096];
    for (double now = gate_now(); now < until; now = gate_now()) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int n = poll(&p, 1, (int)((until - now) * 1000) + 1);
        if (n < 0 && errno != EINTR)
            break;
        if (n <= 0)
            continue;
        ssize_t r = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            break;
    }
    shutdown(fd, SHUT_RDWR);
}

static void gate_conn_close(struct gate *g, struct gate_conn *c)
{
    epoll_ctl(g->epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    gate_client_remove(g, (const struct sockaddr *)&c->addr);
    c->state = GATE_STATE_FREE;
    g->n_pending--;
}

/* Answers and keeps reading (and dropping) what the client still sends for a moment, so
 * that it sees the answer instead of a reset. */
static void gate_conn_refuse(struct gate *g, struct gate_conn *c, int status, const char *message, const char *code)
{
    (void)g;
    gate_reply(c->fd, status, message, code);
    shutdown(c->fd, SHUT_WR);
    c->state = GATE_STATE_LINGER;
    c->deadline = gate_now() + GATE_LINGER_S;
}

static void gate_conn_readable(struct gate *g, struct gate_conn *c)
{
    char buf[GATE_MAX_HEAD_BYTES + 1];
    if (c->state == GATE_STATE_LINGER) {
        for (;;) {
            ssize_t r = recv(c->fd, buf, sizeof buf, 0);
            if (r > 0)
                continue;
            if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
                gate_conn_close(g, c);
            return;
        }
    }
    ssize_t r = recv(c->fd, buf, sizeof buf, MSG_PEEK);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        gate_conn_close(g, c); /* gone before its request */
        return;
    }
    if (r < 0)
        return;
    size_t hl = gate_head_length(buf, (size_t)r);
    if (hl == 0) {
        if ((size_t)r > GATE_MAX_HEAD_BYTES)
            gate_conn_refuse(g, c, 431, "the request line and headers are larger than 16 KiB",
                             "request_header_too_large");
        return; /* more to come: edge-triggered, the next bytes wake us */
    }
    struct gate_verdict v;
    gate_head_check(buf, hl, g->cfg.max_body_bytes, &v);
    if (v.status) {
        gate_conn_refuse(g, c, v.status, v.message, v.code);
        return;
    }
    pthread_mutex_lock(&g->mu);
    bool room = g->n_active < g->cfg.max_active;
    /* full: as nginx reuses keep-alive connections when it runs short, close an idle one
     * (its close comes back through gate_conn_closed) so that a fresh client is served */
    if (!room && g->cfg.make_room && g->n_active < g->cfg.max_active + GATE_EVICT_SLACK)
        room = g->cfg.make_room(g->ctx);
    if (room)
        g->n_active++;
    pthread_mutex_unlock(&g->mu);
    if (!room) {
        gate_conn_refuse(g, c, 503, "the server has too many open connections; retry shortly", "server_overloaded");
        return;
    }
    epoll_ctl(g->epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
    int fd = c->fd;
    struct sockaddr_storage addr = c->addr;
    socklen_t addrlen = c->addrlen;
    c->state = GATE_STATE_FREE;
    g->n_pending--;
    /* from here the connection counts as handed over: gate_conn_closed ends it */
    if (!g->handoff(g->ctx, fd, (const struct sockaddr *)&addr, addrlen))
        gate_conn_closed(g, (const struct sockaddr *)&addr);
}

static void gate_accept(struct gate *g)
{
    for (;;) {
        struct sockaddr_storage addr;
        socklen_t len = sizeof addr;
        int fd = accept4(g->listen_fd, (struct sockaddr *)&addr, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE)
                log_warn("serve: out of file descriptors accepting a connection");
            return;
        }
        if (!gate_client_add(g, (const struct sockaddr *)&addr)) {
            gate_reply(fd, 503, "too many connections from this address", "too_many_connections");
            close(fd);
            continue;
        }
        int slot = -1;
        if (g->n_pending < g->cfg.max_pending)
            for (int i = 0; i < g->cfg.max_pending && slot < 0; i++)
                if (g->conns[i].state == GATE_STATE_FREE)
                    slot = i;
        if (slot < 0) {
            gate_reply(fd, 503, "the server has too many connections waiting; retry shortly", "server_overloaded");
            close(fd);
            gate_client_remove(g, (const struct sockaddr *)&addr);
            continue;
        }
        struct gate_conn *c = &g->conns[slot];
        c->fd = fd;
        c->addr = addr;
        c->addrlen = len;
        c->state = GATE_STATE_HEAD;
        c->deadline = gate_now() + g->cfg.head_timeout_s;
        g->n_pending++;
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.u64 = (uint64_t)slot};
        if (epoll_ctl(g->epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            gate_conn_close(g, c);
            continue;
        }
        gate_conn_readable(g, c); /* the head may be there already */
    }
}

static void gate_expire(struct gate *g, double now)
{
    for (int i = 0; i < g->cfg.max_pending; i++) {
        struct gate_conn *c = &g->conns[i];
        if (c->state == GATE_STATE_FREE || now < c->deadline)
            continue;
        if (c->state == GATE_STATE_HEAD)
            gate_conn_refuse(g, c, 408, "the request line and headers did not arrive in time", "request_timeout");
        else
            gate_conn_close(g, c);
    }
}

static void *gate_thread(void *arg)
{
    struct gate *g = arg;
    struct epoll_event evs[64];
    double last_scan = 0;
    while (!atomic_load(&g->stopping)) {
        if (atomic_load(&g->listener) == 1) {
            epoll_ctl(g->epoll_fd, EPOLL_CTL_DEL, g->listen_fd, NULL);
            close(g->listen_fd);
            g->listen_fd = -1;
            atomic_store(&g->listener, 2);
        }
        int n = epoll_wait(g->epoll_fd, evs, 64, 100);
        for (int k = 0; k < n; k++) {
            uint64_t tag = evs[k].data.u64;
            if (tag == GATE_WAKE_TAG) {
                uint64_t x;
                ssize_t r = read(g->wake_fd, &x, sizeof x);
                (void)r;
            } else if (tag == GATE_LISTEN_TAG) {
                if (g->listen_fd >= 0)
                    gate_accept(g);
            } else if (tag < (uint64_t)g->cfg.max_pending && g->conns[tag].state != GATE_STATE_FREE) {
                gate_conn_readable(g, &g->conns[tag]);
            }
        }
        double now = gate_now();
        if (now - last_scan >= 0.1) {
            gate_expire(g, now);
            last_scan = now;
        }
    }
    return NULL;
}

/* ---------------------------------------------------------------- life cycle */

static enum hr_status gate_listen(struct gate *g, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *ai = NULL;
    char ports[16];
    snprintf(ports, sizeof ports, "%d", g->cfg.port);
    int gai = getaddrinfo(g->cfg.host, ports, &hints, &ai);
    if (gai != 0 || !ai)
        return hr_err(err, errlen, HR_ERR_INVALID, "--host '%s': %s", g->cfg.host,
                      gai ? gai_strerror(gai) : "no address");
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 1024) != 0) {
        if (fd >= 0)
            close(fd);
        freeaddrinfo(ai);
        return hr_err(err, errlen, HR_ERR_IO, "cannot listen on %s:%d (address in use or not available)",
                      g->cfg.host, g->cfg.port);
    }
    freeaddrinfo(ai);
    struct sockaddr_storage a;
    socklen_t al = sizeof a;
    g->port = g->cfg.port;
    if (getsockname(fd, (struct sockaddr *)&a, &al) == 0)
        g->port = a.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&a)->sin6_port)
                                          : ntohs(((struct sockaddr_in *)&a)->sin_port);
    g->listen_fd = fd;
    return HR_OK;
}

enum hr_status gate_start(struct gate **out, const struct gate_config *cfg,
                          bool (*handoff)(void *ctx, int fd, const struct sockaddr *addr, socklen_t addrlen),
                          void *ctx, char *err, size_t errlen)
{
    *out = NULL;
    if (cfg->port < 0 || cfg->port > 65535)
        return hr_err(err, errlen, HR_ERR_INVALID, "--port must be in 0..65535, got %d", cfg->port);
    if (cfg->head_timeout_s < 1 || cfg->max_per_client < 1 || cfg->max_pending < 1 || cfg->max_active < 1)
        return hr_err(err, errlen, HR_ERR_INVALID, "connection limits must be positive");
    struct gate *g = calloc(1, sizeof *g);
    if (!g)
        return hr_err(err, errlen, HR_ERR_NOMEM, "out of memory");
    g->cfg = *cfg;
    g->listen_fd = g->epoll_fd = g->wake_fd = -1;
    g->handoff = handoff;
    g->ctx = ctx;
    pthread_mutex_init(&g->mu, NULL);
    g->cap_clients = cfg->max_pending + cfg->max_active;
    g->conns = calloc((size_t)cfg->max_pending, sizeof *g->conns);
    g->clients = calloc((size_t)g->cap_clients, sizeof *g->clients);
    enum hr_status st = HR_OK;
    if (!g->conns || !g->clients)
        st = hr_err(err, errlen, HR_ERR_NOMEM, "out of memory");
    if (st == HR_OK)
        st = gate_listen(g, err, errlen);
    if (st == HR_OK) {
        g->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
        g->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        struct epoll_event le = {.events = EPOLLIN, .data.u64 = GATE_LISTEN_TAG};
        struct epoll_event we = {.events = EPOLLIN, .data.u64 = GATE_WAKE_TAG};
        if (g->epoll_fd < 0 || g->wake_fd < 0 || epoll_ctl(g->epoll_fd, EPOLL_CTL_ADD, g->listen_fd, &le) != 0 ||
            epoll_ctl(g->epoll_fd, EPOLL_CTL_ADD, g->wake_fd, &we) != 0)
            st = hr_err(err, errlen, HR_ERR_IO, "cannot set up the listener (epoll)");
    }
    if (st == HR_OK) {
        if (pthread_create(&g->thread, NULL, gate_thread, g) != 0)
            st = hr_err(err, errlen, HR_ERR_INTERNAL, "cannot start the listener thread");
        else
            g->started = true;
    }
    if (st != HR_OK) {
        gate_stop(g);
        return st;
    }
    *out = g;
    return HR_OK;
}

int gate_port(const struct gate *g)
{
    return g ? g->port : 0;
}

static void gate_wake(struct gate *g)
{
    uint64_t one = 1;
    if (g->wake_fd >= 0) {
        ssize_t w = write(g->wake_fd, &one, sizeof one);
        (void)w;
    }
}

void gate_close_listener(struct gate *g)
{
    if (!g)
        return;
    if (!g->started) {
        if (g->listen_fd >= 0)
            close(g->listen_fd);
        g->listen_fd = -1;
        return;
    }
    int open = 0;
    if (!atomic_compare_exchange_strong(&g->listener, &open, 1))
        return;
    gate_wake(g);
    /* the thread closes it at its next turn; wait for that, so nothing is accepted after */
    for (int t = 0; t < 400 && atomic_load(&g->listener) != 2; t++)
        usleep(5000);
}

void gate_stop(struct gate *g)
{
    if (!g)
        return;
    if (g->started) {
        atomic_store(&g->stopping, true);
        gate_wake(g);
        pthread_join(g->thread, NULL);
    }
    for (int i = 0; g->conns && i < g->cfg.max_pending; i++)
        if (g->conns[i].state != GATE_STATE_FREE)
            close(g->conns[i].fd);
    if (g->listen_fd >= 0)
        close(g->listen_fd);
    if (g->epoll_fd >= 0)
        close(g->epoll_fd);
    if (g->wake_fd >= 0)
        close(g->wake_fd);
    pthread_mutex_destroy(&g->mu);
    free(g->conns);
    free(g->clients);
    free(g);
}
