/*
 * catalog_repl.c — a replicated catalog's requests through Raft
 * (catalog_repl.h).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog_repl.h"
#include "catalog_sm.h"
#include "log.h"
#include "msg.h"
#include "sx_errors.h"

struct catrepl {
    catp *c;
    repl *r;
    catsm *sm;
    atomic_bool quiet;
};

/* A request in flight: answered from the loop thread. */
typedef struct pending {
    catrepl *cr;
    msg_type t;
    const uint8_t *req; /* borrowed until the reply (net_defer_fn) */
    size_t n;
    net_reply *rep;
} pending;

int catrepl_start(catp *c, repl *r, const cfg_cluster *cfg, const char *snapdir, catrepl **out)
{
    *out = NULL;
    catrepl *cr = calloc(1, sizeof *cr);
    if (cr == NULL)
        return SX_ENOMEM;
    cr->c = c;
    cr->r = r;
    atomic_init(&cr->quiet, false);
    uint64_t boot_size = 0, applied = 0;
    int rc = catsm_open(c, snapdir, &cr->sm, &boot_size, &applied);
    if (rc == 0)
        rc = repl_group_add(r, CFG_CATALOG_GROUP, cfg->catalog, cfg->ncatalog, &catsm_ops, cr->sm,
                            boot_size, applied);
    if (rc != 0) {
        catsm_close(cr->sm);
        free(cr);
        return rc;
    }
    *out = cr;
    return 0;
}

void catrepl_quiesce(catrepl *cr)
{
    if (cr != NULL)
        atomic_store(&cr->quiet, true);
}

void catrepl_free(catrepl *cr)
{
    if (cr == NULL)
        return;
    catsm_close(cr->sm);
    free(cr);
}

static void answer_err(net_reply *rep, msg_type t, int err, const char *msg, uint64_t hint)
{
    mp_buf out;
    mp_buf_init(&out);
    if (err == SX_ENOTLEADER)
        msg_encode_err_hint(t, err, msg, hint, &out);
    else
        msg_encode_err(t, err, msg, &out);
    net_reply_send(rep, &out);
}

/* A refusal by the Raft side, as the caller should see it. */
static void answer_raft_err(pending *p, int err, uint64_t leader)
{
    switch (err) {
    case RAFT_ERR_NOT_LEADER:
    case RHOST_LOST: /* certainly not applied: the leader changed */
        answer_err(p->rep, p->t, SX_ENOTLEADER,
                   leader ? "not the catalog's leader: retry at the node named"
                          : "not the catalog's leader, and no leader is known yet: retry",
                   leader ? rhost_node_of(leader) : 0);
        break;
    case RAFT_ERR_IO:
        answer_err(p->rep, p->t, SX_EIO,
                   "this catalog replica stopped (a disk error, or its node is stopping): "
                   "retry at another",
                   0);
        break;
    case RAFT_ERR_NOMEM: answer_err(p->rep, p->t, SX_ENOMEM, "out of memory", 0); break;
    default:
        /* GONE (stopping: unknown outcome), BUSY (a leadership transfer) */
        answer_err(p->rep, p->t, SX_EUNAVAIL,
                   "the catalog replica could not finish the request (stopping, or its "
                   "leadership moving): retry",
                   0);
        break;
    }
}

static void read_done(void *arg, int err, uint64_t index, rhost_result *res, uint64_t leader)
{
    pending *p = arg;
    (void)index;
    (void)res;
    if (err != RAFT_OK) {
        answer_raft_err(p, err, leader);
    } else {
        mp_buf out;
        mp_buf_init(&out);
        catp_handle(p->cr->c, MSG_CATALOG, p->req, p->n, &out);
        net_reply_send(p->rep, &out);
    }
    free(p);
}

static void change_done(void *arg, int err, uint64_t index, rhost_result *res, uint64_t leader)
{
    pending *p = arg;
    (void)index;
    if (err != RAFT_OK) {
        answer_raft_err(p, err, leader);
    } else if (res == NULL || res->reply == NULL) {
        answer_err(p->rep, p->t, SX_ENOMEM, "out of memory building the reply", 0);
    } else {
        mp_buf out;
        mp_buf_init(&out);
        mp_put_raw(&out, res->reply, res->reply_len);
        free(res->reply);
        res->reply = NULL;
        if (out.oom)
            answer_err(p->rep, p->t, SX_ENOMEM, "out of memory", 0);
        else
            net_reply_send(p->rep, &out);
    }
    free(p);
}

bool catrepl_defer(catrepl *cr, msg_type t, const uint8_t *req, size_t n, net_reply *rep)
{
    if (t != MSG_CATALOG && t != MSG_CAT_UPDATE && t != MSG_CAT_BACKFILLED)
        return false;
    if (atomic_load(&cr->quiet)) {
        answer_err(rep, t, SX_EUNAVAIL, "this catalog replica is stopping: retry at another", 0);
        return true;
    }
    pending *p = malloc(sizeof *p);
    if (p == NULL)
        return false; /* a worker answers it (out of memory there too, likely) */
    *p = (pending){ cr, t, req, n, rep };
    int rc;
    if (t == MSG_CATALOG) {
        rc = repl_read(cr->r, CFG_CATALOG_GROUP, read_done, p);
    } else {
        /* the entry: the type, then the frame as received */
        uint8_t *e = malloc(n + 1);
        if (e == NULL) {
            free(p);
            return false;
        }
        e[0] = (uint8_t)t;
        memcpy(e + 1, req, n);
        rc = n + 1 > UINT32_MAX
                 ? RAFT_ERR_INVALID
                 : repl_propose(cr->r, CFG_CATALOG_GROUP, e, (uint32_t)(n + 1), change_done, p);
        free(e);
    }
    if (rc != RAFT_OK) {
        answer_raft_err(p, rc, 0);
        free(p);
    }
    return true;
}
