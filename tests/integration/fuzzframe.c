/*
 * fuzzframe.c — sx-fuzzframe: a deterministic frame-mutation fuzzer for
 * every port of a running cluster. It proves the project rule "never assert
 * or abort on network input: answer with an error code and keep serving".
 *
 * Usage:
 *   sx-fuzzframe --config FILE --read TABLE --write TABLE
 *                [--count N] [--seed S] [--timeout-ms MS] [--port NAME] [-v]
 *   sx-fuzzframe --config FILE --ping          every port answers PING
 *   sx-fuzzframe --send URL HEX                one frame (URL "link+tcp://..."
 *                                              for a node), its reply, a PING
 *
 * For every process of the config (routers over nng REQ/REP, storage and
 * index nodes over links, proto/PROTOCOL.md "Transport") it builds VALID
 * seed frames of every message type that port serves, with the cluster's
 * real contents (tables, indexes, items, keys, partitions, tokens,
 * watermarks, read first), then for each seed N mutants from a fixed-seed
 * PRNG (each mutant's generator is derived from --seed, the port, the seed
 * and the mutant's number, so a case is the same however the others went):
 * bit flips, boundary bytes, truncation at item starts, headers and ends,
 * inflated or deflated container/str/bin headers, inserted, duplicated and
 * deleted items, integers replaced by boundary values, items replaced by
 * values of other types, swapped items, another message type, another
 * version, appended fields, items spliced in from another seed, and MULTI
 * wrapping (alone, beside valid frames, nested, or the wrapper mutated).
 *
 * Each frame sent must get a reply within the timeout (none of these frames
 * is one a server may drop: all are under the size limit) that is a
 * well-formed reply frame: an error reply with a known code and a message,
 * typed as the request (or as PING or MULTI, when the server cannot tell),
 * or a success reply of the request's own type that decodes as that type's
 * reply (a MULTI's: one reply per inner frame, each checked the same way).
 * Then the port must answer PING. A port that stops answering is given up.
 *
 * Data safety. Nodes do not authenticate their peers yet, so a mutated
 * inter-node write that decodes may really write. Before sending, each
 * frame (and each frame inside a MULTI) is decoded exactly as the server
 * will (msg_decode_req) and withheld, counted as such, when it could touch
 * anything but the --write table: a PUT, DELETE, INDEX_CREATE, INDEX_DROP
 * or CAT_UPDATE naming another table that existed at the start, an S_WRITE
 * to another table id, a CAT_BACKFILLED of such a table's index, an I_BUILD
 * carrying a key of such an index, an I_APPLY whose upto passes the
 * watermark its partition had for its source at the start (it would move
 * the watermark: the records it skipped would never be applied) or whose hw
 * is above 10^15 µs (a high-water no real partition is below: one above it
 * would let tombstones be collected early). Reads go everywhere.
 *
 * Exit status: 0 when every frame behaved, 1 when one did not, 2 on usage
 * or set-up errors. Each failure is printed when it happens; at exit, per
 * port and seed, the frames sent and how they were answered (ok, error
 * reply, withheld, no reply, bad reply), then the first failing case of the
 * first port that had one, in full: seed, mutant, case, mutations, the
 * frame's hex and the --send line that replays it.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include "catalog.h"
#include "config.h"
#include "hash.h"
#include "item.h"
#include "msg.h"
#include "mp.h"
#include "sx_errors.h"
#include "tuple.h"

#define DEFAULT_COUNT 1500         /* mutants per seed (fuzzframe.sh's too) */
#define DEFAULT_TIMEOUT_MS 15000   /* generous: the suite also runs under ASan */
#define MULTI_EVERY 6              /* every 6th mutant goes inside a MULTI */
#define MAX_SEEDS 40
#define MAX_ITEMS 512              /* items of a frame the mutator can aim at */
#define MAX_PORT_FAILURES 5        /* then the port is given up */
#define HW_SANE 1000000000000000ull  /* 10^15 µs: below every real hw */
#define FAKE_INDEX 0xfffffff0u     /* an index id no table holds (as sx-ibuild) */
#define LINK_PREFIX "link+"

/* ---- small helpers ---------------------------------------------------------- */

static void die_oom(void)
{
    fprintf(stderr, "sx-fuzzframe: out of memory\n");
    exit(2);
}

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz ? sz : 1);
    if (p == NULL)
        die_oom();
    return p;
}

static void add(sx_bytes *b, const void *p, size_t n)
{
    if (n && bytes_append(b, p, n) != 0)
        die_oom();
}

/* Replaces b[off, off+oldn) by p..n. */
static void splice_in(sx_bytes *b, size_t off, size_t oldn, const uint8_t *p, size_t n)
{
    sx_bytes t = { 0 };

    add(&t, b->p, off);
    add(&t, p, n);
    add(&t, b->p + off + oldn, b->n - off - oldn);
    bytes_free(b);
    *b = t;
}

/* Moves an mp_buf's bytes into a fresh sx_bytes. */
static sx_bytes take_buf(mp_buf *m)
{
    sx_bytes b = { 0 };

    if (m->oom)
        die_oom();
    add(&b, m->sb.data, m->sb.size);
    mp_buf_free(m);
    return b;
}

static sx_bytes encode_req(msg_type t, const void *s)
{
    mp_buf m;

    mp_buf_init(&m);
    if (msg_encode_req(t, s, &m) != 0)
        die_oom();
    return take_buf(&m);
}

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void hex_print(FILE *f, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%02x", p[i]);
}

/* ---- deterministic PRNG (splitmix64) ------------------------------------------ */

typedef struct rng { uint64_t s; } rng;

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rnd(rng *r)
{
    r->s += 0x9e3779b97f4a7c15ull;
    return mix64(r->s);
}

static uint64_t below(rng *r, uint64_t n)
{
    return n ? rnd(r) % n : 0;
}

/* The generator of one mutant: a function of the run's seed, the port, the
 * seed frame and the mutant's number only. */
static uint64_t case_seed(uint64_t seed, int port, int s, int m)
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

static int walk_one(mp_cur *c, const uint8_t *base, int depth, int parent, fz_item *it,
                    int *k)
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

static void be_put(uint8_t *p, uint64_t v, int bytes)
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
        be_put(h + 1, count, 2);
        return 3;
    }
    h[0] = kind == MP_ARRAY ? 0xdd : kind == MP_MAP ? 0xdf : kind == MP_STR ? 0xdb : 0xc6;
    be_put(h + 1, count > 0xffffffffull ? 0xffffffffull : count, 4);
    return 5;
}

/* Values an item may be replaced with: every type, boundaries included. */
static void other_value(rng *r, mp_buf *m)
{
    static const uint8_t ext[] = { 0xd4, 0x01, 0x00 };
    static const uint8_t never[] = { 0xc1 };
    int deep;

    switch (below(r, 18)) {
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
    case 11: mp_put_array(m, 1); mp_put_nil(m); break;
    case 12: mp_put_map(m, 1); mp_put_cstr(m, "id"); mp_put_u64(m, 1); break;
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
    default:
        mp_put_i64(m, INT64_MIN);
        break;
    }
}

