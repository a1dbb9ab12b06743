/*
 * load.c — `shardex load TABLE [FILE]`: bulk loading of JSON lines.
 *
 * Lines are parsed on the main thread into batches that are sent with the
 * asynchronous API, several in flight at once (a synchronous batch at a
 * time leaves the cluster idle while the CLI waits for each reply). The
 * file's order still decides: a line whose key is in a batch still in
 * flight waits until that batch is answered, so a later line for a key
 * always lands after an earlier one (within one batch the store keeps the
 * request's order). Batches are answered in the order they were sent,
 * oldest first; a batch the store refuses for one of its items is sent
 * again item by item, so that each refused line is reported with its
 * number and the others are stored.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sodium.h>
#include "cli.h"

#define LOAD_BATCH 2000 /* items per PUT request (default) */
#define LOAD_BATCH_MAX 10000
#define LOAD_INFLIGHT 16 /* requests in flight (default) */
#define LOAD_INFLIGHT_MAX 64
/* clang-format off */
#define LOAD_BATCH_BYTES (4u << 20)  /* ... and at most about this much JSON
                                        per request, well under the 16 MiB
                                        frame limit */
#define LOAD_PROGRESS_S 2            /* progress line period on a terminal */
#define LOAD_IDLE_MS 50              /* input paused this long: send what was
                                        read, count the answers in */
/* clang-format on */

static const char *LOAD_USAGE =
    "usage: shardex load TABLE [FILE] [--batch N] [--inflight N]\n"
    "  Stores one JSON object per line from FILE (or stdin) and prints how\n"
    "  many items were stored. Lines go in batches of --batch items (default\n"
    "  2000, 1..10000), --inflight batches at once (default 16, 1..64); a\n"
    "  key's later line always lands after its earlier ones. Bad lines are\n"
    "  reported with their number; the command then exits 3 (the good lines\n"
    "  are still stored). When the input pauses (a stream), what was read is\n"
    "  sent at once. On a terminal, progress is printed every 2 s.\n";

struct loader;

/* One batch: the items of up to --batch lines, kept until answered. */
typedef struct batch {
    struct loader *ld;
    sx_item **items;
    long *lines;
    uint64_t *keys; /* key hashes (0: the line has no usable key) */
    size_t n;
    size_t bytes; /* JSON bytes of its lines */
    uint64_t seq; /* 1, 2, ... in sending order */
    bool done;    /* answered (under the loader's mu) */
    int status;
    char errmsg[256];
} batch;

typedef struct key_slot {
    uint64_t h;   /* 0: empty */
    uint64_t seq; /* the last batch holding h */
} key_slot;

typedef struct loader {
    cli_ctx *ctx;
    const char *table;
    char *pk, *sk; /* the table's key attributes */
    int max_batch, inflight;
    batch *ring;       /* inflight + 1 batches: one filling */
    uint64_t sent;     /* seq of the last batch sent */
    uint64_t answered; /* seq of the last batch whose answer is counted */
    key_slot *kt;      /* keys of the batches in flight and filling:
                        * open addressing, rebuilt from the batches
                        * when half full; 4 × their most keys */
    size_t kt_mask, kt_used;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    long stored;
    long refused;       /* lines the store refused (bad items) */
    long stopped_at;    /* > 0: the first line of a batch that could not
                         * be stored (the store or the cluster failed) */
    time_t progress_at; /* next progress line (0: not a terminal) */
    long lines_read;
} loader;

/* Errors that are an item's own (its key, its size, its form): the other
 * items of its batch can still be stored. */
static bool item_error(int rc)
{
    return rc == SX_EKEY || rc == SX_EPROTO || rc == SX_ETOOBIG || rc == SX_EINVAL;
}

static batch *batch_of(loader *ld, uint64_t seq)
{
    return &ld->ring[seq % (uint64_t)(ld->inflight + 1)];
}

/* ---- keys in flight ---- */

/* Appends attribute name's value in it to the hash state, as its type's tag
 * and its bytes (the store's key tuple distinguishes types too; -0.0 is
 * 0.0). Returns false when the attribute is absent or not a scalar key. */
static bool hash_attr(crypto_generichash_state *st, const sx_item *it, const char *name)
{
    sx_value v;
    unsigned char tag;
    if (sx_item_get(it, name, &v) != 0)
        return false;
    tag = (unsigned char)v.type;
    crypto_generichash_update(st, &tag, 1);
    switch (v.type) {
    case SX_INT:
        crypto_generichash_update(st, (const unsigned char *)&v.i, sizeof v.i);
        return true;
    case SX_DOUBLE: {
        double d = v.d == 0.0 ? 0.0 : v.d;
        crypto_generichash_update(st, (const unsigned char *)&d, sizeof d);
        return true;
    }
    case SX_BOOL:
        tag = v.b != 0;
        crypto_generichash_update(st, &tag, 1);
        return true;
    case SX_STR:
    case SX_BIN: crypto_generichash_update(st, (const unsigned char *)v.s, v.len); return true;
    default: return false;
    }
}

