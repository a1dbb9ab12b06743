/*
 * catclient.c — calls to the catalog's leader among its replicas
 * (catclient.h).
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "catclient.h"
#include "fiber.h"
#include "msg.h"
#include "net.h"
#include "os.h"
#include "sx_errors.h"

/* One attempt's share of a call's time when there are several replicas: a
 * replica that stopped answering (paused, cut off) costs at most this
 * before the next is tried. */
#define CATCLIENT_ATTEMPT_MS 1000
/* The pause after every replica was tried in turn without finding the
 * leader (an election in progress). */
#define CATCLIENT_ROUND_PAUSE_MS 50

struct catclient {
    const cfg_cluster *cfg;
    int n;
    net_peer *peer[CFG_MAX_REPLICAS];
    int node[CFG_MAX_REPLICAS]; /* their nodes (indexes into cfg.nodes) */
    atomic_int cur;             /* the replica (0..n-1) tried first */
};

int catclient_new(const cfg_cluster *cfg, catclient **out)
{
    /* a config made by hand (tests) may name catalog_node alone */
    int n = cfg->ncatalog > 0 ? cfg->ncatalog : 1;
    *out = NULL;
    if (n > CFG_MAX_REPLICAS)
        return SX_ECONFIG;
    for (int i = 0; i < n; i++) {
        int k = cfg->ncatalog > 0 ? cfg->catalog[i] : cfg->catalog_node;
        if (k < 0 || k >= cfg->nnodes)
            return SX_ECONFIG;
    }
    catclient *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return SX_ENOMEM;
    c->cfg = cfg;
    for (int i = 0; i < n; i++) {
        c->node[i] = cfg->ncatalog > 0 ? cfg->catalog[i] : cfg->catalog_node;
        int rc = net_peer_open_link(cfg->nodes[c->node[i]].url, 1, &c->peer[i]);
        if (rc != 0) {
            catclient_free(c);
            return rc;
        }
        c->n++;
    }
    atomic_init(&c->cur, 0);
    *out = c;
    return 0;
}

void catclient_free(catclient *c)
{
    if (c == NULL)
        return;
    for (int i = 0; i < c->n; i++)
        net_peer_close(c->peer[i]);
    free(c);
}

int catclient_leader(catclient *c)
{
    return c->node[atomic_load(&c->cur)];
}

/* The replica slot of node id `id`, or -1. */
static int slot_of(const catclient *c, uint64_t id)
{
    for (int i = 0; id != 0 && i < c->n; i++)
        if ((uint64_t)c->cfg->nodes[c->node[i]].id == id)
            return i;
    return -1;
}

/* The error code of reply frame p[n] (0: a success or another error) */
static int reply_err(const uint8_t *p, size_t n)
{
    msg_type t;
    int is_reply;
    mp_cur cur;
    uint32_t count;
    uint64_t v, err;

    if (msg_peek(p, n, &t, &is_reply) != 0 || !is_reply)
        return 0;
    cur = mp_cur_make(p, n);
    if (mp_read_array(&cur, &count) || count < 3 || mp_read_u64(&cur, &v) ||
        mp_read_u64(&cur, &v) || mp_read_u64(&cur, &err))
        return 0;
    return (int)err;
}

int catclient_call(catclient *c, const uint8_t *req, size_t n, int timeout_ms, uint8_t **resp,
                   size_t *resp_n)
{
    unsigned long long end = os_mono_ms() + (unsigned long long)(timeout_ms > 0 ? timeout_ms : 0);
    int i = atomic_load(&c->cur), last = SX_EUNAVAIL, tried = 0;

    *resp = NULL;
    *resp_n = 0;
    for (;;) {
        unsigned long long now = os_mono_ms();
        if (now >= end)
            return last;
        int left = (int)(end - now);
        int attempt = c->n > 1 && left > CATCLIENT_ATTEMPT_MS ? CATCLIENT_ATTEMPT_MS : left;
        uint8_t *r = NULL;
        size_t rn = 0;
        int rc = net_peer_call_sync(c->peer[i], req, n, attempt, &r, &rn);
        int next = (i + 1) % c->n;
        /* with several replicas, one that cannot serve (it says so:
         * SX_ENOTLEADER; or it fails: SX_EUNAVAIL, SX_EIO) is passed over */
        int re = rc == 0 ? reply_err(r, rn) : 0;
        bool pass = re == SX_ENOTLEADER || (c->n > 1 && (re == SX_EUNAVAIL || re == SX_EIO));
        if (rc == 0 && !pass) {
            atomic_store(&c->cur, i);
            *resp = r;
            *resp_n = rn;
            return 0;
        }
        if (rc == 0) {
            int hinted = re == SX_ENOTLEADER ? slot_of(c, msg_err_hint(r, rn)) : -1;
            free(r);
            last = re == SX_ENOTLEADER ? SX_ENOTLEADER : SX_EUNAVAIL;
            if (hinted >= 0 && hinted != i)
                next = hinted; /* straight there: not a round */
        } else {
            last = rc == SX_ENET ? SX_EUNAVAIL : rc;
            if (rc == SX_ENOMEM)
                return rc;
        }
        if (c->n == 1 && rc != 0)
            return last; /* one replica: as a plain call */
        if (++tried % c->n == 0)
            fib_sleep_ms(CATCLIENT_ROUND_PAUSE_MS);
        i = next;
    }
}
