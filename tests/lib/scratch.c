/*
 * scratch.c — scratch directories for tests (scratch.h).
 */
#define _XOPEN_SOURCE 700 /* nftw, mkdtemp */
#include "scratch.h"
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *scratch_make(const char *prefix, char *buf, size_t n)
{
    const char *tmp = getenv("TMPDIR");
    int len = snprintf(buf, n, "%s/%s-XXXXXX", tmp != NULL && *tmp != '\0' ? tmp : "/tmp", prefix);

    if (len < 0 || (size_t)len >= n) {
        fprintf(stderr, "%s: scratch dir path too long\n", prefix);
        return NULL;
    }
    if (mkdtemp(buf) == NULL) {
        fprintf(stderr, "%s: mkdtemp %s: %s\n", prefix, buf, strerror(errno));
        return NULL;
    }
    return buf;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    return remove(path);
}

int scratch_remove(const char *path)
{
    return nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}

bool scratch_run(int argc, char **argv, const char *prefix, bool (*run)(const char *dir))
{
    char buf[PATH_MAX];
    bool ok;

    if (argc > 1)
        return run(argv[1]);
    if (scratch_make(prefix, buf, sizeof(buf)) == NULL)
        return false;
    ok = run(buf);
    scratch_remove(buf);
    return ok;
}
