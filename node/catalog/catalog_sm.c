/*
 * catalog_sm.c — the catalog partition as a Raft state machine
 * (catalog_sm.h). Its snapshots are snapdir's, over the catalog's whole
 * leveldb.
 */
#include <stdlib.h>
#include <string.h>

#include "catalog_sm.h"
#include "log.h"
#include "msg.h"
#include "snapdir.h"
#include "sx_errors.h"

#define CATSM_MARKER "raft_installing"

struct catsm {
    catp *c;
    snapdir sd;
};

static int apply(void *sm, const raft_entry *e, rhost_result *res)
{
    catsm *s = sm;
    if (e->type != RAFT_ENTRY_NORMAL)
        return catp_mark_applied(s->c, e->index) == 0 ? 0 : -1;
    mp_buf b;
    mp_buf_init(&b);
    int rc = catp_apply_entry(s->c, e->index, e->data, e->len, &b);
    if (rc != 0) {
        mp_buf_free(&b);
        LOG_ERROR("catalog replica: cannot apply entry %llu: %s", (unsigned long long)e->index,
                  sx_strerror(rc));
        return -1;
    }
    if (mp_buf_take(&b, &res->reply, &res->reply_len) != 0)
        res->reply = NULL; /* the proposer then answers "out of memory" */
    mp_buf_free(&b);
    return 0;
}

static int snap_make(void *sm, uint64_t *index, uint64_t *size)
{
    catsm *s = sm;
    return snapdir_make(&s->sd, catp_applied(s->c), index, size);
}

static int snap_read(void *sm, uint64_t index, uint64_t off, uint8_t *buf, uint32_t len)
{
    catsm *s = sm;
    return snapdir_read(&s->sd, index, off, buf, len);
}

static int snap_stage(void *sm, uint64_t index, uint64_t off, const uint8_t *p, uint32_t len)
{
    catsm *s = sm;
    (void)index;
    return snapdir_stage(&s->sd, off, p, len);
}

static int snap_verify(void *sm, const raft_snap_meta *m)
{
    catsm *s = sm;
    return snapdir_verify(&s->sd, m);
}

/* The catalog's in-memory state from its (replaced) leveldb. */
static int reload(catsm *s)
{
    int rc = catp_reload(s->c);
    if (rc != 0)
        LOG_ERROR("catalog replica: its replaced state does not load: %s", sx_strerror(rc));
    return rc == 0 ? 0 : -1;
}

static int snap_install(void *sm, const raft_snap_meta *m)
{
    catsm *s = sm;
    return snapdir_install(&s->sd, m) == 0 ? reload(s) : -1;
}

static int reset(void *sm)
{
    catsm *s = sm;
    return snapdir_wipe(&s->sd) == 0 ? reload(s) : -1;
}

const rhost_sm_ops catsm_ops = { apply,        snap_make,   snap_read, snap_stage,
                                 snap_install, snap_verify, reset };

int catsm_open(catp *c, const char *dir, catsm **out, uint64_t *boot_size, uint64_t *applied)
{
    *out = NULL;
    catsm *s = calloc(1, sizeof *s);
    if (s == NULL)
        return SX_ENOMEM;
    s->c = c;
    size_t akn = 0;
    const char *akey = catp_applied_key(&akn);
    bool wiped = false;
    int rc = snapdir_open(&s->sd, dir, "the catalog's replica", catp_db(c), NULL, 0, NULL, 0,
                          CATSM_MARKER, strlen(CATSM_MARKER), akey, akn, &wiped, boot_size,
                          applied);
    if (rc == 0 && wiped && reload(s) != 0)
        rc = SX_EIO;
    if (rc != 0) {
        snapdir_close(&s->sd);
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

void catsm_close(catsm *s)
{
    if (s != NULL)
        snapdir_close(&s->sd);
    free(s);
}
