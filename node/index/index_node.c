/*
 * index_node.c — the index role of shardex-node: opens this node's index
 * partitions, serves I_APPLY, I_BUILD, I_RANGE, I_WATERMARKS, NODE_STATUS and PING
 * on the node's URL, and runs the collector until stopped: tombstones every
 * second, and every DROP_CHECK_MS the entries of dropped indexes (it
 * fetches the catalog from the catalog node to know them).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "node.h"
#include "catalog_cache.h"
#include "index_part.h"
#include "ix_epoch.h"
#include "keyfilter_load.h"
#include "link_auth.h"
#include "log.h"
#include "net.h"
#include "repl.h"
#include "sx_errors.h"

#define GC_INTERVAL_MS 1000
#define GC_MAX_BATCHES 16
#define DROP_CHECK_MS 5000
#define DROP_MAX_BATCHES 64 /* of 1,000 entries, per partition and round */

typedef struct ix_node {
    const cfg_cluster *cfg;
    const cfg_node *self;
    int nparts;
    ix_part **parts; /* immutable after start-up */
    repl *repl;      /* its replicated partitions' Raft groups, or NULL */

    pthread_mutex_t gc_mu; /* guards gc_stop */
    pthread_cond_t gc_cv;
    bool gc_stop;
    pthread_t gc_thread;
    catcache *cc;            /* the catalog, for dropped indexes (gc thread) */
    bool cat_failing;        /* gc thread only: log once per outage */
    uint64_t drop_last_ms;   /* gc thread only */
    uint64_t epoch;          /* never 0: I_BUILD's reply (ix_epoch.h) */
    bool epoch_kept;         /* taken from the last clean stop */
    bool drop_unfinished;    /* gc thread only: the last round ran out of
                              * batches; the next runs at the next tick */
    uint64_t drop_catver;    /* catalog version of the last finished drop
                              * round (0: none yet); atomic */
    uint64_t drop_collected; /* entries of dropped indexes collected since
                              * start; atomic */
} ix_node;

static ix_part *find_part(ix_node *nd, uint64_t id)
{
    int i;

    for (i = 0; i < nd->nparts; i++)
        if (nd->parts[i]->id == id)
            return nd->parts[i];
    return NULL;
}

/* Set once the node holds a replicated partition: its reads then wait for
 * a leadership check, so they are not quick. */
static atomic_bool any_replicated;

/* An error reply for partition p's request of type t: SX_ENOTLEADER names
 * the node leading p's group (when known), so the caller goes there. */
static void encode_part_err(const ix_part *p, msg_type t, int err, const char *msg, mp_buf *out)
{
    if (err == SX_ENOTLEADER)
        msg_encode_err_hint(t, err, msg, p != NULL ? (uint64_t)ix_part_leader_hint(p) : 0, out);
    else
        msg_encode_err(t, err, msg, out);
}

/* Before a read of replicated partition p: its leadership confirmed, else
 * the error reply in out and false. */
static bool read_ok(ix_part *p, msg_type t, mp_buf *out)
{
    int hint, rc = ix_part_read_barrier(p, &hint);

    if (rc != 0)
        msg_encode_not_served(t, "index partition", p->id, rc, (uint64_t)hint, out);
    return rc == 0;
}

/* ---- handlers: each appends one reply frame to out ---- */

static void do_ping(ix_node *nd, mp_buf *out)
{
    msg_PING_rep rep;

    memset(&rep, 0, sizeof(rep));
    rep.role = (mp_span){ (const uint8_t *)"index", 5 };
    rep.name = (mp_span){ (const uint8_t *)nd->self->name, strlen(nd->self->name) };
    msg_encode_rep(MSG_PING, &rep, out);
}

/* An I_BUILD's fields as the I_APPLY they share (msg.h); lists borrowed. */
static void build_view(const msg_I_BUILD_req *b, msg_I_APPLY_req *a)
{
    memset(a, 0, sizeof(*a));
    a->part = b->part;
    a->source = b->source;
    a->upto = b->upto;
    a->hw = b->hw;
    a->seqs = b->seqs;
    a->kinds = b->kinds;
    a->versions = b->versions;
    a->keys = b->keys;
    a->hashes = b->hashes;
    a->projs = b->projs;
}

/* Encodes the reply of an applied I_APPLY or (t == MSG_I_BUILD) I_BUILD:
 * the source's watermark wm, and an I_APPLY's synced one or an I_BUILD's
 * node epoch. */
