/* JIT option arrays for the driver, shared by linking and loads with options. */
#include <stdlib.h>
#include <string.h>

#include "proto/jit_options.h"
#include "server/jit_options.h"

static void put(struct srv_jit *j, CUjit_option o, void *v)
{
    j->opts[j->n] = o;
    j->vals[j->n++] = v;
}

/* A log buffer and its size option (whose slot the driver overwrites with the size used). */
static bool log_buffer(struct srv_jit *j, CUjit_option buf_opt, CUjit_option size_opt, uint64_t cap,
                       char **buf_p, size_t *cap_p, unsigned *size_slot)
{
    if (cap == 0)
        return true;
    *cap_p = cap > PROTO_JIT_LOG_MAX ? PROTO_JIT_LOG_MAX : (size_t)cap;
    if ((*buf_p = calloc(1, *cap_p)) == NULL)
        return false;
    put(j, buf_opt, *buf_p);
    *size_slot = j->n;
    put(j, size_opt, (void *)(uintptr_t)*cap_p);
    return true;
}

CUresult srv_jit_init(struct srv_jit *j, const uint64_t *words, size_t nwords, uint64_t info_cap,
                      uint64_t error_cap)
{
    memset(j, 0, sizeof(*j));
    if (nwords > SRV_JIT_MAX_WORDS)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < nwords; i++) {
        CUjit_option o = PROTO_JIT_WORD_OPTION(words[i]);
        if (!proto_jit_option_is_integer(o))
            return CUDA_ERROR_INVALID_VALUE;
        put(j, o, (void *)(uintptr_t)PROTO_JIT_WORD_VALUE(words[i]));
    }
    j->wall = j->n;
    put(j, CU_JIT_WALL_TIME, NULL);
    if (!log_buffer(j, CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, info_cap,
                    &j->info, &j->info_cap, &j->info_size) ||
        !log_buffer(j, CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, error_cap,
                    &j->error, &j->error_cap, &j->error_size)) {
        srv_jit_fini(j);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

void srv_jit_fini(struct srv_jit *j)
{
    free(j->info);
    free(j->error);
    j->info = j->error = NULL;
}

uint64_t srv_jit_wall_bits(const struct srv_jit *j)
{
    uint64_t bits = 0;

    memcpy(&bits, &j->vals[j->wall], sizeof(float));
    return bits;
}

CUresult srv_jit_logs_reply(struct srv_session *s, struct srv_call *call, const struct srv_jit *j,
                            const void *head, size_t head_len)
{
    size_t ni = j->info_cap ? strnlen(j->info, j->info_cap - 1) : 0;
    size_t ne = j->error_cap ? strnlen(j->error, j->error_cap - 1) : 0;
    uint8_t *buf = srv_scratch(s, head_len + ni + ne + 2);

    if (buf == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (head_len > 0)
        memcpy(buf, head, head_len);
    memcpy(buf + head_len, j->info ? j->info : "", ni);
    buf[head_len + ni] = 0;
    memcpy(buf + head_len + ni + 1, j->error ? j->error : "", ne);
    buf[head_len + ni + 1 + ne] = 0;
    call->rdata = buf;
    call->rdata_len = head_len + ni + ne + 2;
    return CUDA_SUCCESS;
}
