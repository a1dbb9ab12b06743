/*
 * storage_node.c — the storage role of shardex-node: start-up (catalog
 * partition when this node hosts it, catalog cache, the node's store and
 * its fact partitions, sockets to index nodes, shippers, server, catalog
 * poll, one backfill thread per partition), request dispatch, S_HEADS and
 * NODE_STATUS, and the clean stop (poll and backfill threads, server, peer
 * sockets, shippers, the store's committer, partitions, the store, in that
 * order).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <time.h>
#include "backfill.h"
#include "storage_cat.h"
#include "catalog_part.h"
#include "catalog_repl.h"
#include "catclient.h"
#include "link_auth.h"
#include "ixroute.h"
#include "log.h"
#include "msg.h"
#include "net.h"
#include "node.h"
#include "shipper.h"
#include "storage_part.h"
#include "sx_errors.h"

/* The catalog poll's period: a new index's build starts 100-150 ms after
 * its creation (backfill.c's BF_SETTLE_MS after the first poll that sees
 * it). A poll costs a CATALOG round trip of a few bytes while nothing
 * changed (its `since`), or on the catalog's own node a version read. */
#define ST_POLL_MS 50

struct st_node;

/* A partition's backfill thread. */
typedef struct st_bfthread {
    struct st_node *n;
    st_part *p;
    pthread_t th;
    bool started;
} st_bfthread;

typedef struct st_node {
    const node_opts *o;
    const cfg_cluster *cfg;
    catp *catp;       /* NULL unless this node holds (a replica of) the catalog */
    repl *repl;       /* the node's Raft groups (NULL: it holds none) */
    catrepl *catrepl; /* its replica of a replicated catalog, or NULL */
    st_cat *cc;
    int nparts;
    st_part **parts;
    st_store *store;    /* the partitions' shared leveldb and committer */
    catclient *catpeer; /* calls to the catalog's leader (backfills done) */
    net_server *srv;
    bool hosting; /* the router this node hosts was started */
    pthread_t poll_th;
    bool poll_started;
    st_bfthread *bf;    /* one per partition */
    ship *ship;         /* the node's outbox shipper */
    pthread_mutex_t mu; /* guards stop */
    pthread_cond_t cv;  /* a catalog poll happened, or stopping */
    bool stop;
} st_node;

/* Replaces whatever out holds with an error reply. */
static void reply_err(mp_buf *out, msg_type t, int err, const char *msg)
{
    mp_buf_free(out);
    mp_buf_init(out);
    msg_encode_err(t, err, msg, out);
}

/* The reply to a request a replicated partition's replica cannot serve
 * (st_part_read_barrier's failure rc): SX_ENOTLEADER names the leader. */
static void reply_not_served(mp_buf *out, msg_type t, const st_part *p, int rc, int hint)
{
    mp_buf_free(out);
    mp_buf_init(out);
    msg_encode_not_served(t, "partition", p->id, rc, (uint64_t)hint, out);
}

/* Set once the node holds a replicated partition: its reads then wait for
 * a leadership check, so they are not quick (run on the receiving thread). */
static atomic_bool any_replicated;

static st_part *find_part(st_node *n, uint64_t id)
{
    for (int i = 0; i < n->nparts; i++)
        if (n->parts[i]->id == id)
            return n->parts[i];
    return NULL;
}

static void do_heads(st_node *n, mp_buf *out)
{
    uint64_t *parts = calloc((size_t)n->nparts + 1, sizeof(*parts));
    uint64_t *heads = calloc((size_t)n->nparts + 1, sizeof(*heads));
    msg_S_HEADS_rep rep;

    if (parts == NULL || heads == NULL) {
        reply_err(out, MSG_S_HEADS, SX_ENOMEM, "out of memory");
        goto out;
    }
    int m = 0;
    for (int i = 0; i < n->nparts; i++) {
        int hint;

        /* a replicated partition's head is its leader's, once confirmed */
        if (st_part_read_barrier(n->parts[i], &hint) != 0)
            continue;
        parts[m] = n->parts[i]->id;
        st_part_stats(n->parts[i], &heads[m], NULL, NULL, NULL);
        m++;
    }
    memset(&rep, 0, sizeof(rep));
    rep.parts.n = rep.heads.n = (uint32_t)m;
    rep.parts.v = parts;
    rep.heads.v = heads;
    if (msg_encode_rep(MSG_S_HEADS, &rep, out) != 0)
        reply_err(out, MSG_S_HEADS, SX_ENOMEM, "out of memory");
out:
    free(parts);
    free(heads);
}

