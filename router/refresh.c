/*
 * refresh.c — the router's catalog refresher: one thread that fetches the
 * catalog about every second, so that changes the router is not told of
 * (an index finishing its backfill, an index dropped through another
 * router) reach its cache without waiting for a lookup miss. Request
 * handlers still refresh on a miss themselves.
 */
#include <errno.h>
#include <time.h>

#include "router.h"
#include "log.h"
#include "sx_errors.h"

#define RT_REFRESH_MS 1000

static void *refresher(void *arg)
{
    router *rt = arg;
    struct timespec until;
    bool warned = false;

    os_thread_name("sx-refresh");

    pthread_mutex_lock(&rt->mu);
    while (!rt->stop) {
        int rc;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += RT_REFRESH_MS / 1000;
        while (!rt->stop && pthread_cond_timedwait(&rt->cv, &rt->mu, &until) != ETIMEDOUT)
            ;
        if (rt->stop)
            break;
        pthread_mutex_unlock(&rt->mu);
        rc = catcache_refresh(rt->cc);
        if (rc != 0 && !warned)
            LOG_WARN("router: catalog refresh failed (%s); serving the cached copy",
                     sx_strerror(rc));
        else if (rc == 0 && warned)
            LOG_INFO("router: catalog refresh works again");
        warned = rc != 0;
        pthread_mutex_lock(&rt->mu);
    }
    pthread_mutex_unlock(&rt->mu);
    return NULL;
}

int rt_refresher_start(router *rt)
{
    if (pthread_create(&rt->refresher, NULL, refresher, rt) != 0)
        return SX_ENOMEM;
    rt->refresher_on = true;
    return 0;
}

void rt_refresher_stop(router *rt)
{
    if (!rt->refresher_on)
        return;
    pthread_mutex_lock(&rt->mu);
    rt->stop = true;
    pthread_cond_broadcast(&rt->cv);
    pthread_mutex_unlock(&rt->mu);
    pthread_join(rt->refresher, NULL);
    rt->refresher_on = false;
}
