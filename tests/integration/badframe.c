/*
 * badframe.c — sx-badframe: sends malformed, truncated, oversized and
 * otherwise wrong frames straight to shardex ports and checks that each
 * process answers with an error reply and still answers PING afterwards.
 * The frame limit (SX_MAX_FRAME, 16 MiB: on a link port the frame's, on
 * the router's REQ/REP client port the SP message's, its 4-byte request
 * id included) is checked at every port: a frame over it (by one byte,
 * 17 MiB, a length header of 1 GiB or 2^64-1) must be dropped — the
 * connection closed, no answer — and a frame of exactly the limit read
 * and answered (with an error: it is malformed).
 *
 * Usage: sx-badframe [--link-key HEX CLUSTER] URL [URL...]   e.g. tcp://127.0.0.1:7100
 *   A URL prefixed "link+" (link+tcp://127.0.0.1:7101) is a storage or index
 *   node's port, which speaks links (proto/PROTOCOL.md, "Links": a u32
 *   big-endian length, a u64 id, the frame) instead of nng's REQ/REP.
 *   With --link-key (the cluster's "link_key" and "cluster" name) links start
 *   with the hello exchange and the proof and carry tags (rawlink.c), and
 *   each link port must also drop a stranger's PING: one without a hello,
 *   one with a forged tag.
 * Exit status: 0 when every case behaved at every URL, 1 otherwise.
 *
 * Frames are msgpack arrays [version=1, type, fields...]; replies are
 * [1, type|0x80, err, ...] (see proto/wire/msg.h). This program deliberately does
 * not use proto/: it speaks the wire format from scratch, as a stranger
 * would (holding the key, as a compromised peer would).
 *
 * Frames at and over the size limit are sent over a raw TCP connection
 * speaking nng's SP-over-TCP framing by hand (8-byte handshake, then an
 * 8-byte big-endian length before each message): nng's own REQ socket may
 * hang in nng_close while a send the peer refused is still pending, and a
 * raw socket also lets us claim a length far larger than we send.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <msgpack.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include "rawlink.h"

#define REPLY_TIMEOUT_MS 10000 /* generous: the suite also runs under ASan */
/* Every port's frame limit: SX_MAX_FRAME (proto/runtime/net.h), the
 * NNG_OPT_RECVMAXSZ of the router's client port (net_listen, net_tls.c)
 * and the bound on a link frame (link.c). */
#define MAX_FRAME (16u * 1024u * 1024u)
#define BIG_FRAME (17u * 1024u * 1024u)

/* One test case: a frame the server must answer with an error reply, or
 * (EXPECT_REPLY) with any reply frame, a MULTI's success reply included. */
typedef enum { EXPECT_ERROR, EXPECT_REPLY } expect_kind;

typedef struct frame {
    const char *name;
    uint8_t *p;
    size_t n;
    expect_kind expect;
} frame;

/* Deterministic pseudo-random bytes (xorshift), so failures reproduce. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint8_t rng_byte(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint8_t)(rng_state >> 24);
}

/* Copies an sbuffer's bytes into f (takes ownership of the data). */
static int frame_from_sbuf(frame *f, const char *name, msgpack_sbuffer *sb, expect_kind e)
{
    f->name = name;
    f->p = (uint8_t *)sb->data;
    f->n = sb->size;
    f->expect = e;
    sb->data = NULL;
    sb->size = sb->alloc = 0;
    return f->p ? 0 : -1;
}

static int frame_from_bytes(frame *f, const char *name, const void *p, size_t n, expect_kind e)
{
    f->name = name;
    f->p = malloc(n ? n : 1);
    if (!f->p)
        return -1;
    memcpy(f->p, p, n);
    f->n = n;
    f->expect = e;
    return 0;
}

static void pack_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

