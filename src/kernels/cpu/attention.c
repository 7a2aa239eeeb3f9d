/* Paged causal attention, one kernel for prefill and decode.
 *
 * Each (token, head) walks its own row's KV from position 0 to its position in
 * fixed tiles of CPU_ATTN_TILE positions with an online softmax.  The tile size is a
 * constant and the walk follows positions (not blocks), so the sequence of
 * operations depends only on the token's position: the same bits whether the token
 * is decoded alone, prefilled in a chunk of any size, or batched with anything.
 *
 * A task takes one KV head and a block of consecutive tokens of one row, with all
 * the query heads that share that KV head: the tile's K and V rows are widened to
 * f32 once for all of them, their scores come from one GEMM (every element is a lone
 * dot product of head_dim), and the softmax/V update takes the rows together.  Tokens
 * whose position lies before the tile simply sit it out; how the tokens are grouped
 * changes nothing.  A decode batch of many rows instead gives each task one row with
 * every KV head (attn_run_rows), for the memory's sake.  Decode rows whose block
 * tables begin with the same blocks (a prefix they share, through the prefix cache or
 * n > 1) go through those tiles together, each tile read and widened once for all of
 * them, and then each through its own tiles (attn_run_chunk).
 *
 * A compute-bf16 variant over a bf16 store scores with the bf16 dot product, the query
 * rows rounded to bf16 (on every path, so still one definition per variant). */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "model/dtype.h"

#define ATTN_DIRECT_ROWS 4
#define ATTN_ROWS_PER_THREAD 4 /* decode rows per thread before tasks take whole rows */
#define ATTN_ROWS_MAX_KV 64
#define ATTN_GROUP_MAX_ROWS 1024 /* larger batches are not searched for shared prefixes */

/* Decode rows that share their first tiles, in chunks: chunk c is rows[first[c] ..
 * first[c + 1]), whose first tiles[c] tiles lie in the same blocks. */
struct attn_groups {
    int n_chunks;
    int rows[ATTN_GROUP_MAX_ROWS];         /* batch rows, chunk by chunk */
    int first[ATTN_GROUP_MAX_ROWS + 1];    /* [n_chunks + 1] */
    int tiles[ATTN_GROUP_MAX_ROWS];        /* [n_chunks] */
    unsigned char in[ATTN_GROUP_MAX_ROWS]; /* [n_rows] 1: the row is in a chunk */
};

/* Which walk a row takes. */
enum attn_kind {
    ATTN_KIND_RUN,   /* attn_run: (token block, KV head) tasks */
    ATTN_KIND_WALK,  /* attn_run_rows: the whole row, every KV head */
    ATTN_KIND_CHUNK, /* attn_run_chunk: with the rows it shares tiles with */
};

struct attn_task {
    const struct cpu_variant *v;
    struct cpu_attn_scratch *scratch; /* [n_threads] */
    float *out;                       /* [n_tok, n_heads, head_dim] */
    const float *q;                   /* [n_tok, n_heads, head_dim] */
    const struct batch *b;
    const struct kv_store *kv;
    const struct attn_groups *groups; /* NULL: no chunks */
    int layer, n_heads, group, qb;    /* qb: tokens per task */
    int walk;                         /* decode rows take the whole-row walk (attn_walk_row) */
    int all_walk;                     /* every row does: walk task i is row i */
    /* tasks: chunks x KV heads, then the whole-row walks, then attn_run's */
    int n_chunk_tasks, n_walk;
    float scale;
};

/* Whether row r takes the whole-row walk (attn_run_rows): a decode row, short enough
 * for the direct walk.  The store and variant must allow it too (attn_task.walk). */
static int attn_walk_row(const struct attn_task *c, const struct batch_row *r)
{
    return r->query_len * c->group <= ATTN_DIRECT_ROWS && r->query_len * c->n_heads <= CPU_ATTN_MAX_ROWS;
}

static enum attn_kind attn_kind_of(const struct attn_task *c, int ri)
{
    if (c->groups && c->groups->in[ri])
        return ATTN_KIND_CHUNK;
    if (c->walk && attn_walk_row(c, &c->b->rows[ri]))
        return ATTN_KIND_WALK;
    return ATTN_KIND_RUN;
}

