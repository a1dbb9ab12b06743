/*
 * projection_test.c — what an index entry carries and what it can answer
 * (proto/cluster/item.c: item_project, item_covers), for the three kinds of
 * projection, on a table with a partition key and a sort key:
 *   - keys: the key attributes (partition and sort key) and the indexed
 *     attributes, nothing else;
 *   - list: those and the listed attributes;
 *   - all: the whole item, as it is;
 *   - a query is answered from the index alone only when the index projects
 *     every attribute it asks for; a query asking for whole items (no
 *     attribute named) only by an index projecting all.
 */
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "item.h"
#include "sx_errors.h"

/* {"user": 7, "ts": 100, "town": "Redmond", "name": "Ada", "note": "n"} */
static void make_item(mp_buf *b)
{
    mp_buf_init(b);
    mp_put_map(b, 5);
    mp_put_cstr(b, "user");
    mp_put_i64(b, 7);
    mp_put_cstr(b, "ts");
    mp_put_i64(b, 100);
    mp_put_cstr(b, "town");
    mp_put_cstr(b, "Redmond");
    mp_put_cstr(b, "name");
    mp_put_cstr(b, "Ada");
    mp_put_cstr(b, "note");
    mp_put_cstr(b, "n");
}

/* The attribute count of map m. */
static uint32_t count_of(const mp_buf *m)
{
    mp_cur c = mp_cur_make((const uint8_t *)m->sb.data, m->sb.size);
    uint32_t n = 0;

    CHECK(mp_read_map(&c, &n) == 0);
    return n;
}

static bool has(const mp_buf *m, const char *name)
{
    mp_span v;

    return item_get((const uint8_t *)m->sb.data, m->sb.size, name, &v) == 0;
}

int main(void)
{
    char *attrs[] = { "town" }, *list[] = { "name" };
    char *q_name[] = { "name" }, *q_keys[] = { "user", "ts", "town" }, *q_note[] = { "note" };
    cat_table t = { .id = 1, .name = "events", .pk = "user", .sk = "ts" };
    cat_index keys = {
        .id = 2, .name = "by_town", .nattrs = 1, .attrs = attrs, .proj = CAT_PROJ_KEYS
    };
    cat_index lst = keys, all = keys;
    mp_buf it, out;

    lst.proj = CAT_PROJ_LIST;
    lst.nproj = 1;
    lst.proj_attrs = list;
    all.proj = CAT_PROJ_ALL;
    make_item(&it);

    /* keys only: user, ts, town */
    mp_buf_init(&out);
    CHECK(item_project(&t, &keys, (const uint8_t *)it.sb.data, it.sb.size, &out) == 0);
    CHECK(count_of(&out) == 3);
    CHECK(has(&out, "user") && has(&out, "ts") && has(&out, "town"));
    CHECK(!has(&out, "name") && !has(&out, "note"));
    mp_buf_free(&out);

    /* list: and name */
    mp_buf_init(&out);
    CHECK(item_project(&t, &lst, (const uint8_t *)it.sb.data, it.sb.size, &out) == 0);
    CHECK(count_of(&out) == 4);
    CHECK(has(&out, "user") && has(&out, "ts") && has(&out, "town") && has(&out, "name"));
    CHECK(!has(&out, "note"));
    mp_buf_free(&out);

    /* all: the item as it is */
    mp_buf_init(&out);
    CHECK(item_project(&t, &all, (const uint8_t *)it.sb.data, it.sb.size, &out) == 0);
    CHECK(out.sb.size == it.sb.size && memcmp(out.sb.data, it.sb.data, it.sb.size) == 0);
    mp_buf_free(&out);

    /* coverage */
    CHECK(item_covers(&t, &keys, q_keys, 3));
    CHECK(!item_covers(&t, &keys, q_name, 1));
    CHECK(item_covers(&t, &lst, q_name, 1));
    CHECK(item_covers(&t, &lst, q_keys, 3));
    CHECK(!item_covers(&t, &lst, q_note, 1));
    CHECK(item_covers(&t, &all, q_note, 1));
    /* whole items asked for (no attribute named) */
    CHECK(!item_covers(&t, &keys, NULL, 0));
    CHECK(!item_covers(&t, &lst, NULL, 0));
    CHECK(item_covers(&t, &all, NULL, 0));

    mp_buf_free(&it);
    return CHECK_DONE();
}