static void do_status(st_node *n, mp_buf *out)
{
    const cfg_node *me = &n->cfg->nodes[n->o->self];
    msg_NODE_STATUS_rep rep;
    mp_buf st;

    mp_buf groups;
    mp_buf_init(&groups);
    bool with_groups = n->repl != NULL && repl_status(n->repl, &groups) == 0;
    mp_buf_init(&st);
    mp_put_map(&st, with_groups ? 9 : 8);
    if (with_groups) { /* its replicas of replicated groups */
        mp_put_cstr(&st, "groups");
        mp_put_raw(&st, groups.sb.data, groups.sb.size);
    }
    mp_buf_free(&groups);
    mp_put_cstr(&st, "name");
    mp_put_cstr(&st, me->name);
    mp_put_cstr(&st, "links_authenticated");
    mp_put_bool(&st, link_auth_enabled());
    mp_put_cstr(&st, "role");
    mp_put_cstr(&st, "storage");
    st_filter_status(n->store, &st);
    cstats_put(&n->store->commits, &st);
    mp_put_cstr(&st, "writes_past_deadline");
    mp_put_u64(&st, __atomic_load_n(&n->store->late, __ATOMIC_RELAXED));
    mp_put_cstr(&st, "url");
    mp_put_cstr(&st, me->url);
    mp_put_cstr(&st, "partitions");
    mp_put_array(&st, (uint32_t)n->nparts);
    bool refused = ldb_failed(n->store->db); /* one store for every partition */
    for (int i = 0; i < n->nparts; i++) {
        uint64_t head, hw, items, outbox;
        st_build b;

        st_part_stats(n->parts[i], &head, &hw, &items, &outbox);
        st_part_build(n->parts[i], &b);
        mp_put_map(&st, (b.active ? 9 : 5) + (refused ? 1 : 0));
        if (refused) { /* a disk error: ldb.h */
            mp_put_cstr(&st, "writes_refused");
            mp_put_bool(&st, true);
        }
        mp_put_cstr(&st, "id");
        mp_put_u64(&st, n->parts[i]->id);
        mp_put_cstr(&st, "items");
        mp_put_u64(&st, items);
        mp_put_cstr(&st, "outbox");
        mp_put_u64(&st, outbox);
        mp_put_cstr(&st, "head");
        mp_put_u64(&st, head);
        mp_put_cstr(&st, "hw");
        mp_put_u64(&st, hw);
        if (b.active) {
            mp_put_cstr(&st, "building");
            mp_put_cstr(&st, b.indexes);
            mp_put_cstr(&st, "build_scanned");
            mp_put_u64(&st, b.scanned);
            mp_put_cstr(&st, "build_emitted");
            mp_put_u64(&st, b.emitted);
            mp_put_cstr(&st, "build_runs");
            mp_put_u64(&st, b.runs);
        }
    }
    memset(&rep, 0, sizeof(rep));
    rep.status.p = (const uint8_t *)st.sb.data;
    rep.status.n = st.sb.size;
    if (st.oom || msg_encode_rep(MSG_NODE_STATUS, &rep, out) != 0)
        reply_err(out, MSG_NODE_STATUS, SX_ENOMEM, "out of memory");
    mp_buf_free(&st);
}

