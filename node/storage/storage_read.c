/*
 * storage_read.c — reads of a fact partition: S_GET (a batch of point gets
 * by fact-local key h|pk) and S_RANGE (an ordered range of fact-local keys
 * with an optional equality filter and paging). Lock-free: leveldb reads
 * run concurrently with the group-commit writer.
 *
 * S_RANGE paging: lo is inclusive, hi exclusive (empty hi: to the end of
 * the table in this partition). When the reply stops early (limit reached,
 * reply size, scan budget or time slice exhausted: storage_part.h) `next`
 * holds the last fact-local key examined; the caller continues after it
 * (ascending: lo = next | 0x00; descending: hi = next). Otherwise next is
 * empty.
 */
#include <stdlib.h>
#include <string.h>
#include "hash.h"
#include "item.h"
#include "log.h"
#include "storage_part.h"
#include "sx_errors.h"

#define ST_RANGE_MAX_LIMIT 1000
#define ST_RANGE_MAX_BYTES (8u << 20)
#define ST_RANGE_MAX_SCAN 100000
#define ST_LOCAL_MAX (8 + SX_MAX_KEY)

static const uint8_t nil_byte = 0xc0;

static bool local_key_ok(const st_part *p, mp_span k)
{
    uint64_t h;

    if (k.n < 9 || k.n > ST_LOCAL_MAX)
        return false;
    h = be_get64(k.p);
    return h >= p->hlo && h <= p->hhi;
}

void st_get(st_part *p, const msg_S_GET_req *rq, mp_buf *out)
{
    uint32_t n = rq->keys.n;
    uint8_t **vals = calloc(n ? n : 1, sizeof(*vals));
    mp_span *items = calloc(n ? n : 1, sizeof(*items));
    uint64_t *vers = calloc(n ? n : 1, sizeof(*vers));
    uint8_t key[ST_FACT_KEY_MAX];
    msg_S_GET_rep rep;
    int rc = 0;

    if (!vals || !items || !vers) {
        rc = SX_ENOMEM;
        goto out;
    }
    if (st_table(p, rq->table_id) == NULL) {
        rc = SX_ENOTABLE;
        goto out;
    }
    for (uint32_t i = 0; rc == 0 && i < n; i++) {
        size_t vn = 0, kn;

        if (!local_key_ok(p, rq->keys.v[i])) {
            rc = SX_EWRONGPART;
            break;
        }
        kn = st_fact_key(key, (uint32_t)rq->table_id, rq->keys.v[i].p, rq->keys.v[i].n);
        rc = st_kget(p, NULL, key, kn, &vals[i], &vn);
        if (rc == SX_ENOTFOUND) {
            items[i].p = &nil_byte;
            items[i].n = 1;
            rc = 0;
        } else if (rc == 0) {
            rc = st_fact_decode(vals[i], vn, &vers[i], &items[i]);
        }
    }
out:
    if (rc == 0) {
        memset(&rep, 0, sizeof(rep));
        rep.items.n = n;
        rep.items.v = items;
        rep.versions.n = n;
        rep.versions.v = vers;
        rc = msg_encode_rep(MSG_S_GET, &rep, out);
    }
    if (rc != 0)
        msg_encode_err(MSG_S_GET, rc,
                       rc == SX_EWRONGPART ? "key hash outside this partition or bad key"
                                           : sx_strerror(rc),
                       out);
    for (uint32_t i = 0; vals && i < n; i++)
        free(vals[i]);
    free(vals);
    free(items);
    free(vers);
}

/* State of one S_RANGE scan. */
typedef struct range_st {
    const uint8_t *where; /* NULL: no filter */
    size_t wn;
    uint32_t limit, count, scanned;
    uint64_t t_end;  /* os_mono_us: the time slice ends */
    tup_bytes arena; /* returned items, concatenated */
    size_t *offs;    /* count + 1 offsets into arena */
    uint8_t next[ST_LOCAL_MAX];
    size_t next_n;
    int err;
} range_st;

