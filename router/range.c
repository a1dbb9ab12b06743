/*
 * range.c — query key ranges: equality values, range/prefix conditions,
 * resumption after a consumed key, and clipping to index partitions (see
 * range.h).
 */
#include <string.h>

#include "range.h"
#include "hash.h"
#include "sx_errors.h"

bool rt_raw_nil(mp_span raw)
{
    return raw.n == 0 || (raw.n == 1 && raw.p[0] == 0xc0);
}

int rt_eq_encode(mp_span eq, uint32_t max_k, tup_bytes *out, uint32_t *k, rt_err *e)
{
    mp_cur c;
    uint32_t cnt, i;
    int rc;

    *k = 0;
    if (rt_raw_nil(eq))
        return 0;
    c = mp_cur_make(eq.p, eq.n);
    if (mp_read_array(&c, &cnt) != 0)
        return rt_errf(e, SX_EINVAL, "eq must be an array of values");
    if (cnt > max_k)
        return rt_errf(e, SX_EINVAL, "eq has %u values but at most %u are allowed", cnt, max_k);
    for (i = 0; i < cnt; i++) {
        rc = tup_encode_mp(out, &c);
        if (rc == SX_ENOMEM)
            return rt_errf(e, rc, "out of memory");
        if (rc != 0)
            return rt_errf(e, SX_EKEY, "eq value %u is not a scalar key value", i + 1);
    }
    if (out->n > SX_MAX_KEY)
        return rt_errf(e, SX_EKEY, "eq values are longer than %d bytes encoded", SX_MAX_KEY);
    *k = cnt;
    return 0;
}

/* Appends the tuple component of a msgpack scalar bound. */
static int put_bound(tup_bytes *b, mp_span v, const char *name, const char *what, rt_err *e)
{
    mp_cur c = mp_cur_make(v.p, v.n);
    int rc = tup_encode_mp(b, &c);

    if (rc == SX_ENOMEM)
        return rt_errf(e, rc, "out of memory");
    if (rc != 0 || mp_left(&c) != 0)
        return rt_errf(e, SX_EKEY, "'%s' bound on %s must be one scalar value", name, what);
    return 0;
}

/* hi = strinc(b) (b's copy), or open when no bound exists. */
static int upper_of(const tup_bytes *b, rt_range *r)
{
    r->hi.n = 0;
    if (b->n == 0) {
        r->hi_open = true;
        return 0;
    }
    if (tup_bytes_append(&r->hi, b->p, b->n) != 0)
        return SX_ENOMEM;
    if (tup_strinc(&r->hi) != 0) {
        r->hi.n = 0;
        r->hi_open = true;
    }
    return 0;
}

int rt_range_build(const uint8_t *base, size_t bn, uint64_t cond, mp_span from, mp_span to,
                   mp_span prefix, const char *what, rt_range *r, rt_err *e)
{
    tup_bytes tmp = { 0 };
    int rc = 0;

    r->hi_open = false;
    if (tup_bytes_append(&r->lo, base, bn) != 0 || tup_bytes_append(&tmp, base, bn) != 0) {
        rc = rt_errf(e, SX_ENOMEM, "out of memory");
        goto out;
    }
    switch (cond) {
    case Q_COND_NONE: break;
    case Q_COND_RANGE:
        if (!rt_raw_nil(from) && (rc = put_bound(&r->lo, from, "from", what, e)) != 0)
            goto out;
        if (!rt_raw_nil(to) && (rc = put_bound(&tmp, to, "to", what, e)) != 0)
            goto out;
        break;
    case Q_COND_PREFIX:
        if (tup_encode_str_prefix(&tmp, prefix.p, prefix.n) != 0) {
            rc = rt_errf(e, SX_ENOMEM, "out of memory");
            goto out;
        }
        r->lo.n = 0;
        if (tup_bytes_append(&r->lo, tmp.p, tmp.n) != 0) {
            rc = rt_errf(e, SX_ENOMEM, "out of memory");
            goto out;
        }
        break;
    default:
        rc = rt_errf(e, SX_EINVAL, "unknown condition %llu (0 none, 1 range, 2 prefix)",
                     (unsigned long long)cond);
        goto out;
    }
    if (r->lo.n > SX_MAX_KEY + 8 || tmp.n > SX_MAX_KEY + 8) {
        rc = rt_errf(e, SX_EKEY, "query bounds are too long");
        goto out;
    }
    if (upper_of(&tmp, r) != 0)
        rc = rt_errf(e, SX_ENOMEM, "out of memory");
out:
    tup_bytes_free(&tmp);
    return rc;
}

bool rt_range_empty(const rt_range *r)
{
    return !r->hi_open && tup_keycmp(r->lo.p, r->lo.n, r->hi.p, r->hi.n) >= 0;
}

int rt_range_resume(rt_range *r, const uint8_t *pos, size_t n, bool desc)
{
    static const uint8_t zero = 0;

    if (tup_keycmp(pos, n, r->lo.p, r->lo.n) < 0 ||
        (!r->hi_open && tup_keycmp(pos, n, r->hi.p, r->hi.n) >= 0))
        return SX_ETOKEN;
    if (desc) {
        r->hi.n = 0;
        r->hi_open = false;
        return tup_bytes_append(&r->hi, pos, n) != 0 ? SX_ENOMEM : 0;
    }
    r->lo.n = 0;
    if (tup_bytes_append(&r->lo, pos, n) != 0 || tup_bytes_append(&r->lo, &zero, 1) != 0)
        return SX_ENOMEM;
    return 0;
}

/* Appends the 4-byte index id then tuple t..n. */
static int put_local(tup_bytes *b, uint32_t id, const uint8_t *t, size_t n)
{
    uint8_t be[4];

    be_put32(be, id);
    if (tup_bytes_append(b, be, 4) != 0 || (n > 0 && tup_bytes_append(b, t, n) != 0))
        return -SX_ENOMEM;
    return 0;
}

int rt_range_clip(const rt_range *r, const cfg_part *p, uint32_t index_id, tup_bytes *lo,
                  tup_bytes *hi)
{
    const uint8_t *l = r->lo.p, *h = r->hi.p;
    size_t ln = r->lo.n, hn = r->hi.n;
    bool hopen = r->hi_open;

    if (p->lo_n > 0 && tup_keycmp(p->lo, p->lo_n, l, ln) > 0) {
        l = p->lo;
        ln = p->lo_n;
    }
    if (p->hi_n > 0 && (hopen || tup_keycmp(p->hi, p->hi_n, h, hn) < 0)) {
        h = p->hi;
        hn = p->hi_n;
        hopen = false;
    }
    if (!hopen && tup_keycmp(l, ln, h, hn) >= 0)
        return 0;
    if (put_local(lo, index_id, l, ln) != 0)
        return -SX_ENOMEM;
    if (!hopen && put_local(hi, index_id, h, hn) != 0)
        return -SX_ENOMEM;
    return 1;
}

void rt_range_free(rt_range *r)
{
    tup_bytes_free(&r->lo);
    tup_bytes_free(&r->hi);
}
