/* A step's sampling spread over host threads (sample_rows.h). */
#include "engine/sample_rows.h"

#include <stdlib.h>
#include <string.h>

enum hr_status sample_rows_init(struct sample_rows *sr, int n_threads, int vocab, int cap, char *err, size_t errlen)
{
    memset(sr, 0, sizeof *sr);
    if (n_threads < 2 || cap < 1)
        return hr_err(err, errlen, HR_ERR_INVALID, "sampling threads: %d threads for %d rows", n_threads, cap);
    sr->vocab = vocab;
    sr->cap = cap;
    sr->ss = calloc((size_t)n_threads, sizeof *sr->ss);
    sr->items = calloc((size_t)cap, sizeof *sr->items);
    sr->item_of = malloc((size_t)cap * sizeof *sr->item_of);
    if (!sr->ss || !sr->items || !sr->item_of) {
        sample_rows_free(sr);
        return hr_err(err, errlen, HR_ERR_NOMEM, "sampling threads: out of memory");
    }
    enum hr_status st = HR_OK;
    for (int i = 0; i < n_threads && st == HR_OK; i++)
        if ((st = sampler_scratch_init(&sr->ss[i], vocab, err, errlen)) == HR_OK)
            sr->n_threads = i + 1;
    if (st == HR_OK)
        st = threadpool_init(&sr->tp, n_threads, err, errlen);
    if (st != HR_OK) {
        sample_rows_free(sr);
        return st;
    }
    sample_rows_reset(sr);
    return HR_OK;
}

void sample_rows_free(struct sample_rows *sr)
{
    if (sr->tp.n_threads)
        threadpool_free(&sr->tp);
    for (int i = 0; sr->ss && i < sr->n_threads; i++)
        sampler_scratch_free(&sr->ss[i]);
    free(sr->ss);
    free(sr->items);
    free(sr->item_of);
    memset(sr, 0, sizeof *sr);
}

void sample_rows_reset(struct sample_rows *sr)
{
    sr->n = 0;
    for (int i = 0; i < sr->cap; i++)
        sr->item_of[i] = -1;
}

struct sample_rows_item *sample_rows_add(struct sample_rows *sr, int row)
{
    HR_ASSERT(row >= 0 && row < sr->cap && sr->item_of[row] < 0 && sr->n < sr->cap);
    sr->item_of[row] = sr->n;
    struct sample_rows_item *it = &sr->items[sr->n++];
    memset(it, 0, sizeof *it);
    return it;
}

static void sample_rows_task(void *ctx, int task, int thread)
{
    struct sample_rows *sr = ctx;
    struct sample_rows_item *it = &sr->items[task];
    sampler_sample(it->p, it->logits, sr->vocab, it->history, it->n_prompt, it->n_generated, it->seq_index, it->step,
                   &sr->ss[thread], &it->r);
}

void sample_rows_run(struct sample_rows *sr)
{
    if (sr->n > 0)
        threadpool_run(&sr->tp, sample_rows_task, sr, sr->n);
}

const struct sampler_result *sample_rows_result(const struct sample_rows *sr, int row)
{
    if (row < 0 || row >= sr->cap || sr->item_of[row] < 0)
        return NULL;
    return &sr->items[sr->item_of[row]].r;
}
