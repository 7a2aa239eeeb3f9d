/* hearth chat: an interactive chat on the terminal, with the model's chat template.
 * Each turn renders the whole conversation, so the prefix cache serves the history.
 * On a terminal, lines are read with libedit (editing, history); Ctrl-C stops the
 * answer being written and keeps the conversation. */
#include <editline/readline.h>
#include <jansson.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/status.h"
#include "cli/args.h"
#include "cli/cli.h"
#include "cli/engine_opts.h"
#include "cli/request_opts.h"
#include "template/template.h"

static const char chat_commands[] =
    "/help   this list\n"
    "/reset  start a new conversation (the system prompt stays)\n"
    "/exit   quit (so does Ctrl-D)\n"
    "Ctrl-C while the model writes stops the answer; the conversation goes on.\n";

static void chat_usage(void)
{
    fprintf(stderr, "usage: hearth chat --model DIR [--system TEXT] [--no-thinking] [options]\n"
                    "Reads a message per line from stdin and streams the answer.\n%s\n%s\n%s",
            chat_commands, request_opts_help, engine_opts_help);
}

static atomic_int chat_interrupted;

static void chat_on_sigint(int sig)
{
    (void)sig;
    atomic_store(&chat_interrupted, 1);
}

/* The next line (malloc'd, without its newline), or NULL at the end of input.  A
 * Ctrl-C at the prompt gives an empty line. */
static char *chat_read_line(bool tty)
{
    if (tty) {
        for (;;) {
            atomic_store(&chat_interrupted, 0);
            char *l = readline("> ");
            if (l || !atomic_load(&chat_interrupted))
                return l;
            fputc('\n', stderr);
        }
    }
    fprintf(stderr, "> ");
    char *line = NULL;
    size_t cap = 0;
    ssize_t n = getline(&line, &cap, stdin);
    if (n < 0) {
        free(line);
        return NULL;
    }
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = 0;
    return line;
}

/* Streams one answer; returns it (malloc'd) or NULL on error. */
static char *chat_turn(struct hearth_engine *e, struct request_opts *ro, const char *prompt)
{
    char err[HR_ERRLEN];
    struct hearth_request *r = NULL;
    ro->p.prompt = prompt;
    if (hearth_submit(e, &ro->p, &r, err, sizeof err) != HR_OK) {
        fprintf(stderr, "hearth chat: %s\n", err);
        return NULL;
    }
    size_t len = 0, cap = 256;
    char *answer = malloc(cap);
    struct hearth_event ev;
    bool stopped = false;
    atomic_store(&chat_interrupted, 0);
    while (answer) {
        enum hr_status st = hearth_request_next_event(r, &ev, 100);
        if (st == HR_ERR_FULL) { /* no event yet: a Ctrl-C stops the answer */
            if (atomic_exchange(&chat_interrupted, 0) && !stopped) {
                hearth_request_cancel(r);
                stopped = true;
            }
            continue;
        }
        if (st != HR_OK)
            break;
        if (atomic_exchange(&chat_interrupted, 0) && !stopped) {
            hearth_request_cancel(r);
            stopped = true;
        }
        if (ev.type == HEARTH_EVENT_DONE) {
            if (stopped)
                fprintf(stderr, "\n[stopped]");
            if (ev.finish_reason == HEARTH_FINISH_ERROR)
                fprintf(stderr, "\nhearth chat: %s\n", ev.message);
            fprintf(stderr, "\n[%d prompt tokens, %d from the cache, %d generated]\n", ev.prompt_tokens,
                    ev.cached_tokens, ev.completion_tokens);
            break;
        }
        fwrite(ev.text, 1, ev.text_len, stdout);
        fflush(stdout);
        if (len + ev.text_len + 1 > cap) {
            while (len + ev.text_len + 1 > cap)
                cap *= 2;
            char *na = realloc(answer, cap);
            if (!na) {
                free(answer);
                answer = NULL;
                break;
            }
            answer = na;
        }
        memcpy(answer + len, ev.text, ev.text_len);
        len += ev.text_len;
    }
    if (answer)
        answer[len] = 0;
    hearth_request_free(r);
    return answer;
}

static json_t *chat_msg(const char *role, const char *content)
{
    return json_pack("{s:s, s:s}", "role", role, "content", content);
}

int cli_chat(int argc, char **argv)
{
    struct hearth_engine_params ep;
    struct request_opts ro;
    engine_opts_default(&ep);
    request_opts_default(&ro);
    ro.p.max_tokens = 512;
    const char *system = NULL;
    int thinking = -1;
    for (int i = 1; i < argc; i++) {
        int r = request_opts_parse_with_engine(&ep, &ro, argc, argv, &i);
        if (r < 0)
            return 2;
        if (r > 0)
            continue;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            chat_usage();
            return 0;
        } else if (args_is(argv[i], "--system")) {
            if (!(system = args_value(argc, argv, &i)))
                return 2;
        } else if (!strcmp(argv[i], "--no-thinking")) {
            thinking = 0;
        } else {
            fprintf(stderr, "hearth chat: unknown option '%s'\n", argv[i]);
            chat_usage();
            return 2;
        }
    }
    if (!ep.model_dir) {
        chat_usage();
        return 2;
    }
    char err[HR_ERRLEN];
    struct chat_template_model tm;
    if (chat_template_model_load(&tm, ep.model_dir, err, sizeof err) != HR_OK) {
        fprintf(stderr, "hearth chat: %s\n", err);
        return 1;
    }
    struct hearth_engine *e = NULL;
    if (hearth_engine_init(&e, &ep, err, sizeof err) != HR_OK) {
        fprintf(stderr, "hearth chat: %s\n", err);
        chat_template_model_free(&tm);
        return 1;
    }
    json_t *msgs = json_array();
    if (system)
        json_array_append_new(msgs, chat_msg("system", system));
    bool tty = isatty(STDIN_FILENO) && isatty(STDERR_FILENO);
    struct sigaction sa = {0};
    sa.sa_handler = chat_on_sigint; /* no SA_RESTART: a read at the prompt returns */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    if (tty)
        using_history();
    char *line = NULL;
    int rc = 0;
    for (;;) {
        free(line);
        if (!(line = chat_read_line(tty)))
            break;
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit"))
            break;
        if (tty && *line)
            add_history(line);
        if (!strcmp(line, "/reset")) {
            json_array_clear(msgs);
            if (system)
                json_array_append_new(msgs, chat_msg("system", system));
            fprintf(stderr, "[a new conversation]\n");
            continue;
        }
        if (line[0] == '/') { /* commands stay here; an unknown one is not sent to the model */
            if (strcmp(line, "/help") != 0)
                fprintf(stderr, "unknown command %s\n", line);
            fputs(chat_commands, stderr);
            continue;
        }
        if (!*line)
            continue;
        json_array_append_new(msgs, chat_msg("user", line));
        struct chat_template_request req = {.messages = msgs, .add_generation_prompt = true,
                                            .enable_thinking = thinking};
        char *prompt = NULL;
        size_t plen = 0;
        if (chat_template_model_render(&tm, &req, &prompt, &plen, err, sizeof err) != HR_OK) {
            fprintf(stderr, "hearth chat: %s\n", err);
            rc = 1;
            break;
        }
        char *answer = chat_turn(e, &ro, prompt);
        free(prompt);
        if (!answer) {
            rc = 1;
            break;
        }
        json_array_append_new(msgs, chat_msg("assistant", answer));
        free(answer);
    }
    free(line);
    json_decref(msgs);
    hearth_engine_free(e);
    chat_template_model_free(&tm);
    return rc;
}