static void do_ping(st_node *n, mp_buf *out)
{
    const char *name = n->cfg->nodes[n->o->self].name;
    msg_PING_rep rep;

    memset(&rep, 0, sizeof(rep));
    rep.role.p = (const uint8_t *)"storage";
    rep.role.n = 7;
    rep.name.p = (const uint8_t *)name;
    rep.name.n = strlen(name);
    if (msg_encode_rep(MSG_PING, &rep, out) != 0)
        reply_err(out, MSG_PING, SX_ENOMEM, "out of memory");
}

/* Decoded partition requests. */
typedef union st_req {
    msg_S_WRITE_req w;
    msg_S_GET_req g;
    msg_S_RANGE_req r;
} st_req;

static void do_part(st_node *n, msg_type t, const uint8_t *req, size_t len, mp_buf *out)
{
    st_req u;
    st_part *p;
    uint64_t part;
    char msg[96];
    int rc;

    memset(&u, 0, sizeof(u));
    rc = msg_decode_req(t, req, len, &u);
    if (rc != 0) {
        reply_err(out, t, rc, "malformed request");
        goto out;
    }
    part = t == MSG_S_WRITE ? u.w.part : t == MSG_S_GET ? u.g.part : u.r.part;
    p = find_part(n, part);
    if (p == NULL) {
        snprintf(msg, sizeof(msg), "partition %llu is not on this node", (unsigned long long)part);
        reply_err(out, t, SX_EWRONGPART, msg);
        goto out;
    }
    int hint, brc;

    if (t != MSG_S_WRITE && (brc = st_part_read_barrier(p, &hint)) != 0) {
        reply_not_served(out, t, p, brc, hint);
        goto out;
    }
    if (t == MSG_S_WRITE)
        st_write(p, &u.w, out);
    else if (t == MSG_S_GET)
        st_get(p, &u.g, out);
    else
        st_range(p, &u.r, out);
    if (out->oom)
        reply_err(out, t, SX_ENOMEM, "out of memory");
out:
    msg_free_req(t, &u);
}

static void handle(void *arg, const uint8_t *req, size_t len, mp_buf *out)
{
    st_node *n = arg;
    msg_type t = MSG_PING;
    int is_reply = 0;
    int rc = msg_peek(req, len, &t, &is_reply);

    if (rc != 0 || is_reply) {
        reply_err(out, rc == 0 ? t : MSG_PING, rc ? rc : SX_EPROTO, "malformed request frame");
        return;
    }
    switch (t) {
    case MSG_PING: do_ping(n, out); break;
    case MSG_CATALOG:
    case MSG_CAT_UPDATE:
    case MSG_CAT_BACKFILLED:
        if (n->catrepl != NULL) /* served through Raft (defer); this one did not decode */
            reply_err(out, t, SX_EPROTO, "malformed catalog request");
        else if (n->catp != NULL)
            catp_handle(n->catp, t, req, len, out);
        else
            reply_err(out, t, SX_EINVAL, "this storage node does not host the catalog");
        break;
    case MSG_S_WRITE:
    case MSG_S_GET:
    case MSG_S_RANGE: do_part(n, t, req, len, out); break;
    case MSG_S_HEADS: do_heads(n, out); break;
    case MSG_R_PROBE:
    case MSG_R_JOIN:
        if (n->repl == NULL || !repl_handle(n->repl, t, req, len, out))
            reply_err(out, t, SX_EINVAL, "this node holds no replicated group");
        break;
    case MSG_NODE_STATUS: do_status(n, out); break;
    default: reply_err(out, t, SX_EINVAL, "message not served by a storage node"); break;
    }
}

/* Waits up to ST_POLL_MS on n->cv (under n->mu); false once stopping. */
static bool poll_wait(st_node *n)
{
    struct timespec ts;
    bool go;

    pthread_mutex_lock(&n->mu);
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += ST_POLL_MS * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    if (!n->stop)
        pthread_cond_timedwait(&n->cv, &n->mu, &ts);
    go = !n->stop;
    pthread_mutex_unlock(&n->mu);
    return go;
}

/* The node's catalog poll: refreshes the cache every ST_POLL_MS and wakes
 * the partitions' backfill threads. */
