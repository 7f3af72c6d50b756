/* Client-internal API shared by the files of client/ (libcuda.so.1). Nothing here is exported:
 * the library exports only the CUDA driver API (cu*). */
#ifndef RGPU_CLIENT_H
#define RGPU_CLIENT_H

#include <cuda.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/log.h"
#include "common/status.h"

#define CLI_HIDDEN __attribute__((visibility("hidden")))
#define CLI_EXPORT __attribute__((visibility("default")))

/* The driver version we report: the server's, but never below what CUDA 13 runtimes accept. */
#define CLI_MIN_DRIVER_VERSION 13000

struct cli_device {
    int ordinal;
    char name[256];
    CUuuid uuid;
    size_t total_mem;
    int attrs[CU_DEVICE_ATTRIBUTE_MAX];
    char pci_bus_id[32];
    int pci_domain, pci_bus, pci_device;
};

/* Every handle given to the application points to a client object that starts with this. */
enum cli_handle_type {
    CLI_H_CTX = 1, CLI_H_MODULE, CLI_H_FUNCTION, CLI_H_LIBRARY, CLI_H_KERNEL, CLI_H_STREAM,
    CLI_H_EVENT,
};
struct cli_handle {
    uint64_t id;   /* the id the server knows; (counter << 4) | type */
    uint32_t type; /* enum cli_handle_type */
    uint32_t magic;
};
#define CLI_HANDLE_MAGIC 0x72677075u

struct cli_ctx {
    struct cli_handle h;
    int device;
    bool is_primary;
    unsigned flags;
    void *cls;            /* context-local storage, owned by export_tables.c */
};

/* Ensure the session exists (connect + handshake on first use). CUDA_SUCCESS or the error that
 * every call returns while there is no session. */
CUresult cli_ensure_init(void);
bool cli_initialized(void);
int cli_driver_version(void);
int cli_device_count(void);
const struct cli_device *cli_device(int ordinal); /* NULL if out of range */

/* Contexts. The thread's current context (NULL when none). */
struct cli_ctx *cli_ctx_current(void);
void cli_ctx_set_current(struct cli_ctx *ctx);
/* The one primary-context object of a device: stable for the life of the process. */
struct cli_ctx *cli_primary_ctx(int dev);

/* Context-local storage hooks (export_tables.c): run the destructors of ctx's entries. */
void cli_cls_destroy(struct cli_ctx *ctx);
/* The export table with that UUID (export_tables.c), or NULL if we serve none. */
const void *cli_export_table(const CUuuid *id);

/* Log an unsupported entry point once by name; returns CUDA_ERROR_NOT_SUPPORTED. */
CUresult cli_unsupported(const char *name);

/* Translate an internal status at the client's edge. */
CUresult cli_status_to_cu(rg_status_t status);

#endif
