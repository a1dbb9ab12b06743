/*
 * fz_mutate.c — sx-fuzzframe's mutator: small memory and byte helpers, a
 * deterministic PRNG (splitmix64), the frame seen as msgpack items, the
 * encodings the mutations write, the mutations themselves (bit flips,
 * boundary bytes, truncation, inflated or deflated headers, inserted,
 * duplicated, deleted, replaced, swapped and spliced items, another type or
 * version, appended fields) and MULTI wrapping. Nothing here does I/O: the
 * same generator state always gives the same mutant.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <inttypes.h>
#include "fz.h"

#define MAX_ITEMS 512 /* items of a frame the mutator can aim at */

/* ---- memory and bytes ------------------------------------------------------- */

void fz_die_oom(void)
{
    fprintf(stderr, "sx-fuzzframe: out of memory\n");
    exit(2);
}

void *fz_xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz ? sz : 1);
    if (p == NULL)
        fz_die_oom();
    return p;
}

void fz_add(tup_bytes *b, const void *p, size_t n)
{
    if (n && tup_bytes_append(b, p, n) != 0)
        fz_die_oom();
}

/* Replaces b[off, off+oldn) by p..n. */
static void splice_in(tup_bytes *b, size_t off, size_t oldn, const uint8_t *p, size_t n)
{
    tup_bytes t = { 0 };

    fz_add(&t, b->p, off);
    fz_add(&t, p, n);
    fz_add(&t, b->p + off + oldn, b->n - off - oldn);
    tup_bytes_free(b);
    *b = t;
}

/* Moves an mp_buf's bytes into a fresh tup_bytes. */
tup_bytes fz_take_buf(mp_buf *m)
{
    tup_bytes b = { 0 };

    if (m->oom)
        fz_die_oom();
    fz_add(&b, m->sb.data, m->sb.size);
    mp_buf_free(m);
    return b;
}

tup_bytes fz_encode_req(msg_type t, const void *s)
{
    mp_buf m;

    mp_buf_init(&m);
    if (msg_encode_req(t, s, &m) != 0)
        fz_die_oom();
    return fz_take_buf(&m);
}

/* ---- deterministic PRNG (splitmix64) ------------------------------------------ */

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rnd(fz_rng *r)
{
    r->s += 0x9e3779b97f4a7c15ull;
    return mix64(r->s);
}

uint64_t fz_below(fz_rng *r, uint64_t n)
{
    return n ? rnd(r) % n : 0;
}

/* The generator of one mutant: a function of the run's seed, the port, the
 * seed frame and the mutant's number only. */
uint64_t fz_case_seed(uint64_t seed, int port, int s, int m)
{
    return mix64(seed ^ mix64(((uint64_t)port << 48) ^ ((uint64_t)s << 24) ^ (uint64_t)m));
}

/* ---- the frame as items ------------------------------------------------------ */

/* One msgpack value of a frame: where it is, its header's length, its whole
 * length, its kind, its parent (an index, -1 for the root) and, for a
 * container, its count (pairs for a map). */
typedef struct fz_item {
    size_t off, hdr, len;
    mp_kind kind;
    int parent;
    uint32_t count;
} fz_item;

static int walk_one(mp_cur *c, const uint8_t *base, int depth, int parent, fz_item *it, int *k)
{
    const uint8_t *start = c->p;
    mp_val v;
    int idx = -1;

    if (depth > MP_MAX_DEPTH || mp_read(c, &v) != 0)
        return -1;
    if (*k < MAX_ITEMS) {
        idx = (*k)++;
        it[idx].off = (size_t)(start - base);
        it[idx].kind = v.kind;
        it[idx].parent = parent;
        it[idx].count = v.count;
        it[idx].hdr = (size_t)(c->p - start) - (v.kind == MP_STR || v.kind == MP_BIN ? v.s.n : 0);
    }
    if (v.kind == MP_ARRAY || v.kind == MP_MAP) {
        uint64_t n = (uint64_t)v.count * (v.kind == MP_MAP ? 2 : 1);
        for (uint64_t i = 0; i < n; i++)
            if (walk_one(c, base, depth + 1, idx, it, k) != 0)
                return -1;
    }
    if (idx >= 0)
        it[idx].len = (size_t)(c->p - start);
    return 0;
}

