/*
 * ix_epoch.c — an index node's epoch kept across a clean stop. See
 * ix_epoch.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sodium.h>
#include "ix_epoch.h"
#include "ldb.h"
#include "log.h"
#include "sx_errors.h"

#define EPOCH_TEXT 17 /* 16 hex digits and a newline */

static int epoch_path(const char *data_dir, const char *name, char *out, size_t cap)
{
    if ((size_t)snprintf(out, cap, "%s/%s", data_dir, name) >= cap) {
        LOG_ERROR("index node epoch: path %s/%s too long", data_dir, name);
        return SX_EIO;
    }
    return 0;
}

/* Parses exactly 16 lowercase hex digits and a newline; 0 when malformed. */
static uint64_t epoch_parse(const char *s, size_t n)
{
    uint64_t v = 0;

    if (n != EPOCH_TEXT || s[16] != '\n')
        return 0;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return 0;
        v = v << 4 | (uint64_t)d;
    }
    return v;
}

void ix_epoch_draw(uint64_t *epoch)
{
    do
        randombytes_buf(epoch, sizeof(*epoch)); /* sodium_init: main */
    while (*epoch == 0);
}

void ix_epoch_take(const char *data_dir, uint64_t *epoch, bool *kept)
{
    char path[4200], buf[EPOCH_TEXT + 1];
    ssize_t n;
    uint64_t v;
    int fd;

    *kept = false;
    ix_epoch_draw(epoch);
    if (epoch_path(data_dir, "epoch", path, sizeof(path)) != 0)
        return;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno != ENOENT)
            LOG_ERROR("index node epoch: open %s: %s: drawing a new one", path, strerror(errno));
        return;
    }
    n = read(fd, buf, sizeof(buf));
    if (n < 0)
        LOG_ERROR("index node epoch: read %s: %s: drawing a new one", path, strerror(errno));
    close(fd);
    v = n < 0 ? 0 : epoch_parse(buf, (size_t)n);
    if (n >= 0 && v == 0)
        LOG_WARN("index node epoch: %s does not hold an epoch (%zd bytes): drawing a new one", path,
                 n);
    /* served only once its removal is durable: a crash must never find it
     * again after this run served it (a file left behind is harmless while
     * this run serves another epoch: all that was acknowledged under the
     * kept one was sealed) */
    if (unlink(path) != 0) {
        LOG_ERROR("index node epoch: remove %s: %s: drawing a new one", path, strerror(errno));
        return;
    }
    if (ldb_sync_parent(path) != 0) {
        LOG_ERROR("index node epoch: the removal of %s is not durable (see above): drawing "
                  "a new one",
                  path);
        return;
    }
    if (v != 0) {
        *epoch = v;
        *kept = true;
    }
}

/* Removes a temporary file left by a failed keep; one left behind is
 * harmless (never read, truncated by the next keep). */
static void discard(const char *tmp)
{
    if (unlink(tmp) != 0 && errno != ENOENT)
        LOG_WARN("index node epoch: remove %s: %s", tmp, strerror(errno));
}

int ix_epoch_keep(const char *data_dir, uint64_t epoch)
{
    char tmp[4200], path[4200], text[EPOCH_TEXT + 1];
    int fd;

    if (epoch_path(data_dir, "epoch.tmp", tmp, sizeof(tmp)) != 0 ||
        epoch_path(data_dir, "epoch", path, sizeof(path)) != 0)
        return SX_EIO;
    snprintf(text, sizeof(text), "%016" PRIx64 "\n", epoch);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        LOG_ERROR("index node epoch: create %s: %s", tmp, strerror(errno));
        return SX_EIO;
    }
    ssize_t w = write(fd, text, EPOCH_TEXT);
    if (w != EPOCH_TEXT || fsync(fd) != 0) {
        LOG_ERROR("index node epoch: write %s: %s", tmp,
                  w >= 0 && w != EPOCH_TEXT ? "short write" : strerror(errno));
        close(fd);
        discard(tmp);
        return SX_EIO;
    }
    if (close(fd) != 0 || rename(tmp, path) != 0) {
        LOG_ERROR("index node epoch: rename %s to %s: %s", tmp, path, strerror(errno));
        discard(tmp);
        return SX_EIO;
    }
    return ldb_sync_parent(path);
}
