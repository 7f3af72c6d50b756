/* JIT options of cuLinkCreate, cuModuleLoadDataEx and cuLibraryLoadData on the client: what of
 * the application's option arrays travels (proto/jit_options.h), and how the worker's answer
 * (logs, filled sizes, wall time) is written back into them as the driver would. */
#ifndef RGPU_CLIENT_JIT_H
#define RGPU_CLIENT_JIT_H

#include "client/api/api.h"

/* Integer options as wire words; log buffers and their capacities as the application gave
 * them, capacities clamped to PROTO_JIT_LOG_MAX (the worker's logs are never longer). */
struct cli_jit {
    uint64_t words[16];
    unsigned nwords;
    char *info, *error;
    size_t info_cap, error_cap;
};

/* Read the option arrays (n may be 0, opts/vals NULL). CUDA_ERROR_INVALID_VALUE when n > 0
 * and an array is missing; options beyond what the wire takes (max_words) are dropped with a
 * warning, once. */
CUresult cli_jit_read(unsigned n, const CUjit_option *opts, void *const *vals, unsigned max_words,
                      struct cli_jit *j);
/* The worker's logs (info NUL error NUL, len bytes) into the application's buffers. */
void cli_jit_logs_out(const struct cli_jit *j, const char *logs, size_t len);
/* The outputs of a load's reply, out = [wall time float bits, info size, error size], into the
 * value slots of CU_JIT_WALL_TIME and the two *_LOG_BUFFER_SIZE_BYTES options. */
void cli_jit_values_out(unsigned n, const CUjit_option *opts, void **vals, const uint64_t *out,
                        unsigned nout);

#endif