/* The positions from pos on, at most left of them, that lie in one block of row r:
 * their count; the block and pos's offset in it come back in *blk and *off. */
static int attn_span(const struct kv_store *kv, const struct batch_row *r, int pos, int left, int *blk, int *off)
{
    int bs = kv->block_size;
    *blk = r->block_table[pos / bs];
    *off = pos % bs;
    return bs - *off < left ? bs - *off : left;
}

/* dst[j, :] = K (sel 0) or V (sel 1) of position p0 + j widened to f32, j < n; the
 * positions may cross block boundaries. */
static void attn_gather(const struct attn_task *c, const struct batch_row *r, int kvh, int sel, int p0, int n,
                        float *dst)
{
    const struct kv_store *kv = c->kv;
    int hd = kv->head_dim;
    for (int j = 0, run; j < n; j += run) {
        int blk, off;
        run = attn_span(kv, r, p0 + j, n - j, &blk, &off);
        const void *h = kv_store_head(kv, blk, c->layer, sel, kvh);
        if (kv->dtype == KV_DTYPE_F32)
            memcpy(dst + (int64_t)j * hd, (const float *)h + (int64_t)off * hd, (size_t)run * hd * sizeof(float));
        else
            c->v->widen_bf16(dst + (int64_t)j * hd, (const uint16_t *)h + (int64_t)off * hd, (int64_t)run * hd);
    }
}

/* Bytes from K (or V) of the tile's positions [p, p + n) to those of the next tile's
 * [p + CPU_ATTN_TILE, ...) when those exist (up to last) and both tiles lie in one
 * block each (always when blocks hold a multiple of CPU_ATTN_TILE tokens); else 0.
 * The walks prefetch that far ahead while they read: the next tile's K and V come in
 * at the pace this one's are used (K ~10%, V ~10% of the step's attention; bursts of
 * prefetches, or a whole tile at once, only got in the way). */
static ptrdiff_t attn_ahead(const struct kv_store *kv, const struct batch_row *r, int layer, int p, int n, int last)
{
    int bs = kv->block_size, q = p + CPU_ATTN_TILE;
    if (q > last || p % bs + n > bs || q % bs + n > bs)
        return 0;
    const char *a = (const char *)kv_store_head(kv, r->block_table[p / bs], layer, 0, 0) +
                    (size_t)(p % bs) * kv->head_dim * kv->elem_size;
    const char *b = (const char *)kv_store_head(kv, r->block_table[q / bs], layer, 0, 0) +
                    (size_t)(q % bs) * kv->head_dim * kv->elem_size;
    return b - a;
}

/* Scores straight from a bf16 store, no widening: by the bf16-weight GEMM from f32
 * query rows (q), or, in a compute-bf16 variant, by the bf16 GEMM from query rows
 * rounded to bf16 (qb != NULL; every path of that variant scores this way); the K
 * rows `ahead` bytes on are prefetched as these are read (attn_ahead of the tile).  V
 * rows are returned by pointer when vrows != NULL.  s[i * CPU_ATTN_TILE + j].
 * Widening is exact, so the f32 route gives the bits of the widened tile (test_kernels
 * checks that gemm_bf16 equals gemm_f32 over widened rows). */
static void attn_direct(const struct attn_task *c, const struct batch_row *r, int kvh, const float *q,
                        const uint16_t *qb, int rows, int p0, int n, ptrdiff_t ahead, float *s,
                        const uint16_t **vrows)
{
    const struct kv_store *kv = c->kv;
    int hd = kv->head_dim;
    for (int j = 0, run; j < n; j += run) {
        int blk, off;
        run = attn_span(kv, r, p0 + j, n - j, &blk, &off);
        const uint16_t *k = (const uint16_t *)kv_store_head(kv, blk, c->layer, 0, kvh) + (int64_t)off * hd;
        const uint16_t *v = (const uint16_t *)kv_store_head(kv, blk, c->layer, 1, kvh) + (int64_t)off * hd;
        if (qb && c->v->scores_bb)
            c->v->scores_bb(s + j, CPU_ATTN_TILE, qb, hd, k, hd, rows, run, hd, ahead);
        else if (qb)
            c->v->gemm_bb(s + j, CPU_ATTN_TILE, qb, hd, k, hd, rows, run, hd);
        else if (c->v->scores_bf16)
            c->v->scores_bf16(s + j, CPU_ATTN_TILE, q, hd, k, hd, rows, run, hd, ahead);
        else
            c->v->gemm_bf16(s + j, CPU_ATTN_TILE, q, hd, k, hd, rows, run, hd);
        if (vrows)
            for (int i = 0; i < run; i++)
                vrows[j + i] = v + (int64_t)i * hd;
    }
}

