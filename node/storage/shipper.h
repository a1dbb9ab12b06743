/*
 * shipper.h — ships a storage node's outboxes to the index partitions: one
 * thread per destination index partition, serving every fact partition of
 * the node; each stream (partition, destination) in seq order, batched (up
 * to 512 records per I_APPLY), the node's I_APPLYs for one destination
 * sent together (one MULTI frame when they fit), with heartbeats that carry
 * each partition's head so every destination's watermark keeps up, retries
 * of a failed stream with exponential backoff (10 ms .. 1 s) while the
 * other streams go on, and deletion of acknowledged records.
 */
#ifndef SX_SHIPPER_H
#define SX_SHIPPER_H

#include <stdbool.h>
#include <stdint.h>
#include <nng/nng.h>
#include "config.h"

struct st_part;
typedef struct ship ship;

/* Starts one shipping thread per index partition of cfg for the node's
 * nparts partitions (parts, which must outlive the shipper; each one's
 * ->ship is set). The shipper opens one link (net_peer_open_link) to each
 * index node of cfg. Returns 0 or SX_ENOMEM / SX_EINVAL (a bad url) /
 * SX_EINTERNAL (thread creation). */
int ship_start(struct st_part **parts, int nparts, const cfg_cluster *cfg, ship **out);

/* Tells the threads to stop: they start no new call. Accepts NULL. */
void ship_quiesce(ship *s);

/* Stops (ship_quiesce), fails the calls in flight (a thread waiting on one
 * returns at once), joins the threads, closes the links, frees the
 * shipper and clears the partitions' ->ship; accepts NULL. */
void ship_stop(ship *s);

/* Tells the shipper a partition committed (its head advanced): wakes
 * threads waiting for work. Thread-safe; takes the shipper's own lock
 * (call it without holding a partition's mu). */
void ship_notify(ship *s);

/* True when every destination has acknowledged a watermark >= seq for
 * partition p. Thread-safe (takes p->mu). */
bool ship_acked_all(ship *s, struct st_part *p, uint64_t seq);

/* The lowest watermark acknowledged for p across destinations (0 if p is
 * not one of the shipper's partitions). Thread-safe. */
uint64_t ship_min_acked(ship *s, struct st_part *p);

#endif
