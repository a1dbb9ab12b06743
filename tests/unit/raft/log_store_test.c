/*
 * log_store_test.c — tests of the leveldb durable log: round trip of several
 * groups in one batch, overwrite of a log suffix, compaction, snapshot
 * install (keeping or dropping the suffix), CRC corruption and gaps refused,
 * recovery after a crash (a child process killed without closing), and
 * after a torn last write (the newest leveldb log file cut short): the last
 * batch is either wholly there or wholly gone, never half.  Finally a real
 * core restarts from the store.
 */
#include <dirent.h>
#include <leveldb/c.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "raft.h"
#include "raft_codec.h"
#include "raft_log_store.h"

#include "check.h" /* tests/unit: CHECK, check_failures */
#include "scratch.h"

static char base[256];

static void mkpath(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", base, name);
}

typedef struct loaded {
    raft_entry e[256];
    uint8_t data[256][16];
    size_t n;
} loaded;

static int collect(void *ctx, const raft_entry *e)
{
    loaded *l = ctx;
    if (l->n >= 256 || e->len > 16)
        return RAFT_ERR_TOO_BIG;
    l->e[l->n] = *e;
    memcpy(l->data[l->n], e->data, e->len);
    l->e[l->n].data = l->data[l->n];
    l->n++;
    return RAFT_OK;
}

static raft_entry mk(uint64_t index, uint64_t term, uint8_t *buf)
{
    buf[0] = (uint8_t)index;
    buf[1] = (uint8_t)term;
    raft_entry e = { term, index, RAFT_ENTRY_NORMAL, 2, buf };
    return e;
}

/* Writes entries [lo, hi] of term `term` and hs {term, 0, commit} for group
 * g in one batch together with the same for group g+1. */
static int write_round(raft_store *s, uint64_t g, uint64_t lo, uint64_t hi, uint64_t term,
                       uint64_t commit)
{
    raft_entry es[64];
    uint8_t bufs[64][2];
    size_t n = 0;
    for (uint64_t i = lo; i <= hi && n < 64; i++, n++)
        es[n] = mk(i, term, bufs[n]);
    raft_store_batch *b;
    if (raft_store_batch_new(s, &b))
        return -1;
    for (uint64_t gg = g; gg <= g + 1; gg++) {
        raft_ready rd;
        memset(&rd, 0, sizeof rd);
        rd.entries = es;
        rd.n_entries = n;
        rd.hs_changed = 1;
        rd.hs.term = term;
        rd.hs.commit = commit;
        if (raft_store_batch_ready(b, gg, &rd)) {
            raft_store_batch_free(b);
            return -1;
        }
    }
    return raft_store_commit(b, NULL, 0);
}

