/* The client's registry of address ranges (address_ranges.c): device allocations and pinned
 * host memory it made or registered, by kind, with their context and RDMA registration. */
#ifndef RGPU_CLIENT_ADDRESS_RANGES_H
#define RGPU_CLIENT_ADDRESS_RANGES_H

#include "client/objects/objects.h"

enum mem_kind { MEM_DEVICE = 0, MEM_HOST = 1 };

/* flags of a device range */
#define MEM_DEV_LEGACY_IPC 0x1u /* cuMemAlloc / cuMemAllocPitch memory: IPC can export it */
#define MEM_DEV_IPC_OPENED 0x2u /* opened from an IPC handle (client/api/ipc.c) */

struct mem_range {
    uintptr_t base;
    size_t size;
    struct cli_ctx *ctx; /* owning context (device memory) */
    unsigned flags;      /* cuMemHostAlloc / cuMemHostRegister flags (host memory), MEM_DEV_*
                          * (device memory) */
    uint64_t buffer_id;  /* CU_POINTER_ATTRIBUTE_BUFFER_ID */
    void *mr;            /* pinned host memory on an RDMA session: its registration (rdma_copy.c) */
};

bool addr_range_add(enum mem_kind kind, uintptr_t base, size_t size, struct cli_ctx *ctx,
                    unsigned flags);
/* The range containing addr. */
bool addr_range_find(enum mem_kind kind, uintptr_t addr, struct mem_range *range_p);
/* Whether [base, base + size) shares a byte with a range. */
bool addr_range_overlaps(enum mem_kind kind, uintptr_t base, size_t size);
/* Attach mr to the range starting exactly at base unless one is attached already; the
 * attached one (mr, or the earlier one) in *mr_p. False if there is no such range. */
bool addr_range_attach_mr(enum mem_kind kind, uintptr_t base, void *mr, void **mr_p);
/* Remove the range starting exactly at base. */
bool addr_range_remove(enum mem_kind kind, uintptr_t base, struct mem_range *range_p);

#endif
