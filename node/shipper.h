/*
 * shipper.h — ships a fact partition's outbox to the index partitions, one
 * thread per destination index partition: in seq order, batched (up to 512
 * records per I_APPLY), with heartbeats that carry the partition's head so
 * every destination's watermark keeps up, retries with exponential backoff
 * (10 ms .. 1 s), and deletion of acknowledged records.
 */
#ifndef SX_SHIPPER_H
#define SX_SHIPPER_H

#include <stdbool.h>
#include <stdint.h>
#include <nng/nng.h>

struct st_part;
typedef struct ship ship;

/* Starts one shipping thread per index partition of p->cfg. socks[i] is a
 * REQ socket dialing cfg->nodes[i] (only index nodes' entries are used);
 * the array must outlive the shipper. Sets p->ship. Returns 0 or
 * SX_ENOMEM / SX_EINTERNAL (thread creation). */
int ship_start(struct st_part *p, const nng_socket *socks, ship **out);

/* Stops and joins the threads, frees the shipper; accepts NULL. */
void ship_stop(ship *s);

/* True when every destination has acknowledged a watermark >= seq.
 * Thread-safe (takes p->mu). */
bool ship_acked_all(ship *s, uint64_t seq);

/* The lowest watermark acknowledged across destinations. Thread-safe. */
uint64_t ship_min_acked(ship *s);

#endif
