/* libFuzzer target: the grammar front ends and the matcher. The first byte picks the source
 * kind (GBNF, JSON Schema, regex, choice); the rest is the source text. What compiles is
 * compiled against a vocabulary of the 256 single bytes and walked through its masks, each
 * step checked against the plain matcher. Built by tests/fuzz/build.sh; replayed over the
 * corpus by tests/unit/test_fuzz_replay.c. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gbnf.h"
#include "grammar/grammar_cache.h"
#include "grammar/grammar_mask.h"

static enum hr_status fuzz_grammar_run(const uint8_t *data, size_t size)
{
    if (size < 1)
        return HR_ERR_INVALID;
    static const enum hearth_grammar_kind kinds[4] = {HEARTH_GRAMMAR_GBNF, HEARTH_GRAMMAR_JSON_SCHEMA,
                                                      HEARTH_GRAMMAR_REGEX, HEARTH_GRAMMAR_CHOICE};
    enum hearth_grammar_kind kind = kinds[data[0] & 3];
    char err[HR_ERRLEN], *gbnf = NULL;
    enum hr_status st = grammar_source_to_gbnf(kind, (const char *)data + 1, size - 1, &gbnf, err, sizeof err);
    struct grammar g;
    if (st == HR_OK)
        st = gbnf_parse(gbnf, strlen(gbnf), &g, err, sizeof err);
    free(gbnf);
    if (st != HR_OK)
        return st;
    const char *bytes[257];
    size_t lens[257];
    static char pool[256];
    for (int i = 0; i < 256; i++) {
        pool[i] = (char)i;
        bytes[i] = &pool[i];
        lens[i] = 1;
    }
    bytes[256] = NULL; /* the stop token */
    lens[256] = 0;
    struct grammar_vocab v;
    if (grammar_vocab_init(&v, 257, bytes, lens, NULL, err, sizeof err) != HR_OK)
        __builtin_trap();
    struct grammar_compiled *c;
    if (grammar_compile(&g, &v, 0, &c, err, sizeof err) != HR_OK) {
        grammar_vocab_free(&v);
        return HR_OK; /* out of memory only */
    }
    struct grammar_seq s;
    struct matcher_set tmp;
    int32_t eos = 256;
    float logits[257];
    if (grammar_seq_init(&s, c, -1, err, sizeof err) == HR_OK && matcher_set_init(&tmp, MATCHER_SET_INTS, err, sizeof err) == HR_OK) {
        for (int step = 0; step < 48; step++) {
            for (int t = 0; t < 257; t++)
                logits[t] = 0.0f;
            if (grammar_mask_apply(&s, logits, 257, &eos, 1, err, sizeof err) != HR_OK)
                break;
            /* every allowed byte advances the plain matcher, every other does not */
            for (int b = 0; b < 256; b++)
                if ((logits[b] == 0.0f) != matcher_advance(&c->g, &s.cur, (uint8_t)b, &tmp))
                    __builtin_trap();
            if ((logits[eos] == 0.0f) != matcher_accepting(&s.cur))
                __builtin_trap();
            int n = 0, pick = -1, want = data[(size_t)(step + 1) % size];
            for (int t = 0; t < 257; t++)
                if (logits[t] == 0.0f && n++ == want % 7)
                    pick = t;
            if (pick < 0)
                for (int t = 0; t < 257 && pick < 0; t++)
                    if (logits[t] == 0.0f)
                        pick = t;
            if (pick < 0 || pick == eos || grammar_seq_advance(&s, pick, false, err, sizeof err) != HR_OK)
                break;
        }
        matcher_set_free(&tmp);
    }
    grammar_seq_free(&s);
    grammar_compiled_unref(c);
    grammar_vocab_free(&v);
    return HR_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_grammar_run(data, size);
    return 0;
}