static void test_round_trip_and_overwrite(void)
{
    char p[300];
    mkpath(p, sizeof p, "rt");
    raft_store *s;
    CHECK(raft_store_open(p, 0, &s, NULL, 0) == RAFT_OK);
    CHECK(write_round(s, 10, 1, 10, 1, 4) == RAFT_OK);
    CHECK(write_round(s, 10, 6, 7, 2, 5) == RAFT_OK); /* overwrite 6..10 */
    raft_store_close(s);
    CHECK(raft_store_open(p, 0, &s, NULL, 0) == RAFT_OK);
    uint64_t gs[8];
    size_t ng;
    CHECK(raft_store_groups(s, gs, 8, &ng) == RAFT_OK && ng == 2);
    CHECK(gs[0] == 10 && gs[1] == 11);
    for (uint64_t g = 10; g <= 11; g++) {
        loaded l = { 0 };
        raft_hard_state hs;
        raft_snap_meta sm;
        CHECK(raft_store_load(s, g, &hs, &sm, collect, &l, NULL) == RAFT_OK);
        CHECK(hs.term == 2 && hs.commit == 5);
        CHECK(l.n == 7);
        CHECK(l.e[5].index == 6 && l.e[5].term == 2 && l.e[6].term == 2);
        CHECK(l.e[4].term == 1 && l.data[4][0] == 5);
    }
    /* compaction: drop <= 4 */
    raft_snap_meta m;
    memset(&m, 0, sizeof m);
    m.index = 4;
    m.term = 1;
    m.size = 3;
    raft_store_batch *b;
    CHECK(raft_store_batch_new(s, &b) == RAFT_OK);
    CHECK(raft_store_batch_compact(b, 10, &m) == RAFT_OK);
    CHECK(raft_store_commit(b, NULL, 0) == RAFT_OK);
    loaded l = { 0 };
    raft_hard_state hs;
    raft_snap_meta sm;
    CHECK(raft_store_load(s, 10, &hs, &sm, collect, &l, NULL) == RAFT_OK);
    CHECK(sm.index == 4 && l.n == 3 && l.e[0].index == 5);
    /* snapshot install that does not match the log: suffix dropped */
    raft_ready rd;
    memset(&rd, 0, sizeof rd);
    rd.has_snap = 1;
    rd.snap.index = 6;
    rd.snap.term = 9;
    CHECK(raft_store_batch_new(s, &b) == RAFT_OK);
    CHECK(raft_store_batch_ready(b, 10, &rd) == RAFT_OK);
    CHECK(raft_store_commit(b, NULL, 0) == RAFT_OK);
    memset(&l, 0, sizeof l);
    CHECK(raft_store_load(s, 10, &hs, &sm, collect, &l, NULL) == RAFT_OK);
    CHECK(sm.index == 6 && sm.term == 9 && l.n == 0);
    /* one that matches (group 11 has (6, 2)): suffix kept */
    rd.snap.term = 2;
    CHECK(raft_store_batch_new(s, &b) == RAFT_OK);
    CHECK(raft_store_batch_ready(b, 11, &rd) == RAFT_OK);
    CHECK(raft_store_commit(b, NULL, 0) == RAFT_OK);
    memset(&l, 0, sizeof l);
    CHECK(raft_store_load(s, 11, &hs, &sm, collect, &l, NULL) == RAFT_OK);
    CHECK(sm.index == 6 && l.n == 1 && l.e[0].index == 7);
    raft_store_close(s);
}

/* A joined replica's id: recorded per group, read back across a reopen,
 * absent for other groups, not listed as a group, refused when damaged. */
static void test_replica_id(void)
{
    char p[300];
    mkpath(p, sizeof p, "replica-id");
    raft_store *s;
    uint64_t id = 99;
    CHECK(raft_store_open(p, 1, &s, NULL, 0) == RAFT_OK);
    CHECK(raft_store_get_replica(s, 7, &id) == RAFT_OK && id == 0);
    CHECK(raft_store_set_replica(s, 7, (3ull << 8) | 2) == RAFT_OK);
    size_t n = 5;
    uint64_t g[4];
    CHECK(raft_store_groups(s, g, 4, &n) == RAFT_OK && n == 0);
    raft_store_close(s);
    CHECK(raft_store_open(p, 1, &s, NULL, 0) == RAFT_OK);
    CHECK(raft_store_get_replica(s, 7, &id) == RAFT_OK && id == ((3ull << 8) | 2));
    CHECK(raft_store_get_replica(s, 8, &id) == RAFT_OK && id == 0);
    raft_store_close(s);
    /* damage the record behind the store's back */
    leveldb_options_t *o = leveldb_options_create();
    char *e = NULL;
    leveldb_t *db = leveldb_open(o, p, &e);
    CHECK(db && !e);
    uint8_t k[9] = { 'r', 0, 0, 0, 0, 0, 0, 0, 7 };
    leveldb_writeoptions_t *wo = leveldb_writeoptions_create();
    leveldb_put(db, wo, (const char *)k, 9, "0123456789ab", 12, &e);
    CHECK(!e);
    leveldb_writeoptions_destroy(wo);
    leveldb_close(db);
    leveldb_options_destroy(o);
    CHECK(raft_store_open(p, 1, &s, NULL, 0) == RAFT_OK);
    CHECK(raft_store_get_replica(s, 7, &id) == RAFT_ERR_CORRUPT);
    raft_store_close(s);
}

