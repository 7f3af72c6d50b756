/* Modules, libraries, functions and kernels (module.c, launch.c, image.c). */
#ifndef RGPU_CLIENT_MODULE_H
#define RGPU_CLIENT_MODULE_H

#include "client/api/api.h"

struct cli_module {
    struct cli_handle h; /* PROTO_H_MODULE or PROTO_H_LIBRARY */
    struct cli_ctx *ctx; /* modules only */
    /* Where its kernels' parameter layouts are read (image_params.c): the image itself when it
     * lies in a loaded object (a fatbin cudart registered), else the client's copy (freed at
     * unload), NULL for neither. */
    const void *image;
    size_t image_len;
    void *image_copy;
};

/* A module image's SHA-256, remembered on disk for images inside library files (image_hash.c). */
void cli_image_hash(const void *image, size_t len, uint8_t out[32]);

#define FUNC_CTX_SLOTS 8

/* A CUfunction or a CUkernel (h.type tells which). */
struct cli_func {
    struct cli_handle h;
    struct cli_module *owner;
    char *name;
    pthread_mutex_t lock;
    bool layout_known; /* the parameter layout below was fetched */
    unsigned nparams;
    uint32_t *param_off, *param_size;
    size_t params_len; /* end of the last parameter */
    int attrs[CU_FUNC_ATTRIBUTE_MAX];
    uint64_t attrs_known; /* bit i: attrs[i] is cached */
    struct {
        struct cli_ctx *ctx;
        struct cli_func *func;
    } per_ctx[FUNC_CTX_SLOTS];
};

/* The function or kernel behind an application handle, NULL if neither. */
struct cli_func *cli_func_check(const void *handle);
/* Fetch the parameter layout once (FUNC_GET_PARAM_LAYOUT). */
CUresult cli_func_layout(struct cli_func *f);
/* The layout read from the module image the function came from, when it can be (no round trip
 * then at its first launch); else it stays unknown. */
void cli_func_layout_from_image(struct cli_func *f, const void *image, size_t len);
/* A kernel's function in a context has the kernel's layout (the caller holds from->lock). */
void cli_func_layout_copy(struct cli_func *to, const struct cli_func *from);

/* Kernel parameters (kernelParams or `extra`) of the function or kernel func packed by its
 * layout into a per-thread buffer (valid until the thread's next launch or packing). */
CUresult cli_pack_kernel_params(void *func, void **params, void **extra, uint64_t *id_p,
                                const uint8_t **buf_p, size_t *len_p);

/* Size of a module image: fatbin (header), __fatBinC_Wrapper_t (unwrapped: *start_p moves to
 * the fatbin), ELF cubin (section and program header extents) or PTX text (NUL included).
 * CUDA_ERROR_INVALID_IMAGE when it is none of these. */
CUresult cli_image_size(const void *image, const void **start_p, size_t *len_p);

#endif
