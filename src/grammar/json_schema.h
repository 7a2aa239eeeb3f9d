/* JSON Schema → GBNF, for response_format json_schema, guided_json and tool parameters.
 *
 * Supported: type (object, array, string, number, integer, boolean, null, or a list),
 * properties (emitted in the schema's order), required, additionalProperties (absent or
 * false: none, as OpenAI's strict mode; true or a schema: more pairs after the listed ones),
 * items, prefixItems, minItems/maxItems, enum, const, anyOf/oneOf (as alternatives; oneOf's
 * exclusivity is not enforced), allOf of object schemas (merged), $ref to "#" or any JSON
 * pointer into the document ($defs, definitions; recursion allowed), minLength/maxLength,
 * pattern (see regex.h), format date, time, date-time, uuid, email, and minimum/maximum/
 * exclusiveMinimum/exclusiveMaximum on integers. Annotations (title, description, default,
 * examples, $schema, $id, $comment, deprecated, readOnly, writeOnly) are ignored. Any other
 * keyword is an error naming it and where it is: never silently ignored.
 *
 * Combinations are enforced exactly or refused by name, never dropped: enum/const keep the
 * values that satisfy 'type' (and each other); anyOf/oneOf with keywords beside it (type,
 * properties, required, allOf, ...) intersect each branch with them ('type' intersected,
 * 'properties' and 'required' merged, anything else both define differently refused); allOf
 * merges object schemas only where the merge is the intersection; without 'type', the
 * keywords of one type (minLength, minItems, minimum, ...) restrict the output to that type.
 *
 * Output is compact, as OpenAI's strict mode emits it: no whitespace between tokens. Numbers
 * have at most 15 integer digits, 15 fraction digits and a 2-digit exponent. */
#ifndef HEARTH_GRAMMAR_JSON_SCHEMA_H
#define HEARTH_GRAMMAR_JSON_SCHEMA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

#define JSON_SCHEMA_MAX_BYTES (256 * 1024) /* schema text at most */
#define JSON_SCHEMA_MAX_LENGTH 512         /* the largest finite maxLength/maxItems honoured */

/* GBNF text (malloc'd, the caller frees) for documents valid against schema. */
enum hr_status json_schema_to_gbnf(const json_t *schema, char **gbnf, char *err, size_t errlen);

/* with_prims false: without the shared json-* rules (json_schema_prims_gbnf), for grammars
 * that combine several schemas (tool calls). Every other rule name is r<N>, s<N>-<N>, d<N>. */
enum hr_status json_schema_to_gbnf_ex(const json_t *schema, bool with_prims, char **gbnf, char *err, size_t errlen);
const char *json_schema_prims_gbnf(void);

/* The same from schema text (parsed here; a JSON error names line and column). */
enum hr_status json_schema_text_to_gbnf(const char *text, size_t len, char **gbnf, char *err, size_t errlen);

/* GBNF of any JSON object, with optional whitespace (JSON mode, response_format json_object). */
const char *json_schema_object_gbnf(void);

#endif
