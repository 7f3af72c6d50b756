/* Modules and libraries (images go to the server once), functions, kernels and globals. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sha256.h"
#include "client/api/jit.h"
#include "client/api/module.h"

CLI_EXPORT CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)
{
    if (mode == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *mode = CU_MODULE_LAZY_LOADING;
    return CUDA_SUCCESS;
}

static struct cli_module *module_new(enum proto_handle_type type)
{
    struct cli_module *m = calloc(1, sizeof(*m));

    if (m != NULL) {
        cli_handle_init(&m->h, type);
        m->ctx = type == PROTO_H_MODULE ? cli_ctx_current() : NULL;
    }
    return m;
}

/* Larger images outside any loaded object are not copied: their kernels' layouts are asked. */
#define IMAGE_COPY_MAX (8u << 20)

/* Whether p lies in a loaded object (the program, a shared library). */
static bool in_loaded_object(const void *p)
{
    Dl_info info;

    return dladdr(p, &info) != 0 && info.dli_fname != NULL;
}

/* Keeps where the module's kernels' parameter layouts can be read at lookup (image_params.c):
 * an image inside a loaded object (a registered fatbin) stays there while it is loaded; one in
 * other memory (NVRTC's output) may be freed once the load returns, so it is copied. */
static void module_keep_image(struct cli_module *m, const void *image, size_t len)
{
    if (in_loaded_object(image)) {
        m->image = image;
    } else if (len <= IMAGE_COPY_MAX && (m->image_copy = malloc(len)) != NULL) {
        memcpy(m->image_copy, image, len);
        m->image = m->image_copy;
    }
    m->image_len = m->image != NULL ? len : 0;
}

/* The module's image for reading layouts, NULL if none: one in a loaded object still has to be
 * (natively a module outlives a dlclose of the library its image came from). */
static const void *module_image(const struct cli_module *m)
{
    if (m->image == NULL || m->image == m->image_copy)
        return m->image;
    return in_loaded_object(m->image) ? m->image : NULL;
}

/* Images at least this large are offered to the server's module cache by hash first. */
#define IMAGE_CACHE_MIN (64u << 10)

/* Send a large image's SHA-256 instead of its bytes: CUDA_SUCCESS when the server loaded its
 * cached copy, PROTO_RESULT_NOT_CACHED when the bytes must follow, else the error. The call
 * keeps its other arguments (JIT options) and its reply buffers. */
static CUresult image_by_hash(struct cli_call *call)
{
    uint8_t hash[RG_SHA256_LEN];
    const void *image = call->data;
    CUresult res;

    cli_image_hash(image, call->data_len, hash);
    call->a.MODULE_LOAD.image_flags = PROTO_IMAGE_BY_HASH;
    call->a.MODULE_LOAD.image_len = call->data_len;
    call->data = hash;
    call->data_len = sizeof(hash);
    res = cli_call_sync(call);
    call->data = image;
    call->data_len = (size_t)call->a.MODULE_LOAD.image_len;
    return res;
}

/* One load of the image in call's session: a large image goes by hash, then (not cached) once
 * as bulk with PROTO_IMAGE_CACHE; a small one inline or as bulk. */
static CUresult image_send(struct cli_call *call)
{
    CUresult res = PROTO_RESULT_NOT_CACHED;

    call->a.MODULE_LOAD.image_flags = 0;
    call->a.MODULE_LOAD.image_len = call->data_len;
    if (call->data_len >= IMAGE_CACHE_MIN) {
        res = image_by_hash(call);
        call->a.MODULE_LOAD.image_flags = PROTO_IMAGE_CACHE;
    }
    if (res == (CUresult)PROTO_RESULT_NOT_CACHED)
        res = cli_call_sync(call);
    return res;
}

/* A library and its kernels belong to the process, not to a context: natively a library is
 * loaded into every device's context. With several servers, its load and each kernel lookup go
 * to every session: first where the call goes (its context's), then to the others without a
 * context, their replies' outputs dropped. When one fails, undo_op (if any) takes the object
 * back from the sessions that have it and the failure is returned. */
