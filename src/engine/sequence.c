/* Groups: their lists and their memory. */
#include <stdlib.h>

#include "engine/sequence.h"

void group_list_push_back(struct group_list *l, struct group *g)
{
    g->next = NULL;
    g->prev = l->tail;
    if (l->tail)
        l->tail->next = g;
    else
        l->head = g;
    l->tail = g;
    l->n_groups++;
}

void group_list_push_front(struct group_list *l, struct group *g)
{
    g->prev = NULL;
    g->next = l->head;
    if (l->head)
        l->head->prev = g;
    else
        l->tail = g;
    l->head = g;
    l->n_groups++;
}

void group_list_remove(struct group_list *l, struct group *g)
{
    if (g->prev)
        g->prev->next = g->next;
    else
        l->head = g->next;
    if (g->next)
        g->next->prev = g->prev;
    else
        l->tail = g->prev;
    g->next = g->prev = NULL;
    l->n_groups--;
}

void group_free(struct group *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->n && g->seqs; i++) {
        struct seq *s = &g->seqs[i];
        free(s->tokens);
        free(s->table);
        if (s->has_text) {
            detok_free(&s->detok);
            stop_matcher_free(&s->stop);
        }
        grammar_seq_free(s->gram);
        free(s->gram);
    }
    grammar_compiled_unref(g->grammar);
    free(g->seqs);
    free(g->stop_ids);
    free(g->bias);
    free(g->salt);
    free(g);
}
