/* One generation request of the OpenAI API, from validated request to response: renders
 * chat messages with the model's template, tokenizes, checks the context, submits one
 * engine request per prompt (each with n samples), and turns the engine's events into
 * choices, SSE chunks, usage and metrics.  Used by one HTTP thread at a time; it never
 * blocks the engine (events wait in the engine request until job_pump takes them). */
#ifndef HEARTH_SERVER_JOB_H
#define HEARTH_SERVER_JOB_H

#include <stdbool.h>

#include <hearth.h>

#include "server/access_log.h"
#include "server/openai.h"
#include "server/response.h"
#include "server/server.h"
#include "server/strbuf.h"

struct job_sub {
    struct hearth_request *req;
    int prompt_tokens;
    bool done;                  /* its DONE event came */
};

struct job {
    struct server *srv;
    struct hearth_engine *engine;
    struct openai_request rq;   /* owned */
    struct job_sub *subs;       /* [n_subs]: one engine request per prompt */
    int n_subs;
    int n_per_sub;              /* samples per prompt: choice = sub * n_per_sub + sample */
    struct response resp;
    struct strbuf out;          /* SSE bytes not yet sent (streaming) */
    bool finished;              /* every DONE came; for streams, the last frames are in out */
    bool cancelled;
    double t_cancel;            /* when job_cancel was first called */
    enum hr_status fail;        /* an engine error (HR_OK: none) */
    char fail_msg[HR_ERRLEN];
    double t_start;             /* monotonic seconds at submission */
    bool seen_token;
    double t_first_token;       /* monotonic seconds of the first token (0: none yet) */
    double *t_last;             /* [n_choices] time of each choice's last token (ITL) */
    bool counted;               /* counted in srv->active_jobs */
    uint64_t seed;              /* the seed the engine reports (first prompt's) */
    /* Another API over the chat path (/v1/responses): after each job_pump, out_filter
     * rewrites what came into out; filter_ctx is the filter's, freed by filter_free
     * in job_free. */
    void (*out_filter)(struct job *j);
    void *filter_ctx;
    void (*filter_free)(void *ctx);
};

/* Takes rq over (even on failure) and submits.  key_index: the API key used (for
 * --salt-per-key), -1 for none.  Failures name the bad field in param. */
enum hr_status job_start(struct job *j, struct server *s, struct openai_request *rq, int key_index, char *param,
                         size_t paramlen, char *err, size_t errlen);
/* Takes the events that have come, waiting up to timeout_ms for the first. */
void job_pump(struct job *j, int timeout_ms);
/* Asks the engine to stop every request of the job (client gone, server stopping). */
void job_cancel(struct job *j);
/* Cancelled long enough ago that the engine should have answered: stop waiting. */
bool job_abandoned(const struct job *j);
/* The body of a finished non-streamed job (a new reference), or NULL on oom. */
json_t *job_body(struct job *j);
/* The same as JSON text (*out malloc'd), about the body's size in memory. */
enum hr_status job_body_text(struct job *j, char **out, size_t *len, char *err, size_t errlen);

/* The tokens so far, for the access log: the engine's counts once finished, before
 * that the prompt's length and the tokens that came (cached unknown). */
void job_access_usage(const struct job *j, struct access_log_usage *out);
void job_free(struct job *j);

/* Monotonic seconds. */
double job_now(void);

#endif