static void test_corruption(void)
{
    char p[300];
    mkpath(p, sizeof p, "corrupt");
    raft_store *s;
    CHECK(raft_store_open(p, 0, &s, NULL, 0) == RAFT_OK);
    CHECK(write_round(s, 1, 1, 5, 1, 3) == RAFT_OK);
    raft_store_close(s);
    /* flip a byte inside entry 3 of group 1, behind the store's back */
    leveldb_options_t *o = leveldb_options_create();
    char *e = NULL;
    leveldb_t *db = leveldb_open(o, p, &e);
    CHECK(db && !e);
    uint8_t k[17] = { 'e' };
    for (int i = 0; i < 8; i++)
        k[1 + i] = (uint8_t)(1ull >> (56 - 8 * i));
    for (int i = 0; i < 8; i++)
        k[9 + i] = (uint8_t)(3ull >> (56 - 8 * i));
    leveldb_readoptions_t *ro = leveldb_readoptions_create();
    size_t vl;
    char *v = leveldb_get(db, ro, (const char *)k, 17, &vl, &e);
    CHECK(v && !e);
    leveldb_writeoptions_t *wo = leveldb_writeoptions_create();
    if (v) {
        v[vl - 1] ^= 0x40;
        leveldb_put(db, wo, (const char *)k, 17, v, vl, &e);
        leveldb_free(v);
    }
    /* and delete entry 2 of group 2: a gap */
    k[8] = 2;
    k[16] = 2;
    leveldb_delete(db, wo, (const char *)k, 17, &e);
    leveldb_close(db);
    leveldb_options_destroy(o);
    leveldb_readoptions_destroy(ro);
    leveldb_writeoptions_destroy(wo);
    CHECK(raft_store_open(p, 0, &s, NULL, 0) == RAFT_OK);
    raft_hard_state hs;
    raft_snap_meta sm;
    uint64_t bad = 0;
    loaded l = { 0 };
    CHECK(raft_store_load(s, 1, &hs, &sm, collect, &l, &bad) == RAFT_ERR_CORRUPT);
    CHECK(bad == 3);
    memset(&l, 0, sizeof l);
    CHECK(raft_store_load(s, 2, &hs, &sm, collect, &l, &bad) == RAFT_ERR_CORRUPT);
    CHECK(bad == 2);
    raft_store_close(s);
}

/* The child writes `rounds` synced batches (round r: entries 1..r of term r,
 * commit r, for groups 1 and 2) and is killed without closing the store. */
static void crash_child(const char *p, int rounds)
{
    pid_t pid = fork();
    if (pid == 0) {
        raft_store *s;
        if (raft_store_open(p, 1, &s, NULL, 0))
            _exit(3);
        for (int r = 1; r <= rounds; r++)
            if (write_round(s, 1, (uint64_t)r, (uint64_t)r, (uint64_t)r, (uint64_t)r))
                _exit(4);
        kill(getpid(), SIGKILL);
        _exit(5);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
}

/* Returns the number of complete rounds found, or -1 if the state is not
 * exactly the state after some number of rounds. */
static int rounds_found(const char *p)
{
    raft_store *s;
    if (raft_store_open(p, 0, &s, NULL, 0))
        return -1;
    int res = -2;
    for (uint64_t g = 1; g <= 2; g++) {
        loaded l = { 0 };
        raft_hard_state hs;
        raft_snap_meta sm;
        if (raft_store_load(s, g, &hs, &sm, collect, &l, NULL)) {
            res = -1;
            break;
        }
        int r = (int)hs.term;
        int ok = hs.commit == (uint64_t)r && l.n == (size_t)r;
        for (size_t i = 0; ok && i < l.n; i++)
            ok = l.e[i].index == i + 1 && l.e[i].term == i + 1;
        if (!ok || (res >= 0 && res != r)) {
            res = -1;
            break;
        }
        res = r;
    }
    raft_store_close(s);
    return res;
}

static int newest_log(const char *dir, char *out, size_t n)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    struct dirent *de;
    unsigned long best = 0;
    int found = -1;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l > 4 && !strcmp(de->d_name + l - 4, ".log")) {
            unsigned long num = strtoul(de->d_name, NULL, 10);
            if (found < 0 || num >= best) {
                best = num;
                snprintf(out, n, "%s/%s", dir, de->d_name);
                found = 0;
            }
        }
    }
    closedir(d);
    return found;
}

