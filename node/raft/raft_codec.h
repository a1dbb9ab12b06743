/*
 * raft_codec.h — byte encodings of the core's durable records, each with a
 * CRC-32C so that a torn or corrupted record is detected on recovery:
 *   entry:      crc u32 | term u64 | index u64 | type u8 | len u32 | data
 *   hard state: crc u32 | term u64 | vote u64 | commit u64
 *   snap meta:  crc u32 | index u64 | term u64 | size u64 | max_id u64 |
 *               n u32 | n × (id u64 | voter u8)
 * All integers little-endian; the CRC covers every byte after it.
 * Used by the leveldb log store and by the simulator's disk model.
 */
#ifndef SHARDEX_RAFT_CODEC_H
#define SHARDEX_RAFT_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "raft.h"

/* CRC-32C (Castagnoli) of p[0..n), continuing from crc (start with 0). */
uint32_t raft_crc32c(uint32_t crc, const void *p, size_t n);

#define RAFT_CODEC_ENTRY_HDR 25
#define RAFT_CODEC_HS_LEN 28
#define RAFT_CODEC_SNAP_MAX (40 + RAFT_MAX_MEMBERS * 9)

/* Bytes needed to encode e. */
size_t raft_codec_entry_size(const raft_entry *e);
/* Encodes e into out (raft_codec_entry_size(e) bytes). */
void raft_codec_entry_encode(const raft_entry *e, uint8_t *out);
/* Decodes an entry from p[0..len); e->data points into p (borrowed).
 * Returns RAFT_OK or RAFT_ERR_CORRUPT (short, bad CRC, bad type, trailing
 * bytes). */
int raft_codec_entry_decode(const uint8_t *p, size_t len, raft_entry *e);

void raft_codec_hs_encode(const raft_hard_state *hs, uint8_t out[RAFT_CODEC_HS_LEN]);
/* Returns RAFT_OK or RAFT_ERR_CORRUPT. */
int raft_codec_hs_decode(const uint8_t *p, size_t len, raft_hard_state *hs);

/* Encodes s into out (at most RAFT_CODEC_SNAP_MAX bytes); returns length. */
size_t raft_codec_snap_encode(const raft_snap_meta *s, uint8_t *out);
/* Returns RAFT_OK or RAFT_ERR_CORRUPT. */
int raft_codec_snap_decode(const uint8_t *p, size_t len, raft_snap_meta *s);

/* Little-endian helpers shared by the stores. */
void raft_put64(uint8_t *p, uint64_t v);
uint64_t raft_get64(const uint8_t *p);
void raft_put32(uint8_t *p, uint32_t v);
uint32_t raft_get32(const uint8_t *p);

#endif
