/* Request options shared by generate, chat and bench: sampling and stopping. */
#ifndef HEARTH_CLI_REQUEST_OPTS_H
#define HEARTH_CLI_REQUEST_OPTS_H

#include <hearth.h>

#define REQUEST_OPTS_MAX_STOP 64

struct request_opts {
    struct hearth_request_params p;
    const char *stop[REQUEST_OPTS_MAX_STOP];
    int32_t stop_ids[REQUEST_OPTS_MAX_STOP];
    char *grammar_buf;  /* a grammar or schema read from a file (owned) */
};

void request_opts_default(struct request_opts *o);
void request_opts_free(struct request_opts *o);
/* Like engine_opts_parse: 1 consumed, 0 not ours, -1 bad value (message printed). */
int request_opts_parse(struct request_opts *o, int argc, char **argv, int *i);
/* An engine option (engine_opts_parse), else a request option: the same answers. */
int request_opts_parse_with_engine(struct hearth_engine_params *ep, struct request_opts *o, int argc, char **argv,
                                   int *i);

extern const char request_opts_help[];

#endif