/* Asks for K and V of positions [p0, p0 + n) ahead of use: a head's tiles lie a whole
 * layer slice apart, or in blocks anywhere in the pool, which no hardware prefetcher
 * can guess. */
static void attn_prefetch(const struct attn_task *c, const struct batch_row *r, int kvh, int p0, int n)
{
    const struct kv_store *kv = c->kv;
    size_t row = (size_t)kv->head_dim * kv->elem_size;
    for (int j = 0, run; j < n; j += run) {
        int blk, off;
        run = attn_span(kv, r, p0 + j, n - j, &blk, &off);
        for (int sel = 0; sel < 2; sel++) {
            const char *h = (const char *)kv_store_head(kv, blk, c->layer, sel, kvh) + (size_t)off * row;
            for (size_t b = 0; b < (size_t)run * row; b += 64)
                __builtin_prefetch(h + b, 0, 2); /* to L2: more misses in flight than L1 allows */
        }
    }
}

/* A compute-bf16 variant over a bf16 store scores with the bf16 dot product: the one
 * place that says so, since every path of the variant must. */
static int attn_scores_bb(const struct attn_task *c)
{
    return c->kv->dtype == KV_DTYPE_BF16 && c->v->gemm_bb != NULL;
}

/* A task's scratch rows: `rows` per KV head (tokens times the group's query heads),
 * KV heads from kvh0 on; row i is token t0 + (i % rows) / G, query head
 * (kvh0 + i / rows) * G + (i % rows) % G, at this offset of q and out. */
static int64_t attn_row_at(const struct attn_task *c, int t0, int kvh0, int rows, int i)
{
    int G = c->group, ii = i % rows;
    return ((int64_t)(t0 + ii / G) * c->n_heads + (kvh0 + i / rows) * G + ii % G) * c->kv->head_dim;
}

/* Scratch row i takes the query row at offset `at` of q (and of out): loads it and
 * clears its running state. */
static void attn_load_row(const struct attn_task *c, struct cpu_attn_scratch *sc, int i, int64_t at)
{
    int hd = c->kv->head_dim;
    memcpy(sc->q + (int64_t)i * hd, c->q + at, (size_t)hd * sizeof(float));
    memset(sc->acc + (int64_t)i * hd, 0, (size_t)hd * sizeof(float));
    sc->m[i] = -INFINITY;
    sc->l[i] = 0.0f;
}

/* After the `all` rows are loaded: rounds them to bf16 where the variant scores so. */
static void attn_loaded(const struct attn_task *c, struct cpu_attn_scratch *sc, int all)
{
    if (attn_scores_bb(c))
        c->v->to_bf16(sc->qb, sc->q, (int64_t)all * c->kv->head_dim);
}

/* Loads the `all` rows of attn_row_at's numbering. */
static void attn_begin(const struct attn_task *c, struct cpu_attn_scratch *sc, int t0, int kvh0, int rows, int all)
{
    for (int i = 0; i < all; i++)
        attn_load_row(c, sc, i, attn_row_at(c, t0, kvh0, rows, i));
    attn_loaded(c, sc, all);
}

/* o = acc / l: one output row. */
static void attn_out_row(float *o, const float *acc, float l, int hd)
{
    float inv = 1.0f / l;
    for (int d = 0; d < hd; d++)
        o[d] = acc[d] * inv;
}

/* Writes the `all` rows' outputs. */
static void attn_finish(const struct attn_task *c, const struct cpu_attn_scratch *sc, int t0, int kvh0, int rows,
                        int all)
{
    int hd = c->kv->head_dim;
    for (int i = 0; i < all; i++)
        attn_out_row(c->out + attn_row_at(c, t0, kvh0, rows, i), sc->acc + (int64_t)i * hd, sc->l[i], hd);
}