static void *poll_main(void *arg)
{
    st_node *n = arg;
    bool warned = false;

    os_thread_name("sx-poll");

    do {
        int rc = st_cat_refresh(n->cc);

        if (rc != 0 && !warned)
            LOG_WARN("catalog poll: %s (will retry)", sx_strerror(rc));
        warned = rc != 0;
        pthread_mutex_lock(&n->mu);
        pthread_cond_broadcast(&n->cv);
        pthread_mutex_unlock(&n->mu);
    } while (poll_wait(n));
    return NULL;
}

/* One partition's backfill driver: after each poll, steps the partition
 * against the newest cached catalog (partitions backfill in parallel). */
static void *bf_main(void *arg)
{
    st_bfthread *b = arg;
    st_node *n = b->n;

    os_thread_name("sx-backfill");

    while (poll_wait(n)) {
        const cat_catalog *cat = NULL;

        if (st_cat_get(n->cc, 0, &cat) == 0)
            bf_step(b->p, cat, n->catpeer);
    }
    return NULL;
}

/* Opens the links to the catalog's replicas (dialed in the background). */
static int dial_catalog(st_node *n)
{
    int rc = catclient_new(n->cfg, &n->catpeer);

    if (rc != 0)
        LOG_ERROR("cannot dial the catalog's nodes: %s", sx_strerror(rc));
    return rc;
}

/* Opens the node's store (DATA/store), copies into it the partition
 * directories of the per-partition layout (DATA/p<ID>) and opens the
 * partitions. */
static int open_parts(st_node *n)
{
    char dir[4096];
    struct stat st;
    int rc;

    n->parts = calloc((size_t)n->cfg->nstorage + 1, sizeof(*n->parts));
    if (n->parts == NULL)
        return SX_ENOMEM;
    snprintf(dir, sizeof(dir), "%s/store", n->o->data_dir);
    rc = st_store_open(dir, &n->store);
    if (rc == 0)
        rc = ixroute_new(n->cfg, &n->store->ixr);
    if (rc != 0)
        return rc;
    for (int i = 0; i < n->cfg->nstorage; i++) {
        const cfg_part *cp = &n->cfg->storage[i];

        if (!cfg_part_on(cp, n->o->self))
            continue;
        snprintf(dir, sizeof(dir), "%s/p%llu", n->o->data_dir, (unsigned long long)cp->id);
        if (stat(dir, &st) == 0 && (rc = st_store_migrate(n->store, dir, cp->id)) != 0)
            return rc;
        rc = st_part_open(n->cfg, cp, n->cc, n->store, &n->parts[n->nparts]);
        if (rc != 0)
            return rc;
        n->nparts++;
    }
    return st_store_start(n->store, n->parts, n->nparts);
}

/* Point reads of facts and the heads: local, short, never waiting (but
 * on a node with replicated partitions, where they wait for a leadership
 * check). */
static bool quick(msg_type t)
{
    if (t == MSG_PING)
        return true;
    return (t == MSG_S_GET || t == MSG_S_HEADS) && !atomic_load(&any_replicated);
}

/* Makes each replicated partition of the node a replica of its group. */
static int replicate_parts(st_node *n)
{
    for (int i = 0; i < n->nparts; i++) {
        const cfg_part *cp = NULL;
        int rc;

        for (int k = 0; k < n->cfg->nstorage; k++)
            if (n->cfg->storage[k].id == n->parts[i]->id)
                cp = &n->cfg->storage[k];

        if (cp == NULL || cp->nrep < 2)
            continue;
        atomic_store(&any_replicated, true);
        rc = st_part_replicate(n->parts[i], n->repl, cp, n->o->data_dir);
        if (rc != 0) {
            LOG_ERROR("partition %llu: cannot load its replica: %s", (unsigned long long)cp->id,
                      sx_strerror(rc));
            return rc;
        }
    }
    return 0;
}

