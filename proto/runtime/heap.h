/*
 * heap.h — the malloc settings of shardex's programs: the daemons, the CLI
 * and the benchmark, which move MiBs of frames a second in a bulk load.
 *
 * Freed frames, group tables and sort buffers stay in the process for
 * reuse instead of going back to the kernel, where each new one would be
 * faulted in and zeroed afresh (2-12 us a page in a VM; docs/PERFORMANCE.md).
 * The cost: up to 64 MiB held free at the top of each heap. libshardex
 * leaves its host program's malloc alone.
 */
#ifndef SX_HEAP_H
#define SX_HEAP_H

#ifdef __GLIBC__
#include <malloc.h>
#endif

/* Keeps blocks under 32 MiB on the heaps and up to 64 MiB of free memory
 * at the top of each heap. Call first thing in main, before any thread
 * starts. Best effort: a setting glibc refuses leaves its default, which
 * is only slower. */
static inline void heap_tune(void)
{
#ifdef __GLIBC__
    (void)mallopt(M_MMAP_THRESHOLD, 32 << 20);
    (void)mallopt(M_TRIM_THRESHOLD, 64 << 20);
#endif
}

#endif