/* cnt[i], i < rows: how many positions of the tile [p0, p0 + n) row i takes, its
 * token's position being first + i / G (G rows a token). */
static void attn_counts(int *cnt, int rows, int G, int first, int p0, int n)
{
    for (int i = 0; i < rows; i++) {
        int pos = first + i / G;
        cnt[i] = pos + 1 - p0 < n ? pos + 1 - p0 : n;
    }
}

/* Whether `rows` rows take a tile straight from a bf16 store (few rows: widening the
 * tile would cost more than it saves). */
static int attn_direct_ok(const struct attn_task *c, int rows)
{
    return rows <= ATTN_DIRECT_ROWS && c->kv->dtype == KV_DTYPE_BF16 && c->v->attn_update_rows_bf16;
}

/* One tile, positions [p0, p0 + n) of row r's KV, for scratch rows [i0, i0 + rows)
 * (sc->n: how many of the positions each takes): scores, then softmax and V update.
 * The walk reads up to position `last`; the next tile's K and V are asked for ahead. */
static void attn_tile(const struct attn_task *c, struct cpu_attn_scratch *sc, const struct batch_row *r, int kvh,
                      int i0, int rows, int p0, int n, int last, int direct)
{
    int hd = c->kv->head_dim;
    ptrdiff_t ahead = attn_ahead(c->kv, r, c->layer, p0, n, last);
    const uint16_t *qb = attn_scores_bb(c) ? sc->qb + (int64_t)i0 * hd : NULL;
    float *s = sc->s + (int64_t)i0 * CPU_ATTN_TILE;
    if (direct) { /* prefetches as it reads */
        const uint16_t *vrows[CPU_ATTN_TILE];
        attn_direct(c, r, kvh, sc->q + (int64_t)i0 * hd, qb, rows, p0, n, ahead, s, vrows);
        c->v->attn_update_rows_bf16(sc->m + i0, sc->l + i0, sc->acc + (int64_t)i0 * hd, s, sc->n + i0, rows,
                                    c->scale, vrows, hd, ahead);
        return;
    }
    if (p0 + CPU_ATTN_TILE <= last) {
        int nn = last + 1 - (p0 + CPU_ATTN_TILE);
        attn_prefetch(c, r, kvh, p0 + CPU_ATTN_TILE, nn < CPU_ATTN_TILE ? nn : CPU_ATTN_TILE);
    }
    /* K and V of the tile widened once for every row; scores by the f32 GEMM */
    if (qb) {
        attn_direct(c, r, kvh, NULL, qb, rows, p0, n, ahead, s, NULL);
    } else {
        attn_gather(c, r, kvh, 0, p0, n, sc->k);
        c->v->gemm_f32(s, CPU_ATTN_TILE, sc->q + (int64_t)i0 * hd, hd, sc->k, hd, rows, n, hd);
    }
    attn_gather(c, r, kvh, 1, p0, n, sc->v);
    if (c->v->attn_update_rows) {
        c->v->attn_update_rows(sc->m + i0, sc->l + i0, sc->acc + (int64_t)i0 * hd, s, sc->n + i0, rows, c->scale,
                               sc->v, hd);
    } else {
        for (int i = i0; i < i0 + rows; i++)
            c->v->attn_update(&sc->m[i], &sc->l[i], sc->acc + (int64_t)i * hd, sc->s + (int64_t)i * CPU_ATTN_TILE,
                              sc->n[i], c->scale, sc->v, hd);
    }
}

/* Decode batches of many rows: a task takes one row's token(s) with every KV head.
 * Per tile it scores every head (a block's K of one layer is one run of memory), then
 * updates every head (its V, the next run): runs are read much faster than one head's
 * scattered 4 KB pieces, and as each row of K and V is read, the same row of the next
 * tile is asked for (attn_ahead).  Each head performs exactly the operations of
 * attn_run's direct walk. */
