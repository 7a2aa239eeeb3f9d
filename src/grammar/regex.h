/* Regular expressions → GBNF, for guided_regex and JSON Schema "pattern".
 *
 * The ECMAScript subset JSON Schema uses: literals and escapes (\n \t \r \f \v \0 \xHH
 * \uHHHH \/ and escaped metacharacters), classes [...] and [^...] with ranges and \d \w \s
 * \D \W \S inside or outside them, `.` (any character but a newline), groups ( ), (?: ),
 * alternation |, quantifiers * + ? {m} {m,} {m,n} (lazy forms accepted: the language is the
 * same), and ^ $ at the ends (the whole string is matched either way). Backreferences and
 * lookaround are refused with a message naming them.
 *
 * json_string: the expression describes the inside of a JSON string: characters JSON must
 * escape (" \ and controls) are written escaped, so the output stays valid JSON. */
#ifndef HEARTH_GRAMMAR_REGEX_H
#define HEARTH_GRAMMAR_REGEX_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"
#include "grammar/gbuf.h"

#define REGEX_MAX_BYTES 4096

/* Appends a GBNF expression (no rule definitions) to out. */
enum hr_status regex_to_gbnf(const char *re, size_t len, bool json_string, struct gbuf *out, char *err,
                             size_t errlen);

/* A whole grammar ("root ::= ...") for guided_regex: malloc'd, the caller frees. */
enum hr_status regex_grammar(const char *re, size_t len, char **gbnf, char *err, size_t errlen);

#endif