/* The hash of it's key (never 0), or 0 when it has no usable key (the
 * store will refuse it: nothing to order) or the key attributes are
 * unknown (then one batch is in flight at a time: nothing to order). */
static uint64_t key_hash(const loader *ld, const sx_item *it)
{
    crypto_generichash_state st;
    uint64_t h;
    if (!ld->pk)
        return 0;
    crypto_generichash_init(&st, NULL, 0, sizeof h);
    if (!hash_attr(&st, it, ld->pk) || (ld->sk && !hash_attr(&st, it, ld->sk)))
        return 0;
    crypto_generichash_final(&st, (unsigned char *)&h, sizeof h);
    return h ? h : 1;
}

/* The slot of h, or the first reusable one on its way (empty, or holding a
 * batch already answered). Lookups must not stop at a reusable slot: h may
 * sit further on, put there while that slot was taken. */
static key_slot *kt_find(loader *ld, uint64_t h, bool *found)
{
    size_t mask = ld->kt_mask, i = (size_t)h & mask;
    key_slot *reuse = NULL;
    for (;; i = (i + 1) & mask) {
        key_slot *s = &ld->kt[i];
        if (s->h == h) {
            *found = true;
            return s;
        }
        if (!reuse && s->seq <= ld->answered)
            reuse = s;
        if (s->h == 0) {
            *found = false;
            return reuse;
        }
    }
}

static void kt_set(loader *ld, uint64_t h, uint64_t seq)
{
    bool found;
    key_slot *s = kt_find(ld, h, &found);
    if (!found && s->h == 0)
        ld->kt_used++;
    s->h = h;
    s->seq = seq;
}

/* Records that batch seq holds key h. When half the slots are taken, the
 * table is emptied and the keys of the batches in flight and filling put
 * back: at most a quarter of the slots, so lookups always meet an empty
 * slot and stay short. */
static void kt_put(loader *ld, uint64_t h, uint64_t seq)
{
    kt_set(ld, h, seq);
    if (ld->kt_used <= (ld->kt_mask + 1) / 2)
        return;
    memset(ld->kt, 0, sizeof(key_slot) * (ld->kt_mask + 1));
    ld->kt_used = 0;
    for (uint64_t q = ld->answered + 1; q <= ld->sent + 1; q++) {
        batch *b = batch_of(ld, q);
        for (size_t k = 0; k < b->n; k++)
            if (b->keys[k])
                kt_set(ld, b->keys[k], q);
    }
}

/* The batch in flight that holds h, or 0. */
static uint64_t kt_inflight(loader *ld, uint64_t h)
{
    bool found;
    key_slot *s = kt_find(ld, h, &found);
    return found && s->seq > ld->answered && s->seq <= ld->sent ? s->seq : 0;
}

/* ---- sending and answering ---- */

static void batch_done(sx_op *op, void *arg)
{
    batch *b = arg;
    loader *ld = b->ld;
    pthread_mutex_lock(&ld->mu);
    b->status = sx_op_status(op);
    snprintf(b->errmsg, sizeof b->errmsg, "%s", b->status ? sx_op_errmsg(op) : "");
    b->done = true;
    pthread_cond_broadcast(&ld->cv);
    pthread_mutex_unlock(&ld->mu);
}

static void batch_clear(batch *b)
{
    for (size_t k = 0; k < b->n; k++)
        sx_item_free(b->items[k]);
    b->n = 0;
    b->bytes = 0;
}

/* Counts the answer of batch b (sent, answered): stored, or sent again item
 * by item when one of its items was refused, or the load stops. */
static void count_answer(loader *ld, batch *b)
{
    sx_client *c = ld->ctx->client;
    if (b->status == SX_OK) {
        ld->stored += (long)b->n;
    } else if (!item_error(b->status)) {
        cli_error("lines %ld-%ld: %s", b->lines[0], b->lines[b->n - 1],
                  b->errmsg[0] ? b->errmsg : sx_strerror(b->status));
        if (!ld->stopped_at || b->lines[0] < ld->stopped_at)
            ld->stopped_at = b->lines[0];
    } else {
        for (size_t k = 0; k < b->n && !ld->stopped_at; k++) {
            int rc = sx_put(c, ld->table, b->items[k], NULL);
            if (rc == SX_OK) {
                ld->stored++;
            } else {
                cli_error("line %ld: %s", b->lines[k], sx_client_errmsg(c));
                if (item_error(rc))
                    ld->refused++;
                else
                    ld->stopped_at = b->lines[k];
            }
        }
    }
    batch_clear(b);
}

