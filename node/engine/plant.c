/*
 * plant.c — whether a planted bug is on (plant.h).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plant.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char planted[64];

static void read_env(void)
{
    const char *e = getenv("SHARDEX_PLANT");

    if (e != NULL && strlen(e) < sizeof planted)
        snprintf(planted, sizeof planted, "%s", e);
}

bool plant_on(const char *name)
{
    pthread_once(&once, read_env);
    return planted[0] != '\0' && strcmp(planted, name) == 0;
}