/* Items of frame p..n in document order (it[0] the root); returns their
 * number, or 0 when the frame is not one well-formed value any more. */
static int walk(const uint8_t *p, size_t n, fz_item *it)
{
    mp_cur c = mp_cur_make(p, n);
    int k = 0;

    if (walk_one(&c, p, 0, -1, it, &k) != 0)
        return 0;
    return k;
}

/* The index of the i-th child of item parent, or -1. */
static int child(const fz_item *it, int n, int parent, int i)
{
    for (int j = parent + 1; j < n; j++)
        if (it[j].parent == parent && i-- == 0)
            return j;
    return -1;
}

/* ---- encodings used by the mutations ------------------------------------------- */

void fz_be_put(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * (bytes - 1 - i)));
}

/* A container/str/bin header claiming count, width 0 (its smallest form),
 * 8, 16 or 32 bits (8 only for str and bin). Returns its length in h[5]. */
static size_t header(mp_kind kind, uint64_t count, int width, uint8_t h[5])
{
    bool sb = kind == MP_STR || kind == MP_BIN;
    bool fix = kind == MP_STR ? count < 32 : kind != MP_BIN && count < 16;

    if (width == 0)
        width = fix ? 4 : sb && count < 256 ? 8 : count < 65536 ? 16 : 32;
    if (width == 4 && fix) {
        h[0] = (uint8_t)((kind == MP_ARRAY ? 0x90 : kind == MP_MAP ? 0x80 : 0xa0) | count);
        return 1;
    }
    if (width <= 8 && sb && count < 256) {
        h[0] = kind == MP_STR ? 0xd9 : 0xc4;
        h[1] = (uint8_t)count;
        return 2;
    }
    if (width <= 16 && count < 65536) {
        h[0] = kind == MP_ARRAY ? 0xdc : kind == MP_MAP ? 0xde : kind == MP_STR ? 0xda : 0xc5;
        fz_be_put(h + 1, count, 2);
        return 3;
    }
    h[0] = kind == MP_ARRAY ? 0xdd : kind == MP_MAP ? 0xdf : kind == MP_STR ? 0xdb : 0xc6;
    fz_be_put(h + 1, count > 0xffffffffull ? 0xffffffffull : count, 4);
    return 5;
}

/* Values an item may be replaced with: every type, boundaries included. */
static void other_value(fz_rng *r, mp_buf *m)
{
    static const uint8_t ext[] = { 0xd4, 0x01, 0x00 };
    static const uint8_t never[] = { 0xc1 };
    int deep;

    switch (fz_below(r, 18)) {
    case 0: mp_put_nil(m); break;
    case 1: mp_put_bool(m, false); break;
    case 2: mp_put_bool(m, true); break;
    case 3: mp_put_i64(m, -1); break;
    case 4: mp_put_double(m, 1.5); break;
    case 5: mp_put_cstr(m, ""); break;
    case 6: mp_put_cstr(m, "x"); break;
    case 7: mp_put_bin(m, "", 0); break;
    case 8: mp_put_bin(m, "\x30x\x00", 3); break;
    case 9: mp_put_array(m, 0); break;
    case 10: mp_put_map(m, 0); break;
    case 11:
        mp_put_array(m, 1);
        mp_put_nil(m);
        break;
    case 12:
        mp_put_map(m, 1);
        mp_put_cstr(m, "id");
        mp_put_u64(m, 1);
        break;
    case 13: mp_put_raw(m, ext, sizeof ext); break;
    case 14: mp_put_raw(m, never, sizeof never); break;
    case 15: {
        char big[2000];
        memset(big, 'k', sizeof big);
        mp_put_str(m, big, sizeof big);
        break;
    }
    case 16:
        for (deep = 0; deep < 40; deep++)
            mp_put_array(m, 1);
        mp_put_nil(m);
        break;
    default: mp_put_i64(m, INT64_MIN); break;
    }
}

