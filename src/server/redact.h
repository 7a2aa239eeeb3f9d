/* Messages for clients name no server paths: the model directory, weight files and the
 * like are replaced by "<path>" (the full message goes to the server log). */
#ifndef HEARTH_SERVER_REDACT_H
#define HEARTH_SERVER_REDACT_H

#include <stddef.h>

/* Copies in to out[n] (always NUL-terminated, truncated if need be) with every absolute
 * path replaced by "<path>".  A path starts with '/' at the start of the text or after a
 * space, quote, bracket, '=' or ':' and runs to the next space, quote, bracket, comma, or
 * ':' that ends the text or precedes a space. */
void redact_paths(const char *in, char *out, size_t n);

#endif