static CUresult every_session(struct cli_call *call, CUresult (*send)(struct cli_call *),
                              unsigned undo_op)
{
    CUresult res = send(call);
    int first = cli_session_index(call->sess), n = cli_session_count();
    unsigned done = res == CUDA_SUCCESS ? 1u << first : 0; /* bit i: session i has it */

    for (int i = 0; i < n && res == CUDA_SUCCESS; i++) {
        struct cli_call c = *call;

        if (i == first)
            continue;
        c.sess = cli_session_at(i);
        c.ctx = 0;
        c.out = NULL, c.out_cap = 0, c.rdata = NULL, c.rdata_cap = 0;
        if ((res = send(&c)) == CUDA_SUCCESS)
            done |= 1u << i;
    }
    for (int i = 0; res != CUDA_SUCCESS && undo_op != 0 && i < n; i++) {
        struct cli_call u = {CLI_ARGS_AS(undo_op, MODULE_UNLOAD)};

        if (!(done & (1u << i)))
            continue;
        u.a.MODULE_UNLOAD.handle = call->a.MODULE_LOAD.id;
        u.sess = cli_session_at(i);
        (void)cli_call_sync(&u);
    }
    return res;
}

/* MODULE_LOAD(_JIT) / LIBRARY_LOAD(_JIT) as call (op, and any JIT arguments after the
 * image's; the four ops begin with MODULE_LOAD's arguments); a library in every session. Only
 * stack state: safe in any thread. */
static CUresult image_load(struct cli_call *call, enum proto_handle_type type, const void *image,
                           void **handle_p)
{
    struct cli_module *m;
    CUresult res = type == PROTO_H_MODULE ? cli_need_ctx()
                   : cli_initialized()    ? CUDA_SUCCESS
                                          : CUDA_ERROR_NOT_INITIALIZED;

    if (res != CUDA_SUCCESS)
        return res;
    if (handle_p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    res = cli_image_size(image, &call->data, &call->data_len);
    if (res != CUDA_SUCCESS)
        return res;
    if ((m = module_new(type)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    call->a.MODULE_LOAD.id = m->h.id;
    res = type == PROTO_H_LIBRARY ? every_session(call, image_send, PROTO_OP_LIBRARY_UNLOAD)
                                  : image_send(call);
    if (res != CUDA_SUCCESS) {
        free(m);
        return res;
    }
    module_keep_image(m, call->data, call->data_len);
    *handle_p = m;
    return CUDA_SUCCESS;
}

static CUresult plain_load(unsigned op, enum proto_handle_type type, const void *image,
                           void **handle_p)
{
    struct cli_call call = {CLI_ARGS_AS(op, MODULE_LOAD)};

    return image_load(&call, type, image, handle_p);
}

/* A load with JIT options: integer options travel (LOAD_JIT args), the worker compiles with
 * log buffers of the sizes asked, and the logs, their filled sizes and the wall time come back
 * into the application's arrays as the driver writes them. */
static CUresult jit_load(unsigned op, enum proto_handle_type type, const void *image, unsigned n,
                         CUjit_option *opts, void **vals, void **handle_p)
{
    struct cli_jit jit;
    uint64_t out[3] = {0, 0, 0};
    struct cli_call call = {CLI_ARGS_AS(op, MODULE_LOAD_JIT), .out = out, .out_cap = 3};
    CUresult res =
        cli_jit_read(n, opts, vals, CLI_CALL_MAX_ARGS - PROTO_NARGS_MODULE_LOAD_JIT, &jit);

    if (res != CUDA_SUCCESS)
        return res;
    if (jit.info_cap + jit.error_cap > 0 &&
        (call.rdata = malloc(jit.info_cap + jit.error_cap + 2)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    call.rdata_cap = call.rdata != NULL ? jit.info_cap + jit.error_cap + 2 : 0;
    call.a.MODULE_LOAD_JIT.info_cap = jit.info_cap;
    call.a.MODULE_LOAD_JIT.error_cap = jit.error_cap;
    memcpy(call.a.words + PROTO_NARGS_MODULE_LOAD_JIT, jit.words, 8 * jit.nwords);
    call.nargs += jit.nwords;
    res = image_load(&call, type, image, handle_p);
    if (res != CUDA_ERROR_DEVICE_UNAVAILABLE && call.nout >= 3) {
        cli_jit_logs_out(&jit, call.rdata, call.rdata_len);
        cli_jit_values_out(n, opts, vals, out, call.nout);
    }
    free(call.rdata);
    return res;
}

CLI_EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    return plain_load(PROTO_OP_MODULE_LOAD, PROTO_H_MODULE, image, (void **)module);
}

CLI_EXPORT CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int n,
                                       CUjit_option *options, void **values)
{
    if (n == 0)
        return cuModuleLoadData(module, image);
    return jit_load(PROTO_OP_MODULE_LOAD_JIT, PROTO_H_MODULE, image, n, options, values,
                    (void **)module);
}

CLI_EXPORT CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
    return cuModuleLoadData(module, fatCubin);
}

static void *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long len;

    if (f == NULL)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = calloc(1, (size_t)len + 1)) != NULL &&
        fread(buf, 1, (size_t)len, f) != (size_t)len) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

