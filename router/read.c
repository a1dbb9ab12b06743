/*
 * read.c — point operations by primary key: GET (S_GET on the partition
 * owning the key's hash) and DELETE (S_WRITE with one delete on that
 * partition). The key is a map holding the table's key attributes.
 */
#include <stdlib.h>
#include <string.h>

#include "router.h"
#include "hash.h"
#include "item.h"
#include "range.h"
#include "sx_errors.h"

int rt_item_key(const router *rt, const cat_table *t, const uint8_t *p, size_t n, tup_bytes *key)
{
    tup_bytes pk = { 0 };
    size_t pklen = 0;
    uint8_t hb[8];
    int rc;

    rc = item_primary_key(t, p, n, &pk, &pklen);
    if (rc == 0) {
        be_put64(hb, hash_shard(rt->cfg->hash_key, pk.p, pklen));
        if (tup_bytes_append(key, hb, 8) != 0 || tup_bytes_append(key, pk.p, pk.n) != 0)
            rc = SX_ENOMEM;
    }
    tup_bytes_free(&pk);
    return rc;
}

/* Builds the fact-local key h | pk of key map `key` for table t and finds
 * its partition. */
static int point_key(router *rt, const cat_table *t, mp_span key, tup_bytes *local,
                     const cfg_part **part, rt_err *e)
{
    tup_bytes pk = { 0 };
    size_t pklen = 0;
    uint64_t h;
    uint8_t hb[8];
    int rc;

    if (key.n > SX_MAX_ITEM || item_validate(key.p, key.n) != 0)
        return rt_errf(e, SX_EINVAL, "key must be a map of the key attributes");
    rc = item_primary_key(t, key.p, key.n, &pk, &pklen);
    if (rc != 0) {
        if (rc == SX_EKEY)
            rt_key_errf(e, t, pk.n, "bad key");
        else
            rt_errf(e, rc, "cannot read the key: %s", sx_strerror(rc));
        tup_bytes_free(&pk);
        return rc;
    }
    h = hash_shard(rt->cfg->hash_key, pk.p, pklen);
    be_put64(hb, h);
    rc = tup_bytes_append(local, hb, 8) != 0 || tup_bytes_append(local, pk.p, pk.n) != 0;
    tup_bytes_free(&pk);
    if (rc != 0)
        return rt_errf(e, SX_ENOMEM, "out of memory");
    *part = cfg_storage_for(rt->cfg, h);
    return 0;
}

int rt_h_get(router *rt, const uint8_t *p, size_t n, mp_buf *out, rt_err *e)
{
    msg_GET_req q;
    msg_S_GET_req req;
    msg_S_GET_rep rep;
    msg_GET_rep r;
    const cat_catalog *cat;
    const cat_table *t;
    const cfg_part *part;
    tup_bytes local = { 0 };
    mp_span key;
    rt_rpc c;
    int rc;

    memset(&c, 0, sizeof(c));
    memset(&rep, 0, sizeof(rep));
    rc = msg_decode_req(MSG_GET, p, n, &q);
    if (rc != 0)
        return rt_errf(e, rc, "malformed GET request");
    rc = rt_table(rt, q.table, &cat, &t, e);
    if (rc == 0)
        rc = point_key(rt, t, q.key, &local, &part, e);
    if (rc != 0)
        goto out;
    memset(&req, 0, sizeof(req));
    key = (mp_span){ local.p, local.n };
    req.part = part->id;
    req.table_id = t->id;
    req.keys = (msg_spans){ 1, &key };
    c = (rt_rpc){ .part = part, .type = MSG_S_GET, .req = &req, .rep = &rep };
    if (rt_rpc_run(rt, &c, 1) != 0) {
        rc = rt_errf(e, SX_ENOMEM, "out of memory");
        goto out;
    }
    if (c.err != 0) {
        rc = rt_rpc_fail(rt, &c, e);
        goto out;
    }
    if (rep.items.n != 1 || rep.versions.n != 1) {
        rc = rt_errf(e, SX_EPROTO, "storage partition %llu sent a malformed reply",
                     (unsigned long long)part->id);
        goto out;
    }
    if (rt_raw_nil(rep.items.v[0])) {
        rc = rt_errf(e, SX_ENOTFOUND, "no item with that key in table '%s'", t->name);
        goto out;
    }
    memset(&r, 0, sizeof(r));
    r.item = rep.items.v[0];
    r.version = rep.versions.v[0];
    if (msg_encode_rep(MSG_GET, &r, out) != 0)
        rc = rt_errf(e, SX_ENOMEM, "out of memory");
out:
    rt_rpc_release(&c, 1);
    tup_bytes_free(&local);
    msg_free_req(MSG_GET, &q);
    return rc;
}

