/* The bulk paths of large copies, beside the call API (the entry points choose one or the
 * other): one-sided RDMA copies of pinned memory (rdma_copy.c) and the data lanes of TCP
 * sessions (lanes.c). */
#ifndef RGPU_CLIENT_BULK_H
#define RGPU_CLIENT_BULK_H

#include <cuda.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One-sided bulk copies of pinned memory on RDMA sessions (rdma_copy.c). CLI_RDMA_NOT_TAKEN
 * when the copy must go the ordinary way (not RDMA, not pinned, too small, not registrable). */
#define CLI_RDMA_NOT_TAKEN ((CUresult)-1)
/* Data lanes of TCP sessions (lanes.c): the server's offer from the Welcome and how many lanes
 * to use (0: none); a large HtoD (htod) or DtoH copy over them, or CLI_LANES_NOT_TAKEN when it
 * should go the ordinary way. */
#define CLI_LANES_NOT_TAKEN ((CUresult)-2)
CUresult cli_lanes_copy(bool htod, CUdeviceptr dptr, void *host, size_t n, uint64_t stream,
                        bool async);
/* An asynchronous lane copy of pinned memory returns once its call is sent; the reply of any
 * synchronous call sent after it means the worker is done with it, and then the client's lanes
 * finish their part before that call returns (lanes.c's post-reply hook, lanes_synced:
 * client/session/synced.c).
 * cli_lanes_quiesce: before pinned memory is freed or unregistered, no lane copy may still read
 * or write it. */
void cli_lanes_quiesce(void);
CUresult cli_rdma_htod(CUdeviceptr dst, const void *src, size_t n, uint64_t stream, bool async);
CUresult cli_rdma_dtoh(void *dst, CUdeviceptr src, size_t n, uint64_t stream, bool async);
/* Pinned memory leaves the client's records: wait until the server no longer needs its
 * registration, then drop it (mr from struct mem_range; NULL: nothing to do). */
void cli_rdma_forget(void *mr);

/* The order of the bulk paths' post-reply hooks (client/session/call.h): after a synchronizing
 * reply the lane copies settle first, then the host mirrors (host_mirror.h) are read back. */
#define CLI_SYNCED_LANES   10
#define CLI_SYNCED_MIRRORS 20

#endif
