/*
 * bf_sort.c — a backfill's sorted run of index records. See bf_sort.h.
 *
 * A record is packed in the arena as
 *   fkn (u32) | kn (u32) | pn (u32) | version (u64) | h (u64) | fkey | key | proj
 * (host order; read with memcpy). Each has an index entry holding the
 * first 24 bytes of its entry key as three big-endian numbers
 * (zero-padded) and the key's length, so that the sort decides nearly
 * every comparison without reading the arena (a cache miss each: many
 * entries share a tuple), and its arena offset (32 bits: a run holds at
 * most BF_RECS_MAX_BYTES). Ties of whole keys (rare) read h and the fact
 * key from the arena.
 */
#define _GNU_SOURCE /* mremap */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "bf_sort.h"
#include "sx_errors.h"

#define HDR 28

/* The first 24 bytes of a key decide most comparisons without reading the
 * arena (an index id, a short value and a numeric primary key fit): with
 * 16, keys sharing a value would compare in the arena, a cache miss each;
 * h is read there only when keys tie, rarely. */
typedef struct bf_ent {
    uint64_t k0, k1, k2; /* key bytes 0..7, 8..15, 16..23, big-endian */
    uint32_t kn;
    uint32_t off; /* in the arena */
} bf_ent;         /* 32 bytes */

/* The arena of the run being sorted (one sort per thread at a time). */
static _Thread_local const uint8_t *sort_base;

#define HUGE_PAGE ((size_t)2 << 20)

/* The run's two arrays live in their own anonymous mappings, grown by
 * mremap: grown by realloc, a run of tens of MiB would, below glibc's
 * mmap threshold (raised to 32 MiB once a large block is freed), be copied
 * whole at each doubling and faulted in 4 KiB at a time (together ~20 %
 * of a backfill thread in a virtual machine, where a fault is dear). mremap
 * moves pages without copying, and the mapping asks for transparent huge
 * pages (Debian's default "madvise" mode; where refused the pages stay
 * small). *cap counts units. */
static int grow(void **p, size_t *cap, size_t need, size_t unit)
{
    size_t c = *cap ? *cap : HUGE_PAGE / unit;
    void *np;

    while (c < need) {
        if (c > SIZE_MAX / 2 / unit)
            return SX_ENOMEM;
        c *= 2;
    }
    if (c == *cap)
        return 0;
    if (*p == NULL)
        np = mmap(NULL, c * unit, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    else
        np = mremap(*p, *cap * unit, c * unit, MREMAP_MAYMOVE);
    if (np == MAP_FAILED)
        return SX_ENOMEM;
    if (madvise(np, c * unit, MADV_HUGEPAGE) != 0) {
        /* advice only: small pages, as before */
    }
    *p = np;
    *cap = c;
    return 0;
}

static void unmap(void *p, size_t cap, size_t unit)
{
    if (p != NULL && munmap(p, cap * unit) != 0) {
        /* only for an invalid range, which p and cap never are */
    }
}

void bf_recs_init(bf_recs *r)
{
    memset(r, 0, sizeof(*r));
}

void bf_recs_free(bf_recs *r)
{
    unmap(r->a, r->acap, 1);
    unmap(r->e, r->cap, sizeof(bf_ent));
    bf_recs_init(r);
}

void bf_recs_clear(bf_recs *r)
{
    r->an = 0;
    r->n = 0;
    r->sorted = 0;
}

static void put32(uint8_t *p, size_t v)
{
    uint32_t x = (uint32_t)v;

    memcpy(p, &x, 4);
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t x;

    memcpy(&x, p, 4);
    return x;
}

int bf_recs_add(bf_recs *r, const uint8_t *fkey, size_t fkn, uint64_t version, uint64_t h,
                const uint8_t *key, size_t kn, const uint8_t *proj, size_t pn)
{
    size_t need, i;
    uint8_t *q;
    uint64_t k0 = 0, k1 = 0, k2 = 0;

    if (fkn > UINT32_MAX || kn > UINT32_MAX || pn > UINT32_MAX)
        return SX_ETOOBIG;
    need = HDR + fkn + kn + pn;
    if (r->an > BF_RECS_MAX_BYTES - need || need > BF_RECS_MAX_BYTES)
        return SX_ETOOBIG;
    if (grow((void **)&r->a, &r->acap, r->an + need, 1) != 0 ||
        grow((void **)&r->e, &r->cap, r->n + 1, sizeof(bf_ent)) != 0)
        return SX_ENOMEM;
    q = r->a + r->an;
    put32(q, fkn);
    put32(q + 4, kn);
    put32(q + 8, pn);
    memcpy(q + 12, &version, 8);
    memcpy(q + 20, &h, 8);
    memcpy(q + HDR, fkey, fkn);
    memcpy(q + HDR + fkn, key, kn);
    if (pn > 0)
        memcpy(q + HDR + fkn + kn, proj, pn);
    for (i = 0; i < 8; i++) {
        k0 = k0 << 8 | (i < kn ? key[i] : 0);
        k1 = k1 << 8 | (i + 8 < kn ? key[i + 8] : 0);
        k2 = k2 << 8 | (i + 16 < kn ? key[i + 16] : 0);
    }
    r->e[r->n].k0 = k0;
    r->e[r->n].k1 = k1;
    r->e[r->n].k2 = k2;
    r->e[r->n].kn = (uint32_t)kn;
    r->e[r->n].off = (uint32_t)r->an;
    r->n++;
    r->an += need;
    return 0;
}

size_t bf_recs_bytes(const bf_recs *r)
{
    return r->an + r->n * sizeof(bf_ent);
}

static void decode(const uint8_t *q, bf_rec *out)
{
    out->fkn = get32(q);
    out->kn = get32(q + 4);
    out->pn = get32(q + 8);
    memcpy(&out->version, q + 12, 8);
    memcpy(&out->h, q + 20, 8);
    out->fkey = q + HDR;
    out->key = q + HDR + out->fkn;
    out->proj = out->pn > 0 ? q + HDR + out->fkn + out->kn : NULL;
}

static int bytes_cmp(const uint8_t *a, size_t an, const uint8_t *b, size_t bn)
{
    int c = memcmp(a, b, an < bn ? an : bn);

    if (c != 0)
        return c;
    return an < bn ? -1 : an > bn;
}

static int ent_cmp(const void *x, const void *y)
{
    const bf_ent *a = x, *b = y;
    bf_rec ra, rb;
    int c;

    if (a->k0 != b->k0)
        return a->k0 < b->k0 ? -1 : 1;
    if (a->k1 != b->k1)
        return a->k1 < b->k1 ? -1 : 1;
    if (a->k2 != b->k2)
        return a->k2 < b->k2 ? -1 : 1;
    if (a->kn <= 24 && b->kn <= 24 && a->kn != b->kn)
        return a->kn < b->kn ? -1 : 1; /* equal when zero-padded: a prefix */
    decode(sort_base + a->off, &ra);
    decode(sort_base + b->off, &rb);
    if ((a->kn > 24 || b->kn > 24) && (c = bytes_cmp(ra.key, ra.kn, rb.key, rb.kn)) != 0)
        return c;
    if (ra.h != rb.h)
        return ra.h < rb.h ? -1 : 1;
    return bytes_cmp(ra.fkey, ra.fkn, rb.fkey, rb.fkn);
}

/* Byte b (0..23) of e's key prefix. */
static unsigned ent_byte(const bf_ent *e, int b)
{
    uint64_t w = b < 8 ? e->k0 : b < 16 ? e->k1 : e->k2;

    return (unsigned)(w >> (56 - 8 * (b % 8))) & 0xff;
}

static void insertion_sort(bf_ent *e, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        bf_ent x = e[i];
        size_t j = i;

        while (j > 0 && ent_cmp(&e[j - 1], &x) > 0) {
            e[j] = e[j - 1];
            j--;
        }
        e[j] = x;
    }
}

