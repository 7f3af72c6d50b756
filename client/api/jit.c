/* JIT options and logs shared by linking (link.c) and loads with options (module.c). */
#include <stdio.h>
#include <string.h>

#include "client/api/jit.h"
#include "proto/jit_options.h"

static size_t clamp_cap(uintptr_t v)
{
    return v > PROTO_JIT_LOG_MAX ? PROTO_JIT_LOG_MAX : (size_t)v;
}

CUresult cli_jit_read(unsigned n, const CUjit_option *opts, void *const *vals, unsigned max_words,
                      struct cli_jit *j)
{
    static bool warned;

    memset(j, 0, sizeof(*j));
    if (n > 0 && (opts == NULL || vals == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    if (max_words > sizeof(j->words) / sizeof(j->words[0]))
        max_words = sizeof(j->words) / sizeof(j->words[0]);
    for (unsigned i = 0; i < n; i++) {
        uintptr_t v = (uintptr_t)vals[i];
        switch (opts[i]) {
        case CU_JIT_INFO_LOG_BUFFER:
            j->info = (char *)v;
            break;
        case CU_JIT_ERROR_LOG_BUFFER:
            j->error = (char *)v;
            break;
        case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
            j->info_cap = clamp_cap(v);
            break;
        case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
            j->error_cap = clamp_cap(v);
            break;
        default:
            if (!proto_jit_option_is_integer(opts[i]))
                break;
            if (j->nwords < max_words)
                j->words[j->nwords++] = PROTO_JIT_WORD(opts[i], v);
            else if (!__atomic_exchange_n(&warned, true, __ATOMIC_RELAXED))
                rg_warn("JIT: more than %u integer options; option %d and later ones dropped",
                        max_words, (int)opts[i]);
        }
    }
    if (j->info == NULL)
        j->info_cap = 0;
    if (j->error == NULL)
        j->error_cap = 0;
    return CUDA_SUCCESS;
}

void cli_jit_logs_out(const struct cli_jit *j, const char *logs, size_t len)
{
    size_t ni = len > 0 ? strnlen(logs, len) : 0;
    const char *error = ni + 1 < len ? logs + ni + 1 : "";
    size_t ne = ni + 1 < len ? strnlen(error, len - ni - 1) : 0;

    if (j->info != NULL && j->info_cap > 0)
        snprintf(j->info, j->info_cap, "%.*s", (int)ni, len > 0 ? logs : "");
    if (j->error != NULL && j->error_cap > 0)
        snprintf(j->error, j->error_cap, "%.*s", (int)ne, error);
}

void cli_jit_values_out(unsigned n, const CUjit_option *opts, void **vals, const uint64_t *out,
                        unsigned nout)
{
    for (unsigned i = 0; i < n && nout >= 3; i++) {
        switch (opts[i]) {
        case CU_JIT_WALL_TIME:
            memcpy(&vals[i], &out[0], sizeof(float));
            break;
        case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
            vals[i] = (void *)(uintptr_t)out[1];
            break;
        case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
            vals[i] = (void *)(uintptr_t)out[2];
            break;
        default:
            break;
        }
    }
}