static int apply_rep(msg_type t, uint64_t wm, uint64_t synced, uint64_t epoch, mp_buf *out)
{
    if (t == MSG_I_BUILD) {
        msg_I_BUILD_rep rep = { .watermark = wm, .epoch = epoch };

        return msg_encode_rep(t, &rep, out);
    }
    msg_I_APPLY_rep rep = { .watermark = wm, .synced = synced };

    return msg_encode_rep(t, &rep, out);
}

/* I_APPLY or (t == MSG_I_BUILD) I_BUILD m, waiting for its group. */
static void apply_sync(ix_node *nd, msg_type t, const msg_I_APPLY_req *m, mp_buf *out)
{
    ix_part *p = find_part(nd, m->part);
    uint64_t wm = 0, synced = 0;
    char err[200];
    int rc;

    if (p == NULL) {
        msg_encode_err(t, SX_EWRONGPART, "index partition not on this node", out);
        return;
    }
    rc = ix_part_apply(p, m, t == MSG_I_BUILD, &wm, &synced, err, sizeof(err));
    if (rc != 0) {
        if (rc != SX_ENOTLEADER)
            LOG_WARN("%s p%llu from %llu: %s", msg_name(t), (unsigned long long)m->part,
                     (unsigned long long)m->source, err);
        encode_part_err(p, t, rc, err, out);
        return;
    }
    if (apply_rep(t, wm, synced, nd->epoch, out) != 0 || out->oom) {
        mp_buf_free(out);
        mp_buf_init(out);
        msg_encode_err(t, SX_ENOMEM, "out of memory", out);
    }
}

static void do_apply(ix_node *nd, const msg_I_APPLY_req *m, mp_buf *out)
{
    apply_sync(nd, MSG_I_APPLY, m, out);
}

/* The refusal of an I_BUILD whose sender does not promise to seal it. */
#define UNSEALED_SENDER "a build's sender must seal it (seals = 1: proto/PROTOCOL.md)"

static void do_build(ix_node *nd, const msg_I_BUILD_req *b, mp_buf *out)
{
    msg_I_APPLY_req m;

    if (b->seals != 1) {
        msg_encode_err(MSG_I_BUILD, SX_EINVAL, UNSEALED_SENDER, out);
        return;
    }
    build_view(b, &m);
    apply_sync(nd, MSG_I_BUILD, &m, out);
}

static void do_range(ix_node *nd, const msg_I_RANGE_req *m, mp_buf *out)
{
    ix_part *p = find_part(nd, m->part);

    if (p == NULL) {
        msg_encode_err(MSG_I_RANGE, SX_EWRONGPART, "index partition not on this node", out);
        return;
    }
    if (read_ok(p, MSG_I_RANGE, out))
        ix_part_range(p, m, out);
}

static void do_watermarks(ix_node *nd, const msg_I_WATERMARKS_req *m, mp_buf *out)
{
    ix_part *p = find_part(nd, m->part);
    msg_I_WATERMARKS_rep rep;
    uint64_t *wm;

    if (p == NULL) {
        msg_encode_err(MSG_I_WATERMARKS, SX_EWRONGPART, "index partition not on this node", out);
        return;
    }
    if (!read_ok(p, MSG_I_WATERMARKS, out))
        return;
    wm = calloc((size_t)p->nsrc + 1, sizeof(*wm));
    if (wm == NULL) {
        msg_encode_err(MSG_I_WATERMARKS, SX_ENOMEM, "out of memory", out);
        return;
    }
    ix_part_state(p, NULL, NULL, wm, NULL);
    memset(&rep, 0, sizeof(rep));
    rep.sources = (msg_u64s){ (uint32_t)p->ncfg, p->src }; /* config sources first */
    rep.wms = (msg_u64s){ (uint32_t)p->ncfg, wm };
    msg_encode_rep(MSG_I_WATERMARKS, &rep, out);
    free(wm);
}

