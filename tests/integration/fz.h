/*
 * fz.h — what the files of sx-fuzzframe share: the PRNG state, the
 * mutation record, connections (REQ/REP or link), the cluster context, the
 * per-port seeds and statistics, and the functions one file offers another.
 *
 *   fz_mutate.c   memory and byte helpers, the PRNG, the frame as items,
 *                 the mutations and MULTI wrapping
 *   fz_wire.c     transports (REQ/REP and links) and judging a reply
 *   fz_seeds.c    the cluster as the fuzzer sees it (what a frame must not
 *                 touch), the seed frames of each port, the set-up calls
 *   fuzzframe.c   running the cases of each port, the report, the modes,
 *                 main (its header comment describes the whole program)
 *
 * Threading: one thread per port runs fz_mutate / fz_conn_call /
 * fz_check_reply / fz_unsafe on its own fz_port and fz_conn; the fz_ctx is
 * filled by fz_setup before the threads start and only read afterwards.
 * Every function here exits the program (status 2) when memory runs out.
 */
#ifndef SX_FZ_H
#define SX_FZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <nng/nng.h>
#include "catalog.h"
#include "config.h"
#include "msg.h"
#include "mp.h"
#include "tuple.h"

#define MAX_SEEDS 40 /* seed frames of one port */

/* ---- memory and bytes (fz_mutate.c) ---------------------------------------- */

/* Prints "out of memory" and exits with status 2. */
void fz_die_oom(void);

/* calloc(n, sz) (at least one byte); never NULL. Free with free(). */
void *fz_xcalloc(size_t n, size_t sz);

/* Appends p..n to *b (nothing when n is 0). */
void fz_add(tup_bytes *b, const void *p, size_t n);

/* Moves an mp_buf's bytes into a fresh tup_bytes (the caller's, freed with
 * tup_bytes_free); *m is freed. */
tup_bytes fz_take_buf(mp_buf *m);

/* Request t with fields s, encoded; the caller frees it with tup_bytes_free. */
tup_bytes fz_encode_req(msg_type t, const void *s);

/* Writes the low `bytes` bytes of v big-endian into p[0..bytes). */
void fz_be_put(uint8_t *p, uint64_t v, int bytes);

/* ---- deterministic PRNG (fz_mutate.c) ---------------------------------------- */

/* A splitmix64 generator; any value is a valid state. */
typedef struct fz_rng {
    uint64_t s;
} fz_rng;

/* A number below n drawn from r (0 when n is 0). */
uint64_t fz_below(fz_rng *r, uint64_t n);

/* The generator of one mutant: a function of the run's seed, the port, the
 * seed frame and the mutant's number only. */
uint64_t fz_case_seed(uint64_t seed, int port, int s, int m);

/* ---- mutations (fz_mutate.c) ------------------------------------------------- */

/* A frame being mutated (b, owned: tup_bytes_free) and what was done to it. */
typedef struct fz_mut {
    tup_bytes b;
    char desc[512];
    size_t dl;
} fz_mut;

/* Appends a printf-style note to m->desc (silently cut when it is full). */
void fz_note(fz_mut *m, const char *fmt, ...);

/* Applies 1 to 4 mutations drawn from r to m->b; donor (borrowed) is
 * another seed frame whose items may be spliced in. */
void fz_mutate(fz_mut *m, fz_rng *r, const tup_bytes *donor);

/* Replaces m->b by a MULTI holding it in one of several ways drawn from r
 * (alone, between valid frames, beside a nested MULTI, the wrapper then
 * mutated, repeated); valid and ping (borrowed) are the neighbours. */
void fz_wrap_multi(fz_mut *m, fz_rng *r, const tup_bytes *valid, const tup_bytes *ping);

/* A MULTI request of frames f[0..n) (borrowed); the caller frees it. */
tup_bytes fz_multi_of(const tup_bytes *const *f, int n);

/* ---- transports and replies (fz_wire.c) -------------------------------------- */

typedef enum { R_REPLY, R_TIMEOUT, R_BROKEN } fz_outcome;

/* A connection to one port: nng REQ/REP for a router, a link (length- and
 * id-prefixed frames over TCP) for a node. Set url, link, timeout_ms and
 * fd = -1; the rest is the transport's. url is borrowed. */
typedef struct fz_conn {
    const char *url;
    bool link;
    nng_socket sock; /* REQ/REP (router) */
    bool open;
    int fd;               /* link */
    struct link_auth *au; /* its hellos and tags, with a link key */
    uint64_t next_id;
    int timeout_ms;
} fz_conn;

