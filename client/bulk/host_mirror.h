/* Pinned host memory mirrored on the worker (host_mirror.c; docs/ARCHITECTURE.md, "Mapped
 * pinned host memory"). GPU work that names a pinned host address (a kernel argument, a
 * memset's target, a copy's endpoint) makes the worker map the same pages at the same address
 * and register them with its driver, lazily, once per range and session. A mirrored range is
 * CLEAN (the client's bytes are authoritative: pushed before the next GPU op that uses it) or
 * DIRTY (GPU work may have written the mirror: read back, as a merge of the bytes the GPU
 * changed, after the next synchronization that means "GPU work is done").
 *
 * Cost for programs that never give the GPU a pinned host address (PyTorch): a launch without
 * any pinned memory reads one word; with pinned memory, each parameter word is compared with
 * the bounds of all pinned ranges and tested against a bit filter of the 2 MiB regions they
 * cover, lock-free, before any exact lookup (which takes the address registry's lock); the reply
 * of a synchronizing op reads one counter. Every function here may be called from any thread.
 *
 * The read-back is host_mirror.c's post-reply hook (client/session/call.h): it runs after every
 * synchronizing op's reply (the ops flagged `synchronizing` in proto/ops.def), however the call
 * was sent, and reads back the DIRTY ranges of that session (one round trip for all of them),
 * which then become CLEAN. */
#ifndef RGPU_CLIENT_HOST_MIRROR_H
#define RGPU_CLIENT_HOST_MIRROR_H

#include "client/objects/objects.h"

/* [lowest, highest) address of the pinned host ranges ever known; 0, 0 when none. */
extern uintptr_t cli_mirror_lo, cli_mirror_hi;
/* A filter on top of the bounds (device pointers often lie between pinned ranges): one bit per
 * 2 MiB region that holds pinned host memory, hashed into 64 Ki bits; set, never cleared. */
#define CLI_MIRROR_REGION_SHIFT 21
#define CLI_MIRROR_FILTER_BITS  16
extern uint64_t cli_mirror_filter[(1u << CLI_MIRROR_FILTER_BITS) / 64];
static inline unsigned cli_mirror_filter_bit(uintptr_t addr)
{
    return (unsigned)(((uint64_t)(addr >> CLI_MIRROR_REGION_SHIFT) * 0x9e3779b97f4a7c15ull) >>
                      (64 - CLI_MIRROR_FILTER_BITS));
}

/* Memory for cuMemHostAlloc, placed where the worker's process is unlikely to have anything
 * (its driver's own address reservations lie elsewhere), so that a mirror at the same address
 * can be made there: mapped from a region of its own (*mapped_p true), or from the heap when
 * that fails. NULL when out of memory. Freed with cli_mirror_host_free. */
void *cli_mirror_host_alloc(size_t size, bool *mapped_p);
void cli_mirror_host_free(void *p, size_t size, bool mapped);
/* A pinned host range was made (cuMemHostAlloc, cuMemHostRegister): widen the bounds. */
void cli_mirror_host_added(uintptr_t base, size_t size);
/* Whether addr may lie in a pinned host range (false: it certainly does not). */
static inline bool cli_mirror_may_hold(uintptr_t addr)
{
    uintptr_t lo = __atomic_load_n(&cli_mirror_lo, __ATOMIC_RELAXED);
    uintptr_t hi = __atomic_load_n(&cli_mirror_hi, __ATOMIC_RELAXED);

    unsigned bit;

    if (addr - lo >= hi - lo)
        return false;
    bit = cli_mirror_filter_bit(addr);
    return (__atomic_load_n(&cli_mirror_filter[bit / 64], __ATOMIC_RELAXED) >> (bit % 64)) & 1;
}

/* GPU work in the current context is about to use the pinned host memory holding addr (a
 * memset's target, a copy's endpoint): mirror it in the context's session if it is not yet
 * (a round trip, once), push the client's bytes if it is CLEAN (sent in order before the op),
 * and mark it DIRTY. False (and nothing done) when addr is not pinned host memory or the range
 * cannot be mirrored: the op then goes as it would have without mirroring. */
bool cli_mirror_use(uintptr_t addr);
/* A launch's packed parameters: every 8-byte-aligned word that points into pinned host memory
 * gets cli_mirror_use. Without pinned host memory: one load. */
void cli_mirror_launch_slow(const uint8_t *params, size_t len);
static inline void cli_mirror_launch(const uint8_t *params, size_t len)
{
    if (__atomic_load_n(&cli_mirror_hi, __ATOMIC_RELAXED) != 0)
        cli_mirror_launch_slow(params, len);
}
/* Whether [addr, addr + len) lies in a range mirrored in the current context's session
 * (dirty_only: a DIRTY one). Such copies run on the worker, on the mirror. */
bool cli_mirror_holds(uintptr_t addr, size_t len, bool dirty_only);
/* The pinned range at base is freed or unregistered: every session's mirror of it goes. */
void cli_mirror_forget(uintptr_t base);

#endif
