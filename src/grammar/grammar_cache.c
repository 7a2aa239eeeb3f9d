/* The LRU of compiled grammars and the source kinds' translation to GBNF. */
#include "grammar/grammar_cache.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gbnf.h"
#include "grammar/gbuf.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"

void grammar_cache_init(struct grammar_cache *c, const struct tokenizer *tk, int n_vocab, int max_entries,
                        size_t max_bytes)
{
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    c->tk = tk;
    c->n_vocab = n_vocab;
    c->max_entries = max_entries > 0 ? max_entries : GRAMMAR_CACHE_ENTRIES;
    c->max_bytes = max_bytes ? max_bytes : GRAMMAR_CACHE_BYTES;
}

void grammar_cache_free(struct grammar_cache *c)
{
    if (!c || !c->max_entries)
        return;
    for (int i = 0; i < c->n; i++) {
        free(c->e[i].text);
        grammar_compiled_unref(c->e[i].c);
    }
    free(c->e);
    if (c->vocab_ready)
        grammar_vocab_free(&c->vocab);
    pthread_mutex_destroy(&c->mu);
    memset(c, 0, sizeof *c);
}

const struct grammar_vocab *grammar_cache_vocab(struct grammar_cache *c, char *err, size_t errlen)
{
    pthread_mutex_lock(&c->mu);
    if (!c->vocab_ready) {
        if (!c->tk) {
            pthread_mutex_unlock(&c->mu);
            hr_err(err, errlen, HR_ERR_INVALID, "grammar: this model has no tokenizer.json to match text with");
            return NULL;
        }
        if (grammar_vocab_from_tokenizer(&c->vocab, c->tk, c->n_vocab, err, errlen) != HR_OK) {
            pthread_mutex_unlock(&c->mu);
            return NULL;
        }
        c->vocab_ready = true;
    }
    pthread_mutex_unlock(&c->mu);
    return &c->vocab;
}

static enum hr_status choice_gbnf(const char *text, size_t len, char **gbnf, char *err, size_t errlen)
{
    json_error_t je;
    json_t *a = json_loadb(text, len, 0, &je);
    if (!json_is_array(a) || json_array_size(a) == 0) {
        json_decref(a);
        return hr_err(err, errlen, HR_ERR_INVALID, "guided_choice: must be a non-empty array of strings");
    }
    struct gbuf o = {0};
    gbuf_str(&o, "root ::= ");
    for (size_t i = 0; i < json_array_size(a); i++) {
        const json_t *s = json_array_get(a, i);
        if (!json_is_string(s)) {
            json_decref(a);
            gbuf_free(&o);
            return hr_err(err, errlen, HR_ERR_INVALID, "guided_choice: item %zu is not a string", i);
        }
        if (i)
            gbuf_str(&o, " | ");
        gbuf_literal(&o, json_string_value(s), json_string_length(s));
    }
    gbuf_str(&o, "\n");
    json_decref(a);
    if (o.oom) {
        gbuf_free(&o);
        return hr_err(err, errlen, HR_ERR_NOMEM, "guided_choice: out of memory");
    }
    *gbnf = o.s;
    return HR_OK;
}

enum hr_status grammar_source_to_gbnf(enum hearth_grammar_kind kind, const char *text, size_t len, char **gbnf,
                                      char *err, size_t errlen)
{
    *gbnf = NULL;
    if (len > GRAMMAR_SOURCE_MAX_BYTES)
        return hr_err(err, errlen, HR_ERR_INVALID, "grammar: %zu bytes of source (at most %d)", len,
                      GRAMMAR_SOURCE_MAX_BYTES);
    switch (kind) {
    case HEARTH_GRAMMAR_GBNF:
        if (!(*gbnf = strndup(text, len)))
            return hr_err(err, errlen, HR_ERR_NOMEM, "grammar: out of memory");
        return HR_OK;
    case HEARTH_GRAMMAR_JSON_SCHEMA:
        return json_schema_text_to_gbnf(text, len, gbnf, err, errlen);
    case HEARTH_GRAMMAR_JSON_OBJECT:
        if (!(*gbnf = strdup(json_schema_object_gbnf())))
            return hr_err(err, errlen, HR_ERR_NOMEM, "grammar: out of memory");
        return HR_OK;
    case HEARTH_GRAMMAR_REGEX:
        return regex_grammar(text, len, gbnf, err, errlen);
    case HEARTH_GRAMMAR_CHOICE:
        return choice_gbnf(text, len, gbnf, err, errlen);
    default:
        return hr_err(err, errlen, HR_ERR_INVALID, "grammar: unknown kind %d", (int)kind);
    }
}

static void evict(struct grammar_cache *c)
{
    while (c->n > 0 && (c->n > c->max_entries || c->bytes > c->max_bytes)) {
        int v = 0;
        for (int i = 1; i < c->n; i++)
            if (c->e[i].used < c->e[v].used)
                v = i;
        c->bytes -= c->e[v].c->bytes + c->e[v].len;
        free(c->e[v].text);
        grammar_compiled_unref(c->e[v].c);
        c->e[v] = c->e[--c->n];
    }
}

enum hr_status grammar_cache_get(struct grammar_cache *c, enum hearth_grammar_kind kind, const char *text,
                                 size_t len, struct grammar_compiled **out, char *err, size_t errlen)
{
    *out = NULL;
    if (kind == HEARTH_GRAMMAR_JSON_OBJECT)
        len = 0; /* one grammar, whatever text came with it */
    const struct grammar_vocab *v = grammar_cache_vocab(c, err, errlen);
    if (!v)
        return HR_ERR_INVALID;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->n; i++)
        if (c->e[i].kind == kind && c->e[i].len == len && memcmp(c->e[i].text, text, len) == 0) {
            c->e[i].used = ++c->tick;
            c->hits++;
            grammar_compiled_ref(c->e[i].c);
            *out = c->e[i].c;
            pthread_mutex_unlock(&c->mu);
            return HR_OK;
        }
    c->misses++;
    pthread_mutex_unlock(&c->mu);

    char *gbnf = NULL;
    enum hr_status st = grammar_source_to_gbnf(kind, text, len, &gbnf, err, errlen);
    struct grammar g;
    if (st == HR_OK)
        st = gbnf_parse(gbnf, strlen(gbnf), &g, err, errlen);
    free(gbnf);
    struct grammar_compiled *gc = NULL;
    if (st == HR_OK)
        st = grammar_compile(&g, v, c->max_positions, &gc, err, errlen);
    if (st != HR_OK)
        return st;

    pthread_mutex_lock(&c->mu);
    char *copy = malloc(len + 1);
    struct grammar_cache_entry *ne = realloc(c->e, ((size_t)c->n + 1) * sizeof *c->e);
    if (copy && ne) {
        c->e = ne;
        memcpy(copy, text, len);
        copy[len] = 0;
        grammar_compiled_ref(gc);
        c->e[c->n++] = (struct grammar_cache_entry){
            .kind = kind, .text = copy, .len = len, .c = gc, .used = ++c->tick};
        c->bytes += gc->bytes + len;
        evict(c);
    } else {
        free(copy);
        if (ne)
            c->e = ne;
    }
    pthread_mutex_unlock(&c->mu);
    *out = gc;
    return HR_OK;
}
