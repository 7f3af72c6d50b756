/* JIT options in the worker (linking and loads with options): the option arrays handed to the
 * driver, built from the wire's integer option words (proto/jit_options.h) plus the worker's
 * own outputs: the wall time and log buffers of the sizes the client asked for. The driver
 * writes into these arrays (for a link, at every step until it is destroyed), so they live as
 * long as the object they were given with. */
#ifndef RGPU_SERVER_JIT_OPTIONS_H
#define RGPU_SERVER_JIT_OPTIONS_H

#include "server/session.h"

#define SRV_JIT_MAX_WORDS 16

struct srv_jit {
    CUjit_option opts[SRV_JIT_MAX_WORDS + 5];
    void *vals[SRV_JIT_MAX_WORDS + 5];
    unsigned n;
    unsigned wall, info_size, error_size; /* slots of the driver's outputs (0 = none for logs) */
    char *info, *error;
    size_t info_cap, error_cap;
};

/* CUDA_ERROR_INVALID_VALUE for more than SRV_JIT_MAX_WORDS words or an option that is not an
 * integer one; CUDA_ERROR_OUT_OF_MEMORY when a log buffer cannot be had. Capacities above
 * PROTO_JIT_LOG_MAX are clamped. */
CUresult srv_jit_init(struct srv_jit *j, const uint64_t *words, size_t nwords, uint64_t info_cap,
                      uint64_t error_cap);
void srv_jit_fini(struct srv_jit *j);
/* The wall time the driver wrote, as float bits. */
uint64_t srv_jit_wall_bits(const struct srv_jit *j);
/* Reply data: head_len bytes of head, then info text NUL, error text NUL (session scratch). */
CUresult srv_jit_logs_reply(struct srv_session *s, struct srv_call *call, const struct srv_jit *j,
                            const void *head, size_t head_len);

#endif
