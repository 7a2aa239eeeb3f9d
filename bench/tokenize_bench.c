/* Tokenizer benchmark driver (built by bench/tokenize.sh): load time of a tokenizer.json and
 * one-thread encode throughput over NUL-separated documents. Prints one JSON object.
 * usage: tokenize_bench TOKENIZER_JSON CORPUS [LOADS] [REPS] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/fileio.h"
#include "tokenizer/tokenizer.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s TOKENIZER_JSON CORPUS [LOADS] [REPS]\n", argv[0]);
        return 2;
    }
    int loads = argc > 3 ? atoi(argv[3]) : 5, reps = argc > 4 ? atoi(argv[4]) : 3;
    if (loads < 1)
        loads = 1;
    if (reps < 1)
        reps = 1;
    char err[HR_ERRLEN];
    struct tokenizer tk;
    double *lt = calloc((size_t)loads, sizeof *lt);
    for (int i = 0; i < loads; i++) {
        double t0 = now_s();
        if (tokenizer_init(&tk, argv[1], err, sizeof err) != HR_OK) {
            fprintf(stderr, "tokenize_bench: %s\n", err);
            return 1;
        }
        lt[i] = (now_s() - t0) * 1e3;
        if (i + 1 < loads)
            tokenizer_free(&tk);
    }
    qsort(lt, (size_t)loads, sizeof *lt, cmp_double);

    char *text;
    size_t len;
    if (fileio_read_all(argv[2], 0, &text, &len, err, sizeof err) != HR_OK) {
        fprintf(stderr, "tokenize_bench: %s\n", err);
        return 1;
    }
    size_t n_docs = 0;
    for (size_t i = 0; i <= len; i++)
        if (i == len || text[i] == 0)
            n_docs++;
    struct tokenizer_ids ids = {0};
    double best = 1e30;
    uint64_t n_ids = 0, hash = 1469598103934665603ull; /* FNV-1a over the ids, to compare with the oracle */
    for (int r = 0; r < reps; r++) {
        uint64_t h = 1469598103934665603ull, cnt = 0;
        double t0 = now_s();
        for (size_t s = 0; s < len;) {
            size_t e = s;
            while (e < len && text[e])
                e++;
            ids.n = 0;
            if (tokenizer_encode(&tk, text + s, e - s, &ids, err, sizeof err) != HR_OK) {
                fprintf(stderr, "tokenize_bench: %s\n", err);
                return 1;
            }
            for (size_t k = 0; k < ids.n; k++) {
                h = (h ^ (uint32_t)ids.ids[k]) * 1099511628211ull;
            }
            cnt += ids.n;
            s = e + 1;
        }
        double dt = now_s() - t0;
        if (dt < best)
            best = dt;
        n_ids = cnt;
        hash = h;
    }
    uint64_t lookups, hits;
    bpe_cache_stats(&tk.model, &lookups, &hits);
    size_t bytes = len - (n_docs - 1); /* without the separators */
    printf("{\"engine\":\"hearth\",\"load_ms_min\":%.1f,\"load_ms_median\":%.1f,\"docs\":%zu,\"bytes\":%zu,"
           "\"ids\":%llu,\"ids_fnv1a\":\"%016llx\",\"encode_s\":%.4f,\"encode_mb_s\":%.2f,"
           "\"word_cache_hit_rate\":%.3f}\n",
           lt[0], lt[loads / 2], n_docs, bytes, (unsigned long long)n_ids, (unsigned long long)hash, best,
           (double)bytes / best / 1e6, lookups ? (double)hits / (double)lookups : 0.0);
    tokenizer_ids_free(&ids);
    tokenizer_free(&tk);
    free(text);
    free(lt);
    return 0;
}