#define RADIX_SMALL 32 /* buckets this small: insertion sort */

/* Sorts e[0..n), whose prefixes share their first b bytes, by ent_cmp: an
 * in-place most-significant-byte radix sort on the 24 prefix bytes (the
 * order of k0, k1, k2 compared as numbers is that of their bytes), with
 * insertion sort for small buckets and qsort for a large bucket of equal
 * prefixes. In place: no buffer of the run's size to allocate and fault
 * in, and no merge copying every entry at every level, which glibc's
 * qsort (a merge sort) does: ~35 % of a backfill thread's time. */
static void radix_sort(bf_ent *e, size_t n, int b)
{
    size_t count[256], next[256], end[256];

    for (;;) {
        size_t pos = 0;
        unsigned lone = 256;

        if (n < RADIX_SMALL) {
            insertion_sort(e, n);
            return;
        }
        if (b == 24) {
            qsort(e, n, sizeof(*e), ent_cmp);
            return;
        }
        memset(count, 0, sizeof(count));
        for (size_t i = 0; i < n; i++)
            count[ent_byte(&e[i], b)]++;
        for (unsigned v = 0; v < 256; v++) {
            if (count[v] == n)
                lone = v;
            next[v] = pos;
            pos += count[v];
            end[v] = pos;
        }
        if (lone < 256) { /* one bucket: the next byte decides */
            b++;
            continue;
        }
        for (unsigned v = 0; v < 256; v++) { /* cycle each entry home */
            while (next[v] < end[v]) {
                bf_ent x = e[next[v]];
                unsigned d = ent_byte(&x, b);

                while (d != v) {
                    bf_ent y = e[next[d]];

                    e[next[d]++] = x;
                    x = y;
                    d = ent_byte(&x, b);
                }
                e[next[v]++] = x;
            }
        }
        pos = 0;
        for (unsigned v = 0; v < 256; v++) {
            if (count[v] > 1)
                radix_sort(e + pos, count[v], b + 1);
            pos += count[v];
        }
        return;
    }
}

void bf_recs_sort(bf_recs *r)
{
    if (r->sorted)
        return;
    sort_base = r->a;
    if (r->n > 1)
        radix_sort(r->e, r->n, 0);
    sort_base = NULL;
    r->sorted = 1;
}

#define PREFETCH_AHEAD 8

void bf_recs_get(const bf_recs *r, size_t i, bf_rec *out)
{
    /* sorted order visits the arena at random: a cache miss a record,
     * which reading in order then overlaps */
    if (i + PREFETCH_AHEAD < r->n)
        __builtin_prefetch(r->a + r->e[i + PREFETCH_AHEAD].off);
    decode(r->a + r->e[i].off, out);
}
