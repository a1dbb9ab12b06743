/*
 * fixture.c — what the storage tests that write through a partition share
 * (fixture.h).
 */
#include "fixture.h"
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include "hash.h"
#include "sx_errors.h"
#include "testcfg.h"

bool stf_open(stf *f, const char *dir, const char *name, bool ipc)
{
    const testcfg c = { .cluster = name, .nstorage = 1, .nindex = 1, .ipc = ipc };
    char path[4200];

    memset(f, 0, sizeof(*f));
    f->dir = dir;
    f->cfg = testcfg_load(dir, &c);
    if (f->cfg == NULL)
        return false;
    snprintf(path, sizeof(path), "%s/catalog", dir);
    CHECK(mkdir(path, 0700) == 0);
    CHECK(catp_open(path, f->cfg, &f->cp) == 0);
    return true;
}

void stf_start(stf *f)
{
    char path[4200];

    CHECK(f->cp != NULL && st_cat_new(f->cfg, f->cp, &f->cc) == 0);
    snprintf(path, sizeof(path), "%s/store", f->dir);
    CHECK(f->cc != NULL && st_store_open(path, &f->store) == 0);
    CHECK(f->store != NULL &&
          st_part_open(f->cfg, &f->cfg->storage[0], f->cc, f->store, &f->p) == 0);
    CHECK(f->p != NULL && st_store_start(f->store, &f->p, 1) == 0);
}

void stf_close(stf *f)
{
    if (f->store != NULL)
        st_store_stop(f->store);
    st_part_close(f->p);
    st_store_close(f->store);
    st_cat_free(f->cc);
    catp_close(f->cp);
    cfg_free(f->cfg);
    memset(f, 0, sizeof(*f));
}

int stf_cat_call(catp *c, msg_type t, const void *req, uint64_t *version)
{
    mp_buf b, out;
    char msg[256] = "";
    int rc;

    mp_buf_init(&b);
    mp_buf_init(&out);
    rc = msg_encode_req(t, req, &b);
    if (rc == 0) {
        catp_handle(c, t, (const uint8_t *)b.sb.data, b.sb.size, &out);
        if (t == MSG_CAT_UPDATE) {
            msg_CAT_UPDATE_rep r;
            memset(&r, 0, sizeof(r));
            rc = msg_decode_rep(t, (const uint8_t *)out.sb.data, out.sb.size, &r, msg, sizeof(msg));
            *version = r.version;
            msg_free_rep(t, &r);
        } else {
            msg_CAT_BACKFILLED_rep r;
            memset(&r, 0, sizeof(r));
            rc = msg_decode_rep(t, (const uint8_t *)out.sb.data, out.sb.size, &r, msg, sizeof(msg));
            *version = r.version;
            msg_free_rep(t, &r);
        }
    }
    if (rc != 0)
        fprintf(stderr, "catalog request %s: %s: %s\n", msg_name(t), sx_strerror(rc), msg);
    mp_buf_free(&b);
    mp_buf_free(&out);
    return rc;
}

static mp_span span_of(const char *s)
{
    return (mp_span){ (const uint8_t *)s, strlen(s) };
}

int stf_create_t(catp *c, uint64_t *version)
{
    msg_CAT_UPDATE_req u;

    memset(&u, 0, sizeof(u));
    u.op = CATOP_CREATE_TABLE;
    u.table = span_of("t");
    u.pk = span_of("id");
    return stf_cat_call(c, MSG_CAT_UPDATE, &u, version);
}

int stf_create_index(catp *c, const char *name, const char *attr, uint64_t *version)
{
    msg_CAT_UPDATE_req u;
    mp_span a = span_of(attr);

    memset(&u, 0, sizeof(u));
    u.op = CATOP_CREATE_INDEX;
    u.table = span_of("t");
    u.index = span_of(name);
    u.attrs = (msg_spans){ 1, &a };
    return stf_cat_call(c, MSG_CAT_UPDATE, &u, version);
}

int stf_backfilled(catp *c, uint32_t index_id, uint64_t *version)
{
    msg_CAT_BACKFILLED_req b;

    memset(&b, 0, sizeof(b));
    b.index_id = index_id;
    b.part = 1;
    return stf_cat_call(c, MSG_CAT_BACKFILLED, &b, version);
}

int stf_write(st_part *p, uint64_t catver, mp_buf *items, const uint64_t *dels, uint32_t n,
              uint64_t *vers, uint64_t *found)
{
    msg_S_WRITE_req q;
    msg_S_WRITE_rep r;
    mp_span objs[8];
    uint64_t nodel[8] = { 0 };
    mp_buf out;
    char msg[256] = "";
    int rc;

    for (uint32_t i = 0; i < n; i++)
        objs[i] = (mp_span){ (const uint8_t *)items[i].sb.data, items[i].sb.size };
    memset(&q, 0, sizeof(q));
    q.part = 1;
    q.catver = catver;
    q.table_id = 1;
    q.objs = (msg_spans){ n, objs };
    q.dels = (msg_u64s){ n, (uint64_t *)(dels != NULL ? dels : nodel) };
    mp_buf_init(&out);
    st_write(p, &q, &out);
    memset(&r, 0, sizeof(r));
    rc = msg_decode_rep(MSG_S_WRITE, (const uint8_t *)out.sb.data, out.sb.size, &r, msg,
                        sizeof(msg));
    if (rc == 0) {
        if (vers != NULL) {
            CHECK(r.versions.n == n && r.found.n == n);
            for (uint32_t i = 0; i < n && i < r.versions.n && i < r.found.n; i++) {
                vers[i] = r.versions.v[i];
                found[i] = r.found.v[i];
            }
        }
    } else {
        fprintf(stderr, "S_WRITE: %s: %s\n", sx_strerror(rc), msg);
    }
    msg_free_rep(MSG_S_WRITE, &r);
    mp_buf_free(&out);
    for (uint32_t i = 0; i < n; i++)
        mp_buf_free(&items[i]);
    return rc;
}

int stf_outbox_scan(st_part *p, uint64_t dest, ldb_visit visit, void *arg)
{
    uint8_t lo[17], hi[17];

    lo[0] = hi[0] = ST_OUT_PREFIX;
    be_put64(lo + 1, dest);
    be_put64(lo + 9, 0);
    be_put64(hi + 1, dest);
    be_put64(hi + 9, UINT64_MAX);
    return st_kscan(p, NULL, lo, sizeof(lo), hi, sizeof(hi), false, visit, arg);
}
