/*
 * fuzzframe.c — sx-fuzzframe: a deterministic frame-mutation fuzzer for
 * every port of a running cluster. It proves the project rule "never assert
 * or abort on network input: answer with an error code and keep serving".
 *
 * Usage:
 *   sx-fuzzframe --config FILE --read TABLE --write TABLE
 *                [--count N] [--seed S] [--timeout-ms MS] [--port NAME] [-v]
 *   sx-fuzzframe --config FILE --ping          every port answers PING
 *   sx-fuzzframe [--config FILE] --send URL HEX  one frame (URL "link+tcp://..."
 *                                              for a node), its reply, a PING
 *                                              (--config: for its link_key)
 *
 * For every process of the config (routers over nng REQ/REP, storage and
 * index nodes over links, proto/PROTOCOL.md "Transport") it builds VALID
 * seed frames of every message type that port serves, with the cluster's
 * real contents (tables, indexes, items, keys, partitions, tokens,
 * watermarks, read first), then for each seed N mutants from a fixed-seed
 * PRNG (each mutant's generator is derived from --seed, the port, the seed
 * and the mutant's number, so a case is the same however the others went):
 * bit flips, boundary bytes, truncation at item starts, headers and ends,
 * inflated or deflated container/str/bin headers, inserted, duplicated and
 * deleted items, integers replaced by boundary values, items replaced by
 * values of other types, swapped items, another message type, another
 * version, appended fields, items spliced in from another seed, and MULTI
 * wrapping (alone, beside valid frames, nested, or the wrapper mutated).
 *
 * Each frame sent must get a reply within the timeout (none of these frames
 * is one a server may drop: all are under the size limit) that is a
 * well-formed reply frame: an error reply with a known code and a message,
 * typed as the request (or as PING or MULTI, when the server cannot tell),
 * or a success reply of the request's own type that decodes as that type's
 * reply (a MULTI's: one reply per inner frame, each checked the same way).
 * Then the port must answer PING. A port that stops answering is given up.
 *
 * Links are authenticated with the config's link_key when it has one: the
 * fuzzer holds the key, as a router would, so its mutants reach the nodes'
 * decoders (what a compromised or buggy peer could send; a stranger's
 * frames stop at the tag, link_test checks that). Data safety: a mutated
 * inter-node write that decodes may really write. Before sending, each
 * frame (and each frame inside a MULTI) is decoded exactly as the server
 * will (msg_decode_req) and withheld, counted as such, when it could touch
 * anything but the --write table: a PUT, DELETE, INDEX_CREATE, INDEX_DROP
 * or CAT_UPDATE naming another table that existed at the start, an S_WRITE
 * to another table id, a CAT_BACKFILLED of such a table's index, an I_BUILD
 * carrying a key of such an index, an I_APPLY whose upto passes the
 * watermark its partition had for its source at the start (it would move
 * the watermark: the records it skipped would never be applied) or whose hw
 * is above 10^15 µs (a high-water no real partition is below: one above it
 * would let tombstones be collected early). Reads go everywhere.
 *
 * Exit status: 0 when every frame behaved, 1 when one did not, 2 on usage
 * or set-up errors. Each failure is printed when it happens; at exit, per
 * port and seed, the frames sent and how they were answered (ok, error
 * reply, withheld, no reply, bad reply), then the first failing case of the
 * first port that had one, in full: seed, mutant, case, mutations, the
 * frame's hex and the --send line that replays it.
 *
 * Where things are: this file runs each port's cases (one thread a port),
 * prints the report and holds the modes and main; fz_mutate.c the PRNG and
 * the mutations, fz_wire.c the transports and the judging of a reply,
 * fz_seeds.c the set-up, the seed frames and the data-safety check; fz.h
 * what they share.
 */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "config.h"
#include "link_auth.h"
#include "msg.h"
#include "fz.h"

