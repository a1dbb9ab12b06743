/*
 * plant.h — the chaos harness's planted bugs (tests/chaos/README.md,
 * "Planted bugs"): whether the one named is on in this process, i.e.
 * named by SHARDEX_PLANT in its environment. Code that plants a bug calls
 * it only under #ifdef SHARDEX_TEST_HOOKS, so other builds carry no bug
 * whatever the environment says.
 */
#ifndef SX_PLANT_H
#define SX_PLANT_H

#include <stdbool.h>

/* True when SHARDEX_PLANT equals name (read once per process). Thread-safe. */
bool plant_on(const char *name);

#endif
