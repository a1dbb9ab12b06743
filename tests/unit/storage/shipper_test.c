/*
 * shipper_test.c — a storage partition's outbox shipped to an index
 * partition (node/storage/shipper.c) through a real shipper, to a scripted
 * index node served on an IPC link that applies I_APPLYs by the index's
 * rules (an I_APPLY whose `after` is past its watermark is refused "out of
 * order"; records at or below it are ignored; answered with the watermark,
 * everything synced) and fails the first FAILS rounds that carry records.
 * Checks:
 *   - every outbox record reaches the index partition, in seq order, none
 *     skipped: those of the failed rounds are sent again, and a round
 *     that starts right after the last one's upto starts at its first
 *     record;
 *   - once the index has them synced, the outbox is emptied: every record,
 *     the last round's included, is deleted from the partition.
 * Waits are for conditions, bounded by WAIT_MS.
 * Links node_storage. Argument: a scratch dir (default: a fresh mkdtemp under /tmp).
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include "check.h"
#include "catalog_part.h"
#include "config.h"
#include "hash.h"
#include "net.h"
#include "shipper.h"
#include "storage_cat.h"
#include "storage_part.h"
#include "storage_store.h"
#include "sx_errors.h"

#define DEST 101
#define FAILS 2
#define MAXSEQ 256
#define WAIT_MS 10000

/* The scripted index partition; guarded by mu (nng threads). */
typedef struct fake_ix {
    pthread_mutex_t mu;
    uint64_t wm;    /* of source 1 */
    int fails_left; /* rounds with records still to fail */
    int failed, refused, rounds;
    uint64_t applied[MAXSEQ];
    int napplied;
    bool disorder; /* a record at or below one applied before */
} fake_ix;

static fake_ix X = { .mu = PTHREAD_MUTEX_INITIALIZER, .fails_left = FAILS };

static void fake_handler(void *arg, const uint8_t *p, size_t n, mp_buf *out)
{
    msg_I_APPLY_req q;
    msg_I_APPLY_rep r;
    msg_type t;
    int is_rep;

    (void)arg;
    if (msg_peek(p, n, &t, &is_rep) != 0 || t != MSG_I_APPLY ||
        msg_decode_req(MSG_I_APPLY, p, n, &q) != 0) {
        msg_encode_err(MSG_PING, SX_EPROTO, "not scripted", out);
        return;
    }
    pthread_mutex_lock(&X.mu);
    X.rounds++;
    if (q.part != DEST || q.source != 1) {
        msg_encode_err(MSG_I_APPLY, SX_EINVAL, "unknown source partition", out);
    } else if (q.seqs.n > 0 && X.fails_left > 0) {
        X.fails_left--;
        X.failed++;
        msg_encode_err(MSG_I_APPLY, SX_EIO, "apply failed: scripted", out);
    } else if (q.after > X.wm) {
        X.refused++;
        msg_encode_err(MSG_I_APPLY, SX_EUNAVAIL, "records out of order: scripted", out);
    } else {
        for (uint32_t i = 0; i < q.seqs.n; i++) {
            if (q.seqs.v[i] <= X.wm)
                continue; /* a redelivery */
            if (X.napplied > 0 && q.seqs.v[i] <= X.applied[X.napplied - 1])
                X.disorder = true;
            if (X.napplied < MAXSEQ)
                X.applied[X.napplied++] = q.seqs.v[i];
        }
        if (q.upto > X.wm)
            X.wm = q.upto;
        memset(&r, 0, sizeof(r));
        r.watermark = X.wm;
        r.synced = X.wm;
        msg_encode_rep(MSG_I_APPLY, &r, out);
    }
    pthread_mutex_unlock(&X.mu);
    msg_free_req(MSG_I_APPLY, &q);
}

/* ---- the storage side (as storage_write_test.c) ---- */

/* Sends one catalog request (type t, req) to c; returns its error and the
 * version in *version. */
static int cat_call(catp *c, msg_type t, const void *req, uint64_t *version)
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

static mp_span S(const char *s)
{
    return (mp_span){ (const uint8_t *)s, strlen(s) };
}

/* t(id) with index by_g on g (ready). */
static int make_catalog(catp *c, uint64_t *version)
{
    msg_CAT_UPDATE_req u;
    msg_CAT_BACKFILLED_req b;
    mp_span ga = S("g");
    int rc;

    memset(&u, 0, sizeof(u));
    u.op = CATOP_CREATE_TABLE;
    u.table = S("t");
    u.pk = S("id");
    if ((rc = cat_call(c, MSG_CAT_UPDATE, &u, version)) != 0)
        return rc;
    u.op = CATOP_CREATE_INDEX;
    u.pk = (mp_span){ NULL, 0 };
    u.index = S("by_g");
    u.attrs = (msg_spans){ 1, &ga };
    if ((rc = cat_call(c, MSG_CAT_UPDATE, &u, version)) != 0)
        return rc;
    memset(&b, 0, sizeof(b));
    b.index_id = 2; /* table 1, index 2: ids in creation order */
    b.part = 1;
    return cat_call(c, MSG_CAT_BACKFILLED, &b, version);
}

