/* The access log: one line per HTTP request when it completes (method, path, status,
 * prompt / cached / generated tokens, time to first token, duration, the client's
 * address and the X-Forwarded-For chain a proxy added), through base/log so that
 * --log-format json makes it one JSON object.  http.c keeps one record per request. */
#ifndef HEARTH_SERVER_ACCESS_LOG_H
#define HEARTH_SERVER_ACCESS_LOG_H

#include <stdbool.h>
#include <sys/socket.h>

/* What a generation request used (from its job). */
struct access_log_usage {
    bool set;                  /* a generation request: the fields below mean something */
    int prompt_tokens;
    int cached_tokens;         /* -1: unknown (the request did not end) */
    int generated_tokens;
    double t_first_token;      /* monotonic seconds of the first token; 0: none came */
};

struct access_log_request {
    char method[16];
    char *path;                /* the URL's path, at most ACCESS_LOG_MAX_PATH bytes */
    char client[64];           /* the peer's numeric address */
    char *forwarded_for;       /* every X-Forwarded-For value, ", "-joined; NULL: none */
    double t_start;            /* monotonic seconds when the headers were in */
    struct access_log_usage usage;
};

#define ACCESS_LOG_MAX_PATH 256
#define ACCESS_LOG_MAX_FORWARDED 512

/* Starts the record: a request's headers are in.  Out of memory only drops the path. */
void access_log_begin(struct access_log_request *r, const char *method, const char *path,
                      const struct sockaddr *peer);
/* One X-Forwarded-For header's value (a request may carry several). */
void access_log_add_forwarded(struct access_log_request *r, const char *value);
/* Writes the line and frees the record.  status 0: no response was sent; completed:
 * the response went out whole (false: the client or the connection went away). */
void access_log_end(struct access_log_request *r, int status, bool completed);

#endif