#define DEFAULT_COUNT 1500       /* mutants per seed (fuzzframe.sh's too) */
#define DEFAULT_TIMEOUT_MS 15000 /* generous: the suite also runs under ASan */
#define MULTI_EVERY 6            /* every 6th mutant goes inside a MULTI */
#define MAX_PORT_FAILURES 5      /* then the port is given up */
#define LINK_PREFIX "link+"

static void hex_print(FILE *f, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%02x", p[i]);
}

/* ---- per port: the run ------------------------------------------------------------------ */

/* Records a failure of case (seed s, mutant mi, generator cs) of frame f. */
static void failure(fz_port *pt, const fz_seed *s, int mi, uint64_t cs, const fz_mut *m,
                    const char *why)
{
    pt->failures++;
    fprintf(stderr, "FAIL %s (%s): %s mutant %d (case 0x%016" PRIx64 "): %s\n", pt->node->name,
            pt->conn.url, s->name, mi, cs, why);
    if (pt->failed)
        return;
    pt->failed = true;
    snprintf(pt->fseed, sizeof pt->fseed, "%s", s->name);
    snprintf(pt->fdesc, sizeof pt->fdesc, "%s", m->desc);
    snprintf(pt->fwhy, sizeof pt->fwhy, "%s", why);
    pt->fmut = mi;
    pt->fcase = cs;
    fz_add(&pt->fframe, m->b.p, m->b.n);
}

/* PING on the port's connection (reconnecting once if needed). */
static int ping_ok(fz_port *pt, tup_bytes *reply)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        uint64_t err = 1;
        char why[200];

        if (attempt && fz_conn_open(&pt->conn) != 0)
            return -1;
        if (fz_conn_call(&pt->conn, pt->ping.p, pt->ping.n, reply) == R_REPLY &&
            fz_check_reply(pt->ping.p, pt->ping.n, reply->p, reply->n, 0, &err, why, sizeof why) ==
                0 &&
            err == 0)
            return 0;
    }
    return -1;
}

/* Sends one case and judges it; returns -1 when the port must be given up. */
static int run_case(fz_port *pt, fz_seed *s, int mi, uint64_t cs, fz_mut *m, tup_bytes *reply)
{
    char why[300];
    uint64_t err = 0;
    fz_outcome o;

    if (fz_unsafe(pt->x, m->b.p, m->b.n, 0)) {
        s->withheld++;
        return 0;
    }
    s->sent++;
    o = fz_conn_call(&pt->conn, m->b.p, m->b.n, reply);
    if (o != R_REPLY) {
        s->noreply++;
        snprintf(why, sizeof why, "%s",
                 o == R_TIMEOUT ? "no reply within the timeout"
                                : "the connection broke instead of a reply");
        failure(pt, s, mi, cs, m, why);
        if (o == R_BROKEN)
            fz_conn_open(&pt->conn);
    } else if (fz_check_reply(m->b.p, m->b.n, reply->p, reply->n, 0, &err, why, sizeof why) != 0) {
        s->bad++;
        failure(pt, s, mi, cs, m, why);
    } else if (err) {
        s->err++;
    } else {
        s->ok++;
    }
    if (pt->x->verbose > 1)
        printf("%s %s #%d: %s -> %s %" PRIu64 "\n", pt->node->name, s->name, mi, m->desc,
               o != R_REPLY ? "no reply"
               : err        ? "error"
                            : "ok",
               err);
    if (ping_ok(pt, reply) != 0) {
        failure(pt, s, mi, cs, m, "the port does not answer PING after this frame");
        return -1;
    }
    return pt->failures >= MAX_PORT_FAILURES ? -1 : 0;
}

