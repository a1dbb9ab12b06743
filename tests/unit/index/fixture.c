/*
 * fixture.c — what the index partition tests share (fixture.h).
 */
#include "fixture.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ldb.h"
#include "sx_errors.h"
#include "testcfg.h"

static const uint8_t nil = 0xc0;

bool ixf_open(const char *dir, const char *name, int nsources, cfg_cluster **cfg, ix_part **p)
{
    const testcfg c = { .cluster = name, .nstorage = nsources, .nindex = 1 };

    *p = NULL;
    *cfg = testcfg_load(dir, &c);
    if (*cfg == NULL)
        return false;
    CHECK(ix_part_open(*cfg, &(*cfg)->index[0], dir, p) == 0);
    if (*p == NULL) {
        cfg_free(*cfg);
        *cfg = NULL;
        return false;
    }
    return true;
}

void ixf_local_key(tup_bytes *b, const char *name)
{
    b->n = 0;
    CHECK(tup_bytes_append(b, name[0] == 'x' ? "\0\0\0\10" : "\0\0\0\7", 4) == 0 &&
          tup_encode_str(b, name, strlen(name)) == 0);
}

void ixf_req_make(ixf_req *r, uint64_t source, uint32_t n, const uint64_t *seqs,
                  const uint64_t *kinds, const uint64_t *versions, const char *const *names,
                  uint64_t upto, uint64_t hw, uint64_t after)
{
    memset(r, 0, sizeof(*r));
    for (uint32_t i = 0; i < n; i++) {
        ixf_local_key(&r->kb[i], names[i]);
        if (seqs != NULL)
            r->seqs[i] = seqs[i];
        r->kinds[i] = kinds[i];
        r->versions[i] = versions[i];
        r->hashes[i] = 42;
        r->keys[i] = (mp_span){ r->kb[i].p, r->kb[i].n };
        r->projs[i] = (mp_span){ &nil, 1 };
    }
    r->m.part = IXF_PART;
    r->m.source = source;
    r->m.upto = upto;
    r->m.hw = hw;
    r->m.after = after;
    r->m.seqs = (msg_u64s){ .n = seqs != NULL ? n : 0, .v = r->seqs };
    r->m.kinds = (msg_u64s){ .n = n, .v = r->kinds };
    r->m.versions = (msg_u64s){ .n = n, .v = r->versions };
    r->m.hashes = (msg_u64s){ .n = n, .v = r->hashes };
    r->m.keys = (msg_spans){ .n = n, .v = r->keys };
    r->m.projs = (msg_spans){ .n = n, .v = r->projs };
}

void ixf_req_free(ixf_req *r)
{
    for (int i = 0; i < IXF_MAXREC; i++)
        tup_bytes_free(&r->kb[i]);
}

int ixf_apply(ix_part *p, ixf_req *r, bool build)
{
    uint64_t wm = 0, synced = 0;
    char err[300] = "";
    int rc = ix_part_apply(p, &r->m, build, &wm, &synced, err, sizeof(err));

    if (rc != 0)
        fprintf(stderr, "apply (source %llu, build %d): %s: %s\n", (unsigned long long)r->m.source,
                build, sx_strerror(rc), err);
    ixf_req_free(r);
    return rc;
}

int ixf_stored(ix_part *p, const char *name, uint64_t *version)
{
    tup_bytes k = { 0 };
    uint8_t ek[64];
    uint8_t *v = NULL;
    size_t vn = 0, en;
    ix_entry e;
    int rc, st = 0;

    ixf_local_key(&k, name);
    en = ix_ekey(ek, k.p, k.n);
    rc = ldb_get(p->db, ek, en, &v, &vn);
    if (rc == 0) {
        CHECK(ix_entry_decode(v, vn, &e) == 0);
        st = e.live ? 1 : 2;
        if (version)
            *version = e.version;
    } else {
        CHECK(rc == SX_ENOTFOUND);
    }
    free(v);
    tup_bytes_free(&k);
    return st;
}
