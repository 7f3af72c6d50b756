/* Anonymous memory at a chosen address: the client places pinned host allocations where the
 * worker can map their mirrors at the same address (client/bulk/host_mirror.c,
 * server/handlers_host_mirror.c). */
#ifndef RGPU_COMMON_MAP_AT_H
#define RGPU_COMMON_MAP_AT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Map len bytes of private read-write memory at exactly at, replacing nothing: false, with
 * nothing mapped, when something is there already (or the kernel took the address as a hint). */
bool rg_map_at(uintptr_t at, size_t len);

#endif