static void *port_main(void *arg)
{
    fz_port *pt = arg;
    const fz_ctx *x = pt->x;
    tup_bytes reply = { 0 };
    uint64_t t0 = fz_now_ms();

    if (ping_ok(pt, &reply) != 0) {
        fz_mut m = { .b = { 0 } };
        failure(pt, &pt->seeds[0], -1, 0, &m, "no PING reply at the start");
        pt->gave_up = true;
    }
    for (int si = 0; si < pt->nseeds && !pt->gave_up; si++) {
        fz_seed *s = &pt->seeds[si];
        int n = x->count * s->weight / 100;

        for (int mi = -1; mi < n && !pt->gave_up; mi++) { /* -1: the seed itself */
            uint64_t cs = fz_case_seed(x->seed, pt->idx, si, mi);
            fz_rng r = { cs };
            fz_mut m = { .b = { 0 } };
            const fz_seed *donor = &pt->seeds[fz_below(&r, (uint64_t)pt->nseeds)];

            fz_add(&m.b, s->frame.p, s->frame.n);
            if (mi >= 0) {
                fz_mutate(&m, &r, &donor->frame);
                if (mi % MULTI_EVERY == MULTI_EVERY - 1 && strcmp(s->name, "MULTI") != 0)
                    fz_wrap_multi(&m, &r, &donor->frame, &pt->ping);
            } else {
                fz_note(&m, "none (the seed)");
            }
            if (run_case(pt, s, mi, cs, &m, &reply) != 0)
                pt->gave_up = true;
            tup_bytes_free(&m.b);
        }
    }
    pt->ms = fz_now_ms() - t0;
    tup_bytes_free(&reply);
    return NULL;
}

/* ---- modes ---------------------------------------------------------------------------------- */

static void print_report(fz_port *ports, int np)
{
    uint64_t tot[6] = { 0 };
    int first = -1;

    printf("%-4s %-18s %7s %7s %7s %9s %8s %5s\n", "port", "seed", "sent", "ok", "error",
           "withheld", "noreply", "bad");
    for (int p = 0; p < np; p++) {
        for (int i = 0; i < ports[p].nseeds; i++) {
            const fz_seed *s = &ports[p].seeds[i];
            printf("%-4s %-18s %7" PRIu64 " %7" PRIu64 " %7" PRIu64 " %9" PRIu64 " %8" PRIu64
                   " %5" PRIu64 "\n",
                   ports[p].node->name, s->name, s->sent, s->ok, s->err, s->withheld, s->noreply,
                   s->bad);
            tot[0] += s->sent;
            tot[1] += s->ok;
            tot[2] += s->err;
            tot[3] += s->withheld;
            tot[4] += s->noreply;
            tot[5] += s->bad;
        }
        printf("%-4s %-18s %.1f s%s\n", ports[p].node->name, "(time)", ports[p].ms / 1000.0,
               ports[p].gave_up ? " (GAVE UP)" : "");
        if (ports[p].failed && first < 0)
            first = p;
    }
    printf("%-23s %7" PRIu64 " %7" PRIu64 " %7" PRIu64 " %9" PRIu64 " %8" PRIu64 " %5" PRIu64 "\n",
           "total", tot[0], tot[1], tot[2], tot[3], tot[4], tot[5]);
    if (first >= 0) {
        const fz_port *pt = &ports[first];
        fprintf(stderr,
                "\nfirst failing case: port %s (%s, %s)\n  seed: %s, mutant %d, case "
                "0x%016" PRIx64 " (--seed 0x%" PRIx64 ")\n  mutation: %s\n  problem: %s\n"
                "  frame (%zu bytes): ",
                pt->node->name, pt->conn.url, pt->conn.link ? "link" : "REQ/REP", pt->fseed,
                pt->fmut, pt->fcase, pt->x->seed, pt->fdesc, pt->fwhy, pt->fframe.n);
        hex_print(stderr, pt->fframe.p, pt->fframe.n);
        fprintf(stderr, "\n  replay: sx-fuzzframe --config %s --send %s%s ", pt->x->config,
                pt->conn.link ? LINK_PREFIX : "", pt->conn.url);
        hex_print(stderr, pt->fframe.p, pt->fframe.n);
        fprintf(stderr, "\n");
    }
}