static void attn_run_rows(const struct attn_task *c, int task, int thread)
{
    const struct batch *b = c->b;
    int n_kv = c->kv->n_kv_heads, hd = c->kv->head_dim, G = c->group;
    struct cpu_attn_scratch *sc = &c->scratch[thread];
    int ri = task;
    if (!c->all_walk) /* the task-th row that takes this walk */
        for (ri = 0;; ri++)
            if (attn_kind_of(c, ri) == ATTN_KIND_WALK && task-- == 0)
                break;
    const struct batch_row *r = &b->rows[ri];
    int t0 = r->query_offset, nq = r->query_len;
    int rows = nq * G; /* per KV head */
    attn_begin(c, sc, t0, 0, rows, rows * n_kv);
    int bb = attn_scores_bb(c);

    int pos_first = b->positions[t0], pos_last = b->positions[t0 + nq - 1];
    const uint16_t *vrows[ATTN_ROWS_MAX_KV][CPU_ATTN_TILE];
    for (int p0 = 0; p0 <= pos_last; p0 += CPU_ATTN_TILE) {
        int n = pos_last + 1 - p0 < CPU_ATTN_TILE ? pos_last + 1 - p0 : CPU_ATTN_TILE;
        int i0 = p0 > pos_first ? (p0 - pos_first) * G : 0;
        attn_counts(sc->n + i0, rows - i0, G, pos_first + i0 / G, p0, n);
        ptrdiff_t ahead = attn_ahead(c->kv, r, c->layer, p0, n, pos_last);
        for (int h = 0; h < n_kv; h++) {
            int i = h * rows + i0;
            attn_direct(c, r, h, sc->q + (int64_t)i * hd, bb ? sc->qb + (int64_t)i * hd : NULL, rows - i0, p0, n,
                        ahead, sc->s + (int64_t)i * CPU_ATTN_TILE, vrows[h]);
        }
        for (int h = 0; h < n_kv; h++) {
            int i = h * rows + i0;
            c->v->attn_update_rows_bf16(sc->m + i, sc->l + i, sc->acc + (int64_t)i * hd,
                                        sc->s + (int64_t)i * CPU_ATTN_TILE, sc->n + i0, rows - i0, c->scale, vrows[h],
                                        hd, ahead);
        }
    }
    attn_finish(c, sc, t0, 0, rows, rows * n_kv);
}

static void attn_run(const struct attn_task *c, int task, int thread)
{
    const struct batch *b = c->b;
    int n_kv = c->kv->n_kv_heads, G = c->group;
    struct cpu_attn_scratch *sc = &c->scratch[thread];

    /* task -> (row, token block, kv head) */
    int kvh = task % n_kv, blk = task / n_kv, ri = 0;
    for (;; ri++) {
        int nb = attn_kind_of(c, ri) != ATTN_KIND_RUN ? 0 : (b->rows[ri].query_len + c->qb - 1) / c->qb;
        if (blk < nb)
            break;
        blk -= nb;
    }
    const struct batch_row *r = &b->rows[ri];
    int t0 = r->query_offset + blk * c->qb;
    int nq = r->query_len - blk * c->qb < c->qb ? r->query_len - blk * c->qb : c->qb;
    int rows = nq * G; /* row i: token t0 + i / G, head kvh * G + i % G */
    attn_begin(c, sc, t0, kvh, rows, rows);

    int pos_first = b->positions[t0], pos_last = b->positions[t0 + nq - 1];
    int direct = attn_direct_ok(c, rows);
    attn_prefetch(c, r, kvh, 0, pos_last + 1 < CPU_ATTN_TILE ? pos_last + 1 : CPU_ATTN_TILE);
    for (int p0 = 0; p0 <= pos_last; p0 += CPU_ATTN_TILE) {
        int n = pos_last + 1 - p0 < CPU_ATTN_TILE ? pos_last + 1 - p0 : CPU_ATTN_TILE;
        /* tokens before this tile have finished: rows from i0 on take part */
        int i0 = p0 > pos_first ? (p0 - pos_first) * G : 0;
        attn_counts(sc->n + i0, rows - i0, G, pos_first + i0 / G, p0, n);
        attn_tile(c, sc, r, kvh, i0, rows - i0, p0, n, pos_last, direct);
    }
    attn_finish(c, sc, t0, kvh, rows, rows);
}

/* ------------------------------------------------------------------ shared prefixes */

static int attn_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* How many leading tiles the n rows all hold in the same blocks, and wholly before
 * their own positions (so each row takes every position of them). */