CLI_EXPORT CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    void *image = fname != NULL ? read_file(fname) : NULL;
    CUresult res;

    if (image == NULL)
        return CUDA_ERROR_FILE_NOT_FOUND;
    res = cuModuleLoadData(module, image);
    free(image);
    return res;
}

/* Sent without waiting, as a launch is: the client checked the handle; what only the worker
 * could refuse comes back at the next synchronizing call. cuDNN unloads its runtime-compiled
 * engines as it goes (24 unloads of ~2-3 ms each in an HF decode's first generate()). */
static CUresult unload(void *handle, enum proto_handle_type type, unsigned op)
{
    struct cli_module *m = cli_handle_check(handle, type);
    struct cli_call call = {CLI_ARGS_AS(op, MODULE_UNLOAD)};
    CUresult res;

    if (m == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    call.a.MODULE_UNLOAD.handle = m->h.id;
    if (m->ctx != NULL)
        cli_call_in(&call, m->ctx);
    res = type == PROTO_H_LIBRARY ? every_session(&call, cli_call_async, 0) : cli_call_async(&call);
    cli_handle_kill(&m->h);
    /* Functions of the module keep pointing at it; the object stays allocated. Their layouts
     * are their own. */
    m->image = NULL;
    free(m->image_copy);
    m->image_copy = NULL;
    return res;
}

CLI_EXPORT CUresult cuModuleUnload(CUmodule hmod)
{
    return unload(hmod, PROTO_H_MODULE, PROTO_OP_MODULE_UNLOAD);
}

/* ---- libraries -------------------------------------------------------------------------- */

/* Library options (host-side tables, preserved binaries) concern the client's own copy of the
 * image, which the worker never shares: they are not sent. */
CLI_EXPORT CUresult cuLibraryLoadData(CUlibrary *library, const void *code,
                                      CUjit_option *jitOptions, void **jitOptionsValues,
                                      unsigned int numJitOptions, CUlibraryOption *libraryOptions,
                                      void **libraryOptionValues, unsigned int numLibraryOptions)
{
    if (numJitOptions == 0)
        return plain_load(PROTO_OP_LIBRARY_LOAD, PROTO_H_LIBRARY, code, (void **)library);
    return jit_load(PROTO_OP_LIBRARY_LOAD_JIT, PROTO_H_LIBRARY, code, numJitOptions, jitOptions,
                    jitOptionsValues, (void **)library);
}

CLI_EXPORT CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName,
                                          CUjit_option *jitOptions, void **jitOptionsValues,
                                          unsigned int numJitOptions,
                                          CUlibraryOption *libraryOptions,
                                          void **libraryOptionValues,
                                          unsigned int numLibraryOptions)
{
    void *image = fileName != NULL ? read_file(fileName) : NULL;
    CUresult res;

    if (image == NULL)
        return CUDA_ERROR_FILE_NOT_FOUND;
    res = cuLibraryLoadData(library, image, jitOptions, jitOptionsValues, numJitOptions,
                            libraryOptions, libraryOptionValues, numLibraryOptions);
    free(image);
    return res;
}

CLI_EXPORT CUresult cuLibraryUnload(CUlibrary library)
{
    return unload(library, PROTO_H_LIBRARY, PROTO_OP_LIBRARY_UNLOAD);
}

