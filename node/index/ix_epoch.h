/*
 * ix_epoch.h — an index node's epoch (the number every I_BUILD reply
 * carries, proto/PROTOCOL.md): kept across a clean stop, drawn anew after
 * anything else.
 *
 * Why: a build whose destination answers with a new epoch starts again
 * from the beginning, since a node that restarted may have lost the build
 * records it applied without a sync. A clean stop seals them all
 * (ix_part_close), so nothing is lost, and a rolling restart of the index
 * nodes need not restart every build running meanwhile. The node writes
 * its epoch to DATA/epoch once every partition has closed sealed; the next
 * start takes it and removes the file durably before it applies anything,
 * so a crash after that start can never find it again.
 */
#ifndef SX_IX_EPOCH_H
#define SX_IX_EPOCH_H

#include <stdbool.h>
#include <stdint.h>

/* Sets *epoch to a new random epoch, never 0. */
void ix_epoch_draw(uint64_t *epoch);

/* Sets *epoch (never 0) for a node starting on data_dir: the one a clean
 * stop left in data_dir/epoch (*kept true) once that file has been
 * removed and its removal synced; otherwise a new one (*kept false: no
 * file, one that does not hold an epoch, or one that cannot be read or
 * removed durably; logged). Never fails: a new epoch is always safe, it
 * only makes the builds running meanwhile start again. */
void ix_epoch_take(const char *data_dir, uint64_t *epoch, bool *kept);

/* Leaves epoch for the next start in data_dir/epoch (written to a
 * temporary file, synced, renamed, the folder synced). Call only after a
 * clean stop in which every partition closed sealed. Returns 0, or SX_EIO
 * (logged; the file may or may not be there for the next start, which is
 * safe either way: everything acknowledged under epoch is durable). */
int ix_epoch_keep(const char *data_dir, uint64_t epoch);

#endif
