/* The scheduler (see scheduler.h). */
#include "engine/scheduler.h"

#include <string.h>


#define SCHED_PICK_WINDOW 64

void sched_release_seq(struct sched *sc, struct seq *s)
{
    block_pool_release_n(sc->pool, s->table, s->n_table);
    s->n_table = 0;
    s->committed = 0;
}

void sched_preempt(struct sched *sc, struct group *g)
{
    HR_ASSERT(g->state == GROUP_STATE_RUNNING);
    for (int i = 0; i < g->n; i++) {
        sched_release_seq(sc, &g->seqs[i]);
        g->seqs[i].published = 0;
    }
    group_list_remove(&sc->running, g);
    g->state = GROUP_STATE_WAITING;
    g->disk_looked_up = false; /* its blocks may be on disk by the time it is admitted again */
    group_list_push_front(&sc->waiting, g);
    sc->n_preemptions++;
}

static int sched_unfinished(const struct group *g)
{
    int n = 0;
    for (int i = 0; i < g->n; i++)
        n += !g->seqs[i].finished;
    return n;
}

static int sched_running_seqs(const struct sched *sc)
{
    int n = 0;
    for (const struct group *g = sc->running.head; g; g = g->next)
        n += sched_unfinished(g);
    return n;
}

static void sched_drop_rows(struct sched_plan *plan, const struct group *g)
{
    int k = 0;
    for (int i = 0; i < plan->n_rows; i++) {
        if (plan->rows[i].s->g == g)
            plan->n_tok -= plan->rows[i].query_len;
        else
            plan->rows[k++] = plan->rows[i];
    }
    plan->n_rows = k;
}

/* The block new blocks of s follow (the pool prefers to hand out the next id). */
static int seq_last_block(const struct seq *s)
{
    return s->n_table ? s->table[s->n_table - 1] : -1;
}

/* Makes positions [committed, committed + q) of s writable: allocates the blocks
 * they need and copies any shared block they fall in.  Preempts the most recently
 * admitted group while blocks are short.  Returns false when s's own group had to
 * be preempted. */
static bool sched_reserve(struct sched *sc, struct seq *s, int q, struct sched_plan *plan)
{
    int bs = sc->block_size;
    int first = s->committed / bs, last = (s->committed + q - 1) / bs;
    HR_ASSERT(last < s->max_table);
    for (;;) {
        bool short_of_blocks = false;
        while (s->n_table <= last) {
            int id;
            if (block_pool_alloc(sc->pool, seq_last_block(s), &id, 1, NULL, 0) != HR_OK) {
                short_of_blocks = true;
                break;
            }
            s->table[s->n_table++] = id;
        }
        for (int b = first; !short_of_blocks && b <= last; b++) {
            int id = s->table[b], from;
            if (block_pool_make_writable(sc->pool, &id, &from, NULL, 0) != HR_OK) {
                short_of_blocks = true;
            } else {
                s->table[b] = id;
                if (from >= 0)
                    batch_add_copy(plan->batch, from, id);
            }
        }
        if (!short_of_blocks)
            return true;
        /* Cached blocks nobody uses go before any running group does. */
        if (sc->pc && prefix_cache_evict(sc->pc, block_pool_n_free(sc->pool) + 1) > 0)
            continue;
        struct group *victim = sc->running.tail;
        sched_drop_rows(plan, victim);
        sched_preempt(sc, victim);
        if (victim == s->g)
            return false;
    }
}

/* Rows of a sequence whose prompt is being scored carry the logits of every token,
 * a bounded number per step: returns the chunk cut to what is left of that budget
 * (0: not this step). */
static int sched_cut_chunk(struct sched_plan *plan, const struct seq *s, int q)
{
    if (!s->g->prompt_lp || s->committed >= s->g->n_prompt)
        return q;
    return q < plan->prompt_logits_left ? q : plan->prompt_logits_left;
}

static void sched_add_row(struct sched_plan *plan, struct seq *s, int q)
{
    bool all = s->g->prompt_lp && s->committed < s->g->n_prompt;
    plan->rows[plan->n_rows++] = (struct sched_row){
        .s = s, .query_len = q, .sample = s->committed + q == s->n_tokens, .all_logits = all};
    plan->n_tok += q;
    if (all)
        plan->prompt_logits_left -= q;
}

