/* What the shim does not offer (nccl/nccl_api.txt): ncclInvalidUsage, and the name logged once.
 * (Implemented entry points are exported twice, the second as pnccl*: NCCL_PROFILE_ALIAS.) */
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "common/log.h"
#include "nccl/nccl_shim.h"

#define MAX_LOGGED 64

ncclResult_t nccl_unsupported(const char *name)
{
    static const char *logged[MAX_LOGGED];
    static int nlogged;
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    bool seen = false;

    pthread_mutex_lock(&lock);
    for (int i = 0; i < nlogged && !seen; i++)
        seen = strcmp(logged[i], name) == 0;
    if (!seen && nlogged < MAX_LOGGED)
        logged[nlogged++] = name;
    pthread_mutex_unlock(&lock);
    if (!seen)
        rg_warn("nccl: %s is not offered by rgpu's NCCL (ncclInvalidUsage)", name);
    return nccl_fail(ncclInvalidUsage, "%s is not offered by rgpu's NCCL", name);
}