/* --send URL HEX: one frame, its reply, then a PING. */
static int send_mode(const char *url, const char *hex, int timeout_ms)
{
    bool link = strncmp(url, LINK_PREFIX, strlen(LINK_PREFIX)) == 0;
    fz_conn c = { .url = link ? url + strlen(LINK_PREFIX) : url,
                  .link = link,
                  .fd = -1,
                  .timeout_ms = timeout_ms };
    tup_bytes f = { 0 }, reply = { 0 }, ping = fz_ping_frame();
    uint64_t err = 0;
    char why[300];
    fz_outcome o;
    int rc = 0;

    for (size_t i = 0; hex[i] && hex[i + 1]; i += 2) {
        unsigned v;
        uint8_t b;
        if (sscanf(hex + i, "%2x", &v) != 1) {
            fprintf(stderr, "sx-fuzzframe: bad hex\n");
            return 2;
        }
        b = (uint8_t)v;
        fz_add(&f, &b, 1);
    }
    o = fz_conn_call(&c, f.p, f.n, &reply);
    if (o != R_REPLY) {
        printf("no reply (%s)\n", o == R_TIMEOUT ? "timed out" : "connection broke");
        rc = 1;
    } else {
        printf("reply (%zu bytes): ", reply.n);
        hex_print(stdout, reply.p, reply.n);
        if (fz_check_reply(f.p, f.n, reply.p, reply.n, 0, &err, why, sizeof why) != 0) {
            printf("\nBAD: %s\n", why);
            rc = 1;
        } else {
            printf("\n%s %" PRIu64 "\n", err ? "error" : "ok", err);
        }
    }
    if (fz_conn_call(&c, ping.p, ping.n, &reply) != R_REPLY) {
        fz_conn_open(&c);
        if (fz_conn_call(&c, ping.p, ping.n, &reply) != R_REPLY) {
            printf("no PING reply afterwards\n");
            rc = 1;
        }
    }
    if (rc == 0)
        printf("PING answered afterwards\n");
    fz_conn_close(&c);
    tup_bytes_free(&f);
    tup_bytes_free(&reply);
    tup_bytes_free(&ping);
    return rc;
}

/* --ping: every port of the config answers PING on a fresh connection. */
static int ping_mode(const cfg_cluster *cfg, int timeout_ms)
{
    tup_bytes ping = fz_ping_frame(), reply = { 0 };
    int bad = 0;

    for (int i = 0; i < cfg->nnodes; i++) {
        fz_conn c = { .url = cfg->nodes[i].url,
                      .link = cfg->nodes[i].role != SX_ROLE_ROUTER,
                      .fd = -1,
                      .timeout_ms = timeout_ms };
        uint64_t err = 1;
        char why[200];
        bool ok = fz_conn_call(&c, ping.p, ping.n, &reply) == R_REPLY &&
                  fz_check_reply(ping.p, ping.n, reply.p, reply.n, 0, &err, why, sizeof why) == 0 &&
                  err == 0;

        printf("%s %s: %s\n", cfg->nodes[i].name, cfg->nodes[i].url,
               ok ? "answers PING" : "NO PING REPLY");
        bad += !ok;
        fz_conn_close(&c);
    }
    tup_bytes_free(&ping);
    tup_bytes_free(&reply);
    return bad ? 1 : 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: sx-fuzzframe --config FILE --read TABLE --write TABLE\n"
            "                    [--count N] [--seed S] [--timeout-ms MS] [--port NAME] [-v]\n"
            "       sx-fuzzframe --config FILE --ping\n"
            "       sx-fuzzframe [--config FILE] --send URL HEX   (URL link+tcp://... for a\n"
            "                    node; FILE gives the link_key, if the cluster has one)\n"
            "Sends N mutants of every seed frame (default %d) to every port of the\n"
            "cluster; each must get a well-formed reply and the port must answer PING\n"
            "afterwards. TABLE --read is read only; mutated writes go to --write.\n",
            DEFAULT_COUNT);
}

