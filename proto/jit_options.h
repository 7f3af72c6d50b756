/* JIT options on the wire (LINK_CREATE, MODULE_LOAD_JIT, LIBRARY_LOAD_JIT; see proto/ops.h).
 * Integer-valued options travel as one word each, (option << 32) | value; the worker refuses
 * any other option in that list, so a client can never make the driver write through a pointer
 * it chose. Log buffers travel as the capacities the application gave: the worker allocates
 * buffers of those sizes (at most PROTO_JIT_LOG_MAX each) and sends their text back, with the
 * sizes the driver reported and the wall time. */
#ifndef RGPU_PROTO_JIT_OPTIONS_H
#define RGPU_PROTO_JIT_OPTIONS_H

#include <cuda.h>
#include <stdbool.h>
#include <stdint.h>

#define PROTO_JIT_LOG_MAX          (1u << 20)
#define PROTO_JIT_WORD(opt, value) (((uint64_t)(opt) << 32) | (uint32_t)(value))
#define PROTO_JIT_WORD_OPTION(w)   ((CUjit_option)((w) >> 32))
#define PROTO_JIT_WORD_VALUE(w)    ((uint32_t)(w))

static inline bool proto_jit_option_is_integer(CUjit_option o)
{
    switch (o) {
    case CU_JIT_MAX_REGISTERS:
    case CU_JIT_THREADS_PER_BLOCK:
    case CU_JIT_OPTIMIZATION_LEVEL:
    case CU_JIT_TARGET_FROM_CUCONTEXT:
    case CU_JIT_TARGET:
    case CU_JIT_FALLBACK_STRATEGY:
    case CU_JIT_GENERATE_DEBUG_INFO:
    case CU_JIT_LOG_VERBOSE:
    case CU_JIT_GENERATE_LINE_INFO:
    case CU_JIT_CACHE_MODE:
    case CU_JIT_POSITION_INDEPENDENT_CODE:
    case CU_JIT_MIN_CTA_PER_SM:
    case CU_JIT_MAX_THREADS_PER_BLOCK:
    case CU_JIT_OVERRIDE_DIRECTIVE_VALUES:
        return true;
    default:
        return false;
    }
}

#endif