/* Counts the answers already in, oldest first, without waiting. */
static void count_answered(loader *ld)
{
    while (ld->answered < ld->sent) {
        batch *b = batch_of(ld, ld->answered + 1);
        pthread_mutex_lock(&ld->mu);
        bool done = b->done;
        pthread_mutex_unlock(&ld->mu);
        if (!done)
            return;
        count_answer(ld, b);
        ld->answered++;
    }
}

/* Waits for the oldest batch in flight and counts its answer. */
static void answer_oldest(loader *ld)
{
    batch *b = batch_of(ld, ld->answered + 1);
    pthread_mutex_lock(&ld->mu);
    while (!b->done)
        pthread_cond_wait(&ld->cv, &ld->mu);
    pthread_mutex_unlock(&ld->mu);
    count_answer(ld, b);
    ld->answered++;
}

/* Sends the filling batch (if it holds lines) and starts the next one,
 * first answering the oldest batch when all are in flight. */
static void send_batch(loader *ld)
{
    batch *b = batch_of(ld, ld->sent + 1);
    int rc;
    if (b->n == 0)
        return;
    if (ld->stopped_at) {
        batch_clear(b);
        return;
    }
    b->seq = ld->sent + 1;
    b->done = false;
    ld->sent++;
    rc = sx_put_batch_async(ld->ctx->client, ld->table, (const sx_item *const *)b->items, b->n,
                            batch_done, b);
    if (rc) {
        /* not started: its callback will not run; answer it here */
        pthread_mutex_lock(&ld->mu);
        b->status = rc;
        snprintf(b->errmsg, sizeof b->errmsg, "%s", sx_strerror(rc));
        b->done = true;
        pthread_mutex_unlock(&ld->mu);
    }
    if (ld->sent - ld->answered >= (uint64_t)ld->inflight)
        answer_oldest(ld);
}

/* Prints a progress line to stderr when one is due (terminals only). */
static void progress(loader *ld, bool last)
{
    if (!ld->progress_at || (!last && time(NULL) < ld->progress_at))
        return;
    fprintf(stderr, "shardex load: %ld lines read, %ld items stored%s", ld->lines_read, ld->stored,
            last ? "\n" : "\r");
    ld->progress_at = time(NULL) + LOAD_PROGRESS_S;
}

/* Parses one line into the filling batch; returns 0 (queued or blank) or
 * 1 (bad line, reported). */
static int load_line(loader *ld, char *line, size_t len, long lineno)
{
    char err[256];
    len = strnlen(line, len); /* (a NUL byte ends the text) */
    while (len && line[len - 1] == '\r')
        line[--len] = '\0';
    if (strspn(line, " \t") == len)
        return 0;
    json_t *j = cli_json_parse(line, err, sizeof err);
    sx_item *it = NULL;
    int rc = j ? cli_json_to_item(j, &it, err, sizeof err) : SX_EINVAL;
    json_decref(j);
    if (rc) {
        cli_error("line %ld: %s", lineno, err);
        return 1;
    }
    batch *b = batch_of(ld, ld->sent + 1);
    if (b->n && b->bytes + len > LOAD_BATCH_BYTES) {
        send_batch(ld);
        b = batch_of(ld, ld->sent + 1);
    }
    uint64_t h = key_hash(ld, it), in = h ? kt_inflight(ld, h) : 0;
    while (ld->answered < in) /* the file's order first */
        answer_oldest(ld);
    b->items[b->n] = it;
    b->lines[b->n] = lineno;
    b->keys[b->n++] = h;
    b->bytes += len;
    if (h)
        kt_put(ld, h, ld->sent + 1);
    if (b->n == (size_t)ld->max_batch)
        send_batch(ld);
    progress(ld, false);
    return 0;
}

/* Parses a numeric option in [lo, hi] (NULL: dflt). */
static int int_opt(const char *s, const char *name, int lo, int hi, int dflt, int *out)
{
    long v = dflt;
    if (s && !cli_long_in(s, lo, hi, &v))
        return cli_usage_error(LOAD_USAGE, "%s must be a number from %d to %d", name, lo, hi);
    *out = (int)v;
    return CLI_OK;
}

static int loader_init(loader *ld)
{
    size_t nb = (size_t)ld->inflight + 1, slots = 1;
    if (sodium_init() < 0)
        return SX_ENOMEM;
    while (slots < 4 * nb * (size_t)ld->max_batch)
        slots *= 2;
    ld->kt_mask = slots - 1;
    ld->ring = calloc(nb, sizeof *ld->ring);
    ld->kt = calloc(slots, sizeof *ld->kt);
    if (!ld->ring || !ld->kt)
        return SX_ENOMEM;
    for (size_t k = 0; k < nb; k++) {
        batch *b = &ld->ring[k];
        b->ld = ld;
        b->items = calloc((size_t)ld->max_batch, sizeof *b->items);
        b->lines = calloc((size_t)ld->max_batch, sizeof *b->lines);
        b->keys = calloc((size_t)ld->max_batch, sizeof *b->keys);
        if (!b->items || !b->lines || !b->keys)
            return SX_ENOMEM;
    }
    return SX_OK;
}

