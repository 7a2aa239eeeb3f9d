/* libmicrohttpd glue (see http.h). */
#include "server/http.h"

#include <errno.h>
#include <linux/tcp.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/log.h"
#include "server/access_log.h"
#include "server/api.h"
#include "server/gate.h"
#include "server/peer.h"
#include "server/watch.h"
#include "server/server.h"
#include "server/sse.h"

struct http {
    struct MHD_Daemon *daemon;
    struct server *srv;
    struct gate *gate;          /* accepts, and hands over connections whose head is in */
    struct watch *watch;        /* deadlines of the later requests of keep-alive connections */
    bool quiesced;
    _Atomic bool stopping;      /* connections waiting for a next request stop waiting */
};

/* A connection (MHD's socket context).  Every request head that libmicrohttpd parses has
 * been checked first: the first one by the gate, each later one by http_vet_next while
 * the bytes are still in the socket, as long as libmicrohttpd has read nothing beyond the
 * requests it answered (a client that pipelines gets "Connection: close" instead). */
struct http_sock {
    struct watch_conn *w;
    int fd;
    uint64_t consumed;          /* bytes of the socket that made the requests answered so far */
    bool unsynced;              /* libmicrohttpd may hold bytes of a request nobody checked */
};

/* One request on a connection (MHD's per-request pointer). */
struct http_conn {
    const struct api_route_info *route;
    int early_status;           /* 404 / 405 / 401, decided from the headers */
    const char *allow;
    struct strbuf body;         /* [body.len] the request body so far */
    bool too_large;
    int key_index;
    int status;                 /* what was queued (for the request counter) */
    bool preflight;             /* CORS preflight: OPTIONS with Access-Control-Request-Method */
    struct access_log_request log;
    uint64_t head_bytes;        /* the request line and headers as sent */
    uint64_t body_bytes;        /* the body as sent (Content-Length framed) */
    bool framed;                /* no Transfer-Encoding: head_bytes + body_bytes is the whole request */
    bool http11;
    bool client_close;          /* Connection: close */
    bool client_keepalive;      /* Connection: keep-alive (HTTP/1.0) */
    bool keep;                  /* the reply keeps the connection and its next head is checked */
};

/* A connection's own state (its socket context). */
static struct http_sock *http_sock_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static struct watch_conn *http_watch_conn(struct MHD_Connection *c)
{
    struct http_sock *k = http_sock_of(c);
    return k ? k->w : NULL;
}

/* ---------------------------------------------------------------- keep-alive */

/* Whether libmicrohttpd has read exactly `upto` bytes of the socket (all it has taken
 * belongs to the requests counted so far).  Called on the connection's own thread, so
 * nothing reads meanwhile; bytes arriving between the looks (the queue's length before
 * and after the byte count differ) make it look again, since a client that sends its
 * next request as soon as it has a reply races this check (an answer of false leaves
 * that request unchecked: the CI simulation once saw a 100 Continue where a 413 was due). */
static bool http_read_exactly(int fd, uint64_t upto)
{
    for (int look = 0; look < 8; look++) {
        struct tcp_info ti;
        socklen_t len = sizeof ti;
        int q0 = 0, q1 = 0;
        memset(&ti, 0, sizeof ti);
        if (ioctl(fd, FIONREAD, &q0) != 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
            ioctl(fd, FIONREAD, &q1) != 0 ||
            len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received)
            return false;
        if (q0 == q1)
            return ti.tcpi_bytes_received - (uint64_t)q0 == upto;
    }
    return false;
}

struct http_tokens {
    bool close, keepalive;
};

/* The tokens of every Connection header. */
static enum MHD_Result http_connection_tokens(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    struct http_tokens *t = cls;
    if (!key || strcasecmp(key, "Connection") || !value)
        return MHD_YES;
    for (const char *p = value; *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        size_t n = strcspn(p, ", \t");
        if (n == 5 && !strncasecmp(p, "close", 5))
            t->close = true;
        if (n == 10 && !strncasecmp(p, "keep-alive", 10))
            t->keepalive = true;
        p += n;
    }
    return MHD_YES;
}

/* Decides, as the reply is queued, whether the connection stays open: only when the
 * client asks for it (HTTP/1.1 unless "close"; HTTP/1.0 with "keep-alive" and a known
 * length) and libmicrohttpd has read nothing beyond this request, so that the next head
 * is still in the socket for http_vet_next.  Otherwise the reply says "Connection: close". */