/* Integers an integer field may become. */
static void other_int(fz_rng *r, mp_buf *m)
{
    static const uint64_t us[] = {
        0,          1,          2,      0x7f,   0x80,          0xff,           0x100,
        0xffff,     0x10000,    100000, 100001, 0xffffffffull, 0x100000000ull, (uint64_t)INT64_MAX,
        1ull << 63, UINT64_MAX,
    };
    uint64_t k = fz_below(r, sizeof us / sizeof us[0] + 3);

    if (k < sizeof us / sizeof us[0]) {
        if (fz_below(r, 4) == 0) { /* a wide encoding of a small value */
            uint8_t w[9] = { 0xcf };
            fz_be_put(w + 1, us[k], 8);
            mp_put_raw(m, w, sizeof w);
        } else {
            mp_put_u64(m, us[k]);
        }
    } else {
        static const int64_t neg[] = { -1, -128, INT64_MIN };
        mp_put_i64(m, neg[k - sizeof us / sizeof us[0]]);
    }
}

/* ---- mutations ----------------------------------------------------------------- */

void fz_note(fz_mut *m, const char *fmt, ...)
{
    va_list ap;
    int w;

    if (m->dl >= sizeof m->desc - 1)
        return;
    va_start(ap, fmt);
    w = vsnprintf(m->desc + m->dl, sizeof m->desc - m->dl, fmt, ap);
    va_end(ap);
    if (w > 0)
        m->dl += (size_t)w < sizeof m->desc - m->dl ? (size_t)w : sizeof m->desc - m->dl - 1;
}

static const uint8_t boundary[] = { 0x00, 0x01, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0,
                                    0xc1, 0xc4, 0xcf, 0xd9, 0xdc, 0xdd, 0xde, 0xdf, 0xe0, 0xff };

static uint8_t boundary_byte(fz_rng *r)
{
    if (fz_below(r, 3) == 0)
        return (uint8_t)(0xc0 + fz_below(r, 32)); /* any msgpack type byte */
    return boundary[fz_below(r, sizeof boundary)];
}

/* A random item other than the root, preferring kinds in mask (bit per
 * mp_kind; 0: any); -1 when there is none. */
static int pick(fz_rng *r, const fz_item *it, int n, unsigned mask)
{
    int cand[MAX_ITEMS], k = 0;

    for (int i = 1; i < n; i++)
        if (mask == 0 || (mask & (1u << it[i].kind)))
            cand[k++] = i;
    return k ? cand[fz_below(r, (uint64_t)k)] : -1;
}

/* Rewrites item i's container header to claim count (its smallest form). */
static void set_count(fz_mut *m, const fz_item *it, int i, uint64_t count)
{
    uint8_t h[5];
    size_t hn = header(it[i].kind, count, 0, h);

    splice_in(&m->b, it[i].off, it[i].hdr, h, hn);
}

static void mut_bytes(fz_mut *m, fz_rng *r)
{
    if (m->b.n == 0) {
        uint8_t b = boundary_byte(r);
        fz_add(&m->b, &b, 1);
        fz_note(m, "byte(empty->%02x) ", b);
        return;
    }
    if (fz_below(r, 2) == 0) {
        int k = 1 + (int)fz_below(r, 3);
        for (int i = 0; i < k; i++) {
            size_t pos = fz_below(r, m->b.n);
            int bit = (int)fz_below(r, 8);
            m->b.p[pos] ^= (uint8_t)(1u << bit);
            fz_note(m, "flip(%zu.%d) ", pos, bit);
        }
    } else {
        size_t pos = fz_below(r, m->b.n);
        m->b.p[pos] = boundary_byte(r);
        fz_note(m, "byte(%zu=%02x) ", pos, m->b.p[pos]);
    }
}

