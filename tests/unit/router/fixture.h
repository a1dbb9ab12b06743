/*
 * fixture.h — the scripted nodes the router tests run a router against
 * (fake_test, query_test): a storage node "s1" (partitions 1 and 2, the
 * lower and upper half of the shard hash) and an index node "i1"
 * (partitions 101, tuples below ["M"], and 102), each a link server on an
 * IPC socket in a scratch dir, named by a generated cluster config
 * (tests/lib/testcfg.h) whose router "r1" is at inproc://<cluster>-r1.
 * Both nodes run one handler: it answers CATALOG with the catalog the test
 * published, and every other request type with the test's scripted
 * function for it ("not scripted" without one). The test's own state is
 * guarded by a mutex of its own, which the handler holds while it answers.
 * Also: S_GET answered from a table of facts, and a QUERY through the
 * router's handler with its answer decoded.
 *
 * The helpers CHECK into the test program's tally: a test using this file
 * defines CHECK_TALLY_SHARED and CHECK_TALLY_DEFINE before its includes.
 */
#ifndef SX_TEST_ROUTER_FIXTURE_H
#define SX_TEST_ROUTER_FIXTURE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include "catalog.h"
#include "config.h"
#include "msg.h"
#include "net.h"
#include "router.h"
#include "tuple.h"

#define CHECK_TALLY_SHARED /* the helpers CHECK too */
#include "check.h"

/* Answers request frame p..n (of the type it is scripted for) into out.
 * Runs on a server thread with the fixture's mutex held. */
typedef void (*rtf_serve_fn)(const uint8_t *p, size_t n, mp_buf *out);

/* The scripted function for one request type. */
typedef struct rtf_script {
    msg_type t;
    rtf_serve_fn serve;
} rtf_script;

/* The scripted nodes. Set up by rtf_open, released by rtf_close; must stay
 * where it is in between (the servers' handler holds its address). */
typedef struct rtf {
    pthread_mutex_t *mu;       /* the test's; held while the handler answers */
    const rtf_script *scripts; /* by request type; CATALOG is the fixture's */
    int nscripts;
    uint8_t *cat; /* the published catalog (under *mu): CATALOG's map */
    size_t catn;
    uint64_t catver;
    char dir[256];    /* the scratch dir: config and sockets */
    cfg_cluster *cfg; /* the config every node and the router are made from */
    net_server *s1, *i1;
} rtf;

/* Sets up fx: a scratch dir, the config of cluster `cluster` with token
 * key token_key (64 hex digits) in it, loaded into fx->cfg, and the two
 * nodes' servers (opened and CHECKed) answering with scripts[0..nscripts)
 * (borrowed) under mutex mu (the test's, initialised). Returns false when
 * the scratch dir or the config could not be had (said on stderr; nothing
 * is left open, fx->cfg NULL). */
bool rtf_open(rtf *fx, const char *cluster, const char *token_key, pthread_mutex_t *mu,
              const rtf_script *scripts, int nscripts);

/* Publishes catalog map b (cat_encode's) at version version: taken over
 * from b (left empty), it answers CATALOG from now on. Takes *fx->mu.
 * Returns mp_buf_take's result (0, or SX_ENOMEM with nothing changed). */
int rtf_publish(rtf *fx, mp_buf *b, uint64_t version);

/* Stops the servers, removes the scratch dir, frees the config and the
 * published catalog. The router made from fx->cfg must be gone. */
void rtf_close(rtf *fx);

/* Answers S_GET request p..n from nfacts facts: keys[k], a fact-local key
 * (hash | primary key tuple), holds item facts[k] (an empty buffer: no
 * item) at version 7; any other key nil at version 0. Stores the request's
 * partition in *part. Returns false, having answered SX_EPROTO "bad
 * S_GET", when p..n is no S_GET of at most 64 keys. */
bool rtf_serve_s_get(const uint8_t *p, size_t n, const tup_bytes *keys, const mp_buf *facts,
                     int nfacts, uint64_t *part, mp_buf *out);

/* What one QUERY was answered. */
typedef struct rtf_qres {
    int rc; /* the answer's error */
    char msg[256];
    int64_t ids[16]; /* the items' "id" (-1: none, or not an integer) */
    uint32_t n;      /* items, at most 16 kept */
    uint64_t entries, stale, covering, nfact;
    uint8_t token[512];
    size_t tokn;    /* 0: no token, or one that did not fit */
    bool token_cut; /* the token did not fit in token */
} rtf_qres;

/* Sends query q (its token replaced by prev's, unless prev is NULL)
 * through rt's handler and decodes the answer into res (zeroed first; res
 * must not be prev). Returns msg_encode_req's result for q (the request
 * is sent whatever it is). */
int rtf_query(router *rt, msg_QUERY_req *q, const rtf_qres *prev, rtf_qres *res);

#endif
