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
 * Links node_storage and the storage tests' fixture. Argument: a scratch dir
 * (default: a fresh one under $TMPDIR or /tmp, removed afterwards).
 */
#define CHECK_TALLY_SHARED /* fixture.c checks too */
#define CHECK_TALLY_DEFINE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "check.h"
#include "fixture.h"
#include "hash.h"
#include "net.h"
#include "scratch.h"
#include "shipper.h"
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

/* ---- the storage side ---- */

/* t(id) with index by_g on g (ready). */
static int make_catalog(catp *c, uint64_t *version)
{
    int rc;

    if ((rc = stf_create_t(c, version)) != 0 ||
        (rc = stf_create_index(c, "by_g", "g", version)) != 0)
        return rc;
    return stf_backfilled(c, 2, version); /* table 1, index 2: ids in creation order */
}

/* Puts items {"id": first .. first + n - 1, "g": "a"} in one S_WRITE. */
static int put_items(st_part *p, uint64_t catver, int64_t first, uint32_t n)
{
    mp_buf items[8];

    for (uint32_t i = 0; i < n; i++) {
        mp_buf_init(&items[i]);
        mp_put_map(&items[i], 2);
        mp_put_cstr(&items[i], "id");
        mp_put_i64(&items[i], first + i);
        mp_put_cstr(&items[i], "g");
        mp_put_cstr(&items[i], "a");
    }
    return stf_write(p, catver, items, NULL, n, NULL, NULL);
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
    int n = 0;

    CHECK(stf_outbox_scan(p, DEST, count_visit, &n) >= 0);
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
    char url[4300];
    stf f;
    st_part *p;
    ship *sh = NULL;
    net_server *srv = NULL;
    net_server_opts so = { .workers = 2 };
    uint64_t catver = 0, head = 0;

    if (!stf_open(&f, dir, "ship", true))
        return false;
    snprintf(url, sizeof(url), "ipc://%s/i1.sock", dir);
    CHECK(net_server_open_link(url, &so, fake_handler, NULL, &srv) == 0);
    CHECK(f.cp != NULL && make_catalog(f.cp, &catver) == 0);
    stf_start(&f);
    p = f.p;
    CHECK(p != NULL && ship_start(&f.p, 1, f.cfg, &sh) == 0);
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
    stf_close(&f);
    net_server_stop(srv);
    return true;
}

int main(int argc, char **argv)
{
    CHECK(proto_init() == 0);
    return scratch_run(argc, argv, "sx-ship", run) ? CHECK_DONE() : 1;
}