static void mut_trunc(fz_mut *m, fz_rng *r, const fz_item *it, int n)
{
    size_t pos;
    int i = n > 1 ? 1 + (int)fz_below(r, (uint64_t)n - 1) : 0;

    switch (fz_below(r, 6)) {
    case 0: pos = fz_below(r, m->b.n + 1); break;
    case 1: pos = n ? it[i].off : 0; break; /* before an item */
    case 2:
        pos = n ? it[i].off + (it[i].hdr > 1 ? 1 + fz_below(r, it[i].hdr - 1) : 0) : 1;
        break;                                                           /* inside a header */
    case 3: pos = n && it[i].len ? it[i].off + it[i].len - 1 : 0; break; /* its last byte */
    case 4: pos = m->b.n ? m->b.n - 1 : 0; break;
    default: pos = fz_below(r, 4); break;
    }
    if (pos > m->b.n)
        pos = m->b.n;
    m->b.n = pos;
    fz_note(m, "trunc(%zu) ", pos);
}

static void mut_inflate(fz_mut *m, fz_rng *r, const fz_item *it, int n)
{
    unsigned mask = 1u << MP_ARRAY | 1u << MP_MAP | 1u << MP_STR | 1u << MP_BIN;
    int i = n == 0 ? -1 : fz_below(r, 4) == 0 ? 0 : pick(r, it, n, mask);
    uint64_t cur, left, claim;
    uint8_t h[5];
    size_t hn;

    if (n > 0 && (i < 0 || !(mask & (1u << it[i].kind))))
        i = 0;
    if (i < 0 || !(mask & (1u << it[i].kind))) {
        mut_bytes(m, r);
        return;
    }
    cur = it[i].kind == MP_ARRAY || it[i].kind == MP_MAP ? it[i].count : it[i].len - it[i].hdr;
    left = m->b.n - it[i].off - it[i].hdr;
    switch (fz_below(r, 8)) {
    case 0: claim = 0xffffffffull; break;
    case 1: claim = cur + 1; break;
    case 2: claim = left + 1; break;
    case 3: claim = cur * 2 + 7; break;
    case 4: claim = 0x10000; break;
    case 5: claim = MSG_MAX_LIST + 1; break;
    case 6: claim = cur ? cur - 1 : 0; break;
    default: claim = 0; break;
    }
    hn = header(it[i].kind, claim, fz_below(r, 2) ? 32 : 0, h);
    splice_in(&m->b, it[i].off, it[i].hdr, h, hn);
    fz_note(m, "count(item %d: %" PRIu64 "->%" PRIu64 ") ", i, cur, claim);
}

static void mut_insert(fz_mut *m, fz_rng *r, const fz_item *it, int n)
{
    uint8_t ins[8];
    int k = 1 + (int)fz_below(r, sizeof ins);
    size_t pos = n && fz_below(r, 2) ? it[fz_below(r, (uint64_t)n)].off : fz_below(r, m->b.n + 1);

    for (int i = 0; i < k; i++)
        ins[i] = fz_below(r, 2) ? boundary_byte(r) : (uint8_t)rnd(r);
    splice_in(&m->b, pos, 0, ins, (size_t)k);
    fz_note(m, "insert(%zu,+%d) ", pos, k);
}

static void mut_dup_or_delete(fz_mut *m, fz_rng *r, const fz_item *it, int n, bool dup)
{
    int i = pick(r, it, n, 0);
    bool fix = fz_below(r, 2) == 0;
    int parent;

    if (i < 0) {
        mut_bytes(m, r);
        return;
    }
    parent = it[i].parent;
    if (dup) {
        tup_bytes copy = { 0 };
        fz_add(&copy, m->b.p + it[i].off, it[i].len);
        splice_in(&m->b, it[i].off + it[i].len, 0, copy.p, copy.n);
        tup_bytes_free(&copy);
    } else {
        splice_in(&m->b, it[i].off, it[i].len, NULL, 0);
    }
    /* the parent's header comes before item i: its offset is unchanged */
    if (fix && parent >= 0)
        set_count(m, it, parent,
                  dup                ? (uint64_t)it[parent].count + 1
                  : it[parent].count ? it[parent].count - 1
                                     : 0);
    fz_note(m, "%s(item %d%s) ", dup ? "dup" : "delete", i, fix ? ", count fixed" : "");
}

