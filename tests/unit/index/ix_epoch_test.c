/*
 * ix_epoch_test.c — node/index/ix_epoch.c: an index node's epoch kept across
 * a clean stop. A start without a file draws a new, non-zero epoch each
 * time; a kept epoch is taken back exactly once (the file is gone after
 * the take, so a second start draws a new one); a file that does not hold
 * an epoch (empty, too short, not hex, zero, trailing bytes) gives a new
 * epoch and is removed; a second keep replaces the first; a file that can
 * be neither read nor removed (a folder in its place) gives a new epoch;
 * keeping into a missing folder fails.
 * Links node_index.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sodium.h>
#include "check.h"
#include "ix_epoch.h"
#include "scratch.h"
#include "sx_errors.h"

static int write_file(const char *path, const char *text, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

    if (fd < 0)
        return -1;
    if (write(fd, text, n) != (ssize_t)n) {
        close(fd);
        return -1;
    }
    return close(fd);
}

int main(void)
{
    char dirbuf[4096], path[4200], missing[4200];
    const char *dir = scratch_make("sx-epoch", dirbuf, sizeof(dirbuf));
    static const char *const bad[] = { "",
                                       "0123",
                                       "0123456789abcdeg\n",
                                       "0000000000000000\n",
                                       "0123456789ABCDEF\n",
                                       "0123456789abcdef\nx",
                                       "0123456789abcdef" };
    uint64_t e1 = 0, e2 = 0, e3 = 0;
    bool kept = true;

    if (dir == NULL || sodium_init() < 0) {
        fprintf(stderr, "ix_epoch_test: set-up failed\n");
        return 1;
    }
    if (snprintf(path, sizeof(path), "%s/epoch", dir) >= (int)sizeof(path) ||
        snprintf(missing, sizeof(missing), "%s/none", dir) >= (int)sizeof(missing)) {
        fprintf(stderr, "ix_epoch_test: scratch dir path too long: %s\n", dir);
        return 1;
    }

    /* no file: new epochs, never 0, not kept */
    ix_epoch_take(dir, &e1, &kept);
    CHECK(!kept && e1 != 0);
    ix_epoch_take(dir, &e2, &kept);
    CHECK(!kept && e2 != 0 && e2 != e1);

    /* kept, then taken back once */
    CHECK(ix_epoch_keep(dir, e1) == 0);
    CHECK(access(path, F_OK) == 0);
    ix_epoch_take(dir, &e3, &kept);
    CHECK(kept && e3 == e1);
    CHECK(access(path, F_OK) != 0);
    ix_epoch_take(dir, &e3, &kept);
    CHECK(!kept && e3 != e1);

    /* a second keep replaces the first */
    CHECK(ix_epoch_keep(dir, e1) == 0);
    CHECK(ix_epoch_keep(dir, e2) == 0);
    ix_epoch_take(dir, &e3, &kept);
    CHECK(kept && e3 == e2);

    /* files that hold no epoch: a new one, and the file is gone */
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK(write_file(path, bad[i], strlen(bad[i])) == 0);
        e3 = 0;
        ix_epoch_take(dir, &e3, &kept);
        CHECK(!kept && e3 != 0);
        CHECK(access(path, F_OK) != 0);
    }

    /* the file can be neither read nor removed (a folder in its place): a
     * new epoch, and the start goes on */
    CHECK(mkdir(path, 0755) == 0);
    e3 = 0;
    ix_epoch_take(dir, &e3, &kept);
    CHECK(!kept && e3 != 0);
    CHECK(rmdir(path) == 0);

    /* keeping into a folder that does not exist fails */
    CHECK(ix_epoch_keep(missing, e1) == SX_EIO);

    CHECK(rmdir(dir) == 0);
    return CHECK_DONE();
}
