/* The fake driver's internals (tests only; never installed). */
#ifndef RGPU_FAKECUDA_H
#define RGPU_FAKECUDA_H

#include <cuda.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Parameters of one launch as the C kernels see them. */
struct fk_launch {
    unsigned grid[3], block[3];
    void **params;
    CUstream stream; /* as launched (NULL, a pseudo-handle or a stream) */
};

struct fk_kernel {
    const char *name;
    unsigned nparams;
    unsigned off[8], size[8];
    /* Returns CUDA_SUCCESS or the error the launch causes (sticky for ILLEGAL_ADDRESS). */
    CUresult (*run)(const struct fk_launch *l);
};

/* A __device__ variable of the test programs, backed by host memory. */
struct fk_global {
    const char *name;
    void *storage;
    size_t size;
};

/* Work another fake library runs "on the GPU" (tests/fakenccl with FAKENCCL_ASYNC=1): ticket(s)
 * is how many of its operations were enqueued on stream s so far (NULL: the legacy stream);
 * done(s, t) whether the first t of them have finished (s = FK_ALL_STREAMS: whether all of
 * them everywhere have). Stream, event and context synchronization wait for it and queries
 * see it, as a GPU's would; copies and cuStreamWaitEvent do not (they run at the call). */
#define FK_ALL_STREAMS ((CUstream) ~(uintptr_t)0)
struct fk_device_work {
    unsigned long long (*ticket)(CUstream s);
    bool (*done)(CUstream s, unsigned long long ticket);
};
/* Exported: the library registers itself (looked up with dlsym). */
void fakecuda_device_work(const struct fk_device_work *w);

/* FAKECUDA_GPU_TIMELINE (fakecuda.c): put ns of GPU work on stream s behind its earlier work
 * and every process's earlier kernel, and return true at once; false without a timeline (the
 * kernel then runs at the call). */
bool fk_timeline_run(CUstream s, uint64_t ns);

const struct fk_kernel *fk_kernel_find(const char *name);
/* The i-th test kernel, NULL past the last (every fake module holds them all). */
const struct fk_kernel *fk_kernel_at(unsigned i);
const struct fk_global *fk_global_find(const char *name);
/* True when [p, p+len) lies inside one global's storage. */
bool fk_global_valid(const void *p, size_t len);
/* True when [p, p+len) lies inside mapped, accessible VMM memory (fake_vmm.c). */
bool fk_vmm_valid(const void *p, size_t len);
/* True when [p, p+len) lies inside host memory registered with cuMemHostRegister
 * (fake_hostreg.c). */
bool fk_hostreg_valid(const void *p, size_t len);
/* True when [p, p+len) lies inside live fake device memory (or registered host memory). */
bool fk_valid(const void *p, size_t len);

/* Device allocations are whole pages (fake_dmabuf.c aliases them with memfds). */
#define FK_PAGE 4096u
static inline size_t fk_page_up(size_t n)
{
    return (n + FK_PAGE - 1) & ~(size_t)(FK_PAGE - 1);
}
/* The cuMemAlloc allocation holding p: its start and its length in whole pages. */
bool fk_alloc_find(const void *p, void **base_p, size_t *len_p);
/* FAKECUDA_VA_BASE's next len bytes mapped with prot, anonymous or of fd (cuMemAlloc's memory,
 * cuMemAddressReserve's reservations, IPC-opened memory: one window, as a real driver's), NULL
 * when it is unset or full. */
void *fk_va_map(size_t len, int prot, int fd);
/* fake_dmabuf.c: the device attributes of GPUDirect RDMA (dmabuf export on unless
 * FAKECUDA_DMABUF=0), and drop the alias of the allocation at p before it is freed. */
int fk_dmabuf_attribute(CUdevice_attribute a);
void fk_dmabuf_forget(const void *p);
/* The memfd aliasing the allocation at base (len bytes, a page multiple), made now if there is
 * none; -1 on failure. It stays the alias's (closed when the allocation is freed). */
int fk_alias_memfd(void *base, size_t len);
/* fake_ipc.c: is [p, p+len) inside memory opened from an IPC handle. fakecuda.c: the flags an
 * event was created with, or ~0u when e is not a live event. */
bool fk_ipc_valid(const void *p, size_t len);
unsigned fk_event_flags(CUevent e);
/* Free a cuMemAlloc allocation of len bytes (a page multiple); the last one freed of 1 MiB or
 * more is kept and handed back by fk_pages_reuse to the next allocation of the same length, as
 * the CUDA driver tends to return a freed address: stale-registration tests rely on it. */
void fk_pages_free(void *p, size_t len);
void *fk_pages_reuse(size_t len);

/* The memory a texture (surf false) or surface object reads or writes (fake_array.c): an
 * array's rows (pitch = bytes per row, rows per slice, slices), or a linear or pitched range. */
struct fk_image {
    unsigned char *data;
    size_t pitch, rows, slices;
};
bool fk_image_of(unsigned long long object, bool surf, struct fk_image *im);

/* A load with JIT options: logs, sizes and wall time written as the driver would (fake_link.c). */
void fk_jit_report(unsigned n, CUjit_option *opts, void **vals, CUresult res, const char *why);
/* fake_preserve.c: remember a library loaded with CU_LIBRARY_BINARY_IS_PRESERVED; at its
 * unload, CUDA_ERROR_INVALID_IMAGE if its image changed meanwhile. */
void fk_preserve_note(void *lib, const void *code, unsigned n, CUlibraryOption *opts, void **vals);
CUresult fk_preserve_check(void *lib);

/* Graphs (fakecuda.c) for fake_graph_cond.c: run a graph's nodes in order; is g a graph; add a
 * node that calls run(arg) when its graph runs. Conditional handles with a default to apply
 * are reset when an executable graph made from their graph is launched (fk_cond_launch). */
CUresult fk_graph_run(CUgraph g);
bool fk_graph_valid(CUgraph g);
CUresult fk_graph_add_run(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n,
                          CUgraphNodeType type, CUresult (*run)(void *), void *arg);
void fk_cond_launch(const void *graph);
/* Stream capture (fakecuda.c): the graph stream s captures into (NULL: none), whether the
 * capture was invalidated, and its dependency set, which each captured node replaces by itself
 * and fake_graph_cond.c's capture-info calls read and update; is every node of nodes[n] one
 * of graph g's. */
#define FK_MAX_CAPTURE_DEPS 8
struct fk_capture_deps {
    CUgraphNode nodes[FK_MAX_CAPTURE_DEPS];
    size_t n;
};
CUgraph fk_capture_of(CUstream s, bool *invalidated_p, struct fk_capture_deps **deps_p);
bool fk_graph_has_nodes(CUgraph g, const CUgraphNode *nodes, size_t n);
/* The test kernels that set a condition from the "device" (cudaGraphSetConditional). */
CUresult fk_k_cond_if_odd(const struct fk_launch *l);
CUresult fk_k_cond_set_value(const struct fk_launch *l);
CUresult fk_k_cond_add(const struct fk_launch *l);
CUresult fk_k_cond_countdown(const struct fk_launch *l);

#endif