/* Builds every bad frame; returns the count or -1 on allocation failure. */
static int build_frames(frame *fs, int max)
{
    int n = 0;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    uint8_t tmp[256];

    /* 1. random garbage (starts with 0xc1, a byte msgpack never uses) */
    tmp[0] = 0xc1;
    for (size_t i = 1; i < 200; i++)
        tmp[i] = rng_byte();
    if (frame_from_bytes(&fs[n++], "random garbage", tmp, 200, EXPECT_ERROR))
        return -1;

    /* 2. random garbage that starts like an array */
    tmp[0] = 0x94;
    for (size_t i = 1; i < 64; i++)
        tmp[i] = rng_byte();
    if (frame_from_bytes(&fs[n++], "garbage after array header", tmp, 64, EXPECT_ERROR))
        return -1;

    /* 3. a valid-looking PUT, truncated in the middle of an item */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 4);
    msgpack_pack_uint64(&pk, 1);
    msgpack_pack_uint64(&pk, 6); /* PUT */
    pack_str(&pk, "customers");
    msgpack_pack_array(&pk, 1);
    msgpack_pack_map(&pk, 2);
    pack_str(&pk, "id");
    msgpack_pack_uint64(&pk, 424242);
    pack_str(&pk, "town");
    pack_str(&pk, "Redmond, a rather long town name to cut");
    sb.size -= 20;
    if (frame_from_sbuf(&fs[n++], "truncated PUT", &sb, EXPECT_ERROR))
        return -1;

    /* 4. array header claiming 2^32-1 elements */
    {
        const uint8_t b[] = { 0xdd, 0xff, 0xff, 0xff, 0xff, 0x01, 0x06 };
        if (frame_from_bytes(&fs[n++], "array of 2^32-1 elements", b, sizeof b, EXPECT_ERROR))
            return -1;
    }
    /* 5. a PUT whose item list claims 2^32-1 elements */
    {
        const uint8_t b[] = { 0x94, 0x01, 0x06, 0xa1, 'x', 0xdd, 0xff, 0xff, 0xff, 0xff, 0x80 };
        if (frame_from_bytes(&fs[n++], "PUT list of 2^32-1 items", b, sizeof b, EXPECT_ERROR))
            return -1;
    }
    /* 6. a map header claiming 2^32-1 pairs inside a GET key */
    {
        const uint8_t b[] = { 0x94, 0x01, 0x07, 0xa1, 'x', 0xdf, 0xff, 0xff, 0xff, 0xff };
        if (frame_from_bytes(&fs[n++], "GET key map of 2^32-1 pairs", b, sizeof b, EXPECT_ERROR))
            return -1;
    }
    /* 7. a str header claiming 4 GiB */
    {
        const uint8_t b[] = { 0x93, 0x01, 0x07, 0xdb, 0xff, 0xff, 0xff, 0xff, 'a' };
        if (frame_from_bytes(&fs[n++], "str of 4 GiB", b, sizeof b, EXPECT_ERROR))
            return -1;
    }
    /* 8. nesting 5000 deep */
    {
        size_t depth = 5000;
        uint8_t *b = malloc(depth + 3);
        if (!b)
            return -1;
        b[0] = 0x93;
        b[1] = 0x01;
        b[2] = 0x06;
        memset(b + 3, 0x91, depth - 1);
        b[depth + 2] = 0xc0;
        fs[n].name = "arrays nested 5000 deep";
        fs[n].p = b;
        fs[n].n = depth + 3;
        fs[n].expect = EXPECT_ERROR;
        n++;
    }
    /* 9. wrong protocol version: PING with version 2 */
    {
        const uint8_t b[] = { 0x92, 0x02, 0x01 };
        if (frame_from_bytes(&fs[n++], "PING with version 2", b, sizeof b, EXPECT_ERROR))
            return -1;
    }
    /* 10. unknown message type */
    {
        const uint8_t b[] = { 0x92, 0x01, 0x63 };
        if (frame_from_bytes(&fs[n++], "unknown type 99", b, sizeof b, EXPECT_ERROR))
            return -1;
    }
    /* 11. a reply frame sent as a request */
    {
        const uint8_t b[] = { 0x95, 0x01, 0x81, 0x00, 0xa1, 'x', 0xa1, 'y' };
        if (frame_from_bytes(&fs[n++], "reply sent as request", b, sizeof b, EXPECT_ERROR))
            return -1;
    }
    /* 12. a GET whose fields have the wrong types */
    {
        const uint8_t b[] = { 0x94, 0x01, 0x07, 0x05, 0x06 };
        if (frame_from_bytes(&fs[n++], "GET with wrong field types", b, sizeof b, EXPECT_ERROR))
            return -1;
    }
    /* 13. not an array at all: a map */
    {
        const uint8_t b[] = { 0x81, 0x01, 0x01 };
        if (frame_from_bytes(&fs[n++], "map instead of array", b, sizeof b, EXPECT_ERROR))
            return -1;
    }
    /* Inter-node messages (served by storage or index nodes; a router must
     * refuse them): counts, truncation and shapes that must not get past the
     * decoder or the handler's validation. None of them can mutate state if
     * rejected late: part/source ids are unknown or watermarks stay at 0. */
    { /* S_WRITE whose dels list claims 2^32-1 entries */
        const uint8_t b[] = { 0x96, 0x01, 22, 0x01, 0x00, 0x01, 0xdd, 0xff, 0xff, 0xff, 0xff };
        if (frame_from_bytes(&fs[n++], "S_WRITE dels of 2^32-1", b, sizeof b, EXPECT_ERROR))
            return -1;
    }
    { /* S_WRITE to partition 1 whose only object is not a map */
        const uint8_t b[] = { 0x97, 0x01, 22, 0x01, 0x00, 0x01, 0x90, 0x91, 0xa3, 'b', 'a', 'd' };
        if (frame_from_bytes(&fs[n++], "S_WRITE object not a map", b, sizeof b, EXPECT_ERROR))
            return -1;
    }
    { /* S_WRITE to an unknown partition */
        const uint8_t b[] = { 0x97, 0x01, 22,   0xcd, 0x03, 0xe7, 0x00, 0x01,
                              0x90, 0x91, 0x81, 0xa2, 'i',  'd',  0x01 };
        if (frame_from_bytes(&fs[n++], "S_WRITE unknown partition", b, sizeof b, EXPECT_ERROR))
            return -1;
    }
    { /* S_GET whose key list holds a truncated bin */
        const uint8_t b[] = { 0x95, 0x01, 23, 0x01, 0x01, 0x92, 0xc4, 0xc8, 'a' };
        if (frame_from_bytes(&fs[n++], "S_GET truncated key", b, sizeof b, EXPECT_ERROR))
            return -1;
    }
    { /* I_APPLY whose seqs list claims 2^32-1 entries */
        const uint8_t b[] = { 0x97, 0x01, 26, 101, 0x01, 0x00, 0x00, 0xdd, 0xff, 0xff, 0xff, 0xff };
        if (frame_from_bytes(&fs[n++], "I_APPLY seqs of 2^32-1", b, sizeof b, EXPECT_ERROR))
            return -1;
    }
    { /* I_APPLY with lists of different lengths (upto 0: harmless) */
        const uint8_t b[] = { 0x9c, 0x01, 26,   101, 0x01, 0x00, 0x00, 0x91, 0x01, /* seqs [1] */
                              0x91, 0x00,                                          /* kinds [PUT] */
                              0x90,                                                /* versions [] */
                              0x91, 0xc4, 0x01, 'x', /* keys [bin "x"] */
                              0x90,                  /* hashes [] */
                              0x90 };                /* projs [] */
        if (frame_from_bytes(&fs[n++], "I_APPLY ragged lists", b, sizeof b, EXPECT_ERROR))
            return -1;
    }
    { /* I_RANGE with wrong field types */
        const uint8_t b[] = { 0x97, 0x01, 27, 0xa1, 'p', 0x05, 0x05, 0xc3, 0xc0 };
        if (frame_from_bytes(&fs[n++], "I_RANGE wrong field types", b, sizeof b, EXPECT_ERROR))
            return -1;
    }
    { /* CAT_UPDATE with an unknown op and wrong field types */
        const uint8_t b[] = { 0x95, 0x01, 20, 0x63, 0x01, 0x02 };
        if (frame_from_bytes(&fs[n++], "CAT_UPDATE bad op and types", b, sizeof b, EXPECT_ERROR))
            return -1;
    }
    /* A MULTI of three INDEX_LISTs of a missing table (""): three catalog
     * refreshes at once on the router's fibers, which hung it for good
     * while the catalog cache held a mutex across the fetch (found by
     * sx-fuzzframe; fixed in 4199bf9). Elsewhere: inner error replies. */
    {
        const uint8_t b[] = { 0x93, 0x01, 30,   0x93, 0xc4, 0x04, 0x93, 0x01, 0x05, 0xa0, 0xc4,
                              0x04, 0x93, 0x01, 0x05, 0xa0, 0xc4, 0x04, 0x93, 0x01, 0x05, 0xa0 };
        if (frame_from_bytes(&fs[n++], "MULTI of 3 catalog misses", b, sizeof b, EXPECT_REPLY))
            return -1;
    }
    /* 14. an empty frame */
    if (frame_from_bytes(&fs[n++], "empty frame", "", 0, EXPECT_ERROR))
        return -1;
    if (n > max)
        abort(); /* programming error: enlarge the array */
    return n;
}

