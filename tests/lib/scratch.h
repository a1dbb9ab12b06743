/*
 * scratch.h — scratch directories for tests: a fresh directory of a test's
 * own under $TMPDIR (or /tmp), removed with everything in it afterwards.
 *   scratch_make(prefix, buf, n)       makes $TMPDIR/<prefix>-XXXXXX
 *   scratch_remove(path)               removes a tree
 *   scratch_run(argc, argv, prefix, run)
 *                                      a test program's run in its scratch
 *                                      dir: `prog [DIR]`
 * An ipc:// socket path in a scratch dir must fit in 107 bytes: a long
 * TMPDIR makes the directory name long too.
 */
#ifndef SX_SCRATCH_H
#define SX_SCRATCH_H

#include <stdbool.h>
#include <stddef.h>

/* Makes a fresh directory $TMPDIR/<prefix>-XXXXXX (mkdtemp; /tmp when
 * TMPDIR is unset or empty), mode 0700, and writes its path into buf[n].
 * Returns buf, or NULL (with the reason on stderr, prefixed by prefix) when
 * the path does not fit in n bytes or the directory could not be made. */
char *scratch_make(const char *prefix, char *buf, size_t n);

/* Removes path and everything below it, depth first, not following
 * symbolic links (a link is removed, not what it points at). Returns 0, or
 * -1 when something could not be removed (a missing path included). */
int scratch_remove(const char *path);

/* Runs run(dir) in the scratch dir of a test program run as `prog [DIR]`:
 * DIR (argv[1]) when given, kept afterwards; else a fresh
 * scratch_make(prefix) directory, removed after run returns, whatever it
 * returned. Returns run's result; false when no directory could be made
 * (said on stderr) and run did not run. */
bool scratch_run(int argc, char **argv, const char *prefix, bool (*run)(const char *dir));

#endif