static void mut_replace(fz_mut *m, fz_rng *r, const fz_item *it, int n, bool as_int)
{
    unsigned ints = 1u << MP_UINT | 1u << MP_INT;
    int i = pick(r, it, n, as_int ? ints : 0);
    mp_buf v;

    if (i < 0) {
        mut_bytes(m, r);
        return;
    }
    mp_buf_init(&v);
    if (as_int)
        other_int(r, &v);
    else
        other_value(r, &v);
    if (v.oom)
        fz_die_oom();
    splice_in(&m->b, it[i].off, it[i].len, (const uint8_t *)v.sb.data, v.sb.size);
    fz_note(m, "%s(item %d <- %02x..%zu) ", as_int ? "int" : "value", i, (uint8_t)v.sb.data[0],
            v.sb.size);
    mp_buf_free(&v);
}

static void mut_swap(fz_mut *m, fz_rng *r, const fz_item *it, int n)
{
    int a = pick(r, it, n, 0), b = pick(r, it, n, 0), t;
    tup_bytes o = { 0 };

    if (a > b) {
        t = a;
        a = b;
        b = t;
    }
    if (a < 0 || a == b || it[b].off < it[a].off + it[a].len) { /* nested or same */
        mut_bytes(m, r);
        return;
    }
    fz_add(&o, m->b.p, it[a].off);
    fz_add(&o, m->b.p + it[b].off, it[b].len);
    fz_add(&o, m->b.p + it[a].off + it[a].len, it[b].off - it[a].off - it[a].len);
    fz_add(&o, m->b.p + it[a].off, it[a].len);
    fz_add(&o, m->b.p + it[b].off + it[b].len, m->b.n - it[b].off - it[b].len);
    tup_bytes_free(&m->b);
    m->b = o;
    fz_note(m, "swap(items %d,%d) ", a, b);
}

/* The frame's version (which 0) or type (which 1) becomes something else. */
static void mut_header(fz_mut *m, fz_rng *r, const fz_item *it, int n, int which)
{
    static const uint64_t types[] = {
        0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,  12,   13,   19,  20,  21,           22,
        23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 99, 127, 0x81, 0x96, 255, 256, 0xffffffffull
    };
    static const uint64_t versions[] = { 0, 2, 3, 127, 255, 0x101, UINT64_MAX };
    int i = n && it[0].kind == MP_ARRAY ? child(it, n, 0, which) : -1;
    mp_buf v;
    uint64_t val;

    if (i < 0) {
        mut_bytes(m, r);
        return;
    }
    mp_buf_init(&v);
    if (which == 0 && fz_below(r, 4) == 0) { /* version 1, wide: must still be fine */
        static const uint8_t wide1[] = { 0xcf, 0, 0, 0, 0, 0, 0, 0, 1 };
        mp_put_raw(&v, wide1, sizeof wide1);
        val = 1;
    } else {
        val = which ? types[fz_below(r, sizeof types / sizeof types[0])]
                    : versions[fz_below(r, sizeof versions / sizeof versions[0])];
        mp_put_u64(&v, val);
    }
    if (v.oom)
        fz_die_oom();
    splice_in(&m->b, it[i].off, it[i].len, (const uint8_t *)v.sb.data, v.sb.size);
    mp_buf_free(&v);
    fz_note(m, "%s(%" PRIu64 ") ", which ? "type" : "version", val);
}

static void mut_append(fz_mut *m, fz_rng *r, const fz_item *it, int n)
{
    int k = 1 + (int)fz_below(r, 3);
    mp_buf v;

    if (n == 0 || it[0].kind != MP_ARRAY) {
        mut_bytes(m, r);
        return;
    }
    mp_buf_init(&v);
    for (int i = 0; i < k; i++)
        other_value(r, &v);
    if (v.oom)
        fz_die_oom();
    fz_add(&m->b, v.sb.data, v.sb.size);
    mp_buf_free(&v);
    set_count(m, it, 0, (uint64_t)it[0].count + (uint64_t)k);
    fz_note(m, "append(%d fields) ", k);
}