static int attn_shared_tiles(const struct kv_store *kv, const struct batch *b, const int *rows, int n)
{
    int tiles = INT_MAX;
    for (int i = 0; i < n; i++) {
        int pos = b->positions[b->rows[rows[i]].query_offset];
        tiles = pos / CPU_ATTN_TILE < tiles ? pos / CPU_ATTN_TILE : tiles;
    }
    /* the leading blocks every row's table has alike, of those the tiles need */
    int bs = kv->block_size, need = (int)(((int64_t)tiles * CPU_ATTN_TILE + bs - 1) / bs), same = need;
    const int32_t *t0 = b->rows[rows[0]].block_table;
    for (int i = 1; i < n; i++)
        for (int k = 0; k < same; k++)
            if (b->rows[rows[i]].block_table[k] != t0[k])
                same = k;
    int t = (int)((int64_t)same * bs / CPU_ATTN_TILE);
    return t < tiles ? t : tiles;
}

/* Finds decode rows (one token each) whose block tables begin with the same block and
 * splits each such set into chunks of at most CPU_ATTN_MAX_ROWS query rows, enough
 * of them to give every thread tasks.  Returns the number of chunks. */
static int attn_group_rows(const struct attn_task *c, struct attn_groups *g, int n_threads)
{
    const struct batch *b = c->b;
    g->n_chunks = 0;
    if (b->n_rows < 2 || b->n_rows > ATTN_GROUP_MAX_ROWS)
        return 0;
    memset(g->in, 0, (size_t)b->n_rows);
    uint64_t key[ATTN_GROUP_MAX_ROWS]; /* first block, then row: rows of a set in order */
    int n = 0;
    for (int i = 0; i < b->n_rows; i++) {
        const struct batch_row *r = &b->rows[i];
        if (r->query_len == 1 && b->positions[r->query_offset] >= CPU_ATTN_TILE)
            key[n++] = (uint64_t)(uint32_t)r->block_table[0] << 32 | (uint32_t)i;
    }
    qsort(key, (size_t)n, sizeof *key, attn_cmp_u64);
    int per = CPU_ATTN_MAX_ROWS / c->group; /* rows per chunk at most */
    int want = (ATTN_ROWS_PER_THREAD * n_threads + c->kv->n_kv_heads - 1) / c->kv->n_kv_heads;
    int used = 0;
    for (int s = 0, e; s < n; s = e) {
        for (e = s + 1; e < n && key[e] >> 32 == key[s] >> 32; e++)
            ;
        int m = e - s, *rows = g->rows + used;
        if (m < 2)
            continue;
        for (int i = 0; i < m; i++)
            rows[i] = (int)(uint32_t)key[s + i];
        int tiles = attn_shared_tiles(c->kv, b, rows, m);
        if (tiles < 1)
            continue;
        int nch = (m + per - 1) / per, more = want < m / 2 ? want : m / 2; /* two rows a chunk at least */
        nch = nch > more ? nch : more;
        for (int k = 0; k < nch; k++) {
            g->first[g->n_chunks] = used + (int)((int64_t)m * k / nch);
            g->tiles[g->n_chunks++] = tiles;
        }
        for (int i = 0; i < m; i++)
            g->in[rows[i]] = 1;
        used += m;
    }
    g->first[g->n_chunks] = used;
    return g->n_chunks;
}

/* A chunk's scratch row i: query head kvh * G + i % G of the (one) token of batch row
 * rows[i / G], at this offset of q and out. */
static int64_t attn_chunk_row_at(const struct attn_task *c, const int *rows, int kvh, int i)
{
    int G = c->group;
    return ((int64_t)c->b->rows[rows[i / G]].query_offset * c->n_heads + kvh * G + i % G) * c->kv->head_dim;
}

/* A chunk of rows with one KV head: the shared tiles once for all of them, then each
 * row's own tiles.  Every row goes through its tiles in position order with the
 * operations of any other walk. */
