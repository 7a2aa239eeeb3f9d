/* GBNF (llama.cpp's grammar format) → struct grammar.
 *
 *   root  ::= "{" ws pair ("," ws pair)* "}"   # a comment
 *   pair  ::= [a-z]+ ws ":" ws ("yes" | "no")
 *   ws    ::= [ \t\n]{0,4}
 *
 * Literals "..." and classes [...] / [^...] with escapes \n \r \t \\ \" \] \- \xHH \uHHHH
 * \UHHHHHHHH (code points, matched as UTF-8), `.` (any character), rule names of
 * [A-Za-z0-9_-], groups ( ), and postfix * + ? {m} {m,} {m,n}. A rule ends at the end of
 * its line, except inside parentheses or after `|`. The start rule is `root`. Errors carry
 * the line and column. */
#ifndef HEARTH_GRAMMAR_GBNF_H
#define HEARTH_GRAMMAR_GBNF_H

#include <stddef.h>

#include "grammar/grammar.h"

#define GBNF_MAX_REPEAT 10000 /* the largest m or n of {m,n} */

/* Copies GBNF text with every rule name prefixed, except names that begin with keep (so
 * several grammars can share one file); literals, classes, repetitions and comments are left
 * as they are. The result is malloc'd. */
enum hr_status gbnf_prefix_rules(const char *text, const char *prefix, const char *keep, char **out, char *err,
                                 size_t errlen);

enum hr_status gbnf_parse(const char *text, size_t len, struct grammar *g, char *err, size_t errlen);

#endif