/* True when node self holds a replica of a replicated group. */
static bool holds_groups(const cfg_cluster *cfg, int self)
{
    if (cfg_catalog_on(cfg, self) && cfg->ncatalog > 1)
        return true;
    for (int i = 0; i < cfg->nstorage; i++)
        if (cfg->storage[i].nrep > 1 && cfg_part_on(&cfg->storage[i], self))
            return true;
    return false;
}

/* A deferred S_WRITE: its decoded request lives until the reply. */
typedef struct st_deferred {
    msg_S_WRITE_req rq;
    net_reply *r;
} st_deferred;

static void deferred_done(void *arg, mp_buf *reply)
{
    st_deferred *d = arg;

    net_reply_send(d->r, reply);
    msg_free_req(MSG_S_WRITE, &d->rq);
    free(d);
}

/* The server's defer function: an S_WRITE is validated and queued for its
 * partition, for the node's committer, right here, and answered by the committer. Anything
 * unusual (malformed, unknown partition, catalog not cached, out of
 * memory) is declined and runs on a worker, which answers it. */
static bool defer(void *arg, msg_type t, const uint8_t *req, size_t len, net_reply *r)
{
    st_node *n = arg;
    st_deferred *d;
    st_part *p;

    if (n->repl != NULL && repl_defer(n->repl, t, req, len, r))
        return true;
    if (n->catrepl != NULL && catrepl_defer(n->catrepl, t, req, len, r))
        return true;
    if (t != MSG_S_WRITE || (d = calloc(1, sizeof(*d))) == NULL)
        return false;
    d->r = r;
    if (msg_decode_req(MSG_S_WRITE, req, len, &d->rq) != 0 ||
        (p = find_part(n, d->rq.part)) == NULL || !st_write_start(p, &d->rq, deferred_done, d)) {
        msg_free_req(MSG_S_WRITE, &d->rq);
        free(d);
        return false;
    }
    return true;
}

static int start(st_node *n)
{
    const cfg_node *me = &n->cfg->nodes[n->o->self];
    char dir[4096];
    int rc;

    if (cfg_catalog_on(n->cfg, n->o->self)) {
        snprintf(dir, sizeof(dir), "%s/catalog", n->o->data_dir);
        rc = catp_open(dir, n->cfg, &n->catp);
        if (rc != 0)
            return rc;
    }
    if (holds_groups(n->cfg, n->o->self)) {
        rc = repl_open(n->cfg, n->o->self, n->o->data_dir, n->o->bootstrap, &n->repl);
        if (rc != 0)
            return rc;
    }
    if (n->catp != NULL && n->cfg->ncatalog > 1) {
        snprintf(dir, sizeof(dir), "%s/catalog.raft", n->o->data_dir);
        rc = catrepl_start(n->catp, n->repl, n->cfg, dir, &n->catrepl);
        if (rc != 0)
            return rc;
    }
    /* a replica of a replicated catalog may lag its leader: the node reads
     * the catalog as everyone does, from the leader */
    rc = st_cat_new(n->cfg, n->catrepl != NULL ? NULL : n->catp, &n->cc);
    if (rc == 0)
        rc = open_parts(n);
    if (rc == 0)
        rc = replicate_parts(n);
    if (rc == 0)
        rc = dial_catalog(n);
    if (rc != 0)
        return rc;
    /* before the server: a commit notifies p->ship, set from here on */
    rc = ship_start(n->parts, n->nparts, n->cfg, &n->ship);
    if (rc != 0)
        return rc;
    int workers = n->o->workers > 0 ? n->o->workers : 16;
    net_server_opts so = { .workers = workers, .quick = quick, .defer = defer };
    rc = net_server_open_link(me->url, &so, handle, n, &n->srv);
    if (rc != 0) {
        LOG_ERROR("cannot listen on %s: %s", me->url, sx_strerror(rc));
        return rc;
    }
    /* the router this node hosts (config "host"): its calls to this node
     * go straight to n->srv */
    for (int i = 0; i < n->cfg->nnodes; i++)
        if (n->cfg->nodes[i].role == SX_ROLE_ROUTER && n->cfg->nodes[i].host == n->o->self &&
            n->o->hosted.start != NULL) {
            if ((rc = n->o->hosted.start(n->o->hosted.arg, n->cfg, i, n->srv)) != 0)
                return rc;
            n->hosting = true;
        }
    if (pthread_create(&n->poll_th, NULL, poll_main, n) != 0)
        return SX_EINTERNAL;
    n->poll_started = true;
    n->bf = calloc((size_t)n->nparts + 1, sizeof(*n->bf));
    if (n->bf == NULL)
        return SX_ENOMEM;
    for (int i = 0; i < n->nparts; i++) {
        n->bf[i].n = n;
        n->bf[i].p = n->parts[i];
        if (pthread_create(&n->bf[i].th, NULL, bf_main, &n->bf[i]) != 0)
            return SX_EINTERNAL;
        n->bf[i].started = true;
    }
    return 0;
}

