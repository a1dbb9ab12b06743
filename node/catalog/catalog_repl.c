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

/* The largest change frame proposed: a log entry travels in RAFT frames
 * (16 MiB at most) with others; real changes are a few hundred bytes. */
#define CATREPL_MAX_CHANGE ((size_t)1 << 20)

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
                            boot_size, applied, NULL, NULL);
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

/* A refusal by the Raft side, as the caller should see it: whenever this
 * replica cannot serve the request (not the leader, leadership moving,
 * joining, stopping, failed), SX_ENOTLEADER, naming the leader when known,
 * so that the caller (catclient.h) goes on to another replica; a change
 * asked again is made once (its request id). */
static void answer_raft_err(pending *p, int err, uint64_t leader)
{
    const char *why;
    switch (err) {
    case RAFT_ERR_NOT_LEADER: why = "not the catalog's leader"; break;
    case RHOST_LOST: why = "the catalog's leader changed before the change committed"; break;
    case RAFT_ERR_IO:
        why = "this catalog replica stopped (a disk error, or its node stopping)";
        break;
    case RAFT_ERR_INVALID: why = "this catalog replica is still joining"; break;
    case RAFT_ERR_NOMEM: why = "this catalog replica is out of memory"; break;
    case RHOST_GONE: why = "this catalog replica stopped before the request finished"; break;
    default: why = "the catalog's leadership is moving"; break;
    }
    char msg[200];
    snprintf(msg, sizeof msg, "%s: retry at %s", why,
             leader ? "the node named" : "another replica");
    answer_err(p->rep, p->t, SX_ENOTLEADER, msg, leader ? rhost_node_of(leader) : 0);
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
        answer_err(rep, t, SX_ENOTLEADER, "this catalog replica is stopping: retry at another", 0);
        return true;
    }
    if (t != MSG_CATALOG && n > CATREPL_MAX_CHANGE) {
        answer_err(rep, t, SX_ETOOBIG, "a catalog change frame is at most 1 MiB", 0);
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
