/*
 * ibuild.c — sx-ibuild: checks an index node's rule for I_BUILD (an index
 * build's records, proto/PROTOCOL.md): a request whose upto is below the
 * partition's watermark for its source is refused whole (SX_EUNAVAIL) and
 * applies nothing, one at the watermark is applied, and neither moves the
 * watermark; one without seals = 1 is refused, and so is an older
 * sender's, which lacks the field (it would never seal); the replies carry the
 * node's epoch (not 0, the same each time), and a seal (an I_BUILD without
 * records) is answered with it.
 *
 * Usage: sx-ibuild CONFIG NODE PART SOURCE VALUE
 *   CONFIG  the cluster's config (the node's URL, the links' key)
 *   NODE    an index node's name (spoken to as a link)
 *   PART    an index partition of that node
 *   SOURCE  a storage partition whose records it has applied (watermark >= 1)
 *   VALUE   a string inside PART's range: the entry's one-value tuple
 * The entry goes under index id 0xfffffff0, which no table holds (ids come
 * from the catalog's counter), so it touches no real index; it stays (the
 * collector removes only ids below the catalog's next id), one entry more
 * in PART's count: run it on a cluster about to be torn down.
 * Exit status: 0 when every check held, 1 when one failed, 2 on usage or
 * transport errors.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "config.h"
#include "hash.h"
#include "link_auth.h"
#include "msg.h"
#include "net.h"
#include "sx_errors.h"
#include "tuple.h"

#define TIMEOUT_MS 10000
#define FAKE_INDEX 0xfffffff0u
#define VERSION 7

/* Encodes request s of type as (with its type byte then changed to t when
 * they differ: a frame of another message's fields), calls it, and
 * decodes the reply (a t's) into rep. Returns the reply's error (0 for
 * success; errmsg gets its message) or exits on a transport or encoding
 * failure. */
static int call_as(net_peer *peer, msg_type t, msg_type as, const void *s, void *rep, char *errmsg,
                   size_t errlen)
{
    mp_buf req;
    uint8_t *resp = NULL;
    size_t resp_n = 0;
    int rc;

    mp_buf_init(&req);
    /* [array, version, type, ...]: version and both types are fixints */
    if (msg_encode_req(as, s, &req) != 0 || req.oom || req.sb.size < 3 ||
        (uint8_t)req.sb.data[2] != (uint8_t)as || t > 127) {
        fprintf(stderr, "sx-ibuild: cannot encode %s\n", msg_name(as));
        exit(2);
    }
    req.sb.data[2] = (char)t;
    rc = net_peer_call_sync(peer, (const uint8_t *)req.sb.data, req.sb.size, TIMEOUT_MS, &resp,
                            &resp_n);
    mp_buf_free(&req);
    if (rc != 0) {
        fprintf(stderr, "sx-ibuild: %s: %s\n", msg_name(t), sx_strerror(rc));
        exit(2);
    }
    errmsg[0] = '\0';
    rc = msg_decode_rep(t, resp, resp_n, rep, errmsg, errlen);
    free(resp);
    return rc;
}

static int call(net_peer *peer, msg_type t, const void *s, void *rep, char *errmsg, size_t errlen)
{
    return call_as(peer, t, t, s, rep, errmsg, errlen);
}

/* The minimal I_BUILD a sender may send: I_APPLY's fields only (no
 * seals), one build record (key, VERSION) read at head upto. */
static int build_old(net_peer *peer, uint64_t part, uint64_t source, uint64_t upto,
                     const tup_bytes *key, char *err, size_t errlen)
{
    static const uint8_t nil = 0xc0;
    uint64_t kind = 0, version = VERSION, hash = 42;
    mp_span k = { key->p, key->n }, proj = { &nil, 1 };
    msg_I_APPLY_req rq = { .part = part,
                           .source = source,
                           .upto = upto,
                           .kinds = { 1, &kind },
                           .versions = { 1, &version },
                           .keys = { 1, &k },
                           .hashes = { 1, &hash },
                           .projs = { 1, &proj } };
    msg_I_BUILD_rep rep;

    return call_as(peer, MSG_I_BUILD, MSG_I_APPLY, &rq, &rep, err, errlen);
}

