/* Path redaction for client-facing messages (see redact.h). */
#include "server/redact.h"

#include <stdbool.h>
#include <string.h>

static bool redact_opens(char c)
{
    return c == ' ' || c == '\t' || c == '\'' || c == '"' || c == '(' || c == '[' || c == '=' || c == ':' ||
           c == '`';
}

static bool redact_closes(const char *p)
{
    char c = *p;
    if (!c || c == ' ' || c == '\t' || c == '\n' || c == '\'' || c == '"' || c == ')' || c == ']' || c == ',' ||
        c == '`')
        return true;
    return c == ':' && (p[1] == 0 || p[1] == ' ');
}

void redact_paths(const char *in, char *out, size_t n)
{
    if (!n)
        return;
    size_t o = 0;
    for (size_t i = 0; in[i] && o + 1 < n;) {
        if (in[i] == '/' && (i == 0 || redact_opens(in[i - 1])) && !redact_closes(in + i + 1)) {
            static const char mark[] = "<path>";
            for (size_t k = 0; mark[k] && o + 1 < n; k++)
                out[o++] = mark[k];
            while (in[i] && !redact_closes(in + i))
                i++;
            continue;
        }
        out[o++] = in[i++];
    }
    out[o] = 0;
}
