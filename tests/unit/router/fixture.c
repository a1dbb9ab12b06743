/*
 * fixture.c — the scripted nodes the router tests run a router against
 * (fixture.h).
 */
#include "fixture.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "item.h"
#include "scratch.h"
#include "sx_errors.h"
#include "testcfg.h"

static void serve_catalog(const rtf *fx, mp_buf *out)
{
    msg_CATALOG_rep r;

    memset(&r, 0, sizeof(r));
    r.version = fx->catver;
    r.catalog = (mp_span){ fx->cat, fx->catn };
    msg_encode_rep(MSG_CATALOG, &r, out);
}

static void handler(void *arg, const uint8_t *p, size_t n, mp_buf *out)
{
    rtf *fx = arg;
    msg_type t;
    int is_rep, k;

    if (msg_peek(p, n, &t, &is_rep) != 0) {
        msg_encode_err(MSG_PING, SX_EPROTO, "bad frame", out);
        return;
    }
    for (k = 0; k < fx->nscripts && fx->scripts[k].t != t; k++)
        ;
    pthread_mutex_lock(fx->mu);
    if (t == MSG_CATALOG)
        serve_catalog(fx, out);
    else if (k < fx->nscripts)
        fx->scripts[k].serve(p, n, out);
    else
        msg_encode_err(t, SX_EINVAL, "not scripted", out);
    pthread_mutex_unlock(fx->mu);
}

bool rtf_open(rtf *fx, const char *cluster, const char *token_key, pthread_mutex_t *mu,
              const rtf_script *scripts, int nscripts)
{
    char prefix[128], router_url[128], url[300];
    net_server_opts no = { .workers = 2 };
    testcfg c = { .cluster = cluster, .nstorage = 2, .nindex = 2, .ipc = true };

    memset(fx, 0, sizeof(*fx));
    fx->mu = mu;
    fx->scripts = scripts;
    fx->nscripts = nscripts;
    snprintf(prefix, sizeof(prefix), "sx-router-%s", cluster);
    if (scratch_make(prefix, fx->dir, sizeof(fx->dir)) == NULL)
        return false;
    snprintf(router_url, sizeof(router_url), "inproc://%s-r1", cluster);
    c.router_url = router_url;
    c.token_key = token_key;
    fx->cfg = testcfg_load(fx->dir, &c);
    if (fx->cfg == NULL) {
        scratch_remove(fx->dir);
        fx->dir[0] = '\0';
        return false;
    }
    snprintf(url, sizeof(url), "ipc://%s/s1.sock", fx->dir);
    CHECK(net_server_open_link(url, &no, handler, fx, &fx->s1) == 0);
    snprintf(url, sizeof(url), "ipc://%s/i1.sock", fx->dir);
    CHECK(net_server_open_link(url, &no, handler, fx, &fx->i1) == 0);
    return true;
}

int rtf_publish(rtf *fx, mp_buf *b, uint64_t version)
{
    uint8_t *cat = NULL, *old;
    size_t catn = 0;
    int rc = mp_buf_take(b, &cat, &catn);

    if (rc != 0)
        return rc;
    pthread_mutex_lock(fx->mu);
    old = fx->cat;
    fx->cat = cat;
    fx->catn = catn;
    fx->catver = version;
    pthread_mutex_unlock(fx->mu);
    free(old);
    return 0;
}

void rtf_close(rtf *fx)
{
    net_server_stop(fx->s1);
    net_server_stop(fx->i1);
    if (fx->dir[0] != '\0')
        scratch_remove(fx->dir);
    cfg_free(fx->cfg);
    free(fx->cat);
    memset(fx, 0, sizeof(*fx));
}

bool rtf_serve_s_get(const uint8_t *p, size_t n, const tup_bytes *keys, const mp_buf *facts,
                     int nfacts, uint64_t *part, mp_buf *out)
{
    static const uint8_t nil = 0xc0;
    msg_S_GET_req q;
    msg_S_GET_rep r;
    mp_span items[64];
    uint64_t vers[64];

    if (msg_decode_req(MSG_S_GET, p, n, &q) != 0 || q.keys.n > 64) {
        msg_encode_err(MSG_S_GET, SX_EPROTO, "bad S_GET", out);
        return false;
    }
    *part = q.part;
    for (uint32_t i = 0; i < q.keys.n; i++) {
        items[i] = (mp_span){ &nil, 1 };
        vers[i] = 0;
        for (int k = 0; k < nfacts; k++)
            if (keys[k].n == q.keys.v[i].n &&
                memcmp(keys[k].p, q.keys.v[i].p, q.keys.v[i].n) == 0 && facts[k].sb.size > 0) {
                items[i] = (mp_span){ (const uint8_t *)facts[k].sb.data, facts[k].sb.size };
                vers[i] = 7;
            }
    }
    memset(&r, 0, sizeof(r));
    r.items = (msg_spans){ q.keys.n, items };
    r.versions = (msg_u64s){ q.keys.n, vers };
    msg_encode_rep(MSG_S_GET, &r, out);
    msg_free_req(MSG_S_GET, &q);
    return true;
}

int rtf_query(router *rt, msg_QUERY_req *q, const rtf_qres *prev, rtf_qres *res)
{
    msg_QUERY_rep r;
    mp_buf req, out;
    int rc;

    memset(res, 0, sizeof(*res));
    if (prev != NULL)
        q->token = (mp_span){ prev->token, prev->tokn };
    mp_buf_init(&req);
    mp_buf_init(&out);
    rc = msg_encode_req(MSG_QUERY, q, &req);
    rt_handle(rt, (const uint8_t *)req.sb.data, req.sb.size, &out);
    memset(&r, 0, sizeof(r));
    res->rc = msg_decode_rep(MSG_QUERY, (const uint8_t *)out.sb.data, out.sb.size, &r, res->msg,
                             sizeof(res->msg));
    if (res->rc == 0) {
        for (uint32_t i = 0; i < r.items.n && res->n < 16; i++) {
            mp_span v;
            int64_t id = -1;
            if (item_get(r.items.v[i].p, r.items.v[i].n, "id", &v) == 0) {
                mp_cur c = mp_cur_make(v.p, v.n);
                mp_read_i64(&c, &id);
            }
            res->ids[res->n++] = id;
        }
        res->entries = r.entries;
        res->stale = r.stale;
        res->covering = r.covering;
        res->nfact = r.fact_parts.n;
        res->token_cut = r.token.n > sizeof(res->token);
        if (!res->token_cut) {
            memcpy(res->token, r.token.p, r.token.n);
            res->tokn = r.token.n;
        }
    }
    msg_free_rep(MSG_QUERY, &r);
    mp_buf_free(&req);
    mp_buf_free(&out);
    return rc;
}
