/* dlopen of rdma-core into a table of function pointers (see rdma_dl.h). */
#include "transport/rdma_dl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static struct rdma_dl rdl;
static char rdl_why[256];
static int rdl_ok;
static pthread_once_t rdl_once = PTHREAD_ONCE_INIT;

#define RDL_SYM(lib, field, name)                                                                  \
    {                                                                                              \
        lib, #name, (void **)&rdl.field                                                            \
    }

static const char *const rdl_libs[] = {"libibverbs.so.1", "librdmacm.so.1"};
/* Every symbol the backend needs: library (0 libibverbs, 1 librdmacm), name, slot. */
static const struct {
    int lib;
    const char *name;
    void **slot;
} rdl_syms[] = {
    RDL_SYM(0, get_device_list, ibv_get_device_list),
    RDL_SYM(0, free_device_list, ibv_free_device_list),
    RDL_SYM(0, get_device_name, ibv_get_device_name),
    RDL_SYM(0, alloc_pd, ibv_alloc_pd),
    RDL_SYM(0, dealloc_pd, ibv_dealloc_pd),
    RDL_SYM(0, reg_mr, ibv_reg_mr),
    RDL_SYM(0, dereg_mr, ibv_dereg_mr),
    RDL_SYM(0, create_comp_channel, ibv_create_comp_channel),
    RDL_SYM(0, destroy_comp_channel, ibv_destroy_comp_channel),
    RDL_SYM(0, create_cq, ibv_create_cq),
    RDL_SYM(0, destroy_cq, ibv_destroy_cq),
    RDL_SYM(0, get_cq_event, ibv_get_cq_event),
    RDL_SYM(0, ack_cq_events, ibv_ack_cq_events),
    RDL_SYM(0, wc_status_str, ibv_wc_status_str),
    RDL_SYM(1, create_event_channel, rdma_create_event_channel),
    RDL_SYM(1, destroy_event_channel, rdma_destroy_event_channel),
    RDL_SYM(1, create_id, rdma_create_id),
    RDL_SYM(1, destroy_id, rdma_destroy_id),
    RDL_SYM(1, bind_addr, rdma_bind_addr),
    RDL_SYM(1, resolve_addr, rdma_resolve_addr),
    RDL_SYM(1, resolve_route, rdma_resolve_route),
    RDL_SYM(1, create_qp, rdma_create_qp),
    RDL_SYM(1, destroy_qp, rdma_destroy_qp),
    RDL_SYM(1, connect, rdma_connect),
    RDL_SYM(1, listen, rdma_listen),
    RDL_SYM(1, accept, rdma_accept),
    RDL_SYM(1, reject, rdma_reject),
    RDL_SYM(1, disconnect, rdma_disconnect),
    RDL_SYM(1, get_cm_event, rdma_get_cm_event),
    RDL_SYM(1, ack_cm_event, rdma_ack_cm_event),
    RDL_SYM(1, migrate_id, rdma_migrate_id),
    RDL_SYM(1, get_src_port, rdma_get_src_port),
    RDL_SYM(1, event_str, rdma_event_str),
};

static void rdl_load(void)
{
    void *handles[2];

    for (int i = 0; i < 2; i++) {
        handles[i] = dlopen(rdl_libs[i], RTLD_NOW | RTLD_LOCAL);
        if (handles[i] == NULL) {
            snprintf(rdl_why, sizeof(rdl_why), "rdma-core is not installed (%s)", dlerror());
            return;
        }
    }
    for (size_t i = 0; i < sizeof(rdl_syms) / sizeof(rdl_syms[0]); i++) {
        *rdl_syms[i].slot = dlsym(handles[rdl_syms[i].lib], rdl_syms[i].name);
        if (*rdl_syms[i].slot == NULL) {
            snprintf(rdl_why, sizeof(rdl_why), "%s has no %s", rdl_libs[rdl_syms[i].lib],
                     rdl_syms[i].name);
            return;
        }
    }
    /* Optional: only GPUDirect RDMA needs it (see rdma_mem_reg_dmabuf). */
    *(void **)&rdl.reg_dmabuf_mr = dlsym(handles[0], "ibv_reg_dmabuf_mr");
    /* Registered memory must stay with this process across fork (a CUDA program may fork);
     * with kernels that handle it themselves this is a no-op. Before any other verbs call; a
     * failure only means a forked child must not touch registered pages, which it never does. */
    int (*fork_init)(void) = (int (*)(void))dlsym(handles[0], "ibv_fork_init");
    if (fork_init != NULL)
        fork_init();
    rdl_ok = 1; /* the libraries stay loaded for the life of the process */
}

const struct rdma_dl *rdma_dl_get(char *why, size_t len)
{
    pthread_once(&rdl_once, rdl_load);
    if (!rdl_ok && why != NULL && len > 0)
        snprintf(why, len, "%s", rdl_why);
    return rdl_ok ? &rdl : NULL;
}