/* Schedules the running sequences: decodes (one token left) or prefill chunks. */
static void sched_running(struct sched *sc, struct sched_plan *plan, bool decodes, int *budget)
{
    int max_rows = sc->max_num_seqs;
    for (struct group *g = sc->running.head, *next; g; g = next) {
        next = g->next;
        for (int i = 0; i < g->n; i++) {
            struct seq *s = &g->seqs[i];
            if (!seq_active(s))
                continue;
            int rem = s->n_tokens - s->committed;
            if (rem < 1 || (decodes ? rem != 1 : rem == 1))
                continue;
            if (*budget == 0 || plan->n_rows == max_rows)
                return;
            int q = sched_cut_chunk(plan, s, rem < *budget ? rem : *budget);
            if (q == 0)
                continue;
            bool ok = sched_reserve(sc, s, q, plan);
            *budget = sc->max_batched_tokens - plan->n_tok;
            if (!ok)
                break; /* g itself was preempted (it was the newest) */
            sched_add_row(plan, s, q);
            *budget -= q;
        }
        /* A preemption may have removed what came after g. */
        next = g->state == GROUP_STATE_RUNNING ? g->next : NULL;
    }
}

/* Full blocks of g's prompt that a running sequence is computing right now and
 * will publish: admitting g after them lets it hit those blocks instead of
 * computing them again. */
static int sched_shared_in_flight(const struct sched *sc, const struct group *g)
{
    const struct seq *s0 = &g->seqs[0];
    int bs = sc->block_size, best = 0, max = (s0->n_tokens - 1) / bs;
    for (const struct group *r = sc->running.head; r; r = r->next) {
        const struct seq *rs = &r->seqs[0];
        if (rs->committed >= rs->n_tokens - 1 || strcmp(r->salt, g->salt) != 0)
            continue; /* not prefilling, or another namespace */
        int lim = rs->n_tokens < s0->n_tokens ? rs->n_tokens : s0->n_tokens, k = 0;
        while (k < lim && rs->tokens[k] == s0->tokens[k])
            k++;
        int blocks = k / bs < max ? k / bs : max;
        if (blocks > best)
            best = blocks;
    }
    return best;
}

/* The next group to admit, or NULL.  lpm: the longest cached prefix first (ties to
 * the older), unless the oldest has waited more than max_wait_steps; fcfs: the
 * oldest.  Either way a group whose uncached prefix is being computed by a running
 * sequence waits for it (in-batch sharing), for at most max_wait_steps. */
static struct group *sched_pick(struct sched *sc)
{
    /* Groups whose blocks are being read from disk wait for them; the others go on. */
    struct group *head = sc->waiting.head;
    while (head && (head->disk_wait || kv_restore_follower_waits(head, &sc->waiting)))
        head = head->next;
    if (!head)
        return NULL;
    if (sc->step_no - head->arrival_step > sc->max_wait_steps)
        return head;
    struct group *best = NULL;
    int best_len = -1, seen = 0;
    /* The scan looks at the oldest SCHED_PICK_WINDOW groups: the cost of a step
     * must not grow with the length of the queue. */
    for (struct group *g = head; g && seen++ < SCHED_PICK_WINDOW; g = g->next) {
        if (g->disk_wait || kv_restore_follower_waits(g, &sc->waiting))
            continue;
        /* The pool's hit, continued by the tiers below it. */
        int cached = !sc->pc || g->prompt_lp ? 0
                     : sc->restore          ? kv_restore_cached_len(sc->restore, g)
                                            : prefix_cache_match_len(sc->pc, g->salt, g->seqs[0].tokens,
                                                                     g->seqs[0].n_tokens);
        if (sc->pc && !g->prompt_lp && sched_shared_in_flight(sc, g) > cached &&
            sc->step_no - g->arrival_step <= sc->max_wait_steps)
            continue;
        if (sc->order == SCHED_ORDER_FCFS)
            return g;
        if (cached > best_len) {
            best = g;
            best_len = cached;
        }
    }
    return best;
}

