/*
 * storage_filter.c — the storage store's absent-key filter (keyfilter.h):
 * created when the committer starts and filled by a background scan of the
 * fact keys on disk (keyfilter_load.h), told of every new fact key a group
 * writes (a stored key is in it already), and asked by the committer before
 * it reads a fact it is about to replace. Until
 * the scan has finished the filter answers "maybe" and every write reads
 * its fact, as it did without a filter; a node without one (turned off,
 * or not set up: logged) runs the same way.
 */
#include <stdlib.h>
#include <string.h>
#include "hash.h"
#include "log.h"
#include "keyfilter_load.h"
#include "storage_part.h"
#include "sx_errors.h"

void st_filter_start(st_store *s)
{
    kf_range *r = calloc((size_t)(s->nparts > 0 ? s->nparts : 1), sizeof(*r));
    uint64_t items = 0;

    if (r == NULL) {
        LOG_WARN("store: cannot set up the absent-key filter (out of memory): every write "
                 "reads its fact");
        return;
    }
    for (int i = 0; i < s->nparts; i++) {
        uint64_t id = s->parts[i]->id;

        be_put64(r[i].lo, id); /* ST_PFX_LEN: the partition's prefix */
        r[i].lo[ST_PFX_LEN] = ST_FACT_PREFIX;
        memcpy(r[i].hi, r[i].lo, ST_PFX_LEN);
        r[i].hi[ST_PFX_LEN] = ST_FACT_PREFIX + 1;
        r[i].lo_n = r[i].hi_n = ST_PFX_LEN + 1;
        r[i].skip = ST_PFX_LEN; /* the filter holds partition-local keys */
        r[i].part = id;
        items += s->parts[i]->w_items;
    }
    kf_load_start(s->db, r, s->nparts, items, "store", &s->kf, &s->kf_load);
    free(r);
}

void st_filter_stop(st_store *s)
{
    kf_load_stop(s->kf_load);
    s->kf_load = NULL;
    kf_destroy(s->kf);
    s->kf = NULL;
}

bool st_fact_absent(st_part *p, kf_key fk)
{
    return p->store->kf != NULL && kf_absent_key(p->store->kf, fk);
}

void st_fact_written(st_part *p, kf_key fk)
{
    if (p->store->kf != NULL)
        kf_add_key(p->store->kf, fk);
}

void st_filter_status(st_store *s, mp_buf *b)
{
    kf_status(s->kf, b);
}
