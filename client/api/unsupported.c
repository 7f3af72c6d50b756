/* Unsupported entry points: log each name once, return CUDA_ERROR_NOT_SUPPORTED. */
#include "client/api/api.h"

#include <string.h>

/* Names are string literals of the generated stubs (or other static strings), so the set keeps
 * pointers; lookups compare contents, so two callers with equal names share one entry. An open-
 * addressed table sized above the 637 driver symbols; if it ever fills, we just log again. */
#define CLI_UNSUPPORTED_SLOTS 2048

static const char *cli_unsupported_seen[CLI_UNSUPPORTED_SLOTS];
static pthread_mutex_t cli_unsupported_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t cli_name_hash(const char *s)
{
    size_t h = 14695981039346656037ull;

    while (*s)
        h = (h ^ (unsigned char)*s++) * 1099511628211ull;
    return h;
}

/* True the first time name is seen. */
static bool cli_unsupported_first(const char *name)
{
    size_t i = cli_name_hash(name) % CLI_UNSUPPORTED_SLOTS;
    bool first = true;

    pthread_mutex_lock(&cli_unsupported_lock);
    for (size_t n = 0; n < CLI_UNSUPPORTED_SLOTS; n++, i = (i + 1) % CLI_UNSUPPORTED_SLOTS) {
        if (cli_unsupported_seen[i] == NULL) {
            cli_unsupported_seen[i] = name;
            break;
        }
        if (strcmp(cli_unsupported_seen[i], name) == 0) {
            first = false;
            break;
        }
    }
    pthread_mutex_unlock(&cli_unsupported_lock);
    return first;
}

CUresult cli_unsupported(const char *name)
{
    if (name == NULL)
        name = "(unnamed)";
    if (cli_unsupported_first(name))
        rg_warn("%s is not supported; returning CUDA_ERROR_NOT_SUPPORTED", name);
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* A probe: a call that frameworks make on every start to learn whether a feature exists, and
 * whose refusal they meet with a fallback (PyTorch's cuMemHostGetDevicePointer, cuBLASLt's
 * export table 1734dc26). Its refusal fails no program, so it is said once at info level, not
 * as a warning on every run; every other refusal warns (docs/frameworks.md). */
CUresult cli_unsupported_probe(const char *name)
{
    if (cli_unsupported_first(name))
        rg_info("%s is not supported (probed; the caller falls back); returning "
                "CUDA_ERROR_NOT_SUPPORTED",
                name);
    return CUDA_ERROR_NOT_SUPPORTED;
}