/* Admits g all or nothing: leases on the cached prefix of every sample it brings,
 * eviction of unused cached blocks if short, then the rest of the blocks; any
 * shortage rolls every step back.  Returns false when g must wait. */
static bool sched_admit_group(struct sched *sc, struct group *g)
{
    int bs = sc->block_size, need = 0;
    for (int i = 0; i < g->n; i++) {
        struct seq *s = &g->seqs[i];
        if (!seq_active(s))
            continue;
        int k = 0;
        s->lease.state = PREFIX_LEASE_NONE;
        if (sc->pc && !g->prompt_lp)
            k = prefix_cache_lookup(sc->pc, g->salt, s->tokens, s->n_tokens, s->table, &s->lease, s);
        s->n_table = k;
        s->committed = k * bs;
        s->published = k;
        need += (s->n_tokens + bs - 1) / bs - k;
        if (sc->restore)
            kv_restore_hold(sc->restore, s, k); /* what it copies back from host RAM stays there */
    }
    if (need > block_pool_n_free(sc->pool) && sc->pc)
        prefix_cache_evict(sc->pc, need);
    bool ok = need <= block_pool_n_free(sc->pool);
    for (int i = 0; i < g->n; i++) {
        struct seq *s = &g->seqs[i];
        if (!seq_active(s))
            continue;
        if (!ok) {
            if (s->lease.state == PREFIX_LEASE_OPEN)
                prefix_cache_lease_abort(sc->pc, &s->lease);
            s->n_table = s->committed = s->published = 0;
            continue;
        }
        int nb = (s->n_tokens + bs - 1) / bs;
        HR_ASSERT(block_pool_alloc(sc->pool, seq_last_block(s), s->table + s->n_table, nb - s->n_table, NULL, 0) ==
                  HR_OK);
        s->n_table = nb;
        if (sc->restore) {
            /* Blocks the host tier holds, then those read from disk, follow the pool's
             * hit: imported, they are committed. */
            int r = kv_restore_apply(sc->restore, s, s->committed / bs);
            s->committed += r * bs;
        }
        if (s->lease.state == PREFIX_LEASE_OPEN) {
            prefix_cache_lease_prepare(sc->pc, &s->lease, s);
            prefix_cache_lease_commit(sc->pc, &s->lease, s);
        }
    }
    if (sc->restore)
        kv_restore_release_holds(sc->restore);
    if (ok && !g->admitted_once) {
        g->admitted_once = true;
        g->cached_tokens = g->seqs[0].committed;
    }
    return ok;
}

static void sched_admit(struct sched *sc, struct sched_plan *plan, int *budget)
{
    while (*budget > 0 && plan->n_rows < sc->max_num_seqs) {
        struct group *g = sched_pick(sc);
        if (!g || sched_running_seqs(sc) + sched_unfinished(g) > sc->max_num_seqs)
            break;
        if (!sched_admit_group(sc, g))
            break; /* nobody overtakes the chosen group */
        group_list_remove(&sc->waiting, g);
        g->state = GROUP_STATE_RUNNING;
        g->admitted = sc->next_admission++;
        group_list_push_back(&sc->running, g);
        for (int i = 0; i < g->n && *budget > 0 && plan->n_rows < sc->max_num_seqs; i++) {
            struct seq *s = &g->seqs[i];
            if (!seq_active(s))
                continue;
            int rem = s->n_tokens - s->committed;
            int q = sched_cut_chunk(plan, s, rem < *budget ? rem : *budget);
            if (q == 0)
                continue;
            sched_add_row(plan, s, q);
            *budget -= q;
        }
    }
}

void sched_plan(struct sched *sc, struct sched_plan *plan)
{
    plan->n_rows = 0;
    plan->n_tok = 0;
    plan->prompt_logits_left = SCHED_PROMPT_LOGITS;
    int budget = sc->max_batched_tokens;
    sched_running(sc, plan, true, &budget);
    sched_running(sc, plan, false, &budget);
    sched_admit(sc, plan, &budget);
}