static void attn_run_chunk(const struct attn_task *c, int chunk, int kvh, int thread)
{
    const struct batch *b = c->b;
    const struct attn_groups *g = c->groups;
    int hd = c->kv->head_dim, G = c->group;
    struct cpu_attn_scratch *sc = &c->scratch[thread];
    const int *rows = g->rows + g->first[chunk];
    int m = g->first[chunk + 1] - g->first[chunk], nr = m * G, shared = g->tiles[chunk] * CPU_ATTN_TILE;
    for (int i = 0; i < nr; i++) {
        attn_load_row(c, sc, i, attn_chunk_row_at(c, rows, kvh, i));
        sc->n[i] = CPU_ATTN_TILE; /* the shared tiles lie wholly before every row's position */
    }
    attn_loaded(c, sc, nr);

    const struct batch_row *r0 = &b->rows[rows[0]];
    int direct = attn_direct_ok(c, nr);
    attn_prefetch(c, r0, kvh, 0, CPU_ATTN_TILE);
    for (int p0 = 0; p0 < shared; p0 += CPU_ATTN_TILE)
        attn_tile(c, sc, r0, kvh, 0, nr, p0, CPU_ATTN_TILE, shared - 1, direct);
    direct = attn_direct_ok(c, G);
    for (int j = 0; j < m; j++) {
        const struct batch_row *r = &b->rows[rows[j]];
        int pos = b->positions[r->query_offset];
        for (int p0 = shared; p0 <= pos; p0 += CPU_ATTN_TILE) {
            int n = pos + 1 - p0 < CPU_ATTN_TILE ? pos + 1 - p0 : CPU_ATTN_TILE;
            attn_counts(sc->n + j * G, G, G, pos, p0, n);
            attn_tile(c, sc, r, kvh, j * G, G, p0, n, pos, direct);
        }
        for (int i = j * G; i < (j + 1) * G; i++)
            attn_out_row(c->out + attn_chunk_row_at(c, rows, kvh, i), sc->acc + (int64_t)i * hd, sc->l[i], hd);
    }
}

/* ------------------------------------------------------------------ launch */

static void attn_run_any(void *ctx, int task, int thread)
{
    const struct attn_task *c = ctx;
    int n_kv = c->kv->n_kv_heads;
    if (task < c->n_chunk_tasks)
        attn_run_chunk(c, task / n_kv, task % n_kv, thread);
    else if ((task -= c->n_chunk_tasks) < c->n_walk)
        attn_run_rows(c, task, thread);
    else
        attn_run(c, task - c->n_walk, thread);
}

void cpu_attention(struct backend *be, float *out, const float *q, const struct batch *b, const struct kv_store *kv,
                   int layer, int n_heads, float scale)
{
    struct cpu_backend *cb = be->impl;
    int G = n_heads / kv->n_kv_heads;
    HR_ASSERT(kv->head_dim <= CPU_ATTN_MAX_HEAD_DIM && n_heads % kv->n_kv_heads == 0 && G <= CPU_ATTN_MAX_ROWS);
    struct attn_task c = {
        .v = cb->v, .scratch = cb->attn, .out = out, .q = q, .b = b, .kv = kv, .layer = layer, .n_heads = n_heads,
        .group = G, .qb = CPU_ATTN_MAX_ROWS / G, .scale = scale,
    };
    struct attn_groups g;
    if (attn_group_rows(&c, &g, be->n_threads) > 0) {
        c.groups = &g;
        c.n_chunk_tasks = g.n_chunks * kv->n_kv_heads;
    }
    /* Decode rows take the whole-row walk when there are enough of them to keep every
     * thread busy, or when other tasks fill the threads anyway; the walks give the
     * same bits, so the choice is free. */
    c.walk = kv->n_kv_heads <= ATTN_ROWS_MAX_KV && kv->dtype == KV_DTYPE_BF16 && cb->v->attn_update_rows_bf16;
    int n_walk = 0, n_other = 0; /* n_other: attn_run's token blocks */
    for (int i = 0; i < b->n_rows; i++) {
        enum attn_kind k = attn_kind_of(&c, i);
        n_walk += k == ATTN_KIND_WALK;
        n_other += k == ATTN_KIND_RUN ? (b->rows[i].query_len + c.qb - 1) / c.qb : 0;
    }
    if (n_walk > 0 && n_other == 0 && c.n_chunk_tasks == 0 && n_walk < ATTN_ROWS_PER_THREAD * be->n_threads) {
        c.walk = 0; /* a few decode rows alone: (row, KV head) tasks spread them over the threads */
        for (int i = 0; i < b->n_rows; i++)
            n_other += (b->rows[i].query_len + c.qb - 1) / c.qb;
        n_walk = 0;
    }
    c.n_walk = n_walk;
    c.all_walk = n_walk == b->n_rows;
    threadpool_run(&cb->pool, attn_run_any, &c, c.n_chunk_tasks + n_walk + n_other * kv->n_kv_heads);
}