/* Sends the one-delete S_WRITE with the DELETE's deadline (capped:
 * rt_write_deadline; req borrows key and del, which must outlive it);
 * retried once if the catalog was stale. */
static int delete_call(router *rt, const cat_table *t, uint64_t catver, const cfg_part *part,
                       mp_span *key, uint64_t deadline_ms, uint64_t *del, rt_rpc *c,
                       msg_S_WRITE_req *req, msg_S_WRITE_rep *rep, rt_err *e)
{
    const cat_catalog *cat;
    int pass;

    memset(req, 0, sizeof(*req));
    req->part = part->id;
    req->catver = catver;
    req->table_id = t->id;
    *del = 1;
    req->dels = (msg_u64s){ 1, del };
    req->objs = (msg_spans){ 1, key };
    for (pass = 0; pass < 2; pass++) {
        req->deadline_ms = rt_write_deadline(rt, deadline_ms);
        rt_rpc_release(c, 1);
        memset(rep, 0, sizeof(*rep));
        *c = (rt_rpc){ .part = part, .type = MSG_S_WRITE, .req = req, .rep = rep };
        if (rt_rpc_run(rt, c, 1) != 0)
            return rt_errf(e, SX_ENOMEM, "out of memory");
        if (c->err != SX_ESTALECAT || pass == 1)
            break;
        if (catcache_refresh(rt->cc) != 0 || catcache_get(rt->cc, 0, &cat) != 0)
            break;
        req->catver = cat->version;
    }
    if (c->err != 0)
        return rt_rpc_fail(rt, c, e);
    if (rep->versions.n != 1 || rep->found.n != 1)
        return rt_errf(e, SX_EPROTO, "storage partition %llu sent a malformed reply",
                       (unsigned long long)part->id);
    return 0;
}

int rt_h_delete(router *rt, const uint8_t *p, size_t n, mp_buf *out, rt_err *e)
{
    msg_DELETE_req q;
    msg_S_WRITE_req req;
    msg_S_WRITE_rep rep;
    msg_DELETE_rep r;
    const cat_catalog *cat;
    const cat_table *t;
    const cfg_part *part;
    uint64_t del = 1;
    rt_rpc c;
    int rc;

    memset(&c, 0, sizeof(c));
    memset(&rep, 0, sizeof(rep));
    rc = msg_decode_req(MSG_DELETE, p, n, &q);
    if (rc != 0)
        return rt_errf(e, rc, "malformed DELETE request");
    rc = rt_table(rt, q.table, &cat, &t, e);
    {
        tup_bytes local = { 0 };
        if (rc == 0)
            rc = point_key(rt, t, q.key, &local, &part, e);
        tup_bytes_free(&local);
    }
    if (rc == 0)
        rc = delete_call(rt, t, cat->version, part, &q.key, q.deadline_ms, &del, &c, &req, &rep, e);
    if (rc == 0 && rep.found.v[0] == 0)
        rc = rt_errf(e, SX_ENOTFOUND, "no item with that key in table '%s'", t->name);
    if (rc == 0) {
        memset(&r, 0, sizeof(r));
        r.version = rep.versions.v[0];
        if (msg_encode_rep(MSG_DELETE, &r, out) != 0)
            rc = rt_errf(e, SX_ENOMEM, "out of memory");
    }
    rt_rpc_release(&c, 1);
    msg_free_req(MSG_DELETE, &q);
    return rc;
}
