/* One access-log line per request (see access_log.h). */
#include "server/access_log.h"

#include <math.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"

static double access_log_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void access_log_begin(struct access_log_request *r, const char *method, const char *path,
                      const struct sockaddr *peer)
{
    memset(r, 0, sizeof *r);
    r->t_start = access_log_now();
    snprintf(r->method, sizeof r->method, "%s", method ? method : "");
    r->path = strndup(path ? path : "", ACCESS_LOG_MAX_PATH);
    snprintf(r->client, sizeof r->client, "-");
    if (peer) {
        socklen_t len = peer->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
        if (getnameinfo(peer, len, r->client, sizeof r->client, NULL, 0, NI_NUMERICHOST) != 0)
            snprintf(r->client, sizeof r->client, "-");
    }
}

void access_log_add_forwarded(struct access_log_request *r, const char *value)
{
    if (!value || !*value)
        return;
    size_t have = r->forwarded_for ? strlen(r->forwarded_for) : 0;
    if (have >= ACCESS_LOG_MAX_FORWARDED)
        return;
    size_t add = strnlen(value, ACCESS_LOG_MAX_FORWARDED - have);
    char *p = realloc(r->forwarded_for, have + 2 + add + 1);
    if (!p)
        return;
    if (have) {
        memcpy(p + have, ", ", 2);
        have += 2;
    }
    memcpy(p + have, value, add);
    p[have + add] = 0;
    r->forwarded_for = p;
}

void access_log_end(struct access_log_request *r, int status, bool completed)
{
    const struct access_log_usage *u = &r->usage;
    double now = access_log_now();
    double ttft = u->set && u->t_first_token > 0 ? (u->t_first_token - r->t_start) * 1e3 : NAN;
    struct log_field f[] = {
        {.key = "method", .type = LOG_FIELD_STR, .str = r->method},
        {.key = "path", .type = LOG_FIELD_STR, .str = r->path},
        {.key = "status", .type = LOG_FIELD_INT, .i = status},
        {.key = "prompt_tokens", .type = u->set ? LOG_FIELD_INT : LOG_FIELD_STR, .i = u->prompt_tokens},
        {.key = "cached_tokens", .type = u->set && u->cached_tokens >= 0 ? LOG_FIELD_INT : LOG_FIELD_STR,
         .i = u->cached_tokens},
        {.key = "generated_tokens", .type = u->set ? LOG_FIELD_INT : LOG_FIELD_STR, .i = u->generated_tokens},
        {.key = "ttft_ms", .type = LOG_FIELD_NUM, .num = ttft},
        {.key = "duration_ms", .type = LOG_FIELD_NUM, .num = (now - r->t_start) * 1e3},
        {.key = "client", .type = LOG_FIELD_STR, .str = r->client},
        {.key = "forwarded_for", .type = LOG_FIELD_STR, .str = r->forwarded_for},
        {.key = "completed", .type = LOG_FIELD_BOOL, .i = completed},
    };
    /* a balancer's health checks and the scraper come every few seconds: at debug level
     * unless they fail */
    bool probe = r->path && (!strcmp(r->path, "/health") || !strcmp(r->path, "/metrics"));
    enum log_level lvl = probe && status == 200 ? LOG_LEVEL_DEBUG : LOG_LEVEL_INFO;
    log_fields(lvl, "access", f, (int)(sizeof f / sizeof f[0]));
    free(r->path);
    free(r->forwarded_for);
    memset(r, 0, sizeof *r);
}