/* Appends one partition's status map. */
static int status_part(ix_part *p, mp_buf *b)
{
    uint64_t entries, tombs, *wm = calloc((size_t)p->nsrc + 1, sizeof(*wm));
    int s;

    if (wm == NULL)
        return SX_ENOMEM;
    bool refused = ldb_failed(p->db);

    ix_part_state(p, &entries, &tombs, wm, NULL);
    mp_put_map(b, refused ? 8 : 7);
    if (refused) { /* a disk error: ldb.h */
        mp_put_cstr(b, "writes_refused");
        mp_put_bool(b, true);
    }
    kf_status(p->kf, b);
    cstats_put(&p->commits, b);
    mp_put_cstr(b, "builds"); /* index_part.h: unsealed groups, seals */
    mp_put_map(b, 3);
    mp_put_cstr(b, "unsynced_groups");
    mp_put_u64(b, __atomic_load_n(&p->lazy_groups, __ATOMIC_RELAXED));
    mp_put_cstr(b, "seals");
    mp_put_u64(b, __atomic_load_n(&p->seals, __ATOMIC_RELAXED));
    mp_put_cstr(b, "logs_synced");
    mp_put_u64(b, __atomic_load_n(&p->logs_synced, __ATOMIC_RELAXED));
    mp_put_cstr(b, "id");
    mp_put_u64(b, p->id);
    mp_put_cstr(b, "entries");
    mp_put_u64(b, entries);
    mp_put_cstr(b, "tombstones");
    mp_put_u64(b, tombs);
    mp_put_cstr(b, "watermarks");
    mp_put_array(b, (uint32_t)p->nsrc);
    for (s = 0; s < p->nsrc; s++) {
        mp_put_array(b, 2);
        mp_put_u64(b, p->src[s]);
        mp_put_u64(b, wm[s]);
    }
    free(wm);
    return 0;
}

static void do_status(ix_node *nd, mp_buf *out)
{
    msg_NODE_STATUS_rep rep;
    char epoch[17];
    mp_buf b;
    int i, rc = 0;

    mp_buf groups;
    mp_buf_init(&groups);
    bool with_groups = nd->repl != NULL && repl_status(nd->repl, &groups) == 0;

    mp_buf_init(&b);
    mp_put_map(&b, with_groups ? 10 : 9);
    if (with_groups) {
        mp_put_cstr(&b, "groups");
        mp_put_raw(&b, (const uint8_t *)groups.sb.data, groups.sb.size);
    }
    mp_buf_free(&groups);
    mp_put_cstr(&b, "name");
    mp_put_cstr(&b, nd->self->name);
    mp_put_cstr(&b, "links_authenticated");
    mp_put_bool(&b, link_auth_enabled());
    mp_put_cstr(&b, "role");
    mp_put_cstr(&b, "index");
    mp_put_cstr(&b, "url");
    mp_put_cstr(&b, nd->self->url);
    mp_put_cstr(&b, "dropped_catalog");
    mp_put_u64(&b, __atomic_load_n(&nd->drop_catver, __ATOMIC_RELAXED));
    mp_put_cstr(&b, "dropped_collected");
    mp_put_u64(&b, __atomic_load_n(&nd->drop_collected, __ATOMIC_RELAXED));
    snprintf(epoch, sizeof(epoch), "%016llx", (unsigned long long)nd->epoch);
    mp_put_cstr(&b, "epoch");
    mp_put_cstr(&b, epoch);
    mp_put_cstr(&b, "epoch_kept");
    mp_put_bool(&b, nd->epoch_kept);
    mp_put_cstr(&b, "partitions");
    mp_put_array(&b, (uint32_t)nd->nparts);
    for (i = 0; i < nd->nparts && rc == 0; i++)
        rc = status_part(nd->parts[i], &b);
    if (rc != 0 || b.oom) {
        msg_encode_err(MSG_NODE_STATUS, SX_ENOMEM, "out of memory", out);
    } else {
        memset(&rep, 0, sizeof(rep));
        rep.status = (mp_span){ (const uint8_t *)b.sb.data, b.sb.size };
        msg_encode_rep(MSG_NODE_STATUS, &rep, out);
    }
    mp_buf_free(&b);
}

/* Decodes a request of message T into its struct, runs FN on it (or answers
 * the decode error), and frees the decoded lists. Uses req, n, nd, out. */