/* Opens a REQ socket connected to url. Returns 0 or an nng error. */
static int open_req(const char *url, nng_socket *s, int timeout_ms)
{
    int rv = nng_req0_open(s);
    if (rv)
        return rv;
    nng_socket_set_ms(*s, NNG_OPT_RECVTIMEO, timeout_ms);
    nng_socket_set_ms(*s, NNG_OPT_SENDTIMEO, REPLY_TIMEOUT_MS);
    nng_socket_set_size(*s, NNG_OPT_RECVMAXSZ, 64u * 1024u * 1024u);
    rv = nng_dial(*s, url, NULL, 0);
    if (rv)
        nng_close(*s);
    return rv;
}

#define LINK_PREFIX "link+"

/* url without its "link+" prefix when it has one (*link set), else url. */
static const char *link_url(const char *url, int *link)
{
    *link = strncmp(url, LINK_PREFIX, strlen(LINK_PREFIX)) == 0;
    return *link ? url + strlen(LINK_PREFIX) : url;
}

static void put_be(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * (bytes - 1 - i)));
}

/* exchange() over a link, on a plain TCP socket (authenticated when a key
 * is set): one frame with id 7, and the reply that carries id 7. */
static int link_exchange(const char *url, const uint8_t *p, size_t n, uint8_t **got, size_t *gotn)
{
    rawlink l;
    uint8_t *b = NULL;
    size_t bn = 0;
    uint64_t id = 0;
    int rv = 0;

    if (rawlink_open(&l, url) != 0)
        return NNG_ECONNREFUSED;
    if (rawlink_send(&l, 7, p, n, false) != 0) {
        rawlink_close(&l);
        return NNG_ECONNRESET;
    }
    int r = rawlink_recv(&l, &id, &b, &bn); /* -1: no reply in time */
    if (r == -2 || (r == 0 && id != 7)) {
        rv = NNG_EPROTO;
    } else if (r == 0) {
        *got = nng_alloc(bn ? bn : 1);
        if (*got == NULL) {
            rv = NNG_ENOMEM;
        } else {
            memcpy(*got, b, bn);
            *gotn = bn;
        }
    }
    free(b);
    rawlink_close(&l);
    return rv;
}