/* The partition's watermark for source, or exits. */
static uint64_t watermark(net_peer *peer, uint64_t part, uint64_t source)
{
    msg_I_WATERMARKS_req rq = { .part = part };
    msg_I_WATERMARKS_rep rep;
    char err[200];
    uint64_t wm = 0;
    int found = 0;

    if (call(peer, MSG_I_WATERMARKS, &rq, &rep, err, sizeof(err)) != 0) {
        fprintf(stderr, "sx-ibuild: I_WATERMARKS: %s\n", err);
        exit(2);
    }
    for (uint32_t i = 0; i < rep.sources.n && i < rep.wms.n; i++)
        if (rep.sources.v[i] == source) {
            wm = rep.wms.v[i];
            found = 1;
        }
    msg_free_rep(MSG_I_WATERMARKS, &rep);
    if (!found) {
        fprintf(stderr, "sx-ibuild: partition %" PRIu64 " has no source %" PRIu64 "\n", part,
                source);
        exit(2);
    }
    return wm;
}

/* Live entries of the fake index from key on (version of the first in
 * *version). */
static uint32_t entries(net_peer *peer, uint64_t part, const tup_bytes *key, uint64_t *version)
{
    msg_I_RANGE_req rq = { .part = part, .lo = { key->p, key->n }, .limit = 10 };
    msg_I_RANGE_rep rep;
    char err[200];
    uint32_t n;

    if (call(peer, MSG_I_RANGE, &rq, &rep, err, sizeof(err)) != 0) {
        fprintf(stderr, "sx-ibuild: I_RANGE: %s\n", err);
        exit(2);
    }
    n = rep.keys.n;
    *version = n > 0 && rep.versions.n > 0 ? rep.versions.v[0] : 0;
    msg_free_rep(MSG_I_RANGE, &rep);
    return n;
}

/* Sends one build record (key, VERSION) read at head upto, or with key
 * NULL a seal (no records), with the field seals; returns the reply's error, its message in err,
 * and on success the node's epoch in *epoch. */
static int build(net_peer *peer, uint64_t part, uint64_t source, uint64_t upto,
                 const tup_bytes *key, uint64_t seals, uint64_t *epoch, char *err, size_t errlen)
{
    static const uint8_t nil = 0xc0;
    uint64_t kind = 0, version = VERSION, hash = 42;
    mp_span k = { key ? key->p : NULL, key ? key->n : 0 }, proj = { &nil, 1 };
    uint32_t n = key != NULL;
    msg_I_BUILD_req rq = { .part = part,
                           .source = source,
                           .upto = upto,
                           .kinds = { n, &kind },
                           .versions = { n, &version },
                           .keys = { n, &k },
                           .hashes = { n, &hash },
                           .projs = { n, &proj },
                           .seals = seals };
    msg_I_BUILD_rep rep = { 0 };
    int rc = call(peer, MSG_I_BUILD, &rq, &rep, err, errlen);

    *epoch = rep.epoch;
    return rc;
}