int main(int argc, char **argv)
{
    fz_ctx x = { .seed = 0x5eedf00d, .count = DEFAULT_COUNT, .timeout_ms = DEFAULT_TIMEOUT_MS };
    const char *config = NULL, *rname = NULL, *wname = NULL, *send_url = NULL, *hex = NULL;
    bool ping = false;
    char err[256];
    fz_port *ports;
    pthread_t *th;
    int np = 0, bad = 0;

    signal(SIGPIPE, SIG_IGN);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--ping")) {
            ping = true;
            continue;
        }
        if (!strcmp(a, "-v")) {
            x.verbose++;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (v == NULL) {
            usage(stderr);
            return 2;
        }
        i++;
        if (!strcmp(a, "--config"))
            config = v;
        else if (!strcmp(a, "--read"))
            rname = v;
        else if (!strcmp(a, "--write"))
            wname = v;
        else if (!strcmp(a, "--count"))
            x.count = atoi(v);
        else if (!strcmp(a, "--seed"))
            x.seed = strtoull(v, NULL, 0);
        else if (!strcmp(a, "--timeout-ms"))
            x.timeout_ms = atoi(v);
        else if (!strcmp(a, "--port"))
            x.only = v;
        else if (!strcmp(a, "--send") && i + 1 < argc) {
            send_url = v;
            hex = argv[++i];
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (x.timeout_ms <= 0 || x.count < 0) {
        usage(stderr);
        return 2;
    }
    if ((!send_url && config == NULL) || (!send_url && !ping && (rname == NULL || wname == NULL))) {
        usage(stderr);
        return 2;
    }
    if (proto_init() != 0 || (config != NULL && cfg_load(config, &x.cfg, err, sizeof err) != 0)) {
        fprintf(stderr, "sx-fuzzframe: %s: %s\n", config ? config : "libsodium", err);
        return 2;
    }
    if (x.cfg != NULL) /* as a router, the cluster's links' key */
        link_auth_set_key(x.cfg->has_link_key ? x.cfg->link_key : NULL, x.cfg->cluster);
    x.config = config;
    if (send_url) {
        int rc = send_mode(send_url, hex, x.timeout_ms);
        cfg_free(x.cfg);
        return rc;
    }
    if (ping) {
        bad = ping_mode(x.cfg, x.timeout_ms);
        cfg_free(x.cfg);
        return bad;
    }
    fz_setup(&x, rname, wname);

    ports = fz_xcalloc((size_t)x.cfg->nnodes, sizeof *ports);
    th = fz_xcalloc((size_t)x.cfg->nnodes, sizeof *th);
    for (int i = 0; i < x.cfg->nnodes; i++) {
        fz_port *pt = &ports[np];
        const cfg_node *nd = &x.cfg->nodes[i];

        if (x.only && strcmp(x.only, nd->name) != 0)
            continue;
        pt->idx = i;
        pt->node = nd;
        pt->x = &x;
        pt->conn = (fz_conn){
            .url = nd->url, .link = nd->role != SX_ROLE_ROUTER, .fd = -1, .timeout_ms = x.timeout_ms
        };
        pt->ping = fz_ping_frame();
        fz_port_seeds(&x, pt);
        np++;
    }
    printf("sx-fuzzframe: seed 0x%" PRIx64 ", %d mutants per seed (weighted), every %dth in "
           "a MULTI, timeout %d ms, %d ports\n",
           x.seed, x.count, MULTI_EVERY, x.timeout_ms, np);
    fflush(stdout);
    for (int p = 0; p < np; p++)
        if (pthread_create(&th[p], NULL, port_main, &ports[p]) != 0) {
            fprintf(stderr, "sx-fuzzframe: cannot start a thread\n");
            return 2;
        }
    for (int p = 0; p < np; p++)
        pthread_join(th[p], NULL);
    print_report(ports, np);
    for (int p = 0; p < np; p++) {
        bad += ports[p].failures;
        fz_conn_close(&ports[p].conn);
        for (int i = 0; i < ports[p].nseeds; i++)
            tup_bytes_free(&ports[p].seeds[i].frame);
        tup_bytes_free(&ports[p].ping);
        tup_bytes_free(&ports[p].fframe);
    }
    printf("sx-fuzzframe: %s\n", bad ? "FAILURES (see above)" : "every frame behaved");
    free(ports);
    free(th);
    fz_ctx_free(&x);
    return bad ? 1 : 0;
}