static int range_visit(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    range_st *s = arg;
    uint64_t ver;
    mp_span item;
    int m = 1;

    if (kn < ST_FACT_HDR + 9 || kn - ST_FACT_HDR > ST_LOCAL_MAX ||
        st_fact_decode(v, vn, &ver, &item) != 0)
        return SX_EIO;
    s->scanned++;
    if (s->where != NULL) {
        m = item_matches(item.p, item.n, s->where, s->wn);
        if (m < 0)
            return SX_EINVAL;
    }
    if (m == 1) {
        if (tup_bytes_append(&s->arena, item.p, item.n) != 0)
            return SX_ENOMEM;
        s->count++;
        s->offs[s->count] = s->arena.n;
    }
    if (s->count >= s->limit || s->arena.n >= ST_RANGE_MAX_BYTES ||
        s->scanned >= ST_RANGE_MAX_SCAN ||
        (s->scanned % ST_RANGE_SLICE_ITEMS == 0 && os_mono_us() >= s->t_end)) {
        s->next_n = kn - ST_FACT_HDR;
        memcpy(s->next, k + ST_FACT_HDR, s->next_n);
        return 1;
    }
    return 0;
}

/* Checks the request and fills s->where, the scan bounds lo/hi. */
static int range_setup(st_part *p, const msg_S_RANGE_req *rq, range_st *s, uint8_t *lo,
                       size_t *lo_n, uint8_t *hi, size_t *hi_n)
{
    uint32_t tid = (uint32_t)rq->table_id;

    if (st_table(p, rq->table_id) == NULL)
        return SX_ENOTABLE;
    if (rq->lo.n > ST_LOCAL_MAX || rq->hi.n > ST_LOCAL_MAX)
        return SX_ETOOBIG;
    if (rq->where.n > 0 && !(rq->where.n == 1 && rq->where.p[0] == nil_byte)) {
        mp_cur c = mp_cur_make(rq->where.p, rq->where.n);
        uint32_t cnt;

        if (mp_validate(rq->where.p, rq->where.n) != 0 || mp_read_map(&c, &cnt) != 0)
            return SX_EINVAL;
        if (cnt > 0) {
            s->where = rq->where.p;
            s->wn = rq->where.n;
        }
    }
    s->limit = rq->limit == 0 || rq->limit > ST_RANGE_MAX_LIMIT ? ST_RANGE_MAX_LIMIT
                                                                : (uint32_t)rq->limit;
    s->offs = calloc(s->limit + 1, sizeof(*s->offs));
    if (s->offs == NULL)
        return SX_ENOMEM;
    *lo_n = st_fact_key(lo, tid, rq->lo.p, rq->lo.n);
    if (rq->hi.n > 0) {
        *hi_n = st_fact_key(hi, tid, rq->hi.p, rq->hi.n);
    } else {
        hi[0] = ST_FACT_PREFIX;
        be_put32(hi + 1, tid + 1);
        *hi_n = tid == UINT32_MAX ? 1 : ST_FACT_HDR;
        if (tid == UINT32_MAX)
            hi[0] = ST_FACT_PREFIX + 1;
    }
    return 0;
}

static int range_reply(const range_st *s, mp_buf *out)
{
    mp_span *items = calloc(s->count ? s->count : 1, sizeof(*items));
    msg_S_RANGE_rep rep;
    int rc;

    if (items == NULL)
        return SX_ENOMEM;
    for (uint32_t i = 0; i < s->count; i++) {
        items[i].p = s->arena.p + s->offs[i];
        items[i].n = s->offs[i + 1] - s->offs[i];
    }
    memset(&rep, 0, sizeof(rep));
    rep.items.n = s->count;
    rep.items.v = items;
    rep.next.p = s->next;
    rep.next.n = s->next_n;
    rc = msg_encode_rep(MSG_S_RANGE, &rep, out);
    free(items);
    return rc;
}

void st_range(st_part *p, const msg_S_RANGE_req *rq, mp_buf *out)
{
    uint8_t lo[ST_FACT_KEY_MAX], hi[ST_FACT_KEY_MAX];
    size_t lo_n = 0, hi_n = 0;
    range_st s;
    int rc;

    memset(&s, 0, sizeof(s));
    s.t_end = os_mono_us() + p->range_slice_us;
    rc = range_setup(p, rq, &s, lo, &lo_n, hi, &hi_n);
    if (rc == 0)
        rc = st_kscan(p, NULL, lo, lo_n, hi, hi_n, rq->desc != 0, range_visit, &s);
    if (rc == 0)
        rc = range_reply(&s, out);
    if (rc != 0)
        msg_encode_err(MSG_S_RANGE, rc,
                       rc == SX_EINVAL ? "where must be nil or a map of attribute to scalar"
                                       : sx_strerror(rc),
                       out);
    free(s.offs);
    tup_bytes_free(&s.arena);
}