static void http_decide_keep(struct MHD_Connection *c, struct http_conn *hc, struct MHD_Response *resp, bool stream)
{
    struct http_sock *k = http_sock_of(c);
    bool want = hc->http11 ? !hc->client_close : hc->client_keepalive && !hc->client_close && !stream;
    hc->keep = false;
    if (want && k && k->w && !k->unsynced && hc->framed) {
        uint64_t upto = k->consumed + hc->head_bytes + hc->body_bytes;
        if (http_read_exactly(k->fd, upto)) {
            k->consumed = upto;
            hc->keep = true;
        }
    }
    if (!hc->keep)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
}

/* After a reply on a connection that stays open, before libmicrohttpd reads again: waits
 * for the next request's head and checks it as the gate checks a first one (one answer
 * for a bad Content-Length, 501 for an unknown Transfer-Encoding, 413 before any
 * 100 Continue, ...).  A good head is left in the socket for libmicrohttpd; a bad one is
 * answered here and the socket shut down, so libmicrohttpd only sees the end.  The watch
 * bounds the wait (keep-alive timeout, then the head deadline) by shutting the socket
 * down; a stop shuts it down too. */
static void http_vet_next(struct http *h, struct http_sock *k)
{
    char buf[GATE_MAX_HEAD_BYTES + 1];
    bool begun = false;
    double head_deadline = 0;
    watch_keepalive(h->watch, k->w);
    /* a socket shut down with part of a head in it still shows that part: the watch's
     * verdict and the head deadline end the wait, not the peek */
    while (!atomic_load(&h->stopping) && !watch_is_shut(h->watch, k->w)) {
        if (begun && job_now() > head_deadline) {
            struct gate_verdict v = {408, "the request line and headers did not arrive in time", "request_timeout"};
            gate_refuse_fd(k->fd, &v);
            return;
        }
        ssize_t r = recv(k->fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
        if (r == 0)
            return; /* closed, or shut down past a deadline: libmicrohttpd sees the end too */
        if (r < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                return;
            struct pollfd p = {.fd = k->fd, .events = POLLIN};
            poll(&p, 1, 250);
            continue;
        }
        if (!begun) {
            watch_head_begins(h->watch, k->w);
            begun = true;
            head_deadline = job_now() + h->srv->cfg.head_timeout_s;
        }
        struct gate_verdict v = {0};
        size_t hl = gate_head_length(buf, (size_t)r);
        if (hl)
            gate_head_check(buf, hl, h->srv->cfg.max_body_bytes, &v);
        else if ((size_t)r > GATE_MAX_HEAD_BYTES)
            v = (struct gate_verdict){431, "the request line and headers are larger than 16 KiB",
                                      "request_header_too_large"};
        if (v.status) {
            gate_refuse_fd(k->fd, &v);
            return;
        }
        if (hl)
            return;
        usleep(10000); /* part of a head: the rest is coming */
    }
}

/* The CORS headers of a reply (none when the request has no allowed Origin). */
static void http_cors(struct MHD_Connection *c, struct server *s, struct MHD_Response *resp, bool preflight)
{
    struct cors_header hs[CORS_MAX_HEADERS];
    int n = cors_headers(&s->cors, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin"), preflight,
                         MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Method"),
                         MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers"), hs);
    for (int i = 0; i < n; i++)
        MHD_add_response_header(resp, hs[i].name, hs[i].value);
}

/* ---------------------------------------------------------------- streaming */

struct http_stream {
    struct server *srv;
    struct job *job;
    int client_fd;
    double last_probe;          /* when a half-closed client was last sent a comment */
    struct access_log_usage *usage; /* the request's access-log record (outlives every read) */
};

static ssize_t http_stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct http_stream *hs = cls;
    struct job *j = hs->job;
    job_access_usage(j, hs->usage);
    for (;;) {
        if (j->out.len > 0) {
            size_t n = j->out.len < max ? j->out.len : max;
            memcpy(buf, j->out.data, n);
            strbuf_consume(&j->out, n);
            return (ssize_t)n;
        }
        if (j->finished)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (j->out.oom)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        /* waiting for tokens (or the prefill): a client that hangs up is noticed here; one
         * that half-closed is sent an SSE comment now and then, which a closed one resets */
        enum peer_state ps = peer_state(hs->client_fd);
        if (ps == PEER_STATE_GONE) {
            job_cancel(j);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (ps == PEER_STATE_HALF_CLOSED && job_now() - hs->last_probe >= 0.5) {
            static const char ping[] = ": ping\n\n";
            hs->last_probe = job_now();
            if (max >= sizeof ping - 1) {
                memcpy(buf, ping, sizeof ping - 1);
                return (ssize_t)(sizeof ping - 1);
            }
        }
        if (atomic_load(&hs->srv->cancel_all) && !j->cancelled)
            job_cancel(j); /* the engine ends each request with a DONE; the stream closes properly */
        if (job_abandoned(j))
            return MHD_CONTENT_READER_END_WITH_ERROR;
        job_pump(j, 100);
    }
}

static void http_stream_free(void *cls)
{
    struct http_stream *hs = cls;
    if (!hs)
        return;
    if (!hs->job->finished)
        metrics_count_disconnect(&hs->srv->metrics);
    job_free(hs->job); /* frees (and so cancels) the engine requests */
    free(hs->job);
    free(hs);
}

/* ---------------------------------------------------------------- replies */

static enum MHD_Result http_queue(struct MHD_Connection *c, struct http_conn *hc, struct server *s,
                                  struct api_reply *r)
{
    struct MHD_Response *resp;
    bool stream = r->stream != NULL;
    if (r->stream) {
        struct http_stream *hs = calloc(1, sizeof *hs);
        if (!hs) {
            api_reply_free(r);
            api_error(r, 503, "out of memory", NULL, NULL);
            return http_queue(c, hc, s, r);
        }
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        hs->srv = s;
        hs->job = r->stream;
        hs->client_fd = ci ? ci->connect_fd : -1;
        hs->usage = &hc->log.usage;
        r->stream = NULL;
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, http_stream_read, hs,
                                                 http_stream_free);
        if (!resp) {
            http_stream_free(hs);
            return MHD_NO;
        }
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    } else {
        resp = MHD_create_response_from_buffer(r->body_len, r->body, MHD_RESPMEM_MUST_FREE);
        if (!resp) {
            api_reply_free(r);
            return MHD_NO;
        }
        r->body = NULL;
    }
    http_decide_keep(c, hc, resp, stream);
    MHD_add_response_header(resp, "Content-Type", r->content_type ? r->content_type : "application/json");
    if (r->retry_after > 0) {
        char v[16];
        snprintf(v, sizeof v, "%d", r->retry_after);
        MHD_add_response_header(resp, "Retry-After", v);
    }
    if (r->allow)
        MHD_add_response_header(resp, "Allow", r->allow);
    http_cors(c, s, resp, hc->preflight);
    hc->status = r->status;
    if (r->usage.set)
        hc->log.usage = r->usage;
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    api_reply_free(r);
    return ret;
}

static enum MHD_Result http_queue_error(struct MHD_Connection *c, struct http_conn *hc, struct server *s,
                                        int status, const char *message, const char *code, const char *allow)
{
    struct api_reply r;
    api_error(&r, status, message, NULL, code);
    r.allow = allow;
    return http_queue(c, hc, s, &r);
}

/* ---------------------------------------------------------------- requests */

static enum MHD_Result http_forwarded_for(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    if (key && !strcasecmp(key, "X-Forwarded-For"))
        access_log_add_forwarded(cls, value);
    return MHD_YES;
}

static enum MHD_Result http_access(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                   const char *version, const char *upload_data, size_t *upload_data_size,
                                   void **con_cls)
{
    struct http *h = cls;
    struct server *s = h->srv;
    struct http_conn *hc = *con_cls;
    if (!hc) { /* the headers are in: route, authenticate, size the body */
        watch_busy(h->watch, http_watch_conn(c));
        hc = calloc(1, sizeof *hc);
        if (!hc)
            return MHD_NO;
        *con_cls = hc;
        hc->key_index = -1;
        const union MHD_ConnectionInfo *hs = MHD_get_connection_info(c, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
        hc->head_bytes = hs ? hs->header_size : 0;
        hc->framed = hs && !MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
        hc->http11 = version && !strcmp(version, MHD_HTTP_VERSION_1_1);
        struct http_tokens tk = {false, false};
        MHD_get_connection_values(c, MHD_HEADER_KIND, http_connection_tokens, &tk);
        hc->client_close = tk.close;
        hc->client_keepalive = tk.keepalive;
        const union MHD_ConnectionInfo *peer = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        access_log_begin(&hc->log, method, url, peer ? peer->client_addr : NULL);
        MHD_get_connection_values(c, MHD_HEADER_KIND, http_forwarded_for, &hc->log);
        hc->route = api_route_find(url, method, &hc->allow);
        hc->preflight = !strcmp(method, "OPTIONS") &&
                        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Method");
        if (hc->preflight) {
            /* a browser's preflight carries no credentials: answered before routing and auth */
        } else if (!hc->route) {
            hc->early_status = hc->allow ? 405 : 404;
        } else if (!hc->route->open && auth_enabled(&s->auth)) {
            const char *hdr = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
            hc->key_index = auth_check(&s->auth, hdr);
            if (hc->key_index < 0)
                hc->early_status = 401;
        }
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > s->cfg.max_body_bytes)
            hc->too_large = true;
        return MHD_YES;
    }
    if (*upload_data_size > 0) { /* a piece of the body: keep it, or drop it when it will be refused */
        hc->body_bytes += *upload_data_size;
        if (!hc->early_status && !hc->too_large) {
            if (hc->body.len + *upload_data_size > s->cfg.max_body_bytes) {
                hc->too_large = true;
                strbuf_free(&hc->body);
            } else if (strbuf_append(&hc->body, upload_data, *upload_data_size) != HR_OK) {
                *upload_data_size = 0;
                return MHD_NO;
            }
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    /* the whole request is in */
    if (hc->preflight) {
        struct api_reply r;
        memset(&r, 0, sizeof r);
        if (!cors_origin_allowed(&s->cors, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin")))
            return http_queue_error(c, hc, s, 400, "Disallowed CORS origin", "cors_origin", NULL);
        r.status = 204;
        r.content_type = "text/plain";
        return http_queue(c, hc, s, &r);
    }
    if (hc->early_status == 404) {
        char msg[300];
        snprintf(msg, sizeof msg, "Unknown route: %s %.200s", method, url);
        return http_queue_error(c, hc, s, 404, msg, "unknown_url", NULL);
    }
    if (hc->early_status == 405) {
        char msg[300];
        snprintf(msg, sizeof msg, "Method %s is not allowed on %.200s (use %s)", method, url, hc->allow);
        return http_queue_error(c, hc, s, 405, msg, "method_not_allowed", hc->allow);
    }
    if (hc->early_status == 401)
        return http_queue_error(c, hc, s, 401, "Incorrect or missing API key: send \"Authorization: Bearer KEY\"",
                                "invalid_api_key", NULL);
    if (hc->too_large) {
        char msg[128];
        snprintf(msg, sizeof msg, "The request body is larger than %zu bytes", s->cfg.max_body_bytes);
        return http_queue_error(c, hc, s, 413, msg, "request_too_large", NULL);
    }
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    struct api_call call = {
        .route = hc->route,
        .path = url,
        .body = hc->body.data,
        .body_len = hc->body.len,
        .key_index = hc->key_index,
        .client_fd = ci ? ci->connect_fd : -1,
        .http10 = version && !strcmp(version, MHD_HTTP_VERSION_1_0),
    };
    struct api_reply r;
    api_handle(s, &call, &r);
    strbuf_free(&hc->body);
    return http_queue(c, hc, s, &r);
}

static void http_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    struct http *h = cls;
    struct http_sock *k = http_sock_of(c);
    watch_idle(h->watch, k ? k->w : NULL);
    struct http_conn *hc = *con_cls;
    if (!hc)
        return;
    if (hc->status)
        metrics_count_request(&h->srv->metrics, hc->route ? hc->route->ep : METRICS_ENDPOINT_OTHER, hc->status);
    access_log_end(&hc->log, hc->status, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
    bool keep = hc->keep && toe == MHD_REQUEST_TERMINATED_COMPLETED_OK;
    strbuf_free(&hc->body);
    free(hc);
    *con_cls = NULL;
    if (keep && k) {
        /* libmicrohttpd may have read on while it sent the reply: then it holds bytes of a
         * request nobody checked, and the connection closes after that one */
        if (http_read_exactly(k->fd, k->consumed))
            http_vet_next(h, k);
        else
            k->unsynced = true;
    }
}

static void http_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = 0;
    log_debug("http: %s", msg);
}

/* ---------------------------------------------------------------- the daemon */

static bool http_make_room(void *ctx)
{
    struct http *h = ctx;
    return watch_evict_idle(h->watch);
}

static bool http_handoff(void *ctx, int fd, const struct sockaddr *addr, socklen_t addrlen)
{
    struct http *h = ctx;
    return MHD_add_connection(h->daemon, fd, addr, addrlen) == MHD_YES; /* MHD closes fd on failure */
}

static void http_notify_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                                   enum MHD_ConnectionNotificationCode toe)
{
    struct http *h = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *fi = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        struct http_sock *k = calloc(1, sizeof *k);
        if (k) { /* without it (out of memory) every reply closes its connection */
            k->fd = fi ? fi->connect_fd : -1;
            k->w = watch_add(h->watch, k->fd);
        }
        *socket_context = k;
        return;
    }
    struct http_sock *k = *socket_context;
    if (k) {
        watch_remove(h->watch, k->w);
        free(k);
    }
    *socket_context = NULL;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    gate_conn_closed(h->gate, ci ? ci->client_addr : NULL);
}

/* A request line came (MHD's URI logger): its head deadline starts. */
static void *http_uri_seen(void *cls, const char *uri, struct MHD_Connection *c)
{
    (void)uri;
    struct http *h = cls;
    watch_head_begins(h->watch, http_watch_conn(c));
    return NULL;
}

enum hr_status http_start(struct http **out, struct server *s, const char *host, int port, int connection_limit,
                          int idle_timeout_s, int keepalive_timeout_s, char *err, size_t errlen)
{
    *out = NULL;
    if (port < 0 || port > 65535)
        return hr_err(err, errlen, HR_ERR_INVALID, "--port must be in 0..65535, got %d", port);
    struct http *h = calloc(1, sizeof *h);
    if (!h)
        return hr_err(err, errlen, HR_ERR_NOMEM, "out of memory");
    h->srv = s;
    enum hr_status st = watch_start(&h->watch, s->cfg.head_timeout_s, keepalive_timeout_s, err, errlen);
    if (st != HR_OK) {
        free(h);
        return st;
    }
    /* the gate listens; MHD gets connections whose first head is in (MHD_add_connection) */
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG | MHD_USE_NO_LISTEN_SOCKET;
    if (strchr(host, ':'))
        flags |= MHD_USE_IPv6;
    /* The logger goes first so that it sees what the other options say.  The gate owns
     * the listening socket (and refuses a busy port). */
    h->daemon = MHD_start_daemon(flags, 0, NULL, NULL, http_access, h,
                                 MHD_OPTION_EXTERNAL_LOGGER, http_log, NULL,
                                 MHD_OPTION_NOTIFY_COMPLETED, http_completed, h,
                                 MHD_OPTION_NOTIFY_CONNECTION, http_notify_connection, h,
                                 MHD_OPTION_URI_LOG_CALLBACK, http_uri_seen, h,
                                 /* the gate counts connections; MHD's own limit is a backstop */
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)connection_limit + GATE_EVICT_SLACK + 16,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)idle_timeout_s,
                                 MHD_OPTION_END);
    if (!h->daemon) {
        watch_stop(h->watch);
        free(h);
        return hr_err(err, errlen, HR_ERR_IO, "cannot start the HTTP daemon");
    }
    struct gate_config gc = {
        .host = host,
        .port = port,
        .head_timeout_s = s->cfg.head_timeout_s,
        .max_per_client = s->cfg.max_conns_per_client,
        .max_pending = connection_limit * 4,
        .max_active = connection_limit,
        .max_body_bytes = s->cfg.max_body_bytes,
        .make_room = http_make_room,
    };
    st = gate_start(&h->gate, &gc, http_handoff, h, err, errlen);
    if (st != HR_OK) {
        MHD_stop_daemon(h->daemon);
        watch_stop(h->watch);
        free(h);
        return st;
    }
    *out = h;
    return HR_OK;
}

int http_port(const struct http *h)
{
    return h ? gate_port(h->gate) : 0;
}

void http_quiesce(struct http *h)
{
    if (!h || h->quiesced)
        return;
    h->quiesced = true;
    gate_close_listener(h->gate);
}

void http_stop(struct http *h)
{
    if (!h)
        return;
    gate_close_listener(h->gate);
    atomic_store(&h->stopping, true);
    MHD_stop_daemon(h->daemon); /* its connections' close notices still reach the gate */
    gate_stop(h->gate);
    watch_stop(h->watch);
    free(h);
}
