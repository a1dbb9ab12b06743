/*
 * index_read.c — I_RANGE on one index partition: live entries of one index
 * in [lo, hi) (hi empty: to the end of lo's index id), ascending or
 * descending, up to a limit and a byte budget, as parallel lists.
 */
#include <stdlib.h>
#include <string.h>
#include "index_part.h"
#include "hash.h"
#include "log.h"
#include "sx_errors.h"

#define RANGE_MAX_LIMIT 1000
/* Stop adding entries once the reply holds this many bytes (frames are
 * capped at SX_MAX_FRAME; projections may be whole items). */
#define RANGE_BYTE_BUDGET (8u * 1024u * 1024u)

typedef struct range_ctx {
    uint8_t *arena; /* copied keys and projections */
    size_t an, acap;
    void *lists; /* one block: the six per-entry arrays below */
    size_t *koff, *klen, *poff, *plen;
    uint64_t *hashes, *versions;
    uint32_t n, limit;
    int err;
    msg_u64s sources, wms; /* the watermarks, read before the range */
} range_ctx;

static int arena_add(range_ctx *r, const void *p, size_t n, size_t *off)
{
    if (r->an + n > r->acap) {
        size_t nc = r->acap ? r->acap : 4096;
        uint8_t *na;

        while (nc < r->an + n)
            nc *= 2;
        na = realloc(r->arena, nc);
        if (na == NULL)
            return SX_ENOMEM;
        r->arena = na;
        r->acap = nc;
    }
    memcpy(r->arena + r->an, p, n);
    *off = r->an;
    r->an += n;
    return 0;
}

static int range_visit(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    range_ctx *r = arg;
    ix_entry e;
    int rc;

    if (ix_entry_decode(v, vn, &e) != 0) {
        LOG_ERROR("index: corrupt entry value in range read");
        return SX_EIO;
    }
    if (!e.live)
        return 0;
    rc = arena_add(r, k + 1, kn - 1, &r->koff[r->n]);
    if (rc == 0)
        rc = arena_add(r, e.proj.p, e.proj.n, &r->poff[r->n]);
    if (rc != 0)
        return rc;
    r->klen[r->n] = kn - 1;
    r->plen[r->n] = e.proj.n;
    r->hashes[r->n] = e.h;
    r->versions[r->n] = e.version;
    r->n++;
    if (r->n >= r->limit || r->an >= RANGE_BYTE_BUDGET)
        return 1;
    return 0;
}

static void range_free(range_ctx *r)
{
    free(r->arena);
    free(r->lists);
    free(r->wms.v);
}

/* Encodes the reply from the collected entries. */
static int range_reply(range_ctx *r, mp_buf *out)
{
    msg_I_RANGE_rep rep;
    mp_span *keys = calloc(r->n + 1, sizeof(mp_span));
    mp_span *projs = calloc(r->n + 1, sizeof(mp_span));
    uint32_t i;
    int rc = SX_ENOMEM;

    if (keys == NULL || projs == NULL)
        goto out;
    for (i = 0; i < r->n; i++) {
        keys[i] = (mp_span){ r->arena + r->koff[i], r->klen[i] };
        projs[i] = (mp_span){ r->arena + r->poff[i], r->plen[i] };
    }
    memset(&rep, 0, sizeof(rep));
    rep.keys = (msg_spans){ r->n, keys };
    rep.projs = (msg_spans){ r->n, projs };
    rep.hashes = (msg_u64s){ r->n, r->hashes };
    rep.versions = (msg_u64s){ r->n, r->versions };
    rep.sources = r->sources;
    rep.wms = r->wms;
    rc = msg_encode_rep(MSG_I_RANGE, &rep, out);
out:
    free(keys);
    free(projs);
    return rc;
}

void ix_part_range(ix_part *p, const msg_I_RANGE_req *m, mp_buf *out)
{
    range_ctx r;
    uint8_t lo[1 + IX_MAX_LOCAL], hi[1 + IX_MAX_LOCAL];
    size_t lo_n, hi_n;
    uint32_t id;
    int rc;

    memset(&r, 0, sizeof(r));
    if (m->lo.n < 4 || m->lo.n > IX_MAX_LOCAL ||
        (m->hi.n > 0 && (m->hi.n < 4 || m->hi.n > IX_MAX_LOCAL))) {
        msg_encode_err(MSG_I_RANGE, SX_EINVAL, "range bounds must be index keys", out);
        return;
    }
    lo_n = ix_ekey(lo, m->lo.p, m->lo.n);
    if (m->hi.n > 0) {
        hi_n = ix_ekey(hi, m->hi.p, m->hi.n);
    } else {
        id = be_get32(m->lo.p);
        if (id == UINT32_MAX) {
            hi[0] = IX_PFX_ENTRY + 1;
            hi_n = 1;
        } else {
            hi[0] = IX_PFX_ENTRY;
            be_put32(hi + 1, id + 1);
            hi_n = 5;
        }
    }
    r.limit = m->limit == 0 || m->limit > RANGE_MAX_LIMIT ? RANGE_MAX_LIMIT : (uint32_t)m->limit;
    _Static_assert(sizeof(size_t) == sizeof(uint64_t), "one block holds both kinds");
    r.lists = malloc(6 * (size_t)r.limit * sizeof(uint64_t));
    r.wms.v = calloc((size_t)p->nsrc + 1, sizeof(uint64_t));
    if (r.lists == NULL || r.wms.v == NULL) {
        rc = SX_ENOMEM;
        goto fail;
    }
    r.koff = r.lists;
    r.klen = r.koff + r.limit;
    r.poff = r.klen + r.limit;
    r.plen = r.poff + r.limit;
    r.hashes = (uint64_t *)(r.plen + r.limit);
    r.versions = r.hashes + r.limit;
    /* Watermarks first: they are published after their batch is synced and
     * visible, so the range read next sees at least everything they cover
     * (a router may then trust the entries without fetching the facts). */
    ix_part_state(p, NULL, NULL, r.wms.v, NULL);
    r.wms.n = (uint32_t)p->ncfg;
    r.sources = (msg_u64s){ (uint32_t)p->ncfg, p->src };
    rc = ldb_scan(p->db, NULL, lo, lo_n, hi, hi_n, m->desc != 0, range_visit, &r);
    if (rc == 0)
        rc = range_reply(&r, out);
fail:
    if (rc != 0) {
        msgpack_sbuffer_clear(&out->sb);
        out->oom = false;
        msg_encode_err(MSG_I_RANGE, rc, "range read failed", out);
    }
    range_free(&r);
}