/* Sends one frame and waits for the reply. *got is set to the reply (free
 * with nng_free(*got, *gotn)) or NULL on timeout. Returns 0, or an nng
 * error other than a timeout. */
static int exchange(const char *url, const uint8_t *p, size_t n, int timeout_ms, uint8_t **got,
                    size_t *gotn)
{
    nng_socket s;
    int link, rv;
    const char *real = link_url(url, &link);

    *got = NULL;
    *gotn = 0;
    if (link)
        return link_exchange(real, p, n, got, gotn);
    rv = open_req(url, &s, timeout_ms);
    if (rv)
        return rv;
    rv = nng_send(s, (void *)p, n, 0);
    if (rv == 0) {
        void *buf = NULL;
        size_t sz = 0;
        rv = nng_recv(s, &buf, &sz, NNG_FLAG_ALLOC);
        if (rv == 0) {
            *got = buf;
            *gotn = sz;
        } else if (rv == NNG_ETIMEDOUT) {
            rv = 0;
        }
    }
    nng_close(s);
    return rv;
}

/* Parses a reply header [1, type|0x80, err, ...]. Returns 0 and fills
 * *type and *err, or -1 when the reply is not such a frame. If msg is not
 * NULL and element 3 is a string, copies it there. */
static int parse_reply(const uint8_t *p, size_t n, uint64_t *type, uint64_t *err, char *msg,
                       size_t msglen, msgpack_object_array *out_arr, msgpack_unpacked *keep)
{
    size_t off = 0;
    msgpack_unpacked_init(keep);
    if (msgpack_unpack_next(keep, (const char *)p, n, &off) != MSGPACK_UNPACK_SUCCESS)
        return -1;
    msgpack_object o = keep->data;
    if (o.type != MSGPACK_OBJECT_ARRAY || o.via.array.size < 3)
        return -1;
    msgpack_object *e = o.via.array.ptr;
    if (e[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER || e[0].via.u64 != 1)
        return -1;
    if (e[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER || !(e[1].via.u64 & 0x80))
        return -1;
    if (e[2].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return -1;
    *type = e[1].via.u64;
    *err = e[2].via.u64;
    if (msg && msglen) {
        msg[0] = '\0';
        if (o.via.array.size >= 4 && e[3].type == MSGPACK_OBJECT_STR) {
            size_t k = e[3].via.str.size < msglen - 1 ? e[3].via.str.size : msglen - 1;
            memcpy(msg, e[3].via.str.ptr, k);
            msg[k] = '\0';
        }
    }
    if (out_arr)
        *out_arr = o.via.array;
    return 0;
}

/* PING must answer [1, 0x81, 0, role, name]. Returns 0 or -1. */
static int check_ping(const char *url, const char *after)
{
    const uint8_t ping[] = { 0x92, 0x01, 0x01 };
    uint8_t *got;
    size_t gotn;
    int rv = exchange(url, ping, sizeof ping, REPLY_TIMEOUT_MS, &got, &gotn);
    if (rv || !got) {
        fprintf(stderr, "FAIL %s: no PING reply after '%s' (%s)\n", url, after,
                rv ? nng_strerror(rv) : "timed out");
        return -1;
    }
    uint64_t type, err;
    msgpack_unpacked up;
    msgpack_object_array arr;
    int ok = parse_reply(got, gotn, &type, &err, NULL, 0, &arr, &up) == 0 && type == 0x81 &&
             err == 0 && arr.size >= 5 && arr.ptr[3].type == MSGPACK_OBJECT_STR &&
             arr.ptr[4].type == MSGPACK_OBJECT_STR;
    if (ok && strcmp(after, "start") == 0)
        printf("%s: PING -> role %.*s, name %.*s\n", url, (int)arr.ptr[3].via.str.size,
               arr.ptr[3].via.str.ptr, (int)arr.ptr[4].via.str.size, arr.ptr[4].via.str.ptr);
    msgpack_unpacked_destroy(&up);
    nng_free(got, gotn);
    if (!ok) {
        fprintf(stderr, "FAIL %s: bad PING reply after '%s'\n", url, after);
        return -1;
    }
    return 0;
}

/* Runs one case against url. Returns 0 when it behaved, -1 otherwise. */
static int run_case(const char *url, const frame *f)
{
    uint8_t *got;
    size_t gotn;
    int rv = exchange(url, f->p, f->n, REPLY_TIMEOUT_MS, &got, &gotn);
    int bad = 0;

    if (rv) {
        fprintf(stderr, "FAIL %s: '%s': %s\n", url, f->name, nng_strerror(rv));
        bad = 1;
    } else if (!got) {
        fprintf(stderr, "FAIL %s: '%s': no reply within %d ms\n", url, f->name, REPLY_TIMEOUT_MS);
        bad = 1;
    } else {
        uint64_t type, err;
        char msg[200];
        msgpack_unpacked up;
        if (parse_reply(got, gotn, &type, &err, msg, sizeof msg, NULL, &up) != 0) {
            fprintf(stderr, "FAIL %s: '%s': reply is not a shardex reply frame\n", url, f->name);
            bad = 1;
        } else if (err == 0 && f->expect == EXPECT_REPLY) {
            printf("ok   %s: %-28s -> success reply\n", url, f->name);
        } else if (err == 0) {
            fprintf(stderr, "FAIL %s: '%s': got a success reply (type 0x%llx)\n", url, f->name,
                    (unsigned long long)type);
            bad = 1;
        } else {
            printf("ok   %s: %-28s -> error %llu: %s\n", url, f->name, (unsigned long long)err,
                   msg);
        }
        msgpack_unpacked_destroy(&up);
        nng_free(got, gotn);
    }
    if (check_ping(url, f->name))
        bad = 1;
    return bad ? -1 : 0;
}

/* ---- frames at and over the size limit ----------------------------------- */

/* Outcome after sending: the peer closed (1), answered (2), or neither
 * within the timeout (0). */
static int raw_outcome(int fd)
{
    uint8_t b[64];
    ssize_t r = recv(fd, b, sizeof b, 0);
    if (r == 0 || (r < 0 && (errno == ECONNRESET || errno == EPIPE)))
        return 1;
    if (r > 0)
        return 2;
    return 0;
}

/* n bytes of a PUT-looking frame: [1, PUT, "x", bin32 claiming 0x010ffff0
 * bytes] then zeros; malformed at any n (its bin runs past the end), so a
 * node that reads it whole answers an error. malloc'd, or NULL. */
static uint8_t *put_body(size_t n)
{
    static const uint8_t put[] = { 0x94, 0x01, 0x06, 0xa1, 'x', 0xc6, 0x01, 0x0f, 0xff, 0xf0 };
    uint8_t *body = calloc(1, n ? n : 1);

    if (body != NULL)
        memcpy(body, put, sizeof put < n ? sizeof put : n);
    return body;
}

/* Sends n bytes; 1 when the peer closed or reset the connection meanwhile,
 * 0 when all were sent, -1 when the peer stopped reading but kept the
 * connection (the send timed out). */
static int send_all(int fd, const uint8_t *p, size_t n)
{
    size_t off = 0;

    while (off < n) {
        ssize_t w = send(fd, p + off, n - off, MSG_NOSIGNAL);
        if (w <= 0)
            return w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? -1 : 1;
        off += (size_t)w;
    }
    return 0;
}

/* A fresh REQ/REP connection (nng's SP-over-TCP: the 8-byte handshake
 * exchanged) to url, or -1 (reported). */
static int sp_connect(const char *url, const char *name)
{
    const uint8_t hello[8] = { 0x00, 'S', 'P', 0x00, 0x00, 0x30, 0x00, 0x00 };
    uint8_t peer[8];
    int fd = raw_connect(url);

    if (fd < 0) {
        fprintf(stderr, "FAIL %s: '%s': cannot connect\n", url, name);
        return -1;
    }
    if (send(fd, hello, sizeof hello, MSG_NOSIGNAL) != (ssize_t)sizeof hello ||
        read_full(fd, peer, sizeof peer) != 0 || peer[1] != 'S' || peer[2] != 'P') {
        fprintf(stderr, "FAIL %s: '%s': no SP handshake\n", url, name);
        close(fd);
        return -1;
    }
    return fd;
}

/* An SP message header: the 8-byte big-endian length (claim: what follows,
 * the 4-byte request id included), then REQ's request id 0x80000001. */
static void sp_header(uint8_t hdr[12], uint64_t claim)
{
    put_be(hdr, claim, 8);
    put_be(hdr + 8, 0x80000001u, 4);
}

/* Sends a message whose length header claims `claim` bytes, followed by
 * `body_n` bytes of put_body, over a fresh connection: SP/TCP (REQ to REP),
 * or a link's (its u32 length holding claim, or 2^32-1 when claim is
 * larger; no tag). The frame is over the port's limit, so the peer must
 * drop the connection without answering, within the timeout. Returns 0
 * when it did, -1 otherwise. */
static int raw_oversized(const char *url, const char *name, uint64_t claim, size_t body_n)
{
    uint8_t hdr[12];
    int link, rc = -1, outcome = 0;
    const char *real = link_url(url, &link);
    rawlink rl = { .fd = -1 };
    int fd = link ? (rawlink_open(&rl, real) == 0 ? rl.fd : -1) : sp_connect(real, name);
    uint8_t *body = NULL;

    if (fd < 0) {
        if (link)
            fprintf(stderr, "FAIL %s: '%s': cannot connect\n", url, name);
        return -1;
    }
    if (link) {
        put_be(hdr, claim > UINT32_MAX ? UINT32_MAX : claim, 4);
        put_be(hdr + 4, 1, 8);
    } else {
        sp_header(hdr, claim);
    }
    if (send(fd, hdr, sizeof hdr, MSG_NOSIGNAL) != (ssize_t)sizeof hdr) {
        outcome = 1; /* already dropped */
    } else if (body_n) {
        body = put_body(body_n);
        if (!body)
            goto out;
        int sent = send_all(fd, body, body_n);
        outcome = sent == 1 ? 1 : 0; /* dropped mid-send, or see below */
    }
    if (outcome == 0)
        outcome = raw_outcome(fd);
    if (outcome != 1) {
        fprintf(stderr, "FAIL %s: '%s': %s\n", url, name,
                outcome == 2 ? "answered: a frame over the size limit was read"
                             : "connection neither dropped nor answered in time");
        goto out;
    }
    printf("ok   %s: %-28s -> dropped\n", url, name);
    rc = 0;
out:
    free(body);
    close(fd);
    return rc;
}

/* A frame of n bytes (put_body), sent whole and well framed: on a link
 * port with its tag (its length 8 + n: the id and the frame; the limit
 * 8 + MAX_FRAME), on a REQ/REP port as one SP message (its length 4 + n:
 * the request id and the frame; NNG_OPT_RECVMAXSZ, MAX_FRAME, bounds that
 * length). With over_limit the port must drop the connection without an
 * answer; else it must read the frame and answer it with an error reply.
 * Returns 0 when it did, -1 otherwise. */
static int sized_frame(const char *url, const char *name, size_t n, int over_limit)
{
    int link, rc = -1, outcome = 0;
    const char *real = link_url(url, &link);
    rawlink rl = { .fd = -1 };
    uint8_t *body = put_body(n), *got = NULL;
    size_t gotn = 0;
    int fd = -1;

    if (body == NULL)
        return -1;
    if (link) {
        if (rawlink_open(&rl, real) != 0) {
            fprintf(stderr, "FAIL %s: '%s': cannot connect\n", url, name);
            goto out;
        }
        fd = rl.fd;
        if (rawlink_send(&rl, 7, body, n, false) != 0) {
            outcome = 1; /* dropped mid-send */
        } else if (over_limit) {
            outcome = raw_outcome(fd);
        } else {
            uint64_t id = 0;
            int r = rawlink_recv(&rl, &id, &got, &gotn);
            outcome = r == 0 && id == 7 ? 2 : 0;
        }
    } else {
        uint8_t hdr[12], lenb[8];
        fd = sp_connect(real, name);
        if (fd < 0)
            goto out;
        sp_header(hdr, 4 + (uint64_t)n);
        if (send(fd, hdr, sizeof hdr, MSG_NOSIGNAL) != (ssize_t)sizeof hdr ||
            send_all(fd, body, n) == 1) {
            outcome = 1;
        } else if (over_limit) {
            outcome = raw_outcome(fd);
        } else if (read_full(fd, lenb, sizeof lenb) != 0) {
            outcome = 1;
        } else {
            uint64_t len = 0;
            for (int i = 0; i < 8; i++)
                len = len << 8 | lenb[i];
            /* the reply: the request id echoed, then the reply frame */
            if (len > 4 && len < 65536 && (got = malloc(len)) != NULL &&
                read_full(fd, got, len) == 0 && got[0] == 0x80 && got[3] == 0x01) {
                memmove(got, got + 4, len - 4);
                gotn = len - 4;
                outcome = 2;
            }
        }
    }
    if (over_limit && outcome != 1) {
        fprintf(stderr, "FAIL %s: '%s': %s\n", url, name,
                outcome == 2 ? "answered: a frame over the size limit was read"
                             : "connection neither dropped nor answered in time");
    } else if (!over_limit && outcome != 2) {
        fprintf(stderr,
                "FAIL %s: '%s': no reply frame (the connection dropped or timed "
                "out): a frame within the size limit must be read and answered\n",
                url, name);
    } else if (over_limit) {
        printf("ok   %s: %-28s -> dropped\n", url, name);
        rc = 0;
    } else {
        uint64_t type, err;
        char msg[200];
        msgpack_unpacked up;
        if (parse_reply(got, gotn, &type, &err, msg, sizeof msg, NULL, &up) != 0 || err == 0)
            fprintf(stderr, "FAIL %s: '%s': the reply is not an error reply frame\n", url, name);
        else
            rc = 0;
        if (rc == 0)
            printf("ok   %s: %-28s -> error %llu: %s\n", url, name, (unsigned long long)err, msg);
        msgpack_unpacked_destroy(&up);
    }
out:
    free(body);
    free(got);
    if (fd >= 0)
        close(fd);
    return rc;
}

/* A stranger's frame on an authenticated link port: a PING with no hello
 * first (bad_tag false), or after the hellos with a tag that does not
 * hold. The node must drop the connection without answering. 0 when it
 * did, -1 otherwise. */
static int stranger(const char *url, bool bad_tag)
{
    const uint8_t ping[] = { 0x92, 0x01, 0x01 };
    const char *name = bad_tag ? "PING with a forged tag" : "PING without a hello";
    rawlink l = { .fd = -1 };
    int outcome = 0;

    if (bad_tag) {
        if (rawlink_open(&l, url) != 0) {
            fprintf(stderr, "FAIL %s: '%s': no hello back\n", url, name);
            return -1;
        }
    } else {
        uint8_t theirs[36];      /* the node's hello comes anyway */
        l.fd = raw_connect(url); /* keyed stays false: no hello, no tag */
        if (l.fd < 0 || read_full(l.fd, theirs, sizeof theirs) != 0 ||
            memcmp(theirs, "SXL1", 4) != 0) {
            fprintf(stderr, "FAIL %s: '%s': cannot connect, or no hello\n", url, name);
            rawlink_close(&l);
            return -1;
        }
    }
    if (rawlink_send(&l, 7, ping, sizeof ping, bad_tag) == 0)
        outcome = raw_outcome(l.fd);
    else
        outcome = 1; /* already dropped */
    rawlink_close(&l);
    if (outcome != 1) {
        fprintf(stderr, "FAIL %s: '%s': %s\n", url, name,
                outcome == 2 ? "answered" : "neither dropped nor answered in time");
        return -1;
    }
    printf("ok   %s: %-28s -> dropped\n", url, name);
    return 0;
}

int main(int argc, char **argv)
{
    frame fs[32];
    int failures = 0;

    signal(SIGPIPE, SIG_IGN);

    if (argc >= 4 && strcmp(argv[1], "--link-key") == 0) {
        if (rawlink_set_key(argv[2], argv[3]) != 0) {
            fprintf(stderr, "sx-badframe: --link-key needs 64 hex digits and a cluster name\n");
            return 2;
        }
        argv += 3;
        argc -= 3;
    }
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        printf("usage: sx-badframe [--link-key HEX CLUSTER] URL [URL...]\n"
               "Sends malformed frames to each shardex port; each must get an\n"
               "error reply (a frame over the 16 MiB limit must be dropped instead,\n"
               "one of exactly the limit answered) and the process must answer PING\n"
               "afterwards. Exit 0 when all behaved.\n"
               "--link-key: the cluster's link_key and name; link ports are then spoken to\n"
               "with it, and must drop a frame without a hello or a good tag.\n");
        return argc < 2 ? 2 : 0;
    }
    int nf = build_frames(fs, (int)(sizeof fs / sizeof fs[0]));
    if (nf < 0) {
        fprintf(stderr, "sx-badframe: out of memory\n");
        return 1;
    }
    for (int u = 1; u < argc; u++) {
        if (check_ping(argv[u], "start")) {
            failures++;
            continue;
        }
        for (int i = 0; i < nf; i++)
            if (run_case(argv[u], &fs[i]))
                failures++;
        if (raw_oversized(argv[u], "frame of 17 MiB", BIG_FRAME, BIG_FRAME) ||
            check_ping(argv[u], "frame of 17 MiB"))
            failures++;
        /* the largest frame the port takes: a link's MAX_FRAME; on a REQ/REP
         * port the limit is on the SP message, request id included */
        int is_link;
        size_t lim = link_url(argv[u], &is_link) && is_link ? MAX_FRAME : MAX_FRAME - 4;
        if (sized_frame(argv[u], "frame 1 byte over the limit", lim + 1, 1) ||
            check_ping(argv[u], "frame 1 byte over the limit"))
            failures++;
        if (sized_frame(argv[u], "frame at the limit", lim, 0) ||
            check_ping(argv[u], "frame at the limit"))
            failures++;
        if (raw_oversized(argv[u], "length header of 2^64-1", UINT64_MAX, 16) ||
            check_ping(argv[u], "length header of 2^64-1"))
            failures++;
        if (raw_oversized(argv[u], "length 1 GiB, 64 kB sent", 1ull << 30, 65536) ||
            check_ping(argv[u], "length 1 GiB, 64 kB sent"))
            failures++;
        int link;
        const char *real = link_url(argv[u], &link);
        for (int bad = 0; link && rawlink_keyed() && bad < 2; bad++)
            if (stranger(real, bad) || check_ping(argv[u], "a stranger's frame"))
                failures++;
    }
    for (int i = 0; i < nf; i++)
        free(fs[i].p);
    if (failures) {
        fprintf(stderr, "sx-badframe: %d failure(s)\n", failures);
        return 1;
    }
    printf("sx-badframe: all cases behaved at %d URL(s)\n", argc - 1);
    return 0;
}