static void loader_free(loader *ld)
{
    for (int k = 0; ld->ring && k <= ld->inflight; k++) {
        batch_clear(&ld->ring[k]);
        free(ld->ring[k].items);
        free(ld->ring[k].lines);
        free(ld->ring[k].keys);
    }
    free(ld->ring);
    free(ld->kt);
    sx_free(ld->pk);
    sx_free(ld->sk);
}

/* While the input pauses: what was read goes out (a stream's lines are
 * not held back for a full batch), the answers already in are counted (a
 * failed one stops the load now, not at the next line). */
static bool load_idle(void *arg)
{
    loader *ld = arg;
    send_batch(ld);
    count_answered(ld);
    progress(ld, false);
    return !ld->stopped_at;
}

/* Reads fd to its end (or the load's stop) and waits for every answer.
 * Returns the bad lines' count; *lineno is the last line read, *read_err
 * a failed read's errno (or 0). */
static long load_all(loader *ld, int fd, long *lineno, int *read_err)
{
    cli_lines in;
    char *line;
    size_t len;
    long bad = 0;
    cli_lines_init(&in, fd);
    while (!ld->stopped_at && cli_lines_next(&in, &line, &len, LOAD_IDLE_MS, load_idle, ld) == 1) {
        ld->lines_read = ++*lineno;
        bad += load_line(ld, line, len, *lineno);
    }
    *read_err = in.err;
    cli_lines_free(&in);
    send_batch(ld);
    while (ld->answered < ld->sent)
        answer_oldest(ld);
    progress(ld, true);
    return bad + ld->refused;
}

int cli_load(cli_ctx *ctx)
{
    const char *pos[2], *batch_s = NULL, *inflight_s = NULL;
    cli_opt opts[] = { { "--batch", true, &batch_s },
                       { "--inflight", true, &inflight_s },
                       { NULL, 0, NULL } };
    loader ld = { .ctx = ctx, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
    int npos, r = cli_parse(ctx, opts, pos, 2, &npos, LOAD_USAGE);
    if (r < 0)
        return CLI_OK;
    if (r)
        return r;
    if (npos < 1)
        return cli_usage_error(LOAD_USAGE, "expected TABLE [FILE]");
    if ((r = int_opt(batch_s, "--batch", 1, LOAD_BATCH_MAX, LOAD_BATCH, &ld.max_batch)) ||
        (r = int_opt(inflight_s, "--inflight", 1, LOAD_INFLIGHT_MAX, LOAD_INFLIGHT, &ld.inflight)))
        return r;
    ld.table = pos[0];
    int fd = STDIN_FILENO, read_err = 0;
    if (npos == 2 && strcmp(pos[1], "-") != 0) {
        fd = open(pos[1], O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return cli_error("cannot open %s: %s", pos[1], strerror(errno));
    }
    if ((r = cli_connect(ctx)))
        goto out;
    int rc = sx_table_key(ctx->client, ld.table, &ld.pk, &ld.sk);
    if (rc == SX_ENOTABLE) {
        r = cli_fail(ctx, rc);
        goto out;
    }
    if (rc) {
        /* The catalog is read from the catalog node (through the router):
         * without the key attributes the order is kept by sending one
         * batch at a time, which needs no keys. */
        fprintf(stderr,
                "shardex load: the table's key is unknown (%s): one batch at a "
                "time\n",
                sx_client_errmsg(ctx->client));
        ld.inflight = 1;
    }
    if (loader_init(&ld) != SX_OK) {
        r = cli_error("out of memory");
        goto out;
    }
    if (isatty(STDERR_FILENO))
        ld.progress_at = time(NULL) + LOAD_PROGRESS_S;
    long lineno = 0, bad = load_all(&ld, fd, &lineno, &read_err);
    printf("%ld\n", ld.stored);
    if (read_err)
        r = cli_error("read error after line %ld (%s); %ld items stored", lineno,
                      strerror(read_err), ld.stored);
    else if (ld.stopped_at)
        r = cli_error("load stopped at line %ld: %ld items stored, %ld bad line%s; the lines "
                      "from %ld on were not all stored (loading them again is harmless)",
                      ld.stopped_at, ld.stored, bad, bad == 1 ? "" : "s", ld.stopped_at);
    else if (bad)
        r = cli_error("%ld bad line%s; %ld items stored", bad, bad == 1 ? "" : "s", ld.stored);
    else
        r = CLI_OK;
out:
    loader_free(&ld);
    if (fd != STDIN_FILENO)
        close(fd);
    return r;
}
