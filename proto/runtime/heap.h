/*
 * heap.h — the malloc settings of shardex's programs: the daemons, the CLI
 * and the benchmark, which move MiBs of frames a second in a bulk load.
 *
 * glibc returns a freed block of 128 KiB or more to the kernel (mmap'd
 * blocks, and the top of a heap past the trim threshold, whose dynamic
 * values rise with what a program frees). A program that allocates and
 * frees each frame of a load then touches fresh pages for every one, and
 * a fresh page costs a fault and the kernel's zeroing (2-12 us each in a
 * VM: docs/PERFORMANCE.md, sessions 19 and 26). With these settings freed
 * frames, group tables and sort buffers stay in the process and are reused:
 * a load of 1,000,000 items through shardex-bench took ~16,000 page faults
 * instead of ~45,000 and ~1.2 CPU-s instead of ~1.6, and W6 with both
 * indexes built after the load took 0.3-0.9 CPU-s less in the daemons
 * (session 26, docs/PERFORMANCE.md). The cost is memory held after a
 * burst: up to 64 MiB free at the top of each heap (glibc gives threads
 * heaps of their own, up to 8 per core). Library users are not affected:
 * libshardex does not change its host program's malloc.
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