#define IX_DISPATCH(T, FN)                                                 \
    do {                                                                   \
        msg_##T##_req m_;                                                  \
        int rc_ = msg_decode_req(MSG_##T, req, n, &m_);                    \
        if (rc_ != 0) {                                                    \
            msg_encode_err(MSG_##T, rc_, "malformed " #T " request", out); \
        } else {                                                           \
            FN(nd, &m_, out);                                              \
        }                                                                  \
        msg_free_req(MSG_##T, &m_);                                        \
    } while (0)

static void ix_handle(void *arg, const uint8_t *req, size_t n, mp_buf *out)
{
    ix_node *nd = arg;
    msg_type t;
    int is_reply = 0, rc;

    rc = msg_peek(req, n, &t, &is_reply);
    if (rc != 0 || is_reply) {
        msg_encode_err(rc == 0 ? t : MSG_PING, rc ? rc : SX_EPROTO, "not a request frame", out);
        return;
    }
    switch (t) {
    case MSG_PING: do_ping(nd, out); break;
    case MSG_NODE_STATUS: do_status(nd, out); break;
    case MSG_I_APPLY: IX_DISPATCH(I_APPLY, do_apply); break;
    case MSG_I_BUILD: IX_DISPATCH(I_BUILD, do_build); break;
    case MSG_I_RANGE: IX_DISPATCH(I_RANGE, do_range); break;
    case MSG_I_WATERMARKS: IX_DISPATCH(I_WATERMARKS, do_watermarks); break;
    case MSG_R_PROBE:
    case MSG_R_JOIN:
        if (nd->repl == NULL || !repl_handle(nd->repl, t, req, n, out))
            msg_encode_err(t, SX_EINVAL, "this node holds no replicated group", out);
        break;
    default: msg_encode_err(t, SX_EINVAL, "message not served by an index node", out); break;
    }
}

/* ---- collectors: tombstones, dropped indexes ---- */

/* Every DROP_CHECK_MS (every tick while a round leaves work behind):
 * fetches the catalog and collects dropped indexes' entries in every
 * partition. An unreachable catalog node skips the round (logged once per
 * outage): nothing is collected without a fresh catalog. */
static void drop_round(ix_node *nd)
{
    const cat_catalog *cat = NULL;
    uint64_t now = (uint64_t)os_mono_ms();
    int rc;

    if (!nd->drop_unfinished && now < nd->drop_last_ms + DROP_CHECK_MS)
        return;
    nd->drop_last_ms = now;
    rc = catcache_refresh(nd->cc);
    if (rc == 0)
        rc = catcache_get(nd->cc, 0, &cat);
    if (rc != 0) {
        if (!nd->cat_failing)
            LOG_WARN("index node %s: cannot read the catalog (%s): dropped indexes "
                     "are collected once it can",
                     nd->self->name, sx_strerror(rc));
        nd->cat_failing = true;
        return;
    }
    nd->cat_failing = false;
    nd->drop_unfinished = false;
    for (int i = 0; i < nd->nparts; i++) {
        uint64_t n = 0;
        bool unfinished = false;

        rc = ix_part_drop_gc(nd->parts[i], cat, DROP_MAX_BATCHES, &n, &unfinished);
        nd->drop_unfinished |= unfinished;
        __atomic_add_fetch(&nd->drop_collected, n, __ATOMIC_RELAXED);
        if (rc != 0)
            LOG_WARN("index p%llu: collecting dropped indexes: %s",
                     (unsigned long long)nd->parts[i]->id, sx_strerror(rc));
    }
    __atomic_store_n(&nd->drop_catver, cat->version, __ATOMIC_RELAXED);
}

static void *gc_main(void *arg)
{
    ix_node *nd = arg;
    struct timespec ts;
    int i;

    os_thread_name("sx-ix-gc");

    pthread_mutex_lock(&nd->gc_mu);
    while (!nd->gc_stop) {
        os_deadline_in(&ts, CLOCK_REALTIME, GC_INTERVAL_MS);
        pthread_cond_timedwait(&nd->gc_cv, &nd->gc_mu, &ts);
        if (nd->gc_stop)
            break;
        pthread_mutex_unlock(&nd->gc_mu);
        for (i = 0; i < nd->nparts; i++) {
            int rc = ix_part_gc(nd->parts[i], GC_MAX_BATCHES, NULL);

            if (rc != 0)
                LOG_WARN("index p%llu: tombstone collection: %s",
                         (unsigned long long)nd->parts[i]->id, sx_strerror(rc));
        }
        drop_round(nd);
        pthread_mutex_lock(&nd->gc_mu);
    }
    pthread_mutex_unlock(&nd->gc_mu);
    return NULL;
}

/* ---- start-up and shutdown ---- */

static int open_parts(ix_node *nd, const node_opts *o)
{
    const cfg_cluster *cfg = o->cfg;
    int i, rc;

    nd->parts = calloc((size_t)cfg->nindex + 1, sizeof(*nd->parts));
    if (nd->parts == NULL)
        return SX_ENOMEM;
    for (i = 0; i < cfg->nindex; i++) {
        if (!cfg_part_on(&cfg->index[i], o->self))
            continue;
        rc = ix_part_open(cfg, &cfg->index[i], o->data_dir, &nd->parts[nd->nparts]);
        if (rc != 0)
            return rc;
        nd->nparts++;
    }
    if (nd->nparts == 0)
        LOG_WARN("index node %s: no index partitions in the config", nd->self->name);
    return 0;
}

/* Closes every partition; true when each closed sealed (ix_part_close). */
static bool close_parts(ix_node *nd)
{
    bool sealed = true;
    int i;

    for (i = 0; i < nd->nparts; i++)
        if (!ix_part_close(nd->parts[i]))
            sealed = false;
    free(nd->parts);
    return sealed;
}

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

    nanosleep(&ts, NULL);
}

/* A deferred I_APPLY or I_BUILD: its decoded request lives until the
 * reply (an I_BUILD's in b, viewed as an I_APPLY in m). */
typedef struct ix_deferred {
    msg_type t;
    ix_part *p;
    uint64_t epoch; /* the node's */
    msg_I_APPLY_req m;
    msg_I_BUILD_req b;
    net_reply *r;
} ix_deferred;

static void deferred_free(ix_deferred *d)
{
    if (d->t == MSG_I_BUILD)
        msg_free_req(MSG_I_BUILD, &d->b);
    else
        msg_free_req(MSG_I_APPLY, &d->m);
    free(d);
}

static void deferred_done(void *arg, int err, uint64_t wm, uint64_t synced, const char *msg)
{
    ix_deferred *d = arg;
    mp_buf out;

    mp_buf_init(&out);
    if (err != 0) {
        if (err != SX_ENOTLEADER)
            LOG_WARN("%s p%llu from %llu: %s", msg_name(d->t), (unsigned long long)d->m.part,
                     (unsigned long long)d->m.source, msg);
        encode_part_err(d->p, d->t, err, msg, &out);
    } else {
        if (apply_rep(d->t, wm, synced, d->epoch, &out) != 0 || out.oom) {
            mp_buf_free(&out);
            mp_buf_init(&out);
            msg_encode_err(d->t, SX_ENOMEM, "out of memory", &out);
        }
    }
    net_reply_send(d->r, &out);
    mp_buf_free(&out);
    deferred_free(d);
}

/* The server's defer function: an I_APPLY or I_BUILD is validated and
 * queued for its partition's committer right here, and answered by the
 * committer. Anything else, and any of them that fails (malformed, unknown
 * partition, invalid, out of memory, stopping), is declined and runs on a
 * worker, which answers it with its error. */
static bool ix_defer(void *arg, msg_type t, const uint8_t *req, size_t len, net_reply *r)
{
    ix_node *nd = arg;
    ix_deferred *d;
    ix_part *p;
    char err[200];
    int rc;

    if (nd->repl != NULL && repl_defer(nd->repl, t, req, len, r))
        return true;
    if ((t != MSG_I_APPLY && t != MSG_I_BUILD) || (d = calloc(1, sizeof(*d))) == NULL)
        return false;
    d->t = t;
    d->epoch = nd->epoch;
    d->r = r;
    if (t == MSG_I_BUILD) {
        rc = msg_decode_req(MSG_I_BUILD, req, len, &d->b);
        if (rc == 0 && d->b.seals != 1)
            rc = SX_EINVAL; /* a worker answers it (do_build) */
        build_view(&d->b, &d->m);
    } else {
        rc = msg_decode_req(MSG_I_APPLY, req, len, &d->m);
    }
    if (rc != 0 || (p = d->p = find_part(nd, d->m.part)) == NULL ||
        ix_part_apply_start(p, &d->m, t == MSG_I_BUILD, deferred_done, d, err, sizeof(err)) != 0) {
        deferred_free(d);
        return false;
    }
    return true;
}

/* Index range reads and watermarks: local, short, never waiting. */
static bool ix_quick(msg_type t)
{
    if (t == MSG_PING)
        return true;
    return (t == MSG_I_RANGE || t == MSG_I_WATERMARKS) && !atomic_load(&any_replicated);
}

/* Opens the node's replication service when it holds a replicated
 * partition, and makes each such partition a replica of its group. */
static int replicate_parts(ix_node *nd, const node_opts *o)
{
    bool any = false;
    int rc;

    for (int i = 0; i < nd->nparts; i++)
        any = any || nd->parts[i]->cp->nrep > 1;
    if (!any)
        return 0;
    atomic_store(&any_replicated, true);
    rc = repl_open(o->cfg, o->self, o->data_dir, o->bootstrap, &nd->repl);
    for (int i = 0; rc == 0 && i < nd->nparts; i++) {
        if (nd->parts[i]->cp->nrep < 2)
            continue;
        rc = ix_part_replicate(nd->parts[i], nd->repl, o->data_dir);
        if (rc != 0)
            LOG_ERROR("index p%llu: cannot load its replica: %s",
                      (unsigned long long)nd->parts[i]->id, sx_strerror(rc));
    }
    return rc;
}

int ix_node_run(const node_opts *o)
{
    ix_node nd;
    net_server *srv = NULL;
    bool gc_started = false, kept = false, stopping = false;
    int rc;

    memset(&nd, 0, sizeof(nd));
    nd.cfg = o->cfg;
    nd.self = &o->cfg->nodes[o->self];
    pthread_mutex_init(&nd.gc_mu, NULL);
    pthread_cond_init(&nd.gc_cv, NULL);
    if (nd.self->role != SX_ROLE_INDEX) {
        LOG_ERROR("node %s is not an index node in the config", nd.self->name);
        rc = SX_ECONFIG;
        goto out;
    }
    ix_epoch_take(o->data_dir, &nd.epoch, &kept);
    rc = open_parts(&nd, o);
    if (rc != 0)
        goto out;
    for (int i = 0; kept && i < nd.nparts; i++)
        if (nd.parts[i]->recovered) { /* a marker though the stop was clean: a */
            ix_epoch_draw(&nd.epoch); /* copied folder, or a tool; unsealed records */
            kept = false;             /* may be gone: the builds must start again */
            LOG_WARN("index node %s: partition %llu held unsealed build records though the "
                     "last stop kept the epoch: drawing a new one",
                     nd.self->name, (unsigned long long)nd.parts[i]->id);
        }
    nd.epoch_kept = kept;
    LOG_INFO("index node %s: epoch %016llx (%s)", nd.self->name, (unsigned long long)nd.epoch,
             kept ? "kept from a clean stop: builds running meanwhile go on"
                  : "new: builds running meanwhile start again");
    rc = replicate_parts(&nd, o);
    if (rc != 0)
        goto out;
    rc = catcache_new(o->cfg, &nd.cc);
    if (rc != 0)
        goto out;
    int workers = o->workers > 0 ? o->workers : 16;
    net_server_opts so = { .workers = workers, .quick = ix_quick, .defer = ix_defer };
    rc = net_server_open_link(nd.self->url, &so, ix_handle, &nd, &srv);
    if (rc != 0) {
        LOG_ERROR("index node %s: cannot listen on %s: %s", nd.self->name, nd.self->url,
                  sx_strerror(rc));
        goto out;
    }
    if (pthread_create(&nd.gc_thread, NULL, gc_main, &nd) != 0) {
        rc = SX_ENOMEM;
        goto out;
    }
    gc_started = true;
    LOG_INFO("index node %s serving %d partitions on %s", nd.self->name, nd.nparts, nd.self->url);
    printf("ready\n");
    fflush(stdout);
    while (!node_should_stop() && !repl_failed(nd.repl))
        sleep_ms(50);
    if (repl_failed(nd.repl))
        rc = SX_EIO; /* fail-stop: logged by the replication service */
    LOG_INFO("index node %s stopping", nd.self->name);
    net_shutdown_guard(NET_SHUTDOWN_GRACE_S);
    stopping = true;
out:
    /* the replicated partitions' requests in hand are answered as the loop
     * stops, so the server's stop does not wait for them */
    repl_stop(nd.repl);
    net_server_stop(srv);
    if (gc_started) {
        pthread_mutex_lock(&nd.gc_mu);
        nd.gc_stop = true;
        pthread_cond_signal(&nd.gc_cv);
        pthread_mutex_unlock(&nd.gc_mu);
        pthread_join(nd.gc_thread, NULL);
    }
    /* the epoch is kept only by a clean stop that left nothing unsealed */
    if (close_parts(&nd) && stopping && ix_epoch_keep(o->data_dir, nd.epoch) == 0)
        LOG_INFO("index node %s: every partition sealed, epoch kept for the next start",
                 nd.self->name);
    repl_close(nd.repl); /* after every user of its groups */
    catcache_free(nd.cc);
    pthread_mutex_destroy(&nd.gc_mu);
    pthread_cond_destroy(&nd.gc_cv);
    return rc;
}
