/* Unsupported NVML entry points (the generated stubs): log each name once, return
 * NVML_ERROR_NOT_SUPPORTED. */
#include <pthread.h>
#include <stdbool.h>

#include "common/log.h"
#include "nvml/nvml_shim.h"

/* Names are the stubs' string literals, one per entry point, so pointers identify them. */
#define SEEN_MAX 1024

static const char *seen[SEEN_MAX];
static int nseen;
static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;

static bool first_time(const char *name)
{
    bool first = true;

    pthread_mutex_lock(&seen_lock);
    for (int i = 0; i < nseen && first; i++)
        first = seen[i] != name;
    if (first && nseen < SEEN_MAX)
        seen[nseen++] = name;
    pthread_mutex_unlock(&seen_lock);
    return first;
}

int nvml_unsupported(const char *name)
{
    if (first_time(name))
        rg_warn("nvml: %s is not supported; returning NVML_ERROR_NOT_SUPPORTED", name);
    return NVML_ERROR_NOT_SUPPORTED;
}