/* Milliseconds on the monotonic clock. */
uint64_t fz_now_ms(void);

/* (Re)connects c. Returns 0 or -1. */
int fz_conn_open(fz_conn *c);

/* Closes c's socket, if open; c may be opened again. */
void fz_conn_close(fz_conn *c);

/* Sends frame p..n on c (connecting first when it is not open) and waits up
 * to c->timeout_ms for its reply, copied into *reply (the caller's,
 * reused: tup_bytes_free when done). R_TIMEOUT leaves a link usable (a late
 * reply is skipped); after R_BROKEN reopen c. */
fz_outcome fz_conn_call(fz_conn *c, const uint8_t *p, size_t n, tup_bytes *reply);

/* Checks that rp..pn is a well-formed answer to request rq..rn: an error
 * reply with a known code and a message, or a success reply of the
 * request's type that decodes as its reply (a MULTI's inner replies each
 * checked against their request; depth 0 at the top). Sets *err (0 for
 * success). Returns 0, or -1 with the reason in why[0..wl). */
int fz_check_reply(const uint8_t *rq, size_t rn, const uint8_t *rp, size_t pn, int depth,
                   uint64_t *err, char *why, size_t wl);

/* ---- the cluster, seeds, set-up (fz_seeds.c) --------------------------------- */

/* An index partition's watermark for one storage source, at the start. */
typedef struct fz_wm {
    uint64_t part, source, wm;
} fz_wm;

/* The run: its options (main) and what the cluster held at the start
 * (fz_setup). */
typedef struct fz_ctx {
    cfg_cluster *cfg;
    const char *config; /* its file, for the replay line */
    cat_catalog *cat;
    const cat_table *rt;  /* --read: real data, read only */
    const cat_index *rix; /* its first index */
    const cat_table *wt;  /* --write: the throwaway table */
    const cat_index *wix; /* its first index, or NULL */
    char **protect;       /* tables at the start other than wt */
    int nprotect;
    uint32_t *pix; /* their index ids */
    int npix;
    fz_wm *wms; /* index partitions' watermarks at the start */
    int nwms;
    tup_bytes items[8]; /* items of the read table */
    int nitems;
    tup_bytes qtoken, stoken; /* real continuation tokens */
    uint64_t seed;
    int count, timeout_ms, verbose;
    const char *only;
} fz_ctx;

/* A seed frame of a port and how its mutants were answered. */
typedef struct fz_seed {
    char name[40];
    tup_bytes frame;
    int weight; /* percent of --count mutants */
    uint64_t sent, ok, err, withheld, noreply, bad;
} fz_seed;

/* One port (process) of the cluster: its seeds, statistics, first failure.
 * Used by one thread at a time (its own while the cases run). */
typedef struct fz_port {
    int idx;
    const cfg_node *node;
    fz_conn conn;
    fz_seed seeds[MAX_SEEDS];
    int nseeds;
    tup_bytes ping;
    int failures;
    bool gave_up;
    uint64_t ms;
    /* the first failing case */
    bool failed;
    char fseed[40], fdesc[512], fwhy[300];
    int fmut;
    uint64_t fcase;
    tup_bytes fframe;
    const fz_ctx *x;
} fz_port;

/* Whether request p..n, decoded as its server will, could change anything
 * but the throwaway table (see fuzzframe.c's header comment); depth 0 at
 * the top. Reads x only. */
bool fz_unsafe(const fz_ctx *x, const uint8_t *p, size_t n, int depth);

/* A PING request; the caller frees it with tup_bytes_free. */
tup_bytes fz_ping_frame(void);

/* Adds the seed frames of pt's role (pt->idx, node, ping and x set), built
 * from what x holds, the last a MULTI of some of them; the frames are
 * pt's (tup_bytes_free each). Exits (status 2) when x lacks what they need. */
void fz_port_seeds(const fz_ctx *x, fz_port *pt);

/* Reads from the cluster of x->cfg (its router, then each index node) the
 * catalog, tables rname and wname, some items, tokens and watermarks into
 * *x. Exits (status 2) when a call fails or something is missing. Free
 * with fz_ctx_free. */
void fz_setup(fz_ctx *x, const char *rname, const char *wname);

/* Frees what fz_setup filled in, and x->cfg. */
void fz_ctx_free(fz_ctx *x);

#endif