/* Puts items {"id": first .. first + n - 1, "g": "a"} in one S_WRITE. */
static int put_items(st_part *p, uint64_t catver, int64_t first, uint32_t n)
{
    msg_S_WRITE_req q;
    msg_S_WRITE_rep r;
    mp_buf items[8], out;
    mp_span objs[8];
    uint64_t dels[8] = { 0 };
    char msg[256] = "";
    int rc;

    for (uint32_t i = 0; i < n; i++) {
        mp_buf_init(&items[i]);
        mp_put_map(&items[i], 2);
        mp_put_cstr(&items[i], "id");
        mp_put_i64(&items[i], first + i);
        mp_put_cstr(&items[i], "g");
        mp_put_cstr(&items[i], "a");
        objs[i] = (mp_span){ (const uint8_t *)items[i].sb.data, items[i].sb.size };
    }
    memset(&q, 0, sizeof(q));
    q.part = 1;
    q.catver = catver;
    q.table_id = 1;
    q.objs = (msg_spans){ n, objs };
    q.dels = (msg_u64s){ n, dels };
    mp_buf_init(&out);
    st_write(p, &q, &out);
    memset(&r, 0, sizeof(r));
    rc = msg_decode_rep(MSG_S_WRITE, (const uint8_t *)out.sb.data, out.sb.size, &r, msg,
                        sizeof(msg));
    if (rc != 0)
        fprintf(stderr, "S_WRITE: %s: %s\n", sx_strerror(rc), msg);
    msg_free_rep(MSG_S_WRITE, &r);
    mp_buf_free(&out);
    for (uint32_t i = 0; i < n; i++)
        mp_buf_free(&items[i]);
    return rc;
}

/* Counts the outbox values of destination DEST (the queue's end marker
 * aside). */
static int count_visit(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    (void)v;
    (void)vn;
    if (kn == 17 && be_get64(k + 9) != UINT64_MAX)
        (*(int *)arg)++;
    return 0;
}

static int outbox_values(st_part *p)
{
    uint8_t lo[17], hi[17];
    int n = 0;

    lo[0] = hi[0] = ST_OUT_PREFIX;
    be_put64(lo + 1, DEST);
    be_put64(lo + 9, 0);
    be_put64(hi + 1, DEST);
    be_put64(hi + 9, UINT64_MAX);
    CHECK(st_kscan(p, NULL, lo, sizeof(lo), hi, sizeof(hi), false, count_visit, &n) >= 0);
    return n;
}

static uint64_t ms_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Waits (at most WAIT_MS, checking every millisecond) until the index
 * applied every seq up to head. */
static bool all_applied(uint64_t head)
{
    uint64_t deadline = ms_now() + WAIT_MS;

    for (;;) {
        pthread_mutex_lock(&X.mu);
        bool done = X.wm >= head && X.napplied > 0 && X.applied[X.napplied - 1] >= head;
        pthread_mutex_unlock(&X.mu);
        if (done)
            return true;
        if (ms_now() > deadline)
            return false;
        struct timespec ms = { 0, 1000000L };
        nanosleep(&ms, NULL);
    }
}

/* Waits (at most WAIT_MS) until the partition's outbox is empty. */
static bool outbox_drained(st_part *p)
{
    uint64_t deadline = ms_now() + WAIT_MS;

    for (;;) {
        pthread_mutex_lock(&p->mu);
        uint64_t left = p->outbox;
        pthread_mutex_unlock(&p->mu);
        if (left == 0 && outbox_values(p) == 0)
            return true;
        if (ms_now() > deadline)
            return false;
        struct timespec ms = { 0, 1000000L };
        nanosleep(&ms, NULL);
    }
}