int main(int argc, char **argv)
{
    net_peer *peer = NULL;
    tup_bytes key = { 0 };
    uint64_t part, source, wm, v = 0, epoch = 0, epoch2 = 0;
    uint8_t id[4];
    char err[256] = "";
    int rc;

    if (argc != 6) {
        fprintf(stderr, "usage: sx-ibuild CONFIG NODE PART SOURCE VALUE\n");
        return 2;
    }
    cfg_cluster *cfg = NULL;
    if (proto_init() != 0 || cfg_load(argv[1], &cfg, err, sizeof err) != 0) {
        fprintf(stderr, "sx-ibuild: %s: %s\n", argv[1], err);
        return 2;
    }
    int node = cfg_node_by_name(cfg, argv[2]);
    if (node < 0) {
        fprintf(stderr, "sx-ibuild: no node '%s' in %s\n", argv[2], argv[1]);
        cfg_free(cfg);
        return 2;
    }
    link_auth_set_key(cfg->has_link_key ? cfg->link_key : NULL, cfg->cluster);
    part = strtoull(argv[3], NULL, 10);
    source = strtoull(argv[4], NULL, 10);
    be_put32(id, FAKE_INDEX);
    rc = tup_bytes_append(&key, id, 4);
    if (!rc)
        rc = tup_encode_str(&key, argv[5], strlen(argv[5]));
    if (!rc)
        rc = net_peer_open_link(cfg->nodes[node].url, 1, &peer);
    cfg_free(cfg);
    if (rc != 0) {
        fprintf(stderr, "sx-ibuild: cannot set up (key or link)\n");
        tup_bytes_free(&key);
        return 2;
    }
    wm = watermark(peer, part, source);
    if (wm == 0) {
        fprintf(stderr,
                "sx-ibuild: source %" PRIu64 " has watermark 0 at partition %" PRIu64
                ": write something first\n",
                source, part);
        net_peer_close(peer);
        tup_bytes_free(&key);
        return 2;
    }
    printf("partition %" PRIu64 ", source %" PRIu64 ": watermark %" PRIu64 "\n", part, source, wm);

    rc = build(peer, part, source, wm - 1, &key, 1, &epoch, err, sizeof(err));
    printf("I_BUILD read at head %" PRIu64 ": %s%s%s\n", wm - 1, sx_strerror(rc),
           err[0] ? ": " : "", err);
    CHECKF(rc == SX_EUNAVAIL && strstr(err, "refused") != NULL,
           "a build request read below the watermark is refused (as such)");
    CHECKF(entries(peer, part, &key, &v) == 0, "and applies nothing");

    rc = build(peer, part, source, wm, &key, 0, &epoch, err, sizeof(err));
    printf("I_BUILD without seals = 1: %s%s%s\n", sx_strerror(rc), err[0] ? ": " : "", err);
    CHECKF(rc == SX_EINVAL && strstr(err, "seal") != NULL,
           "a build request whose sender does not promise to seal it is refused");
    CHECKF(entries(peer, part, &key, &v) == 0, "and applies nothing");

    rc = build_old(peer, part, source, wm, &key, err, sizeof(err));
    printf("I_BUILD of an older sender (no seals field): %s%s%s\n", sx_strerror(rc),
           err[0] ? ": " : "", err);
    CHECKF(rc != 0, "an older sender's build request (it never seals) is refused");
    CHECKF(entries(peer, part, &key, &v) == 0, "and applies nothing");

    rc = build(peer, part, source, wm, &key, 1, &epoch, err, sizeof(err));
    printf("I_BUILD read at head %" PRIu64 ": %s%s%s (epoch %016" PRIx64 ")\n", wm, sx_strerror(rc),
           err[0] ? ": " : "", err, epoch);
    CHECKF(rc == 0, "a build request read at the watermark is applied");
    CHECKF(epoch != 0, "its reply carries the node's epoch");
    CHECKF(entries(peer, part, &key, &v) == 1 && v == VERSION,
           "its entry is there with its version");
    CHECKF(watermark(peer, part, source) == wm, "the watermark did not move");

    rc = build(peer, part, source, 0, NULL, 1, &epoch2, err, sizeof(err));
    printf("seal: %s%s%s (epoch %016" PRIx64 ")\n", sx_strerror(rc), err[0] ? ": " : "", err,
           epoch2);
    CHECKF(rc == 0, "a seal (no records, upto 0: never refused) is answered");
    CHECKF(epoch2 == epoch, "with the same epoch");

    net_peer_close(peer);
    tup_bytes_free(&key);
    return CHECK_DONE();
}