static void test_crash_and_torn_write(void)
{
    char p[300];
    mkpath(p, sizeof p, "crash");
    crash_child(p, 20);
    CHECK(rounds_found(p) == 20); /* synced batches survive a crash */
    /* more rounds, crash, then tear the last write at every possible length
     * of its last few bytes: recovery yields 29 or 30 rounds, never half */
    char q[300];
    mkpath(q, sizeof q, "torn");
    crash_child(q, 30);
    char logf[600];
    CHECK(newest_log(q, logf, sizeof logf) == 0);
    struct stat st;
    CHECK(stat(logf, &st) == 0);
    off_t full = st.st_size;
    int seen29 = 0, seen30 = 0, bad = 0;
    for (off_t cut = 1; cut <= 40 && cut < full; cut += 3) {
        /* each cut on a fresh copy of the crashed store */
        char r[300];
        snprintf(r, sizeof r, "%s/torn%ld", base, (long)cut);
        /* copy the store, then cut its newest log */
        char cmd[1400];
        snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", q, r);
        CHECK(system(cmd) == 0);
        char rl[700];
        snprintf(rl, sizeof rl, "%s/%s", r, strrchr(logf, '/') + 1);
        CHECK(truncate(rl, full - cut) == 0);
        int n = rounds_found(r);
        if (n == 29)
            seen29++;
        else if (n == 30)
            seen30++;
        else
            bad++;
    }
    CHECK(bad == 0);
    CHECK(seen29 > 0); /* the tear did hit the last batch, and it vanished whole */
}

/* A core restarts from the store and carries on. */
static int load_into(void *ctx, const raft_entry *e)
{
    return raft_load_entry(ctx, e);
}

static void test_core_restart(void)
{
    char p[300];
    mkpath(p, sizeof p, "core");
    raft_store *s;
    CHECK(raft_store_open(p, 0, &s, NULL, 0) == RAFT_OK);
    raft_config c;
    raft_config_default(&c, 1, 5);
    raft_snap_meta boot;
    memset(&boot, 0, sizeof boot);
    boot.index = 1;
    boot.term = 1;
    boot.conf.n = 1;
    boot.conf.m[0].id = 1;
    boot.conf.m[0].voter = 1;
    boot.conf.max_id = 1;
    raft_group *g;
    CHECK(raft_group_new(&c, &boot, NULL, 1, &g) == RAFT_OK);
    CHECK(raft_load_done(g) == RAFT_OK);
    raft_store_batch *b;
    CHECK(raft_store_batch_new(s, &b) == RAFT_OK);
    CHECK(raft_store_batch_compact(b, 5, &boot) == RAFT_OK);
    CHECK(raft_store_commit(b, NULL, 0) == RAFT_OK);
    for (int k = 0; k < 40 && raft_role(g) != RAFT_LEADER; k++)
        raft_tick(g);
    CHECK(raft_propose(g, "hello", 5, NULL) == RAFT_OK);
    raft_ready rd;
    while (raft_ready_get(g, &rd)) {
        CHECK(raft_store_batch_new(s, &b) == RAFT_OK);
        CHECK(raft_store_batch_ready(b, 5, &rd) == RAFT_OK);
        CHECK(raft_store_commit(b, NULL, 0) == RAFT_OK);
        raft_advance(g, &rd);
    }
    uint64_t last = raft_last_index(g), term = raft_term(g);
    raft_group_free(g);
    raft_store_close(s);
    CHECK(raft_store_open(p, 0, &s, NULL, 0) == RAFT_OK);
    raft_hard_state hs;
    raft_snap_meta sm;
    CHECK(raft_store_load(s, 5, &hs, &sm, NULL, NULL, NULL) == RAFT_OK);
    CHECK(raft_group_new(&c, &sm, &hs, sm.index, &g) == RAFT_OK);
    CHECK(raft_store_load(s, 5, &hs, &sm, load_into, g, NULL) == RAFT_OK);
    CHECK(raft_load_done(g) == RAFT_OK);
    CHECK(raft_last_index(g) == last && raft_term(g) == term);
    const raft_entry *e = raft_entry_at(g, last);
    CHECK(e && e->len == 5 && !memcmp(e->data, "hello", 5));
    CHECK(raft_commit(g) == last);
    raft_group_free(g);
    raft_store_close(s);
}

int main(void)
{
    if (scratch_make("raft-store", base, sizeof base) == NULL)
        return 1;
    test_round_trip_and_overwrite();
    test_corruption();
    test_replica_id();
    test_crash_and_torn_write();
    test_core_restart();
    if (scratch_remove(base) != 0)
        fprintf(stderr, "could not remove %s\n", base);
    if (check_failures) {
        fprintf(stderr, "%d check(s) failed\n", check_failures);
        return 1;
    }
    printf("all log store tests passed\n");
    return 0;
}
