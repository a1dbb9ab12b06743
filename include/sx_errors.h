/*
 * sx_errors.h — the one list of shardex error codes.
 *
 * Each code crosses the wire as its number, so numbers are explicit and never
 * reused or renumbered. The enum sx_err and sx_strerror() are both generated
 * from SX_ERRORS. Included by shardex.h (public) and by every component.
 */
#ifndef SX_ERRORS_H
#define SX_ERRORS_H

/* clang-format off */
/* X(name, number, message) */
#define SX_ERRORS(X)                                                          \
    X(SX_OK,          0,  "success")                                         \
    X(SX_ENOTFOUND,   1,  "not found")                                       \
    X(SX_EINVAL,      2,  "invalid argument")                                \
    X(SX_ENOMEM,      3,  "out of memory")                                   \
    X(SX_EPROTO,      4,  "malformed message")                               \
    X(SX_EVERSION,    5,  "unsupported protocol version")                    \
    X(SX_EIO,         6,  "storage I/O error")                               \
    X(SX_ENET,        7,  "network error")                                   \
    X(SX_ETIMEDOUT,   8,  "timed out")                                       \
    X(SX_ENOTABLE,    9,  "no such table")                                   \
    X(SX_ENOINDEX,    10, "no such index")                                   \
    X(SX_EEXIST,      11, "already exists")                                  \
    X(SX_ETOOBIG,     12, "too large")                                       \
    X(SX_EKEY,        13, "bad key: missing or invalid key attribute")       \
    X(SX_EWRONGPART,  14, "wrong partition for this key")                    \
    X(SX_ENOTREADY,   15, "index is still building")                         \
    X(SX_ETOKEN,      16, "invalid or tampered continuation token")          \
    X(SX_ECONFIG,     17, "invalid configuration")                           \
    X(SX_EUNAVAIL,    18, "service unavailable")                             \
    X(SX_EINTERNAL,   19, "internal error")                                  \
    X(SX_ESTALECAT,   20, "catalog is stale; refresh and retry")             \
    X(SX_EDEADLINE,   21, "write refused: its deadline had passed")        \
    X(SX_ENOTLEADER,  22, "not the leader of this group; retry at its leader")

/* Error codes returned by every shardex function and carried on the wire. */
typedef enum sx_err {
#define SX__ERR_ENUM(name, num, msg) name = num,
    SX_ERRORS(SX__ERR_ENUM)
#undef SX__ERR_ENUM
    SX__ERR_LIMIT
} sx_err;
/* clang-format on */

/* A static, human-readable message for an error code ("unknown error" for
 * numbers outside the list). Never NULL; never freed. */
const char *sx_strerror(int err);

#endif
