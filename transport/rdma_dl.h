/* Private to transport/: libibverbs.so.1 and librdmacm.so.1 opened at run time (dlopen, as
 * NCCL does), so binaries built here run where rdma-core is absent. Only the functions the rdma
 * backend calls are resolved; verbs.h's inline data-path calls (ibv_post_send, ibv_post_recv,
 * ibv_poll_cq, ibv_req_notify_cq) go through the provider's ops in struct ibv_context and need
 * no symbol. Field names drop the ibv_/rdma_ prefix because verbs.h defines some of those names
 * as macros. */
#ifndef RGPU_TRANSPORT_RDMA_DL_H
#define RGPU_TRANSPORT_RDMA_DL_H

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <stddef.h>

struct rdma_dl {
    /* libibverbs */
    struct ibv_device **(*get_device_list)(int *num_devices);
    void (*free_device_list)(struct ibv_device **list);
    const char *(*get_device_name)(struct ibv_device *device);
    struct ibv_pd *(*alloc_pd)(struct ibv_context *context);
    int (*dealloc_pd)(struct ibv_pd *pd);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access);
    int (*dereg_mr)(struct ibv_mr *mr);
    struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *context);
    int (*destroy_comp_channel)(struct ibv_comp_channel *channel);
    struct ibv_cq *(*create_cq)(struct ibv_context *context, int cqe, void *cq_context,
                                struct ibv_comp_channel *channel, int comp_vector);
    int (*destroy_cq)(struct ibv_cq *cq);
    int (*get_cq_event)(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context);
    void (*ack_cq_events)(struct ibv_cq *cq, unsigned int nevents);
    const char *(*wc_status_str)(enum ibv_wc_status status);
    /* Optional (rdma-core 34 and later): NULL where the library is older. */
    struct ibv_mr *(*reg_dmabuf_mr)(struct ibv_pd *pd, uint64_t offset, size_t length,
                                    uint64_t iova, int fd, int access);
    /* librdmacm */
    struct rdma_event_channel *(*create_event_channel)(void);
    void (*destroy_event_channel)(struct rdma_event_channel *channel);
    int (*create_id)(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
                     enum rdma_port_space ps);
    int (*destroy_id)(struct rdma_cm_id *id);
    int (*bind_addr)(struct rdma_cm_id *id, struct sockaddr *addr);
    int (*resolve_addr)(struct rdma_cm_id *id, struct sockaddr *src, struct sockaddr *dst,
                        int timeout_ms);
    int (*resolve_route)(struct rdma_cm_id *id, int timeout_ms);
    int (*create_qp)(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
    void (*destroy_qp)(struct rdma_cm_id *id);
    int (*connect)(struct rdma_cm_id *id, struct rdma_conn_param *param);
    int (*listen)(struct rdma_cm_id *id, int backlog);
    int (*accept)(struct rdma_cm_id *id, struct rdma_conn_param *param);
    int (*reject)(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len);
    int (*disconnect)(struct rdma_cm_id *id);
    int (*get_cm_event)(struct rdma_event_channel *channel, struct rdma_cm_event **event);
    int (*ack_cm_event)(struct rdma_cm_event *event);
    int (*migrate_id)(struct rdma_cm_id *id, struct rdma_event_channel *channel);
    uint16_t (*get_src_port)(struct rdma_cm_id *id); /* network order */
    const char *(*event_str)(enum rdma_cm_event_type event);
};

/* The table, loaded once per process (thread-safe); NULL when either library or one of its
 * symbols is missing, with the reason in why. */
const struct rdma_dl *rdma_dl_get(char *why, size_t len);

#endif
