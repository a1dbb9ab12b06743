/*
 * u64set.c — a set of 64-bit values. See u64set.h.
 */
#include <stdlib.h>
#include "u64set.h"
#include "sx_errors.h"

void u64set_init(u64set *s)
{
    s->slot = NULL;
    s->cap = s->n = s->max = 0;
    s->has_zero = s->lost = false;
}

/* Gives up on exact membership: every value counts as present. */
static int lose(u64set *s)
{
    free(s->slot);
    s->slot = NULL;
    s->cap = s->n = 0;
    s->lost = true;
    return SX_ENOMEM;
}

void u64set_free(u64set *s)
{
    free(s->slot);
    u64set_init(s);
}

/* Spreads v over the table (a 64-bit finaliser: values may be hashes of
 * low entropy in their low bits, or small integers). */
static size_t home(uint64_t v, size_t cap)
{
    v ^= v >> 33;
    v *= 0xff51afd7ed558ccdull;
    v ^= v >> 33;
    return (size_t)v & (cap - 1);
}

static void place(uint64_t *slot, size_t cap, uint64_t v)
{
    size_t i = home(v, cap);

    while (slot[i] != 0 && slot[i] != v)
        i = (i + 1) & (cap - 1);
    slot[i] = v;
}

int u64set_add(u64set *s, uint64_t v)
{
    if (s->lost)
        return 0; /* every value counts as present already */
    if (v == 0) {
        s->has_zero = true;
        return 0;
    }
    if (u64set_has(s, v))
        return 0;
    if (s->max > 0 && s->n >= s->max)
        return lose(s);
    if ((s->n + 1) * 2 > s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        uint64_t *ns = cap <= SIZE_MAX / sizeof(*ns) ? calloc(cap, sizeof(*ns)) : NULL;

        if (ns == NULL)
            return lose(s);
        for (size_t i = 0; i < s->cap; i++)
            if (s->slot[i] != 0)
                place(ns, cap, s->slot[i]);
        free(s->slot);
        s->slot = ns;
        s->cap = cap;
    }
    place(s->slot, s->cap, v);
    s->n++;
    return 0;
}

bool u64set_has(const u64set *s, uint64_t v)
{
    if (s->lost)
        return true;
    if (v == 0)
        return s->has_zero;
    if (s->cap == 0)
        return false;
    for (size_t i = home(v, s->cap); s->slot[i] != 0; i = (i + 1) & (s->cap - 1))
        if (s->slot[i] == v)
            return true;
    return false;
}
