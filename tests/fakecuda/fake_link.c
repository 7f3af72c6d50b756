/* The fake driver's JIT linker: the "cubin" it produces is its inputs concatenated (the fake's
 * module loader finds kernels by name, whatever the image holds); logs and keys are checked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"

#define FK_LINK_MAGIC 0x4c494e4bu

struct fk_link {
    unsigned magic;
    char *out;
    size_t len;
    char *info, *error;
    size_t info_cap, error_cap;
};

CUresult cuLinkCreate(unsigned n, CUjit_option *opts, void **vals, CUlinkState *state)
{
    struct fk_link *l;

    if (!state || (n && (!opts || !vals)))
        return CUDA_ERROR_INVALID_VALUE;
    if (!(l = calloc(1, sizeof(*l))))
        return CUDA_ERROR_OUT_OF_MEMORY;
    l->magic = FK_LINK_MAGIC;
    for (unsigned i = 0; i < n; i++) {
        if (opts[i] == CU_JIT_INFO_LOG_BUFFER)
            l->info = vals[i];
        if (opts[i] == CU_JIT_ERROR_LOG_BUFFER)
            l->error = vals[i];
        if (opts[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES)
            l->info_cap = (size_t)vals[i];
        if (opts[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
            l->error_cap = (size_t)vals[i];
    }
    if (l->info && l->info_cap)
        l->info[0] = 0;
    if (l->error && l->error_cap)
        l->error[0] = 0;
    *state = (CUlinkState)l;
    return CUDA_SUCCESS;
}

static struct fk_link *link_check(CUlinkState s)
{
    struct fk_link *l = (struct fk_link *)s;
    return l && l->magic == FK_LINK_MAGIC ? l : NULL;
}

CUresult cuLinkAddData(CUlinkState s, CUjitInputType type, void *data, size_t size,
                       const char *name, unsigned n, CUjit_option *o, void **v)
{
    struct fk_link *l = link_check(s);
    char *p;

    if (!l)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!data || !size)
        return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_JIT_INPUT_PTX && type != CU_JIT_INPUT_CUBIN && type != CU_JIT_INPUT_FATBINARY) {
        if (l->error && l->error_cap)
            strncpy(l->error, "fakecuda: unsupported input type", l->error_cap - 1);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    if (!(p = realloc(l->out, l->len + size + 1)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(p + l->len, data, size);
    l->out = p;
    l->len += size;
    p[l->len] = 0;
    if (l->info && l->info_cap)
        strncpy(l->info, name ? name : "", l->info_cap - 1);
    return CUDA_SUCCESS;
}

CUresult cuLinkComplete(CUlinkState s, void **cubin, size_t *size)
{
    struct fk_link *l = link_check(s);

    if (!l)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!cubin || !size || !l->len)
        return CUDA_ERROR_INVALID_VALUE;
    *cubin = l->out;
    *size = l->len;
    return CUDA_SUCCESS;
}

CUresult cuLinkDestroy(CUlinkState s)
{
    struct fk_link *l = link_check(s);

    if (!l)
        return CUDA_ERROR_INVALID_HANDLE;
    l->magic = 0;
    free(l->out);
    free(l);
    return CUDA_SUCCESS;
}

/* ---- loads with JIT options: what the driver reports, made checkable ---- */

/* The info log names the optimization level it was given (4, the default, when none) and
 * whether the line-info option came; the error log says why a load failed. The *_SIZE_BYTES
 * slots get the bytes used, NUL included; the wall time slot a fixed 0.5 ms. */
void fk_jit_report(unsigned n, CUjit_option *opts, void **vals, CUresult res, const char *why)
{
    char info[96], *ibuf = NULL, *ebuf = NULL;
    const char *error = res == CUDA_SUCCESS ? "" : why ? why : "fakecuda: the image did not load";
    size_t icap = 0, ecap = 0;
    unsigned level = 4, lineinfo = 0;

    for (unsigned i = 0; opts && vals && i < n; i++) {
        if (opts[i] == CU_JIT_OPTIMIZATION_LEVEL)
            level = (unsigned)(uintptr_t)vals[i];
        if (opts[i] == CU_JIT_GENERATE_LINE_INFO)
            lineinfo = (unsigned)(uintptr_t)vals[i];
        if (opts[i] == CU_JIT_INFO_LOG_BUFFER)
            ibuf = vals[i];
        if (opts[i] == CU_JIT_ERROR_LOG_BUFFER)
            ebuf = vals[i];
        if (opts[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES)
            icap = (size_t)vals[i];
        if (opts[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
            ecap = (size_t)vals[i];
    }
    snprintf(info, sizeof(info), "fakecuda jit: optimization level %u, line info %u", level,
             lineinfo);
    for (unsigned i = 0; opts && vals && i < n; i++) {
        if (opts[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES && ibuf && icap) {
            snprintf(ibuf, icap, "%s", info);
            vals[i] = (void *)(uintptr_t)(strlen(ibuf) + 1);
        }
        if (opts[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES && ebuf && ecap) {
            snprintf(ebuf, ecap, "%s", error);
            vals[i] = (void *)(uintptr_t)(strlen(ebuf) + 1);
        }
        if (opts[i] == CU_JIT_WALL_TIME) {
            float ms = 0.5f;
            memcpy(&vals[i], &ms, sizeof(ms));
        }
    }
}

/* PTX whose .entry names no test kernel cannot run here: refused as ptxas refuses bad PTX. */
static bool ptx_entries_known(const char *image, char *why, size_t len)
{
    const char *p = image;
    char name[128];

    if (memcmp(image,
               "\x7f"
               "ELF",
               4) == 0 ||
        !strstr(image, ".version"))
        return true;
    while ((p = strstr(p, ".entry ")) != NULL) {
        p += 7;
        if (sscanf(p, "%127[A-Za-z0-9_$]", name) == 1 && !fk_kernel_find(name)) {
            snprintf(why, len, "fakecuda: ptxas: no test kernel named %s", name);
            return false;
        }
    }
    return true;
}

CUresult cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned n, CUjit_option *opts,
                            void **vals)
{
    char why[200] = "";
    CUresult res = image && !ptx_entries_known(image, why, sizeof(why))
                       ? CUDA_ERROR_INVALID_PTX
                       : cuModuleLoadData(m, image);

    fk_jit_report(n, opts, vals, res, why[0] ? why : NULL);
    return res;
}