/* ------------------------------------------------------------------ KV write */

/* One token's K and V rows, all KV heads, into its slot. */
static void kvw_token(const struct cpu_variant *cv, struct kv_store *kv, int layer, int64_t slot, const float *k,
                      const float *v)
{
    int hd = kv->head_dim, bs = kv->block_size;
    if (slot < 0)
        return; /* a padding row's token (backend.h graph_rows): stores nothing */
    int blk = (int)(slot / bs), off = (int)(slot % bs);
    for (int h = 0; h < kv->n_kv_heads; h++) {
        for (int sel = 0; sel < 2; sel++) {
            const float *src = (sel ? v : k) + (int64_t)h * hd;
            void *dst = kv_store_head(kv, blk, layer, sel, h);
            if (kv->dtype == KV_DTYPE_F32)
                memcpy((float *)dst + (int64_t)off * hd, src, (size_t)hd * sizeof(float));
            else
                cpu_store_bf16(cv, (uint16_t *)dst + (int64_t)off * hd, src, hd);
        }
    }
}

/* ------------------------------------------------------------------ q/k norm, RoPE, KV write */

struct prep_task {
    const struct cpu_variant *v;
    float *q, *k;
    const float *vv, *q_norm, *k_norm, *cs;
    float eps;
    int n_heads, per_task;
    struct kv_store *kv;
    const struct batch *b;
    int layer;
};

/* x = rope(rmsnorm(x) * w): the operations of cpu_rmsnorm then cpu_rope, fused. */
static void prep_row(const struct cpu_variant *v, float *x, const float *w, float eps, const float *cs, int hd)
{
    float ss = cpu_dot_f32(v, x, x, hd);
    float inv = 1.0f / sqrtf(ss / (float)hd + eps);
    cpu_norm_scale(v, x, x, w, inv, hd);
    cpu_rope_head(v, x, cs, hd);
}

static void prep_run(void *ctx, int task, int thread)
{
    (void)thread;
    const struct prep_task *c = ctx;
    int hd = c->kv->head_dim, nkv = c->kv->n_kv_heads;
    int t1 = (task + 1) * c->per_task < c->b->n_tok ? (task + 1) * c->per_task : c->b->n_tok;
    for (int t = task * c->per_task; t < t1; t++) {
        const float *cs = c->cs + (int64_t)t * hd;
        for (int h = 0; h < c->n_heads; h++)
            prep_row(c->v, c->q + ((int64_t)t * c->n_heads + h) * hd, c->q_norm, c->eps, cs, hd);
        for (int h = 0; h < nkv; h++)
            prep_row(c->v, c->k + ((int64_t)t * nkv + h) * hd, c->k_norm, c->eps, cs, hd);
        kvw_token(c->v, c->kv, c->layer, c->b->slots[t], c->k + (int64_t)t * nkv * hd, c->vv + (int64_t)t * nkv * hd);
    }
}

void cpu_attn_prep(struct backend *be, float *q, float *k, const float *v, const float *q_norm, const float *k_norm,
                   float eps, const float *cos_sin, int n_heads, struct kv_store *kv, int layer, const struct batch *b)
{
    struct cpu_backend *cb = be->impl;
    struct prep_task c = {.v = cb->v, .q = q, .k = k, .vv = v, .q_norm = q_norm, .k_norm = k_norm, .cs = cos_sin,
                          .eps = eps, .n_heads = n_heads, .kv = kv, .b = b, .layer = layer};
    /* a few tokens per task: one is about 4K elements */
    int even = (b->n_tok + be->n_threads - 1) / be->n_threads;
    c.per_task = even < 4 ? even : 4;
    if (c.per_task < 1)
        c.per_task = 1;
    threadpool_run(&cb->pool, prep_run, &c, (b->n_tok + c.per_task - 1) / c.per_task);
}