/* An item of another seed (donor) takes the place of one of this frame's. */
static void mut_splice(fz_mut *m, fz_rng *r, const fz_item *it, int n, const tup_bytes *donor)
{
    fz_item dit[MAX_ITEMS];
    int dn = walk(donor->p, donor->n, dit), i = pick(r, it, n, 0), j;

    j = dn ? pick(r, dit, dn, 0) : -1;
    if (i < 0 || j < 0) {
        mut_bytes(m, r);
        return;
    }
    splice_in(&m->b, it[i].off, it[i].len, donor->p + dit[j].off, dit[j].len);
    fz_note(m, "splice(item %d <- donor item %d) ", i, j);
}

/* Applies 1 to 4 mutations to m->b. */
void fz_mutate(fz_mut *m, fz_rng *r, const tup_bytes *donor)
{
    int ops = fz_below(r, 10) < 6 ? 1 : fz_below(r, 5) < 3 ? 2 : 3 + (int)fz_below(r, 2);
    fz_item *it = fz_xcalloc(MAX_ITEMS, sizeof *it);

    for (int o = 0; o < ops; o++) {
        int n = walk(m->b.p, m->b.n, it);
        uint64_t k = fz_below(r, 100);

        if (k < 10 || (n == 0 && k < 50))
            mut_bytes(m, r);
        else if (k < 20 || n == 0)
            mut_trunc(m, r, it, n);
        else if (k < 32)
            mut_inflate(m, r, it, n);
        else if (k < 38)
            mut_insert(m, r, it, n);
        else if (k < 44)
            mut_dup_or_delete(m, r, it, n, true);
        else if (k < 50)
            mut_dup_or_delete(m, r, it, n, false);
        else if (k < 63)
            mut_replace(m, r, it, n, true);
        else if (k < 76)
            mut_replace(m, r, it, n, false);
        else if (k < 82)
            mut_swap(m, r, it, n);
        else if (k < 87)
            mut_header(m, r, it, n, 1);
        else if (k < 89)
            mut_header(m, r, it, n, 0);
        else if (k < 92)
            mut_append(m, r, it, n);
        else
            mut_splice(m, r, it, n, donor);
    }
    free(it);
}

/* A MULTI request of frames f[0..n). */
tup_bytes fz_multi_of(const tup_bytes *const *f, int n)
{
    mp_span *v = fz_xcalloc((size_t)n, sizeof *v);
    msg_MULTI_req rq;
    tup_bytes out;

    for (int i = 0; i < n; i++)
        v[i] = (mp_span){ f[i]->p, f[i]->n };
    memset(&rq, 0, sizeof rq);
    rq.frames = (msg_spans){ (uint32_t)n, v };
    out = fz_encode_req(MSG_MULTI, &rq);
    free(v);
    return out;
}

/* Wraps m->b in a MULTI in one of several ways (valid neighbours, a nested
 * MULTI, the wrapper itself mutated, the mutant repeated). */
void fz_wrap_multi(fz_mut *m, fz_rng *r, const tup_bytes *valid, const tup_bytes *ping)
{
    tup_bytes inner = m->b, nested = { 0 }, out;
    const tup_bytes *f[6];
    uint64_t how = fz_below(r, 5);
    int n = 0;

    switch (how) {
    case 0: f[n++] = &inner; break;
    case 1:
        f[n++] = valid;
        f[n++] = &inner;
        f[n++] = ping;
        break;
    case 2: {
        const tup_bytes *pf[1] = { ping };
        nested = fz_multi_of(pf, 1);
        f[n++] = &inner;
        f[n++] = &nested;
        break;
    }
    case 3: f[n++] = &inner; break;
    default:
        for (int k = 2 + (int)fz_below(r, 3); n < k;)
            f[n++] = &inner;
        break;
    }
    out = fz_multi_of(f, n);
    tup_bytes_free(&nested);
    tup_bytes_free(&inner);
    m->b = out;
    fz_note(m, "| in MULTI(%s) ",
            how == 0   ? "alone"
            : how == 1 ? "between valid frames"
            : how == 2 ? "beside a nested MULTI"
            : how == 3 ? "then mutated"
                       : "repeated");
    if (how == 3)
        fz_mutate(m, r, valid);
}