static void stop(st_node *n)
{
    /* first: the router's calls in hand need this node's server */
    if (n->hosting)
        n->o->hosted.stop(n->o->hosted.arg);
    n->hosting = false;
    pthread_mutex_lock(&n->mu);
    n->stop = true;
    pthread_cond_broadcast(&n->cv);
    pthread_mutex_unlock(&n->mu);
    if (n->poll_started)
        pthread_join(n->poll_th, NULL);
    for (int i = 0; n->bf && i < n->nparts; i++)
        if (n->bf[i].started)
            pthread_join(n->bf[i].th, NULL);
    free(n->bf);
    for (int i = 0; i < n->nparts; i++) {
        pthread_mutex_lock(&n->parts[i]->mu);
        n->parts[i]->stopping = true;
        pthread_mutex_unlock(&n->parts[i]->mu);
    }
    /* the catalog replica's requests in hand are answered (RHOST_GONE) as
     * its loop stops, so the server's stop does not wait for them */
    catrepl_quiesce(n->catrepl);
    repl_stop(n->repl);
    net_server_stop(n->srv);
    ship_stop(n->ship);         /* fails its calls in flight at once */
    catclient_free(n->catpeer); /* the backfill threads that used it are gone */
    st_store_stop(n->store);    /* commits what is queued (a replicated
                                 * partition's is refused: its loop stopped) */
    for (int i = 0; i < n->nparts; i++)
        st_part_close(n->parts[i]);
    st_store_close(n->store);
    repl_close(n->repl); /* after every user of its groups */
    catrepl_free(n->catrepl);
    free(n->parts);
    st_cat_free(n->cc);
    catp_close(n->catp);
}

int st_node_run(const node_opts *o)
{
    st_node n;
    int rc;

    memset(&n, 0, sizeof(n));
    n.o = o;
    n.cfg = o->cfg;
    pthread_mutex_init(&n.mu, NULL);
    pthread_cond_init(&n.cv, NULL);
    rc = start(&n);
    if (rc == 0) {
        LOG_INFO("storage node %s serving %d partitions on %s%s", n.cfg->nodes[o->self].name,
                 n.nparts, n.cfg->nodes[o->self].url,
                 n.catrepl ? " (and a replica of the catalog)"
                 : n.catp  ? " (and the catalog)"
                           : "");
        printf("ready\n");
        fflush(stdout);
        while (!node_should_stop() && !repl_failed(n.repl)) {
            struct timespec ts = { 0, 50 * 1000000L };

            nanosleep(&ts, NULL);
        }
        if (repl_failed(n.repl))
            rc = SX_EIO; /* fail-stop: logged by the replication service */
        LOG_INFO("stopping");
        net_shutdown_guard(NET_SHUTDOWN_GRACE_S);
    } else {
        LOG_ERROR("storage node start-up failed: %s", sx_strerror(rc));
    }
    stop(&n);
    pthread_cond_destroy(&n.cv);
    pthread_mutex_destroy(&n.mu);
    return rc;
}
