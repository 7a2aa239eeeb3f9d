/* The gate's head checks (what nginx answers), its refusal of a later request's head,
 * making room by closing idle keep-alive connections (the gate and the watch), and the
 * redaction of server paths. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/gate.h"
#include "server/redact.h"
#include "server/watch.h"
#include "test.h"

static int head_status(const char *head, size_t max_body)
{
    struct gate_verdict v;
    gate_head_check(head, strlen(head), max_body, &v);
    return v.status;
}

static void test_head_length(void)
{
    const char *a = "GET / HTTP/1.1\r\nHost: x\r\n\r\nBODY";
    CHECK(gate_head_length(a, strlen(a)) == strlen(a) - 4);
    const char *b = "GET / HTTP/1.1\nHost: x\n\nBODY";
    CHECK(gate_head_length(b, strlen(b)) == strlen(b) - 4);
    const char *c = "GET / HTTP/1.1\r\nHost: x\r\n";
    CHECK(gate_head_length(c, strlen(c)) == 0);
    CHECK(gate_head_length("", 0) == 0);
}

static void test_head_check(void)
{
    CHECK(head_status("GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 100) == 0);
    CHECK(head_status("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n", 100) == 0);
    CHECK(head_status("GET / HTTP/1.0\r\n\r\n", 100) == 0); /* HTTP/1.0 needs no Host */
    CHECK(head_status("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", 100) == 0);
    CHECK(head_status("POST / HTTP/1.1\r\nHost: x\r\ncontent-length:  7 \r\n\r\n", 100) == 0);
    /* Content-Length: negative, overflowing, not a number, two different values */
    CHECK(head_status("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 100) == 400);
    CHECK(head_status("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n", 100) == 400);
    CHECK(head_status("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 18446744073709551615\r\n\r\n", 100) == 400);
    CHECK(head_status("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\n\r\n", 100) == 400);
    CHECK(head_status("POST / HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n\r\n", 100) == 400);
    CHECK(head_status("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", 100) == 400);
    CHECK(head_status("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", 100) == 0);
    CHECK(head_status("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 101\r\n\r\n", 100) == 413);
    /* request lines */
    CHECK(head_status("GARBAGE\r\n\r\n", 100) == 400);
    CHECK(head_status("GET  / HTTP/1.1\r\nHost: x\r\n\r\n", 100) == 400);
    CHECK(head_status("GET / HTTP/1.1 \r\nHost: x\r\n\r\n", 100) == 400);
    CHECK(head_status("GET / FTP/1.1\r\nHost: x\r\n\r\n", 100) == 400);
    CHECK(head_status("GET / HTTP/2.0\r\nHost: x\r\n\r\n", 100) == 505);
    CHECK(head_status("G(T / HTTP/1.1\r\nHost: x\r\n\r\n", 100) == 400);
    /* headers */
    CHECK(head_status("GET / HTTP/1.1\r\nHost: x\r\nno colon\r\n\r\n", 100) == 400);
    CHECK(head_status("GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", 100) == 400);
    CHECK(head_status("GET / HTTP/1.1\r\n\r\n", 100) == 400); /* 1.1 without Host */
    CHECK(head_status("GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 100) == 400);
    CHECK(head_status("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 100) == 501);
    CHECK(head_status("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 100) == 501);
    CHECK(head_status("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", 100) ==
          400);
    CHECK(head_status("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 100) == 400);
    CHECK(head_status("POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n", 100) == 0);
    CHECK(head_status("POST / HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\n\r\n", 100) == 417);
}

static void test_redact(void)
{
    char out[256];
    redact_paths("cannot open '/srv/models/qwen/model.safetensors': No such file", out, sizeof out);
    CHECK(!strcmp(out, "cannot open '<path>': No such file"));
    redact_paths("/tmp/x/config.json: bad JSON at line 3", out, sizeof out);
    CHECK(!strcmp(out, "<path>: bad JSON at line 3"));
    redact_paths("a/b and 1/2 and (/etc/passwd)", out, sizeof out);
    CHECK(!strcmp(out, "a/b and 1/2 and (<path>)"));
    redact_paths("no paths here", out, sizeof out);
    CHECK(!strcmp(out, "no paths here"));
    redact_paths("/", out, sizeof out);
    CHECK(!strcmp(out, "/"));
    char small[8];
    redact_paths("file /very/long/path/name here", small, sizeof small);
    CHECK(strlen(small) == 7);
}

/* Reads what fd has until the peer closes or 3 s pass; returns the length (-1: no close). */
static int read_to_close(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    for (int i = 0; i < 300; i++) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 10) <= 0)
            continue;
        ssize_t r = recv(fd, buf + n, cap - 1 - n, MSG_DONTWAIT);
        if (r == 0) {
            buf[n] = 0;
            return (int)n;
        }
        if (r > 0)
            n += (size_t)r;
    }
    buf[n] = 0;
    return -1;
}

/* A later head refused on its own socket: one status line, then the end. */
static void test_refuse_fd(void)
{
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    const char *bad = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n";
    CHECK(send(sv[1], bad, strlen(bad), 0) == (ssize_t)strlen(bad));
    struct gate_verdict v;
    gate_head_check(bad, strlen(bad), 100, &v);
    CHECK(v.status == 400);
    shutdown(sv[1], SHUT_WR); /* the client is done: the linger ends at once */
    gate_refuse_fd(sv[0], &v);
    char buf[2048];
    int n = read_to_close(sv[1], buf, sizeof buf);
    CHECK_MSG(n > 0 && !strncmp(buf, "HTTP/1.1 400 ", 13) && strstr(buf + 1, "HTTP/1.") == NULL, "%s", buf);
    close(sv[0]);
    close(sv[1]);
}

/* The watch closes the idle keep-alive connection that waited longest, never one whose
 * next request has begun to arrive, never one that is not idle between requests. */
static void test_evict_idle(void)
{
    struct watch *w;
    char err[256];
    CHECK_OK(watch_start(&w, 60, 60, err, sizeof err), err);
    int a[2], b[2], c[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, a) == 0 && socketpair(AF_UNIX, SOCK_STREAM, 0, b) == 0 &&
          socketpair(AF_UNIX, SOCK_STREAM, 0, c) == 0);
    struct watch_conn *wa = watch_add(w, a[0]), *wb = watch_add(w, b[0]), *wc = watch_add(w, c[0]);
    CHECK(watch_evict_idle(w) == false); /* new connections are not idle between requests */
    watch_keepalive(w, wa);
    usleep(2000);
    watch_keepalive(w, wb);
    watch_busy(w, wc);
    CHECK(send(a[1], "G", 1, 0) == 1); /* a's next request has begun: a is spared */
    CHECK(watch_evict_idle(w) == true);
    char buf[64];
    CHECK(read_to_close(b[1], buf, sizeof buf) == 0); /* b, the other idle one, was closed */
    CHECK(watch_evict_idle(w) == false);              /* a has bytes waiting, c is busy */
    watch_remove(w, wa);
    watch_remove(w, wb);
    watch_remove(w, wc);
    watch_stop(w);
    for (int i = 0; i < 2; i++) {
        close(a[i]);
        close(b[i]);
        close(c[i]);
    }
}

/* With every slot taken, the gate asks for room and admits the fresh client. */
static _Atomic int room_asked, n_handed;
static int handed[4];
static bool room_cb(void *ctx)
{
    (void)ctx;
    room_asked++;
    return true;
}
static bool keep_cb(void *ctx, int fd, const struct sockaddr *addr, socklen_t addrlen)
{
    (void)ctx, (void)addr, (void)addrlen;
    if (n_handed < 4)
        handed[n_handed++] = fd;
    else
        close(fd);
    return true;
}

static void test_make_room(void)
{
    struct gate *g;
    char err[256];
    struct gate_config cfg = {.host = "127.0.0.1", .port = 0, .head_timeout_s = 5, .max_per_client = 8,
                              .max_pending = 8, .max_active = 1, .max_body_bytes = 100, .make_room = room_cb};
    CHECK_OK(gate_start(&g, &cfg, keep_cb, NULL, err, sizeof err), err);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)gate_port(g))};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int cl[2];
    for (int i = 0; i < 2; i++) {
        cl[i] = socket(AF_INET, SOCK_STREAM, 0);
        CHECK(connect(cl[i], (struct sockaddr *)&sa, sizeof sa) == 0);
        const char *req = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
        CHECK(send(cl[i], req, strlen(req), 0) == (ssize_t)strlen(req));
        for (int t = 0; t < 300 && n_handed <= i; t++)
            usleep(10000);
    }
    CHECK_MSG(n_handed == 2 && room_asked == 1, "handed %d, asked %d", n_handed, room_asked);
    gate_stop(g);
    for (int i = 0; i < n_handed; i++)
        close(handed[i]);
    close(cl[0]);
    close(cl[1]);
}

int main(void)
{
    TEST_RUN(test_head_length);
    TEST_RUN(test_head_check);
    TEST_RUN(test_redact);
    TEST_RUN(test_refuse_fd);
    TEST_RUN(test_evict_idle);
    TEST_RUN(test_make_room);
    TEST_END();
}