static bool run(const char *dir)
{
    char path[4200], err[300], url[4300];
    cfg_cluster *cfg = NULL;
    catp *cp = NULL;
    st_cat *cc = NULL;
    st_store *store = NULL;
    st_part *p = NULL;
    ship *sh = NULL;
    net_server *srv = NULL;
    net_server_opts so = { .workers = 2 };
    uint64_t catver = 0, head = 0;
    FILE *f;

    if (snprintf(path, sizeof(path), "%s/cluster.json", dir) >= (int)sizeof(path) ||
        (f = fopen(path, "w")) == NULL) {
        fprintf(stderr, "shipper_test: scratch dir unusable: %s\n", dir);
        return false;
    }
    fprintf(
        f,
        "{\"cluster\": \"ship\", \"hash_key\": \"000102030405060708090a0b0c0d0e0f\",\n"
        " \"token_key\": \"000102030405060708090a0b0c0d0e0f000102030405060708090a0b0c0d0e0f\",\n"
        " \"catalog_node\": \"s1\",\n"
        " \"routers\": [{\"name\": \"r1\", \"url\": \"tcp://127.0.0.1:1\"}],\n"
        " \"storage\": [{\"name\": \"s1\", \"url\": \"ipc://%s/s1.sock\", \"partitions\": [\n"
        "   {\"id\": 1, \"lo\": \"0000000000000000\", \"hi\": \"ffffffffffffffff\"}]}],\n"
        " \"index\": [{\"name\": \"i1\", \"url\": \"ipc://%s/i1.sock\", \"partitions\": [\n"
        "   {\"id\": 101, \"lo\": null, \"hi\": null}]}]}\n",
        dir, dir);
    CHECK(fclose(f) == 0);
    if (cfg_load(path, &cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "shipper_test: config: %s\n", err);
        return false;
    }
    snprintf(url, sizeof(url), "ipc://%s/i1.sock", dir);
    CHECK(net_server_open_link(url, &so, fake_handler, NULL, &srv) == 0);
    snprintf(path, sizeof(path), "%s/catalog", dir);
    CHECK(mkdir(path, 0700) == 0);
    CHECK(catp_open(path, cfg, &cp) == 0);
    CHECK(cp != NULL && make_catalog(cp, &catver) == 0);
    CHECK(cp != NULL && st_cat_new(cfg, cp, &cc) == 0);
    snprintf(path, sizeof(path), "%s/store", dir);
    CHECK(cc != NULL && st_store_open(path, &store) == 0);
    CHECK(store != NULL && st_part_open(cfg, &cfg->storage[0], cc, store, &p) == 0);
    CHECK(p != NULL && st_store_start(store, &p, 1) == 0);
    CHECK(p != NULL && ship_start(&p, 1, cfg, &sh) == 0);
    if (p != NULL && sh != NULL && srv != NULL) {
        /* writes of 4, 1, 3, 1, 2 and 1 items (12 records; each write's
         * records are one outbox value, keyed by its last seq), each
         * shipped before the next: the first write's rounds fail FAILS
         * times, and every later round starts at a value of its own */
        static const uint32_t sizes[] = { 4, 1, 3, 1, 2, 1 };
        int64_t id = 1;
        for (size_t w = 0; w < sizeof(sizes) / sizeof(sizes[0]); w++) {
            CHECK(put_items(p, catver, id, sizes[w]) == 0);
            id += sizes[w];
            pthread_mutex_lock(&p->mu);
            head = p->head;
            pthread_mutex_unlock(&p->mu);
            CHECK(head == (uint64_t)id - 1);
            bool applied = all_applied(head);
            CHECKF(applied, "after write %zu: head %llu", w, (unsigned long long)head);
            if (!applied)
                break; /* the rest would only wait out the same failure */
        }
        CHECK(head == 12);
        pthread_mutex_lock(&X.mu);
        CHECK(X.failed == FAILS);
        CHECK(!X.disorder);
        CHECK(X.napplied == (int)head); /* each once, none skipped */
        for (int i = 0; i < X.napplied; i++)
            CHECK(X.applied[i] == (uint64_t)i + 1);
        if (X.napplied != (int)head || X.wm < head)
            fprintf(stderr,
                    "the index got %d of %llu records (watermark %llu, %d rounds, "
                    "%d failed, %d refused as out of order)\n",
                    X.napplied, (unsigned long long)head, (unsigned long long)X.wm, X.rounds,
                    X.failed, X.refused);
        pthread_mutex_unlock(&X.mu);
        CHECK(outbox_drained(p));
        if (outbox_values(p) != 0)
            fprintf(stderr, "%d outbox values left after the index synced them all\n",
                    outbox_values(p));
    }
    ship_stop(sh);
    if (store != NULL)
        st_store_stop(store);
    st_part_close(p);
    st_store_close(store);
    st_cat_free(cc);
    catp_close(cp);
    net_server_stop(srv);
    cfg_free(cfg);
    return true;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    return remove(path);
}

int main(int argc, char **argv)
{
    char tmpl[] = "/tmp/sx-ship-XXXXXX";
    const char *dir = argc > 1 ? argv[1] : mkdtemp(tmpl);
    bool ok;

    if (dir == NULL) {
        perror("shipper_test: mkdtemp");
        return 1;
    }
    CHECK(proto_init() == 0);
    ok = run(dir);
    if (argc <= 1)
        nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return ok ? CHECK_DONE() : 1;
}
