/*
 * lincheck.c — linearizability checker for one read/write register, the
 * Wing–Gong search with Lowe's memoisation (as Porcupine implements it):
 * call and return events in time order form a doubly linked list; the search
 * repeatedly linearizes a pending call whose operation is legal in the
 * current state, removing its call and return from the list, and backtracks
 * when it reaches a return whose call is not yet linearized.  Visited
 * (set of linearized ops, state) pairs are cached so each is explored once.
 * An operation that timed out has its return at +infinity: it may take
 * effect at any time after its call (or, for a put, at the very end, which
 * is the same as never; unread timed-out puts are dropped up front).
 */
#include <stdlib.h>
#include <string.h>

#include "lincheck.h"

typedef struct lnode {
    int op; /* op index */
    int is_call;
    uint64_t time;
    struct lnode *prev, *next, *match;
} lnode;

static int cmp_ev(const void *a, const void *b)
{
    const lnode *x = a, *y = b;
    if (x->time != y->time)
        return x->time < y->time ? -1 : 1;
    /* at equal times, calls first: touching intervals count as concurrent */
    if (x->is_call != y->is_call)
        return x->is_call ? -1 : 1;
    return x->op - y->op;
}

typedef struct cache {
    uint64_t *keys; /* per slot: words of bitset + state */
    uint8_t *used;
    size_t cap, n, words;
} cache;

static uint64_t hash_words(const uint64_t *w, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= w[i];
        h *= 1099511628211ull;
        h ^= h >> 29;
    }
    return h;
}

static int cache_grow(cache *c)
{
    size_t ncap = c->cap ? c->cap * 2 : 1024;
    uint64_t *nk = calloc(ncap * (c->words + 1), sizeof *nk);
    uint8_t *nu = calloc(ncap, 1);
    if (!nk || !nu) {
        free(nk);
        free(nu);
        return -1;
    }
    for (size_t i = 0; i < c->cap; i++) {
        if (!c->used[i])
            continue;
        uint64_t *k = c->keys + i * (c->words + 1);
        size_t j = hash_words(k, c->words + 1) & (ncap - 1);
        while (nu[j])
            j = (j + 1) & (ncap - 1);
        nu[j] = 1;
        memcpy(nk + j * (c->words + 1), k, (c->words + 1) * sizeof *k);
    }
    free(c->keys);
    free(c->used);
    c->keys = nk;
    c->used = nu;
    c->cap = ncap;
    return 0;
}

/* Returns 1 if inserted, 0 if present, -1 on NOMEM. */
static int cache_add(cache *c, const uint64_t *key)
{
    if ((c->n + 1) * 2 > c->cap && cache_grow(c))
        return -1;
    size_t w = c->words + 1;
    size_t j = hash_words(key, w) & (c->cap - 1);
    while (c->used[j]) {
        if (!memcmp(c->keys + j * w, key, w * sizeof *key))
            return 0;
        j = (j + 1) & (c->cap - 1);
    }
    c->used[j] = 1;
    memcpy(c->keys + j * w, key, w * sizeof *key);
    c->n++;
    return 1;
}

static void lift(lnode *e)
{
    e->prev->next = e->next;
    if (e->next)
        e->next->prev = e->prev;
    lnode *m = e->match;
    m->prev->next = m->next;
    if (m->next)
        m->next->prev = m->prev;
}

static void unlift(lnode *e)
{
    lnode *m = e->match;
    m->prev->next = m;
    if (m->next)
        m->next->prev = m;
    e->prev->next = e;
    if (e->next)
        e->next->prev = e;
}

/* lincheck_register: contract (arguments, ownership, errors) in lincheck.h. */
static int search(const sim_hop *ops, size_t n);

/* A put that never returned and whose value nobody read can be linearized
 * after everything else, where it changes nothing observable: drop it
 * before the search (values are unique, so "read" is exact). */
int lincheck_register(const sim_hop *ops, size_t n)
{
    sim_hop *keep = malloc((n ? n : 1) * sizeof *keep);
    if (!keep)
        return -1;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (ops[i].kind == OP_PUT && ops[i].ret == SIM_INF) {
            int seen = 0;
            for (size_t j = 0; j < n && !seen; j++)
                seen = ops[j].kind == OP_GET && ops[j].out == ops[i].in;
            if (!seen)
                continue;
        }
        keep[k++] = ops[i];
    }
    int r = search(keep, k);
    free(keep);
    return r;
}

static int search(const sim_hop *ops, size_t n)
{
    if (n == 0)
        return 1;
    lnode *evs = calloc(2 * n + 1, sizeof *evs);
    size_t words = (n + 63) / 64;
    uint64_t *key = calloc(words + 1, sizeof *key);
    struct frame {
        lnode *e;
        uint64_t state;
    } *stack = calloc(n, sizeof *stack);
    cache c = { 0 };
    c.words = words;
    int result = -1;
    if (!evs || !key || !stack)
        goto out;
    for (size_t i = 0; i < n; i++) {
        evs[2 * i] = (lnode){ (int)i, 1, ops[i].call, NULL, NULL, NULL };
        evs[2 * i + 1] = (lnode){ (int)i, 0, ops[i].ret, NULL, NULL, NULL };
    }
    lnode *sorted = evs + 0; /* sort in place, then link */
    qsort(sorted, 2 * n, sizeof *sorted, cmp_ev);
    lnode **callof = calloc(n, sizeof *callof);
    lnode **retof = calloc(n, sizeof *retof);
    if (!callof || !retof) {
        free(callof);
        free(retof);
        goto out;
    }
    lnode *head = &evs[2 * n];
    memset(head, 0, sizeof *head);
    lnode *prev = head;
    for (size_t i = 0; i < 2 * n; i++) {
        lnode *e = &sorted[i];
        e->prev = prev;
        prev->next = e;
        e->next = NULL;
        prev = e;
        if (e->is_call)
            callof[e->op] = e;
        else
            retof[e->op] = e;
    }
    for (size_t i = 0; i < n; i++) {
        callof[i]->match = retof[i];
        retof[i]->match = callof[i];
    }
    free(callof);
    free(retof);

    uint64_t state = 0;
    size_t depth = 0;
    uint64_t steps = 0;
    lnode *e = head->next;
    while (head->next) {
        if (++steps > 20000000)
            goto out; /* give up: inconclusive */
        if (e->is_call) {
            const sim_hop *op = &ops[e->op];
            int legal;
            uint64_t ns = state;
            if (op->kind == OP_PUT) {
                legal = 1;
                ns = op->in;
            } else {
                legal = op->out == state;
            }
            if (legal) {
                key[e->op / 64] |= 1ull << (e->op % 64);
                key[words] = ns;
                int r = cache_add(&c, key);
                if (r < 0)
                    goto out;
                if (r) {
                    stack[depth].e = e;
                    stack[depth].state = state;
                    depth++;
                    state = ns;
                    lift(e);
                    e = head->next;
                    continue;
                }
                key[e->op / 64] &= ~(1ull << (e->op % 64));
            }
            e = e->next;
        } else {
            if (depth == 0) {
                result = 0;
                goto out;
            }
            depth--;
            lnode *top = stack[depth].e;
            state = stack[depth].state;
            key[top->op / 64] &= ~(1ull << (top->op % 64));
            unlift(top);
            e = top->next;
        }
    }
    result = 1;
out:
    free(evs);
    free(key);
    free(stack);
    free(c.keys);
    free(c.used);
    return result;
}