CLI_EXPORT CUresult cuLibraryGetModule(CUmodule *pMod, CUlibrary library)
{
    struct cli_module *lib = cli_handle_check(library, PROTO_H_LIBRARY);
    struct cli_call call = {CLI_ARGS(LIBRARY_GET_MODULE)};
    struct cli_module *m;
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (lib == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (pMod == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if ((m = module_new(PROTO_H_MODULE)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    call.a.LIBRARY_GET_MODULE.id = m->h.id;
    call.a.LIBRARY_GET_MODULE.library = lib->h.id;
    res = cli_call_sync(&call);
    if (res != CUDA_SUCCESS) {
        free(m);
        return res;
    }
    *pMod = (CUmodule)m;
    return CUDA_SUCCESS;
}

/* ---- functions and kernels -------------------------------------------------------------- */

struct cli_func *cli_func_check(const void *handle)
{
    struct cli_func *f = cli_handle_check(handle, PROTO_H_FUNCTION);

    return f != NULL ? f : cli_handle_check(handle, PROTO_H_KERNEL);
}

static struct cli_func *func_new(enum proto_handle_type type, struct cli_module *owner,
                                 const char *name)
{
    struct cli_func *f = calloc(1, sizeof(*f));

    if (f == NULL)
        return NULL;
    if ((f->name = strdup(name ? name : "")) == NULL) {
        free(f);
        return NULL;
    }
    cli_handle_init(&f->h, type);
    f->owner = owner;
    pthread_mutex_init(&f->lock, NULL);
    return f;
}

static void func_free(struct cli_func *f)
{
    pthread_mutex_destroy(&f->lock);
    free(f->name);
    free(f);
}

/* MODULE_GET_FUNCTION / LIBRARY_GET_KERNEL: [id, owner], data = name. */
static CUresult get_by_name(unsigned op, enum proto_handle_type type, struct cli_module *owner,
                            const char *name, void **handle_p)
{
    struct cli_call call = {CLI_ARGS_AS(op, MODULE_GET_FUNCTION)};
    struct cli_func *f;
    CUresult res;

    if (owner == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (name == NULL || handle_p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if ((f = func_new(type, owner, name)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    call.a.MODULE_GET_FUNCTION.id = f->h.id;
    call.a.MODULE_GET_FUNCTION.parent = owner->h.id;
    call.data = name;
    call.data_len = strlen(name);
    if (owner->ctx != NULL)
        cli_call_in(&call, owner->ctx);
    res = type == PROTO_H_KERNEL ? every_session(&call, cli_call_sync, 0) : cli_call_sync(&call);
    if (res != CUDA_SUCCESS) {
        func_free(f);
        return res;
    }
    cli_func_layout_from_image(f, module_image(owner), owner->image_len);
    *handle_p = f;
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    return get_by_name(PROTO_OP_MODULE_GET_FUNCTION, PROTO_H_FUNCTION,
                       cli_handle_check(hmod, PROTO_H_MODULE), name, (void **)hfunc);
}

CLI_EXPORT CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
    return get_by_name(PROTO_OP_LIBRARY_GET_KERNEL, PROTO_H_KERNEL,
                       cli_handle_check(library, PROTO_H_LIBRARY), name, (void **)pKernel);
}

/* Mint the function of kernel k in ctx; remembered in slot i when there is one. */
static CUresult kernel_function_new(struct cli_func *k, struct cli_ctx *ctx, int i,
                                    struct cli_func **f_p)
{
    struct cli_call call = {CLI_ARGS(KERNEL_GET_FUNCTION)};
    struct cli_func *f = func_new(PROTO_H_FUNCTION, k->owner, k->name);
    CUresult res;

    if (f == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    call.a.KERNEL_GET_FUNCTION.id = f->h.id;
    call.a.KERNEL_GET_FUNCTION.kernel = k->h.id;
    res = cli_call_sync(&call);
    if (res != CUDA_SUCCESS) {
        func_free(f);
        return res;
    }
    cli_func_layout_copy(f, k);
    if (i < FUNC_CTX_SLOTS) {
        k->per_ctx[i].ctx = ctx;
        k->per_ctx[i].func = f;
    }
    *f_p = f;
    return CUDA_SUCCESS;
}

/* A kernel has one function per context; minted once and remembered on the kernel. */
CLI_EXPORT CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
    struct cli_func *k = cli_handle_check(kernel, PROTO_H_KERNEL), *f = NULL;
    struct cli_ctx *ctx = cli_ctx_current();
    CUresult res = cli_need_ctx();
    int i;

    if (res != CUDA_SUCCESS)
        return res;
    if (k == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (pFunc == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&k->lock);
    for (i = 0; i < FUNC_CTX_SLOTS && k->per_ctx[i].ctx != NULL && f == NULL; i++)
        if (k->per_ctx[i].ctx == ctx)
            f = k->per_ctx[i].func;
    if (f == NULL)
        res = kernel_function_new(k, ctx, i, &f);
    pthread_mutex_unlock(&k->lock);
    if (res == CUDA_SUCCESS)
        *pFunc = (CUfunction)f;
    return res;
}

CLI_EXPORT CUresult cuFuncGetName(const char **name, CUfunction hfunc)
{
    struct cli_func *f = cli_func_check(hfunc);

    if (name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (f == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    *name = f->name;
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuKernelGetName(const char **name, CUkernel hfunc)
{
    return cuFuncGetName(name, (CUfunction)hfunc);
}

CLI_EXPORT CUresult cuFuncGetModule(CUmodule *hmod, CUfunction hfunc)
{
    struct cli_func *f = cli_handle_check(hfunc, PROTO_H_FUNCTION);

    if (hmod == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (f == NULL || f->owner == NULL || f->owner->h.type != PROTO_H_MODULE)
        return CUDA_ERROR_INVALID_HANDLE;
    *hmod = (CUmodule)f->owner;
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuKernelGetLibrary(CUlibrary *lib, CUkernel kernel)
{
    struct cli_func *k = cli_handle_check(kernel, PROTO_H_KERNEL);

    if (lib == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (k == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    *lib = (CUlibrary)k->owner;
    return CUDA_SUCCESS;
}

/* ---- globals ---------------------------------------------------------------------------- */

static CUresult get_global(unsigned op, struct cli_module *owner, const char *name,
                           CUdeviceptr *dptr, size_t *bytes)
{
    uint64_t out[2];
    struct cli_call call = {CLI_ARGS_AS(op, MODULE_GET_GLOBAL), .out = out, .out_cap = 2};
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (owner == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    call.a.MODULE_GET_GLOBAL.parent = owner->h.id;
    call.data = name;
    call.data_len = strlen(name);
    res = cli_call_sync(&call);
    if (res != CUDA_SUCCESS)
        return res;
    if (call.nout < 2)
        return CUDA_ERROR_UNKNOWN;
    if (dptr != NULL)
        *dptr = (CUdeviceptr)out[0];
    if (bytes != NULL)
        *bytes = (size_t)out[1];
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuModuleGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod,
                                      const char *name)
{
    return get_global(PROTO_OP_MODULE_GET_GLOBAL, cli_handle_check(hmod, PROTO_H_MODULE), name,
                      dptr, bytes);
}

CLI_EXPORT CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library,
                                       const char *name)
{
    return get_global(PROTO_OP_LIBRARY_GET_GLOBAL, cli_handle_check(library, PROTO_H_LIBRARY), name,
                      dptr, bytes);
}

CUresult cli_module_walk(CUcontext ctx, CUmodule mod, cli_function_visitor visit, void *user)
{
    struct cli_handle *m = cli_handle_check(mod, PROTO_H_MODULE);
    static const size_t cap = 1 << 16;
    struct cli_call call = {CLI_ARGS(MODULE_FUNCTION_NAMES)};
    char *names;
    CUresult res;

    (void)ctx; /* the module's functions belong to the module's own context */
    if (m == NULL || visit == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if ((names = malloc(cap)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    call.a.MODULE_FUNCTION_NAMES.module = m->id;
    call.rdata = names;
    call.rdata_cap = cap;
    res = cli_call_sync(&call);
    for (size_t off = 0; res == CUDA_SUCCESS && off < call.rdata_len;) {
        const char *name = names + off;
        CUfunction f;
        off += strnlen(name, call.rdata_len - off) + 1;
        if ((res = cuModuleGetFunction(&f, mod, name)) != CUDA_SUCCESS)
            break;
        if (visit(user, f, cli_func_check(f)->name, 0) != 0) {
            res = (CUresult)1; /* stopped by the visitor, reported as the driver does */
            break;
        }
    }
    free(names);
    return res;
}