/* Integers an integer field may become. */
static void other_int(rng *r, mp_buf *m)
{
    static const uint64_t us[] = {
        0, 1, 2, 0x7f, 0x80, 0xff, 0x100, 0xffff, 0x10000, 100000, 100001,
        0xffffffffull, 0x100000000ull, (uint64_t)INT64_MAX, 1ull << 63, UINT64_MAX,
    };
    uint64_t k = below(r, sizeof us / sizeof us[0] + 3);

    if (k < sizeof us / sizeof us[0]) {
        if (below(r, 4) == 0) {            /* a wide encoding of a small value */
            uint8_t w[9] = { 0xcf };
            be_put(w + 1, us[k], 8);
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

typedef struct fz_mut {
    sx_bytes b;
    char desc[512];
    size_t dl;
} fz_mut;

static void note(fz_mut *m, const char *fmt, ...)
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

static const uint8_t boundary[] = { 0x00, 0x01, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0,
                                    0xbf, 0xc0, 0xc1, 0xc4, 0xcf, 0xd9, 0xdc, 0xdd,
                                    0xde, 0xdf, 0xe0, 0xff };

static uint8_t boundary_byte(rng *r)
{
    if (below(r, 3) == 0)
        return (uint8_t)(0xc0 + below(r, 32));   /* any msgpack type byte */
    return boundary[below(r, sizeof boundary)];
}

/* A random item other than the root, preferring kinds in mask (bit per
 * mp_kind; 0: any); -1 when there is none. */
static int pick(rng *r, const fz_item *it, int n, unsigned mask)
{
    int cand[MAX_ITEMS], k = 0;

    for (int i = 1; i < n; i++)
        if (mask == 0 || (mask & (1u << it[i].kind)))
            cand[k++] = i;
    return k ? cand[below(r, (uint64_t)k)] : -1;
}

/* Rewrites item i's container header to claim count (its smallest form). */
static void set_count(fz_mut *m, const fz_item *it, int i, uint64_t count)
{
    uint8_t h[5];
    size_t hn = header(it[i].kind, count, 0, h);

    splice_in(&m->b, it[i].off, it[i].hdr, h, hn);
}

static void mut_bytes(fz_mut *m, rng *r)
{
    if (m->b.n == 0) {
        uint8_t b = boundary_byte(r);
        add(&m->b, &b, 1);
        note(m, "byte(empty->%02x) ", b);
        return;
    }
    if (below(r, 2) == 0) {
        int k = 1 + (int)below(r, 3);
        for (int i = 0; i < k; i++) {
            size_t pos = below(r, m->b.n);
            int bit = (int)below(r, 8);
            m->b.p[pos] ^= (uint8_t)(1u << bit);
            note(m, "flip(%zu.%d) ", pos, bit);
        }
    } else {
        size_t pos = below(r, m->b.n);
        m->b.p[pos] = boundary_byte(r);
        note(m, "byte(%zu=%02x) ", pos, m->b.p[pos]);
    }
}

static void mut_trunc(fz_mut *m, rng *r, const fz_item *it, int n)
{
    size_t pos;
    int i = n > 1 ? 1 + (int)below(r, (uint64_t)n - 1) : 0;

    switch (below(r, 6)) {
    case 0: pos = below(r, m->b.n + 1); break;
    case 1: pos = n ? it[i].off : 0; break;                       /* before an item */
    case 2: pos = n ? it[i].off + (it[i].hdr > 1 ? 1 + below(r, it[i].hdr - 1) : 0) : 1;
        break;                                                     /* inside a header */
    case 3: pos = n && it[i].len ? it[i].off + it[i].len - 1 : 0; break; /* its last byte */
    case 4: pos = m->b.n ? m->b.n - 1 : 0; break;
    default: pos = below(r, 4); break;
    }
    if (pos > m->b.n)
        pos = m->b.n;
    m->b.n = pos;
    note(m, "trunc(%zu) ", pos);
}

static void mut_inflate(fz_mut *m, rng *r, const fz_item *it, int n)
{
    unsigned mask = 1u << MP_ARRAY | 1u << MP_MAP | 1u << MP_STR | 1u << MP_BIN;
    int i = n == 0 ? -1 : below(r, 4) == 0 ? 0 : pick(r, it, n, mask);
    uint64_t cur, left, claim;
    uint8_t h[5];
    size_t hn;

    if (n > 0 && (i < 0 || !(mask & (1u << it[i].kind))))
        i = 0;
    if (i < 0 || !(mask & (1u << it[i].kind))) {
        mut_bytes(m, r);
        return;
    }
    cur = it[i].kind == MP_ARRAY || it[i].kind == MP_MAP ? it[i].count
                                                         : it[i].len - it[i].hdr;
    left = m->b.n - it[i].off - it[i].hdr;
    switch (below(r, 8)) {
    case 0: claim = 0xffffffffull; break;
    case 1: claim = cur + 1; break;
    case 2: claim = left + 1; break;
    case 3: claim = cur * 2 + 7; break;
    case 4: claim = 0x10000; break;
    case 5: claim = MSG_MAX_LIST + 1; break;
    case 6: claim = cur ? cur - 1 : 0; break;
    default: claim = 0; break;
    }
    hn = header(it[i].kind, claim, below(r, 2) ? 32 : 0, h);
    splice_in(&m->b, it[i].off, it[i].hdr, h, hn);
    note(m, "count(item %d: %" PRIu64 "->%" PRIu64 ") ", i, cur, claim);
}

static void mut_insert(fz_mut *m, rng *r, const fz_item *it, int n)
{
    uint8_t ins[8];
    int k = 1 + (int)below(r, sizeof ins);
    size_t pos = n && below(r, 2) ? it[below(r, (uint64_t)n)].off : below(r, m->b.n + 1);

    for (int i = 0; i < k; i++)
        ins[i] = below(r, 2) ? boundary_byte(r) : (uint8_t)rnd(r);
    splice_in(&m->b, pos, 0, ins, (size_t)k);
    note(m, "insert(%zu,+%d) ", pos, k);
}

static void mut_dup_or_delete(fz_mut *m, rng *r, const fz_item *it, int n, bool dup)
{
    int i = pick(r, it, n, 0);
    bool fix = below(r, 2) == 0;
    int parent;

    if (i < 0) {
        mut_bytes(m, r);
        return;
    }
    parent = it[i].parent;
    if (dup) {
        sx_bytes copy = { 0 };
        add(&copy, m->b.p + it[i].off, it[i].len);
        splice_in(&m->b, it[i].off + it[i].len, 0, copy.p, copy.n);
        bytes_free(&copy);
    } else {
        splice_in(&m->b, it[i].off, it[i].len, NULL, 0);
    }
    /* the parent's header comes before item i: its offset is unchanged */
    if (fix && parent >= 0)
        set_count(m, it, parent, dup ? (uint64_t)it[parent].count + 1
                  : it[parent].count ? it[parent].count - 1 : 0);
    note(m, "%s(item %d%s) ", dup ? "dup" : "delete", i, fix ? ", count fixed" : "");
}

static void mut_replace(fz_mut *m, rng *r, const fz_item *it, int n, bool as_int)
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
        die_oom();
    splice_in(&m->b, it[i].off, it[i].len, (const uint8_t *)v.sb.data, v.sb.size);
    note(m, "%s(item %d <- %02x..%zu) ", as_int ? "int" : "value", i,
         (uint8_t)v.sb.data[0], v.sb.size);
    mp_buf_free(&v);
}

static void mut_swap(fz_mut *m, rng *r, const fz_item *it, int n)
{
    int a = pick(r, it, n, 0), b = pick(r, it, n, 0), t;
    sx_bytes o = { 0 };

    if (a > b) {
        t = a;
        a = b;
        b = t;
    }
    if (a < 0 || a == b || it[b].off < it[a].off + it[a].len) {   /* nested or same */
        mut_bytes(m, r);
        return;
    }
    add(&o, m->b.p, it[a].off);
    add(&o, m->b.p + it[b].off, it[b].len);
    add(&o, m->b.p + it[a].off + it[a].len, it[b].off - it[a].off - it[a].len);
    add(&o, m->b.p + it[a].off, it[a].len);
    add(&o, m->b.p + it[b].off + it[b].len, m->b.n - it[b].off - it[b].len);
    bytes_free(&m->b);
    m->b = o;
    note(m, "swap(items %d,%d) ", a, b);
}

/* The frame's version (which 0) or type (which 1) becomes something else. */
static void mut_header(fz_mut *m, rng *r, const fz_item *it, int n, int which)
{
    static const uint64_t types[] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 19,
                                      20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32,
                                      99, 127, 0x81, 0x96, 255, 256, 0xffffffffull };
    static const uint64_t versions[] = { 0, 2, 3, 127, 255, 0x101, UINT64_MAX };
    int i = n && it[0].kind == MP_ARRAY ? child(it, n, 0, which) : -1;
    mp_buf v;
    uint64_t val;

    if (i < 0) {
        mut_bytes(m, r);
        return;
    }
    mp_buf_init(&v);
    if (which == 0 && below(r, 4) == 0) {   /* version 1, wide: must still be fine */
        static const uint8_t wide1[] = { 0xcf, 0, 0, 0, 0, 0, 0, 0, 1 };
        mp_put_raw(&v, wide1, sizeof wide1);
        val = 1;
    } else {
        val = which ? types[below(r, sizeof types / sizeof types[0])]
                    : versions[below(r, sizeof versions / sizeof versions[0])];
        mp_put_u64(&v, val);
    }
    if (v.oom)
        die_oom();
    splice_in(&m->b, it[i].off, it[i].len, (const uint8_t *)v.sb.data, v.sb.size);
    mp_buf_free(&v);
    note(m, "%s(%" PRIu64 ") ", which ? "type" : "version", val);
}

static void mut_append(fz_mut *m, rng *r, const fz_item *it, int n)
{
    int k = 1 + (int)below(r, 3);
    mp_buf v;

    if (n == 0 || it[0].kind != MP_ARRAY) {
        mut_bytes(m, r);
        return;
    }
    mp_buf_init(&v);
    for (int i = 0; i < k; i++)
        other_value(r, &v);
    if (v.oom)
        die_oom();
    add(&m->b, v.sb.data, v.sb.size);
    mp_buf_free(&v);
    set_count(m, it, 0, (uint64_t)it[0].count + (uint64_t)k);
    note(m, "append(%d fields) ", k);
}

/* An item of another seed (donor) takes the place of one of this frame's. */
static void mut_splice(fz_mut *m, rng *r, const fz_item *it, int n, const sx_bytes *donor)
{
    fz_item dit[MAX_ITEMS];
    int dn = walk(donor->p, donor->n, dit), i = pick(r, it, n, 0), j;

    j = dn ? pick(r, dit, dn, 0) : -1;
    if (i < 0 || j < 0) {
        mut_bytes(m, r);
        return;
    }
    splice_in(&m->b, it[i].off, it[i].len, donor->p + dit[j].off, dit[j].len);
    note(m, "splice(item %d <- donor item %d) ", i, j);
}

/* Applies 1 to 4 mutations to m->b. */
static void mutate(fz_mut *m, rng *r, const sx_bytes *donor)
{
    int ops = below(r, 10) < 6 ? 1 : below(r, 5) < 3 ? 2 : 3 + (int)below(r, 2);
    fz_item *it = xcalloc(MAX_ITEMS, sizeof *it);

    for (int o = 0; o < ops; o++) {
        int n = walk(m->b.p, m->b.n, it);
        uint64_t k = below(r, 100);

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
static sx_bytes multi_of(const sx_bytes *const *f, int n)
{
    sx_buf *v = xcalloc((size_t)n, sizeof *v);
    msg_MULTI_req rq;
    sx_bytes out;

    for (int i = 0; i < n; i++)
        v[i] = (sx_buf){ f[i]->p, f[i]->n };
    memset(&rq, 0, sizeof rq);
    rq.frames = (sx_bufs){ (uint32_t)n, v };
    out = encode_req(MSG_MULTI, &rq);
    free(v);
    return out;
}

/* Wraps m->b in a MULTI in one of several ways (valid neighbours, a nested
 * MULTI, the wrapper itself mutated, the mutant repeated). */
static void wrap_multi(fz_mut *m, rng *r, const sx_bytes *valid, const sx_bytes *ping)
{
    sx_bytes inner = m->b, nested = { 0 }, out;
    const sx_bytes *f[6];
    uint64_t how = below(r, 5);
    int n = 0;

    switch (how) {
    case 0: f[n++] = &inner; break;
    case 1: f[n++] = valid; f[n++] = &inner; f[n++] = ping; break;
    case 2: {
        const sx_bytes *pf[1] = { ping };
        nested = multi_of(pf, 1);
        f[n++] = &inner;
        f[n++] = &nested;
        break;
    }
    case 3: f[n++] = &inner; break;
    default:
        for (int k = 2 + (int)below(r, 3); n < k;)
            f[n++] = &inner;
        break;
    }
    out = multi_of(f, n);
    bytes_free(&nested);
    bytes_free(&inner);
    m->b = out;
    note(m, "| in MULTI(%s) ", how == 0 ? "alone" : how == 1 ? "between valid frames"
         : how == 2 ? "beside a nested MULTI" : how == 3 ? "then mutated" : "repeated");
    if (how == 3)
        mutate(m, r, valid);
}

/* ---- transports ---------------------------------------------------------------- */

typedef enum { R_REPLY, R_TIMEOUT, R_BROKEN } fz_outcome;

typedef struct fz_conn {
    const char *url;
    bool link;
    nng_socket sock;      /* REQ/REP (router) */
    bool open;
    int fd;               /* link */
    uint64_t next_id;
    int timeout_ms;
} fz_conn;

static int tcp_connect(const char *url)
{
    char host[64];
    unsigned port;
    struct sockaddr_in sa;
    int fd, one = 1;

    if (sscanf(url, "tcp://%63[^:]:%u", host, &port) != 2 || port > 65535)
        return -1;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return -1;
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void conn_close(fz_conn *c)
{
    if (c->link && c->fd >= 0)
        close(c->fd);
    if (!c->link && c->open)
        nng_close(c->sock);
    c->fd = -1;
    c->open = false;
}

/* (Re)connects c. Returns 0 or -1. */
static int conn_open(fz_conn *c)
{
    conn_close(c);
    if (c->link) {
        c->fd = tcp_connect(c->url);
        return c->fd >= 0 ? 0 : -1;
    }
    if (nng_req0_open(&c->sock) != 0)
        return -1;
    c->open = true;
    nng_socket_set_ms(c->sock, NNG_OPT_RECVTIMEO, c->timeout_ms);
    nng_socket_set_ms(c->sock, NNG_OPT_SENDTIMEO, c->timeout_ms);
    nng_socket_set_ms(c->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, 64u * 1024u * 1024u);
    if (nng_dial(c->sock, c->url, NULL, 0) != 0) {
        conn_close(c);
        return -1;
    }
    return 0;
}

/* Reads exactly n bytes by deadline; 0, or -1 (closed or error), -2 (time). */
static int read_by(int fd, uint8_t *p, size_t n, uint64_t deadline)
{
    while (n) {
        uint64_t now = now_ms();
        struct pollfd pf = { fd, POLLIN, 0 };
        ssize_t got;

        if (now >= deadline)
            return -2;
        if (poll(&pf, 1, (int)(deadline - now)) <= 0)
            continue;
        got = recv(fd, p, n, 0);
        if (got <= 0)
            return -1;
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

static fz_outcome link_call(fz_conn *c, const uint8_t *p, size_t n, sx_bytes *reply)
{
    uint8_t hdr[12];
    uint64_t id = ++c->next_id, deadline = now_ms() + (uint64_t)c->timeout_ms;

    be_put(hdr, 8 + (uint64_t)n, 4);
    be_put(hdr + 4, id, 8);
    if (send(c->fd, hdr, sizeof hdr, MSG_NOSIGNAL) != (ssize_t)sizeof hdr)
        return R_BROKEN;
    for (size_t off = 0; off < n;) {
        ssize_t w = send(c->fd, p + off, n - off, MSG_NOSIGNAL);
        if (w <= 0)
            return R_BROKEN;
        off += (size_t)w;
    }
    for (;;) {      /* late replies of earlier (timed out) calls are skipped */
        uint64_t len, rid;
        int rc = read_by(c->fd, hdr, sizeof hdr, deadline);

        if (rc)
            return rc == -2 ? R_TIMEOUT : R_BROKEN;
        len = 0;
        for (int i = 0; i < 4; i++)
            len = len << 8 | hdr[i];
        rid = 0;
        for (int i = 4; i < 12; i++)
            rid = rid << 8 | hdr[i];
        if (len < 8 || len > 8 + 64u * 1024u * 1024u)
            return R_BROKEN;
        reply->n = 0;
        if (reply->cap < len - 8) {
            uint8_t *q = realloc(reply->p, len - 8);
            if (q == NULL)
                die_oom();
            reply->p = q;
            reply->cap = len - 8;
        }
        rc = read_by(c->fd, reply->p, len - 8, deadline);
        if (rc)
            return rc == -2 ? R_TIMEOUT : R_BROKEN;
        reply->n = len - 8;
        if (rid == id)
            return R_REPLY;
    }
}

/* Sends frame p..n on c and waits for its reply (into *reply). */
static fz_outcome conn_call(fz_conn *c, const uint8_t *p, size_t n, sx_bytes *reply)
{
    void *buf = NULL;
    size_t sz = 0;
    int rv;

    if ((c->link ? c->fd < 0 : !c->open) && conn_open(c) != 0)
        return R_BROKEN;
    if (c->link)
        return link_call(c, p, n, reply);
    rv = nng_send(c->sock, (void *)p, n, 0);
    if (rv == 0)
        rv = nng_recv(c->sock, &buf, &sz, NNG_FLAG_ALLOC);
    if (rv != 0)
        return rv == NNG_ETIMEDOUT ? R_TIMEOUT : R_BROKEN;
    reply->n = 0;
    add(reply, buf, sz);
    nng_free(buf, sz);
    return R_REPLY;
}

/* ---- judging a reply --------------------------------------------------------------- */

/* Checks that rp..pn is a well-formed answer to request rq..rn: an error
 * reply with a known code and a message, or a success reply of the
 * request's type that decodes as its reply (a MULTI's inner replies each
 * checked against their request). Sets *err (0 for success). Returns 0, or
 * -1 with the reason in why. */
static int check_reply(const uint8_t *rq, size_t rn, const uint8_t *rp, size_t pn, int depth,
                       uint64_t *err, char *why, size_t wl)
{
    mp_cur c = mp_cur_make(rp, pn);
    uint32_t count;
    uint64_t ver, type;
    msg_type t;
    int is_reply, rc;
    union { max_align_t a; char b[1024]; } u;

    if (mp_read_array(&c, &count) || count < 3 || mp_read_u64(&c, &ver) || ver != 1 ||
        mp_read_u64(&c, &type) || !(type & MSG_REPLY) || mp_read_u64(&c, err)) {
        snprintf(why, wl, "the reply is not a reply frame [1, type|0x80, err, ...]");
        return -1;
    }
    if (*err != 0) {
        sx_buf msg;
        if (*err >= SX__ERR_LIMIT) {
            snprintf(why, wl, "error reply with unknown code %" PRIu64, *err);
            return -1;
        }
        if (count < 4 || mp_read_str(&c, &msg) != 0) {
            snprintf(why, wl, "error reply %" PRIu64 " without a message", *err);
            return -1;
        }
        /* typed as the request, or (when its type cannot be told) as PING,
         * or as MULTI (an inner frame of one, or the MULTI itself) */
        type &= ~(uint64_t)MSG_REPLY;
        if (msg_peek(rq, rn, &t, &is_reply) == 0 && !is_reply && type != (uint64_t)t &&
            type != MSG_PING && type != MSG_MULTI) {
            snprintf(why, wl, "an error reply typed %" PRIu64 " to a %s request", type,
                     msg_name(t));
            return -1;
        }
        return 0;
    }
    if (msg_peek(rq, rn, &t, &is_reply) != 0 || is_reply) {
        snprintf(why, wl, "a success reply (type 0x%" PRIx64 ") to a frame that is not a "
                 "request", type);
        return -1;
    }
    if ((type & ~(uint64_t)MSG_REPLY) != (uint64_t)t) {
        snprintf(why, wl, "a success reply of type %" PRIu64 " to a %s request",
                 type & ~(uint64_t)MSG_REPLY, msg_name(t));
        return -1;
    }
    if (t == MSG_MULTI && depth == 0) {
        msg_MULTI_req mq;
        msg_MULTI_rep mr;
        int bad = 0;

        if (msg_decode_req(MSG_MULTI, rq, rn, &mq) != 0) {
            msg_free_req(MSG_MULTI, &mq);
            snprintf(why, wl, "a success reply to a MULTI that does not decode");
            return -1;
        }
        rc = msg_decode_rep(MSG_MULTI, rp, pn, &mr, NULL, 0);
        if (rc != 0 || mr.frames.n != mq.frames.n) {
            snprintf(why, wl, "MULTI reply: %s (%u replies to %u requests)",
                     rc ? sx_strerror(rc) : "wrong count", mr.frames.n, mq.frames.n);
            bad = 1;
        }
        for (uint32_t i = 0; !bad && i < mq.frames.n; i++) {
            uint64_t ie;
            char iw[200];
            if (check_reply(mq.frames.v[i].p, mq.frames.v[i].n, mr.frames.v[i].p,
                            mr.frames.v[i].n, depth + 1, &ie, iw, sizeof iw) != 0) {
                snprintf(why, wl, "MULTI inner frame %u: %s", i, iw);
                bad = 1;
            }
        }
        msg_free_req(MSG_MULTI, &mq);
        msg_free_rep(MSG_MULTI, &mr);
        return bad ? -1 : 0;
    }
    if (t == MSG_MULTI) {
        snprintf(why, wl, "a nested MULTI was answered with success");
        return -1;
    }
    rc = msg_decode_rep(t, rp, pn, &u, NULL, 0);
    msg_free_rep(t, &u);
    if (rc != 0) {
        snprintf(why, wl, "the success reply does not decode as a %s reply: %s", msg_name(t),
                 sx_strerror(rc));
        return -1;
    }
    return 0;
}

/* ---- the cluster as the fuzzer sees it ------------------------------------------------ */

typedef struct fz_wm { uint64_t part, source, wm; } fz_wm;

typedef struct fz_ctx {
    sx_config *cfg;
    sx_catalog *cat;
    const cat_table *rt;          /* --read: real data, read only */
    const cat_index *rix;         /* its first index */
    const cat_table *wt;          /* --write: the throwaway table */
    const cat_index *wix;         /* its first index, or NULL */
    char **protect;               /* tables at the start other than wt */
    int nprotect;
    uint32_t *pix;                /* their index ids */
    int npix;
    fz_wm *wms;                   /* index partitions' watermarks at the start */
    int nwms;
    sx_bytes items[8];            /* items of the read table */
    int nitems;
    sx_bytes qtoken, stoken;      /* real continuation tokens */
    uint64_t seed;
    int count, timeout_ms, verbose;
    const char *only;
} fz_ctx;

static bool protected_table(const fz_ctx *x, sx_buf name)
{
    for (int i = 0; i < x->nprotect; i++)
        if (sx_buf_eq_cstr(name, x->protect[i]))
            return true;
    return false;
}

static bool protected_index(const fz_ctx *x, uint64_t id)
{
    for (int i = 0; i < x->npix; i++)
        if (x->pix[i] == id)
            return true;
    return false;
}

static uint64_t wm_at_start(const fz_ctx *x, uint64_t part, uint64_t source)
{
    for (int i = 0; i < x->nwms; i++)
        if (x->wms[i].part == part && x->wms[i].source == source)
            return x->wms[i].wm;
    return 0;
}

/* Whether request p..n, decoded as its server will, could change anything
 * but the throwaway table (see the header comment). */
static bool unsafe(const fz_ctx *x, const uint8_t *p, size_t n, int depth)
{
    union {
        msg_MULTI_req mu; msg_PUT_req put; msg_DELETE_req del; msg_INDEX_CREATE_req ic;
        msg_INDEX_DROP_req id; msg_S_WRITE_req sw; msg_CAT_UPDATE_req cu;
        msg_CAT_BACKFILLED_req cb; msg_I_APPLY_req ia; msg_I_BUILD_req ib;
    } u;
    msg_type t;
    int is_reply;
    bool bad = false;

    memset(&u, 0, sizeof u);
    if (msg_peek(p, n, &t, &is_reply) != 0 || is_reply)
        return false;
    switch (t) {
    case MSG_MULTI:
        if (depth == 0 && msg_decode_req(t, p, n, &u) == 0)
            for (uint32_t i = 0; i < u.mu.frames.n && !bad; i++)
                bad = unsafe(x, u.mu.frames.v[i].p, u.mu.frames.v[i].n, depth + 1);
        break;
    case MSG_PUT:
        bad = msg_decode_req(t, p, n, &u) == 0 && protected_table(x, u.put.table);
        break;
    case MSG_DELETE:
        bad = msg_decode_req(t, p, n, &u) == 0 && protected_table(x, u.del.table);
        break;
    case MSG_INDEX_CREATE:
        bad = msg_decode_req(t, p, n, &u) == 0 && protected_table(x, u.ic.table);
        break;
    case MSG_INDEX_DROP:
        bad = msg_decode_req(t, p, n, &u) == 0 && protected_table(x, u.id.table);
        break;
    case MSG_CAT_UPDATE:
        bad = msg_decode_req(t, p, n, &u) == 0 && protected_table(x, u.cu.table);
        break;
    case MSG_S_WRITE:
        bad = msg_decode_req(t, p, n, &u) == 0 && u.sw.table_id != x->wt->id;
        break;
    case MSG_CAT_BACKFILLED:
        bad = msg_decode_req(t, p, n, &u) == 0 && protected_index(x, u.cb.index_id);
        break;
    case MSG_I_APPLY:
        bad = msg_decode_req(t, p, n, &u) == 0 &&
              (u.ia.upto > wm_at_start(x, u.ia.part, u.ia.source) || u.ia.hw > HW_SANE);
        break;
    case MSG_I_BUILD:
        if (msg_decode_req(t, p, n, &u) == 0)
            for (uint32_t i = 0; i < u.ib.keys.n && !bad; i++)
                bad = u.ib.keys.v[i].n < 4 ||
                      protected_index(x, sx_get_be32(u.ib.keys.v[i].p));
        break;
    default:
        return false;
    }
    msg_free_req(t, &u);        /* safe on the zeroed union, decoded or not */
    return bad;
}

/* ---- per port: seeds, statistics, the run ----------------------------------------------- */

typedef struct fz_seed {
    char name[40];
    sx_bytes frame;
    int weight;                   /* percent of --count mutants */
    uint64_t sent, ok, err, withheld, noreply, bad;
} fz_seed;

typedef struct fz_port {
    int idx;
    const cfg_node *node;
    fz_conn conn;
    fz_seed seeds[MAX_SEEDS];
    int nseeds;
    sx_bytes ping;
    int failures;
    bool gave_up;
    uint64_t ms;
    /* the first failing case */
    bool failed;
    char fseed[40], fdesc[512], fwhy[300];
    int fmut;
    uint64_t fcase;
    sx_bytes fframe;
    const fz_ctx *x;
} fz_port;

static fz_seed *seed_add(fz_port *pt, const char *name, sx_bytes frame, int weight)
{
    fz_seed *s;

    if (pt->nseeds >= MAX_SEEDS) {
        fprintf(stderr, "sx-fuzzframe: too many seeds (programming error)\n");
        exit(2);
    }
    s = &pt->seeds[pt->nseeds++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->frame = frame;
    s->weight = weight;
    return s;
}

static sx_bytes ping_frame(void)
{
    msg_PING_req rq;

    memset(&rq, 0, sizeof rq);
    return encode_req(MSG_PING, &rq);
}

static sx_buf cbuf(const char *s)
{
    return (sx_buf){ (const uint8_t *)s, strlen(s) };
}

static sx_buf bbuf(const sx_bytes *b)
{
    return (sx_buf){ b->p, b->n };
}

/* An item of the throwaway table: key kv, a little of every value type. */
static sx_bytes scratch_item(const fz_ctx *x, int64_t kv, const char *town)
{
    mp_buf m;

    mp_buf_init(&m);
    mp_put_map(&m, 7);
    mp_put_cstr(&m, x->wt->pk);
    mp_put_i64(&m, kv);
    mp_put_cstr(&m, "town");
    mp_put_cstr(&m, town);
    mp_put_cstr(&m, "lastname");
    mp_put_cstr(&m, "Fuzz");
    mp_put_cstr(&m, "score");
    mp_put_double(&m, -2.5);
    mp_put_cstr(&m, "tags");
    mp_put_array(&m, 2);
    mp_put_cstr(&m, "a");
    mp_put_nil(&m);
    mp_put_cstr(&m, "blob");
    mp_put_bin(&m, "\x00\xff\x01", 3);
    mp_put_cstr(&m, "ok");
    mp_put_bool(&m, true);
    return take_buf(&m);
}

/* The key map (only the key attributes) of item it of table t. */
static sx_bytes key_of(const cat_table *t, const sx_bytes *it)
{
    mp_buf m;

    mp_buf_init(&m);
    if (item_select(t, it->p, it->n, NULL, 0, &m) != 0)
        die_oom();
    return take_buf(&m);
}

/* h | pk of item it of table t (a fact-local key) and its shard hash. */
static sx_bytes fact_key(const fz_ctx *x, const cat_table *t, const sx_bytes *it, uint64_t *h)
{
    sx_bytes pk = { 0 }, k = { 0 };
    size_t pkl;
    uint8_t hb[8];

    if (item_primary_key(t, it->p, it->n, &pk, &pkl) != 0) {
        fprintf(stderr, "sx-fuzzframe: an item without a valid key\n");
        exit(2);
    }
    *h = sx_shard_hash(x->cfg->hash_key, pk.p, pkl);
    sx_put_be64(hb, *h);
    add(&k, hb, 8);
    add(&k, pk.p, pk.n);
    bytes_free(&pk);
    return k;
}

/* Value of attribute a of item it (raw msgpack), or nil. */
static sx_buf attr_of(const sx_bytes *it, const char *a)
{
    static const uint8_t nil = 0xc0;
    sx_buf v;

    if (item_get(it->p, it->n, a, &v) != 0)
        return (sx_buf){ &nil, 1 };
    return v;
}

/* A one-element msgpack array holding raw value v. */
static sx_bytes array1(sx_buf v)
{
    mp_buf m;

    mp_buf_init(&m);
    mp_put_array(&m, 1);
    mp_put_raw(&m, v.p, v.n);
    return take_buf(&m);
}

static sx_bytes map1(const char *k, sx_buf v)
{
    mp_buf m;

    mp_buf_init(&m);
    mp_put_map(&m, 1);
    mp_put_cstr(&m, k);
    mp_put_raw(&m, v.p, v.n);
    return take_buf(&m);
}

static void router_seeds(const fz_ctx *x, fz_port *pt)
{
    const sx_bytes *it0 = &x->items[0], *it1 = &x->items[x->nitems > 1 ? 1 : 0];
    sx_bytes rkey = key_of(x->rt, it0), s1 = scratch_item(x, 1, "Redmond"),
             s2 = scratch_item(x, 2, "Zurich"), wkey;
    sx_buf town = attr_of(it0, x->rix->attrs[0]);
    sx_bytes eq = array1(town), where = map1(x->rix->attrs[0], town),
             peq = array1(attr_of(it1, x->rt->pk));
    sx_buf items[2] = { bbuf(&s1), bbuf(&s2) }, a2[2] = { cbuf("town"), cbuf("lastname") };
    sx_buf pa[1] = { cbuf("email") }, rattrs[2];
    static const uint8_t empty_arr = 0x90, nil = 0xc0;
    const char *rix = x->rix->name;

    wkey = key_of(x->wt, &s2);
    rattrs[0] = cbuf(x->rix->attrs[0]);
    rattrs[1] = cbuf(x->rt->pk);
    seed_add(pt, "PING", ping_frame(), 50);
    {
        msg_TABLE_CREATE_req r = { .table = cbuf("fzt_a"), .pk = cbuf("id"), .sk = cbuf("") };
        seed_add(pt, "TABLE_CREATE", encode_req(MSG_TABLE_CREATE, &r), 50);
        r.table = cbuf("fzt_b");
        r.sk = cbuf("ts");
        seed_add(pt, "TABLE_CREATE/sk", encode_req(MSG_TABLE_CREATE, &r), 50);
    }
    {
        msg_INDEX_CREATE_req r = { .table = cbuf(x->wt->name), .index = cbuf("fzi_a"),
                                   .attrs = { 2, a2 }, .proj = CAT_PROJ_LIST,
                                   .proj_attrs = { 1, pa } };
        seed_add(pt, "INDEX_CREATE", encode_req(MSG_INDEX_CREATE, &r), 50);
    }
    {
        msg_INDEX_DROP_req r = { .table = cbuf(x->wt->name), .index = cbuf("fzi_a") };
        seed_add(pt, "INDEX_DROP", encode_req(MSG_INDEX_DROP, &r), 30);
    }
    {
        msg_INDEX_LIST_req r = { .table = cbuf(x->rt->name) };
        seed_add(pt, "INDEX_LIST", encode_req(MSG_INDEX_LIST, &r), 50);
    }
    {
        msg_PUT_req r = { .table = cbuf(x->wt->name), .items = { 2, items } };
        seed_add(pt, "PUT", encode_req(MSG_PUT, &r), 100);
    }
    {
        msg_GET_req r = { .table = cbuf(x->rt->name), .key = bbuf(&rkey) };
        seed_add(pt, "GET", encode_req(MSG_GET, &r), 100);
        r.table = cbuf(x->wt->name);
        r.key = bbuf(&wkey);
        seed_add(pt, "GET/write table", encode_req(MSG_GET, &r), 40);
    }
    {
        msg_DELETE_req r = { .table = cbuf(x->wt->name), .key = bbuf(&wkey) };
        seed_add(pt, "DELETE", encode_req(MSG_DELETE, &r), 100);
    }
    {
        msg_QUERY_req r = { .table = cbuf(x->rt->name), .index = cbuf(rix),
                            .eq = bbuf(&eq), .cond = Q_COND_PREFIX, .from = { &nil, 1 },
                            .to = { &nil, 1 }, .prefix = cbuf("S"), .limit = 10,
                            .attrs = { 2, rattrs }, .consistency = Q_VERIFIED };
        seed_add(pt, "QUERY/prefix", encode_req(MSG_QUERY, &r), 100);
        r.cond = Q_COND_RANGE;
        r.prefix = cbuf("");
        r.eq = (sx_buf){ &empty_arr, 1 };
        r.from = town;
        r.to = (sx_buf){ (const uint8_t *)"\xa1z", 2 };
        r.attrs.n = 0;
        r.desc = 1;
        r.consistency = Q_EVENTUAL;
        seed_add(pt, "QUERY/range", encode_req(MSG_QUERY, &r), 100);
        r.cond = Q_COND_NONE;
        r.from = r.to = (sx_buf){ &nil, 1 };
        r.eq = bbuf(&eq);
        r.desc = 0;
        r.consistency = Q_STRONG;
        r.timeout_ms = 3000;
        seed_add(pt, "QUERY/strong", encode_req(MSG_QUERY, &r), 100);
        r.eq = (sx_buf){ &empty_arr, 1 };
        r.consistency = Q_EVENTUAL;
        r.timeout_ms = 0;
        r.limit = 1;
        r.token = bbuf(&x->qtoken);
        seed_add(pt, "QUERY/token", encode_req(MSG_QUERY, &r), 100);
        r.index = cbuf("primary");
        r.token = (sx_buf){ NULL, 0 };
        r.eq = bbuf(&peq);
        r.limit = 5;
        seed_add(pt, "QUERY/primary", encode_req(MSG_QUERY, &r), 60);
    }
    {
        msg_SCAN_req r = { .table = cbuf(x->rt->name), .where = bbuf(&where), .limit = 5 };
        seed_add(pt, "SCAN", encode_req(MSG_SCAN, &r), 100);
        r.where = (sx_buf){ &nil, 1 };
        r.limit = 2;
        r.token = bbuf(&x->stoken);
        seed_add(pt, "SCAN/token", encode_req(MSG_SCAN, &r), 100);
    }
    {
        msg_STATUS_req r;
        memset(&r, 0, sizeof r);
        seed_add(pt, "STATUS", encode_req(MSG_STATUS, &r), 30);
    }
    {
        msg_CATALOG_req r;
        memset(&r, 0, sizeof r);
        seed_add(pt, "CATALOG", encode_req(MSG_CATALOG, &r), 40);
    }
    bytes_free(&rkey);
    bytes_free(&wkey);
    bytes_free(&s1);
    bytes_free(&s2);
    bytes_free(&eq);
    bytes_free(&peq);
    bytes_free(&where);
}

/* Items of the throwaway table whose hash falls in partition cp: n of them,
 * keys from *next on. */
static void scratch_in_part(const fz_ctx *x, const cfg_part *cp, sx_bytes *out, int n,
                            int64_t *next)
{
    for (int k = 0; k < n;) {
        sx_bytes it = scratch_item(x, (*next)++, k ? "Zurich" : "Redmond"), fk;
        uint64_t h;

        fk = fact_key(x, x->wt, &it, &h);
        bytes_free(&fk);
        if (h >= cp->hlo && h <= cp->hhi)
            out[k++] = it;
        else
            bytes_free(&it);
    }
}

static void storage_seeds(const fz_ctx *x, fz_port *pt)
{
    const cfg_part *cp = NULL;
    sx_bytes wi[2], dk, keys[8];
    sx_buf objs[2], kb[8];
    uint64_t dels[2] = { 0, 0 }, one = 1, h;
    int64_t next = 1000 + 1000 * pt->idx;
    uint32_t nk = 0;
    static const uint8_t nil = 0xc0;
    sx_bytes where = map1(x->rix->attrs[0], attr_of(&x->items[0], x->rix->attrs[0]));

    for (int i = 0; i < x->cfg->nstorage; i++)
        if (&x->cfg->nodes[x->cfg->storage[i].node] == pt->node) {
            cp = &x->cfg->storage[i];
            break;
        }
    if (cp == NULL) {
        fprintf(stderr, "sx-fuzzframe: storage node %s has no partition\n", pt->node->name);
        exit(2);
    }
    scratch_in_part(x, cp, wi, 2, &next);
    for (int i = 0; i < x->nitems && nk < 8; i++) {
        sx_bytes k = fact_key(x, x->rt, &x->items[i], &h);
        if (h >= cp->hlo && h <= cp->hhi) {
            keys[nk] = k;
            kb[nk] = bbuf(&keys[nk]);
            nk++;
        } else {
            bytes_free(&k);
        }
    }
    seed_add(pt, "PING", ping_frame(), 40);
    objs[0] = bbuf(&wi[0]);
    objs[1] = bbuf(&wi[1]);
    {
        msg_S_WRITE_req r = { .part = cp->id, .catver = x->cat->version,
                              .table_id = x->wt->id, .dels = { 2, dels },
                              .objs = { 2, objs } };
        seed_add(pt, "S_WRITE", encode_req(MSG_S_WRITE, &r), 100);
        dk = key_of(x->wt, &wi[1]);
        objs[0] = bbuf(&dk);
        r.dels = (sx_u64s){ 1, &one };
        r.objs = (sx_bufs){ 1, objs };
        seed_add(pt, "S_WRITE/delete", encode_req(MSG_S_WRITE, &r), 60);
    }
    {
        msg_S_GET_req r = { .part = cp->id, .table_id = x->rt->id, .keys = { nk, kb } };
        seed_add(pt, "S_GET", encode_req(MSG_S_GET, &r), 100);
    }
    {
        msg_S_RANGE_req r = { .part = cp->id, .table_id = x->rt->id, .limit = 10,
                              .where = bbuf(&where) };
        seed_add(pt, "S_RANGE", encode_req(MSG_S_RANGE, &r), 100);
        if (nk > 0)
            r.lo = kb[0];
        r.desc = 1;
        r.limit = 3;
        r.where = (sx_buf){ &nil, 1 };
        seed_add(pt, "S_RANGE/desc", encode_req(MSG_S_RANGE, &r), 60);
    }
    {
        msg_S_HEADS_req r;
        memset(&r, 0, sizeof r);
        seed_add(pt, "S_HEADS", encode_req(MSG_S_HEADS, &r), 40);
    }
    {
        msg_NODE_STATUS_req r;
        memset(&r, 0, sizeof r);
        seed_add(pt, "NODE_STATUS", encode_req(MSG_NODE_STATUS, &r), 30);
    }
    {
        msg_CATALOG_req r;
        memset(&r, 0, sizeof r);
        seed_add(pt, "CATALOG", encode_req(MSG_CATALOG, &r), 30);
    }
    {   /* served by the catalog node only; elsewhere an error */
        sx_buf a1[1] = { cbuf("town") };
        msg_CAT_UPDATE_req r = { .op = CATOP_CREATE_TABLE, .table = cbuf("fzc_a"),
                                 .index = cbuf(""), .pk = cbuf("id"), .sk = cbuf("") };
        seed_add(pt, "CAT_UPDATE/table", encode_req(MSG_CAT_UPDATE, &r), 40);
        r.op = CATOP_CREATE_INDEX;
        r.table = cbuf(x->wt->name);
        r.index = cbuf("fzc_i");
        r.pk = r.sk = cbuf("");
        r.attrs = (sx_bufs){ 1, a1 };
        r.proj = CAT_PROJ_ALL;
        seed_add(pt, "CAT_UPDATE/index", encode_req(MSG_CAT_UPDATE, &r), 40);
        r.op = CATOP_DROP_INDEX;
        r.attrs.n = 0;
        r.proj = 0;
        seed_add(pt, "CAT_UPDATE/drop", encode_req(MSG_CAT_UPDATE, &r), 30);
    }
    {
        msg_CAT_BACKFILLED_req r = { .index_id = x->wix ? x->wix->id : FAKE_INDEX,
                                     .part = cp->id };
        seed_add(pt, "CAT_BACKFILLED", encode_req(MSG_CAT_BACKFILLED, &r), 40);
    }
    for (uint32_t i = 0; i < nk; i++)
        bytes_free(&keys[i]);
    bytes_free(&wi[0]);
    bytes_free(&wi[1]);
    bytes_free(&dk);
    bytes_free(&where);
}

/* An index-local key of index id whose tuple (a string, then an int
 * primary key) falls in index partition cp. */
static sx_bytes index_key(const fz_ctx *x, const cfg_part *cp, uint32_t id, int64_t pk)
{
    static const char *const cands[] = { "Chicago", "Redmond", "0", "A", "M", "Z", "a",
                                         "m", "z", "\x7f" };
    for (size_t i = 0; i < sizeof cands / sizeof cands[0]; i++) {
        sx_bytes k = { 0 };
        uint8_t idb[4];

        sx_put_be32(idb, id);
        add(&k, idb, 4);
        if (tup_encode_str(&k, cands[i], strlen(cands[i])) != 0 ||
            tup_encode_int(&k, pk) != 0)
            die_oom();
        if (cfg_index_for(x->cfg, k.p + 4, k.n - 4) == cp)
            return k;
        bytes_free(&k);
    }
    fprintf(stderr, "sx-fuzzframe: no test value falls in index partition %" PRIu64 "\n",
            cp->id);
    exit(2);
}

static void index_seeds(const fz_ctx *x, fz_port *pt)
{
    const cfg_part *cp = NULL;
    sx_bytes k1, k2, lo, hi = { 0 }, ilo, ihi;
    uint8_t idb[4];
    uint64_t src = x->cfg->storage[0].id, upto = 0, seqs[2], kinds[2] = { 0, 1 },
             vers[2] = { 7, 8 }, hashes[2] = { 42, 43 };
    static const uint8_t nil = 0xc0, fixmap_proj[] = { 0x81, 0xa1, 'x', 0x01 };
    sx_buf keys[2], projs[2] = { { fixmap_proj, sizeof fixmap_proj }, { &nil, 1 } };

    for (int i = 0; i < x->cfg->nindex; i++)
        if (&x->cfg->nodes[x->cfg->index[i].node] == pt->node) {
            cp = &x->cfg->index[i];
            break;
        }
    if (cp == NULL) {
        fprintf(stderr, "sx-fuzzframe: index node %s has no partition\n", pt->node->name);
        exit(2);
    }
    for (int i = 0; i < x->cfg->nstorage; i++)   /* the source furthest along */
        if (wm_at_start(x, cp->id, x->cfg->storage[i].id) > upto) {
            upto = wm_at_start(x, cp->id, x->cfg->storage[i].id);
            src = x->cfg->storage[i].id;
        }
    seqs[0] = upto > 1 ? upto - 1 : 0;
    seqs[1] = upto;
    k1 = index_key(x, cp, FAKE_INDEX, 1);
    k2 = index_key(x, cp, x->wix ? x->wix->id : FAKE_INDEX, 2);
    keys[0] = bbuf(&k1);
    keys[1] = bbuf(&k2);
    /* the read index, from a value in this partition to the end of it */
    lo = index_key(x, cp, x->rix->id, 0);
    lo.n -= 9;                               /* drop the int pk component */
    sx_put_be32(idb, x->rix->id + 1);
    add(&hi, idb, 4);
    ilo = (sx_bytes){ 0 };
    ihi = (sx_bytes){ 0 };
    sx_put_be32(idb, x->rix->id);
    add(&ilo, idb, 4);

    seed_add(pt, "PING", ping_frame(), 40);
    {
        msg_NODE_STATUS_req r;
        memset(&r, 0, sizeof r);
        seed_add(pt, "NODE_STATUS", encode_req(MSG_NODE_STATUS, &r), 30);
    }
    {
        msg_I_WATERMARKS_req r = { .part = cp->id };
        seed_add(pt, "I_WATERMARKS", encode_req(MSG_I_WATERMARKS, &r), 60);
    }
    {
        msg_I_RANGE_req r = { .part = cp->id, .lo = bbuf(&lo), .hi = bbuf(&hi), .limit = 10 };
        seed_add(pt, "I_RANGE", encode_req(MSG_I_RANGE, &r), 100);
        r.lo = bbuf(&ilo);
        r.hi = bbuf(&ihi);
        r.desc = 1;
        r.limit = 0;
        seed_add(pt, "I_RANGE/desc", encode_req(MSG_I_RANGE, &r), 60);
    }
    {   /* records at or below the watermark: redeliveries, nothing moves */
        msg_I_APPLY_req r = { .part = cp->id, .source = src, .upto = upto, .hw = 0,
                              .seqs = { upto > 1 ? 2 : 0, seqs }, .kinds = { 2, kinds },
                              .versions = { 2, vers }, .keys = { 2, keys },
                              .hashes = { 2, hashes }, .projs = { 2, projs } };
        if (upto <= 1) {     /* no room for two seqs: no records */
            r.kinds.n = r.versions.n = r.keys.n = r.hashes.n = r.projs.n = 0;
        }
        seed_add(pt, "I_APPLY", encode_req(MSG_I_APPLY, &r), 100);
    }
    {   /* a build's records under a fake index and the throwaway one's (its upto
         * far ahead: a build moves no watermark and is then never refused) */
        uint64_t bk[2] = { 0, 0 };
        msg_I_BUILD_req r = { .part = cp->id, .source = src, .upto = upto + (1u << 20),
                              .kinds = { 2, bk }, .versions = { 2, vers },
                              .keys = { 2, keys }, .hashes = { 2, hashes },
                              .projs = { 2, projs }, .seals = 1 };
        seed_add(pt, "I_BUILD", encode_req(MSG_I_BUILD, &r), 100);
        r.kinds.n = r.versions.n = r.keys.n = r.hashes.n = r.projs.n = 0;
        seed_add(pt, "I_BUILD/seal", encode_req(MSG_I_BUILD, &r), 40);
    }
    bytes_free(&k1);
    bytes_free(&k2);
    bytes_free(&lo);
    bytes_free(&hi);
    bytes_free(&ilo);
    bytes_free(&ihi);
}

/* A MULTI seed of a port: PING and two of its other seeds. */
static void multi_seed(fz_port *pt)
{
    const sx_bytes *f[3] = { &pt->ping, &pt->seeds[pt->nseeds > 2 ? 2 : 0].frame,
                             &pt->seeds[pt->nseeds - 1].frame };

    seed_add(pt, "MULTI", multi_of(f, 3), 100);
}

/* Records a failure of case (seed s, mutant mi, generator cs) of frame f. */
static void failure(fz_port *pt, const fz_seed *s, int mi, uint64_t cs, const fz_mut *m,
                    const char *why)
{
    pt->failures++;
    fprintf(stderr, "FAIL %s (%s): %s mutant %d (case 0x%016" PRIx64 "): %s\n",
            pt->node->name, pt->conn.url, s->name, mi, cs, why);
    if (pt->failed)
        return;
    pt->failed = true;
    snprintf(pt->fseed, sizeof pt->fseed, "%s", s->name);
    snprintf(pt->fdesc, sizeof pt->fdesc, "%s", m->desc);
    snprintf(pt->fwhy, sizeof pt->fwhy, "%s", why);
    pt->fmut = mi;
    pt->fcase = cs;
    add(&pt->fframe, m->b.p, m->b.n);
}

/* PING on the port's connection (reconnecting once if needed). */
static int ping_ok(fz_port *pt, sx_bytes *reply)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        uint64_t err = 1;
        char why[200];

        if (attempt && conn_open(&pt->conn) != 0)
            return -1;
        if (conn_call(&pt->conn, pt->ping.p, pt->ping.n, reply) == R_REPLY &&
            check_reply(pt->ping.p, pt->ping.n, reply->p, reply->n, 0, &err, why,
                        sizeof why) == 0 && err == 0)
            return 0;
    }
    return -1;
}

/* Sends one case and judges it; returns -1 when the port must be given up. */
static int run_case(fz_port *pt, fz_seed *s, int mi, uint64_t cs, fz_mut *m, sx_bytes *reply)
{
    char why[300];
    uint64_t err = 0;
    fz_outcome o;

    if (unsafe(pt->x, m->b.p, m->b.n, 0)) {
        s->withheld++;
        return 0;
    }
    s->sent++;
    o = conn_call(&pt->conn, m->b.p, m->b.n, reply);
    if (o != R_REPLY) {
        s->noreply++;
        snprintf(why, sizeof why, "%s", o == R_TIMEOUT ? "no reply within the timeout"
                 : "the connection broke instead of a reply");
        failure(pt, s, mi, cs, m, why);
        if (o == R_BROKEN)
            conn_open(&pt->conn);
    } else if (check_reply(m->b.p, m->b.n, reply->p, reply->n, 0, &err, why,
                           sizeof why) != 0) {
        s->bad++;
        failure(pt, s, mi, cs, m, why);
    } else if (err) {
        s->err++;
    } else {
        s->ok++;
    }
    if (pt->x->verbose > 1)
        printf("%s %s #%d: %s -> %s %" PRIu64 "\n", pt->node->name, s->name, mi, m->desc,
               o != R_REPLY ? "no reply" : err ? "error" : "ok", err);
    if (ping_ok(pt, reply) != 0) {
        failure(pt, s, mi, cs, m, "the port does not answer PING after this frame");
        return -1;
    }
    return pt->failures >= MAX_PORT_FAILURES ? -1 : 0;
}

static void *port_main(void *arg)
{
    fz_port *pt = arg;
    const fz_ctx *x = pt->x;
    sx_bytes reply = { 0 };
    uint64_t t0 = now_ms();

    if (ping_ok(pt, &reply) != 0) {
        fz_mut m = { .b = { 0 } };
        failure(pt, &pt->seeds[0], -1, 0, &m, "no PING reply at the start");
        pt->gave_up = true;
    }
    for (int si = 0; si < pt->nseeds && !pt->gave_up; si++) {
        fz_seed *s = &pt->seeds[si];
        int n = x->count * s->weight / 100;

        for (int mi = -1; mi < n && !pt->gave_up; mi++) {   /* -1: the seed itself */
            uint64_t cs = case_seed(x->seed, pt->idx, si, mi);
            rng r = { cs };
            fz_mut m = { .b = { 0 } };
            const fz_seed *donor = &pt->seeds[below(&r, (uint64_t)pt->nseeds)];

            add(&m.b, s->frame.p, s->frame.n);
            if (mi >= 0) {
                mutate(&m, &r, &donor->frame);
                if (mi % MULTI_EVERY == MULTI_EVERY - 1 && strcmp(s->name, "MULTI") != 0)
                    wrap_multi(&m, &r, &donor->frame, &pt->ping);
            } else {
                note(&m, "none (the seed)");
            }
            if (run_case(pt, s, mi, cs, &m, &reply) != 0)
                pt->gave_up = true;
            bytes_free(&m.b);
        }
    }
    pt->ms = now_ms() - t0;
    bytes_free(&reply);
    return NULL;
}

/* ---- set-up: what the cluster holds ------------------------------------------------------ */

/* One call to the router or a node for set-up, decoded into rep, whose
 * views borrow from *keep (the reply: the caller frees it after rep);
 * exits when it fails. */
static void setup_call(fz_conn *c, msg_type t, const void *rq, void *rep, sx_bytes *keep)
{
    sx_bytes f = encode_req(t, rq);
    char em[200];
    int rc;

    if (conn_call(c, f.p, f.n, keep) != R_REPLY) {
        fprintf(stderr, "sx-fuzzframe: set-up: no %s reply from %s\n", msg_name(t), c->url);
        exit(2);
    }
    bytes_free(&f);
    rc = msg_decode_rep(t, keep->p, keep->n, rep, em, sizeof em);
    if (rc != 0) {
        fprintf(stderr, "sx-fuzzframe: set-up: %s from %s: %s %s\n", msg_name(t), c->url,
                sx_strerror(rc), em);
        exit(2);
    }
}

static void setup(fz_ctx *x, const char *rname, const char *wname)
{
    const cfg_node *r = NULL;
    fz_conn c = { .fd = -1, .timeout_ms = x->timeout_ms };
    sx_bytes keep = { 0 };

    for (int i = 0; i < x->cfg->nnodes && !r; i++)
        if (x->cfg->nodes[i].role == SX_ROLE_ROUTER)
            r = &x->cfg->nodes[i];
    if (r == NULL) {
        fprintf(stderr, "sx-fuzzframe: the config has no router\n");
        exit(2);
    }
    c.url = r->url;
    {
        msg_CATALOG_req rq;
        msg_CATALOG_rep rep;
        memset(&rq, 0, sizeof rq);
        setup_call(&c, MSG_CATALOG, &rq, &rep, &keep);
        if (cat_decode(rep.catalog.p, rep.catalog.n, &x->cat) != 0) {
            fprintf(stderr, "sx-fuzzframe: set-up: the catalog does not decode\n");
            exit(2);
        }
        msg_free_rep(MSG_CATALOG, &rep);
    }
    x->rt = cat_table_by_name(x->cat, rname, strlen(rname));
    x->wt = cat_table_by_name(x->cat, wname, strlen(wname));
    if (!x->rt || !x->wt || x->rt == x->wt || x->rt->nindexes == 0) {
        fprintf(stderr, "sx-fuzzframe: set-up: need tables %s (with an index) and %s\n",
                rname, wname);
        exit(2);
    }
    x->rix = &x->rt->indexes[0];
    x->wix = x->wt->nindexes ? &x->wt->indexes[0] : NULL;
    x->protect = xcalloc(x->cat->ntables, sizeof *x->protect);
    for (uint32_t i = 0; i < x->cat->ntables; i++) {
        const cat_table *t = &x->cat->tables[i];
        if (t == x->wt)
            continue;
        x->protect[x->nprotect++] = t->name;
        x->npix += (int)t->nindexes;
    }
    x->pix = xcalloc((size_t)x->npix, sizeof *x->pix);
    x->npix = 0;
    for (uint32_t i = 0; i < x->cat->ntables; i++)
        for (uint32_t j = 0; &x->cat->tables[i] != x->wt && j < x->cat->tables[i].nindexes; j++)
            x->pix[x->npix++] = x->cat->tables[i].indexes[j].id;
    {   /* some items, and a scan token */
        static const uint8_t nil = 0xc0;
        msg_SCAN_req rq = { .table = cbuf(rname), .where = { &nil, 1 }, .limit = 8 };
        msg_SCAN_rep rep;
        setup_call(&c, MSG_SCAN, &rq, &rep, &keep);
        for (uint32_t i = 0; i < rep.items.n && x->nitems < 8; i++)
            add(&x->items[x->nitems++], rep.items.v[i].p, rep.items.v[i].n);
        add(&x->stoken, rep.token.p, rep.token.n);
        msg_free_rep(MSG_SCAN, &rep);
        if (x->nitems == 0 || x->stoken.n == 0) {
            fprintf(stderr, "sx-fuzzframe: set-up: %s needs more than 8 items\n", rname);
            exit(2);
        }
    }
    {   /* a query token */
        static const uint8_t nil = 0xc0, empty = 0x90;
        msg_QUERY_req rq = { .table = cbuf(rname), .index = cbuf(x->rix->name),
                             .eq = { &empty, 1 }, .from = { &nil, 1 }, .to = { &nil, 1 },
                             .limit = 1 };
        msg_QUERY_rep rep;
        setup_call(&c, MSG_QUERY, &rq, &rep, &keep);
        add(&x->qtoken, rep.token.p, rep.token.n);
        msg_free_rep(MSG_QUERY, &rep);
    }
    conn_close(&c);
    x->wms = xcalloc((size_t)x->cfg->nindex * (size_t)x->cfg->nstorage + 1, sizeof *x->wms);
    for (int i = 0; i < x->cfg->nindex; i++) {
        const cfg_part *cp = &x->cfg->index[i];
        fz_conn lc = { .url = x->cfg->nodes[cp->node].url, .link = true, .fd = -1,
                       .timeout_ms = x->timeout_ms };
        msg_I_WATERMARKS_req rq = { .part = cp->id };
        msg_I_WATERMARKS_rep rep;

        setup_call(&lc, MSG_I_WATERMARKS, &rq, &rep, &keep);
        for (uint32_t j = 0; j < rep.sources.n && j < rep.wms.n &&
                             x->nwms < x->cfg->nindex * x->cfg->nstorage; j++)
            x->wms[x->nwms++] = (fz_wm){ cp->id, rep.sources.v[j], rep.wms.v[j] };
        msg_free_rep(MSG_I_WATERMARKS, &rep);
        conn_close(&lc);
    }
    bytes_free(&keep);
}

static void ctx_free(fz_ctx *x)
{
    for (int i = 0; i < x->nitems; i++)
        bytes_free(&x->items[i]);
    bytes_free(&x->qtoken);
    bytes_free(&x->stoken);
    free(x->protect);
    free(x->pix);
    free(x->wms);
    cat_free(x->cat);
    cfg_free(x->cfg);
}

/* ---- modes ---------------------------------------------------------------------------------- */

static void print_report(fz_port *ports, int np)
{
    uint64_t tot[6] = { 0 };
    int first = -1;

    printf("%-4s %-18s %7s %7s %7s %9s %8s %5s\n", "port", "seed", "sent", "ok", "error",
           "withheld", "noreply", "bad");
    for (int p = 0; p < np; p++) {
        for (int i = 0; i < ports[p].nseeds; i++) {
            const fz_seed *s = &ports[p].seeds[i];
            printf("%-4s %-18s %7" PRIu64 " %7" PRIu64 " %7" PRIu64 " %9" PRIu64 " %8" PRIu64
                   " %5" PRIu64 "\n", ports[p].node->name, s->name, s->sent, s->ok, s->err,
                   s->withheld, s->noreply, s->bad);
            tot[0] += s->sent;
            tot[1] += s->ok;
            tot[2] += s->err;
            tot[3] += s->withheld;
            tot[4] += s->noreply;
            tot[5] += s->bad;
        }
        printf("%-4s %-18s %.1f s%s\n", ports[p].node->name, "(time)", ports[p].ms / 1000.0,
               ports[p].gave_up ? " (GAVE UP)" : "");
        if (ports[p].failed && first < 0)
            first = p;
    }
    printf("%-23s %7" PRIu64 " %7" PRIu64 " %7" PRIu64 " %9" PRIu64 " %8" PRIu64 " %5" PRIu64
           "\n", "total", tot[0], tot[1], tot[2], tot[3], tot[4], tot[5]);
    if (first >= 0) {
        const fz_port *pt = &ports[first];
        fprintf(stderr, "\nfirst failing case: port %s (%s, %s)\n  seed: %s, mutant %d, case "
                "0x%016" PRIx64 " (--seed 0x%" PRIx64 ")\n  mutation: %s\n  problem: %s\n"
                "  frame (%zu bytes): ", pt->node->name, pt->conn.url,
                pt->conn.link ? "link" : "REQ/REP", pt->fseed, pt->fmut, pt->fcase,
                pt->x->seed, pt->fdesc, pt->fwhy, pt->fframe.n);
        hex_print(stderr, pt->fframe.p, pt->fframe.n);
        fprintf(stderr, "\n  replay: sx-fuzzframe --send %s%s ",
                pt->conn.link ? LINK_PREFIX : "", pt->conn.url);
        hex_print(stderr, pt->fframe.p, pt->fframe.n);
        fprintf(stderr, "\n");
    }
}

/* --send URL HEX: one frame, its reply, then a PING. */
static int send_mode(const char *url, const char *hex, int timeout_ms)
{
    bool link = strncmp(url, LINK_PREFIX, strlen(LINK_PREFIX)) == 0;
    fz_conn c = { .url = link ? url + strlen(LINK_PREFIX) : url, .link = link, .fd = -1,
                  .timeout_ms = timeout_ms };
    sx_bytes f = { 0 }, reply = { 0 }, ping = ping_frame();
    uint64_t err = 0;
    char why[300];
    fz_outcome o;
    int rc = 0;

    for (size_t i = 0; hex[i] && hex[i + 1]; i += 2) {
        unsigned v;
        uint8_t b;
        if (sscanf(hex + i, "%2x", &v) != 1) {
            fprintf(stderr, "sx-fuzzframe: bad hex\n");
            return 2;
        }
        b = (uint8_t)v;
        add(&f, &b, 1);
    }
    o = conn_call(&c, f.p, f.n, &reply);
    if (o != R_REPLY) {
        printf("no reply (%s)\n", o == R_TIMEOUT ? "timed out" : "connection broke");
        rc = 1;
    } else {
        printf("reply (%zu bytes): ", reply.n);
        hex_print(stdout, reply.p, reply.n);
        if (check_reply(f.p, f.n, reply.p, reply.n, 0, &err, why, sizeof why) != 0) {
            printf("\nBAD: %s\n", why);
            rc = 1;
        } else {
            printf("\n%s %" PRIu64 "\n", err ? "error" : "ok", err);
        }
    }
    if (conn_call(&c, ping.p, ping.n, &reply) != R_REPLY) {
        conn_open(&c);
        if (conn_call(&c, ping.p, ping.n, &reply) != R_REPLY) {
            printf("no PING reply afterwards\n");
            rc = 1;
        }
    }
    if (rc == 0)
        printf("PING answered afterwards\n");
    conn_close(&c);
    bytes_free(&f);
    bytes_free(&reply);
    bytes_free(&ping);
    return rc;
}

/* --ping: every port of the config answers PING on a fresh connection. */
static int ping_mode(const sx_config *cfg, int timeout_ms)
{
    sx_bytes ping = ping_frame(), reply = { 0 };
    int bad = 0;

    for (int i = 0; i < cfg->nnodes; i++) {
        fz_conn c = { .url = cfg->nodes[i].url, .link = cfg->nodes[i].role != SX_ROLE_ROUTER,
                      .fd = -1, .timeout_ms = timeout_ms };
        uint64_t err = 1;
        char why[200];
        bool ok = conn_call(&c, ping.p, ping.n, &reply) == R_REPLY &&
                  check_reply(ping.p, ping.n, reply.p, reply.n, 0, &err, why,
                              sizeof why) == 0 && err == 0;

        printf("%s %s: %s\n", cfg->nodes[i].name, cfg->nodes[i].url,
               ok ? "answers PING" : "NO PING REPLY");
        bad += !ok;
        conn_close(&c);
    }
    bytes_free(&ping);
    bytes_free(&reply);
    return bad ? 1 : 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: sx-fuzzframe --config FILE --read TABLE --write TABLE\n"
            "                    [--count N] [--seed S] [--timeout-ms MS] [--port NAME] [-v]\n"
            "       sx-fuzzframe --config FILE --ping\n"
            "       sx-fuzzframe --send URL HEX   (URL link+tcp://... for a node)\n"
            "Sends N mutants of every seed frame (default %d) to every port of the\n"
            "cluster; each must get a well-formed reply and the port must answer PING\n"
            "afterwards. TABLE --read is read only; mutated writes go to --write.\n",
            DEFAULT_COUNT);
}

int main(int argc, char **argv)
{
    fz_ctx x = { .seed = 0x5eedf00d, .count = DEFAULT_COUNT,
                 .timeout_ms = DEFAULT_TIMEOUT_MS };
    const char *config = NULL, *rname = NULL, *wname = NULL, *send_url = NULL, *hex = NULL;
    bool ping = false;
    char err[256];
    fz_port *ports;
    pthread_t *th;
    int np = 0, bad = 0;

    signal(SIGPIPE, SIG_IGN);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--ping")) { ping = true; continue; }
        if (!strcmp(a, "-v")) { x.verbose++; continue; }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (v == NULL) { usage(stderr); return 2; }
        i++;
        if (!strcmp(a, "--config")) config = v;
        else if (!strcmp(a, "--read")) rname = v;
        else if (!strcmp(a, "--write")) wname = v;
        else if (!strcmp(a, "--count")) x.count = atoi(v);
        else if (!strcmp(a, "--seed")) x.seed = strtoull(v, NULL, 0);
        else if (!strcmp(a, "--timeout-ms")) x.timeout_ms = atoi(v);
        else if (!strcmp(a, "--port")) x.only = v;
        else if (!strcmp(a, "--send") && i + 1 < argc) { send_url = v; hex = argv[++i]; }
        else { usage(stderr); return 2; }
    }
    if (x.timeout_ms <= 0 || x.count < 0) {
        usage(stderr);
        return 2;
    }
    if (send_url)
        return send_mode(send_url, hex, x.timeout_ms);
    if (config == NULL || (!ping && (rname == NULL || wname == NULL))) {
        usage(stderr);
        return 2;
    }
    if (sx_proto_init() != 0 || cfg_load(config, &x.cfg, err, sizeof err) != 0) {
        fprintf(stderr, "sx-fuzzframe: %s: %s\n", config, err);
        return 2;
    }
    if (ping) {
        bad = ping_mode(x.cfg, x.timeout_ms);
        cfg_free(x.cfg);
        return bad;
    }
    setup(&x, rname, wname);

    ports = xcalloc((size_t)x.cfg->nnodes, sizeof *ports);
    th = xcalloc((size_t)x.cfg->nnodes, sizeof *th);
    for (int i = 0; i < x.cfg->nnodes; i++) {
        fz_port *pt = &ports[np];
        const cfg_node *nd = &x.cfg->nodes[i];

        if (x.only && strcmp(x.only, nd->name) != 0)
            continue;
        pt->idx = i;
        pt->node = nd;
        pt->x = &x;
        pt->conn = (fz_conn){ .url = nd->url, .link = nd->role != SX_ROLE_ROUTER, .fd = -1,
                              .timeout_ms = x.timeout_ms };
        pt->ping = ping_frame();
        if (nd->role == SX_ROLE_ROUTER)
            router_seeds(&x, pt);
        else if (nd->role == SX_ROLE_STORAGE)
            storage_seeds(&x, pt);
        else
            index_seeds(&x, pt);
        multi_seed(pt);
        np++;
    }
    printf("sx-fuzzframe: seed 0x%" PRIx64 ", %d mutants per seed (weighted), every %dth in "
           "a MULTI, timeout %d ms, %d ports\n", x.seed, x.count, MULTI_EVERY, x.timeout_ms, np);
    fflush(stdout);
    for (int p = 0; p < np; p++)
        if (pthread_create(&th[p], NULL, port_main, &ports[p]) != 0) {
            fprintf(stderr, "sx-fuzzframe: cannot start a thread\n");
            return 2;
        }
    for (int p = 0; p < np; p++)
        pthread_join(th[p], NULL);
    print_report(ports, np);
    for (int p = 0; p < np; p++) {
        bad += ports[p].failures;
        conn_close(&ports[p].conn);
        for (int i = 0; i < ports[p].nseeds; i++)
            bytes_free(&ports[p].seeds[i].frame);
        bytes_free(&ports[p].ping);
        bytes_free(&ports[p].fframe);
    }
    printf("sx-fuzzframe: %s\n", bad ? "FAILURES (see above)" : "every frame behaved");
    free(ports);
    free(th);
    ctx_free(&x);
    return bad ? 1 : 0;
}
