/*
 * raw_w6.h — shardex-rawbench leveldb-w6: leveldb alone doing the writes
 * and the scan of W6's load-then-build (see raw_w6.c).
 */
#ifndef SX_BENCH_RAW_W6_H
#define SX_BENCH_RAW_W6_H

#include <stdint.h>
#include "hist.h"

/* Prints one figure (rawbench's JSON line). */
typedef void (*raw_emit_fn)(const char *name, const char *sys, int clients, double ops,
                            const hist *h);

/* Loads items facts into two storage databases, scans them back, writes
 * their two indexes' entries into two index databases, all under dir
 * (which must be new or empty: a load into earlier databases would measure
 * overwrites; else an error), and
 * emits leveldb-w6-load, -scan, -write and leveldb-w6 (items per second
 * over the three phases); each phase's seconds and CPU seconds go to
 * stderr. Returns 0, or 1 after an error message on stderr. */
int raw_w6_run(const char *dir, uint64_t items, raw_emit_fn emit);

#endif
