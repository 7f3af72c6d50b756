/* The private export tables that cudart and the CUDA libraries fetch with cuGetExportTable.
 * Layouts and meanings are the ones observed with CUDA 13.0 (see docs/ARCHITECTURE.md and the
 * research notes): slot 0 holds the table size in bytes, except in the context-local-storage
 * table, which starts with a function and ends with NULL. Slots nobody was seen calling are
 * callable stubs, so a caller never jumps through NULL. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/api/api.h"
#include "client/api/md2.h"

#define ET_SIZE(n) ((void *)(uintptr_t)((n) * sizeof(void *)))
#define ET_FN(f)   ((void *)(f))

/* ---- context helpers -------------------------------------------------------------------- */

/* ctx, or the current context when ctx is NULL. */
static CUresult et_ctx(CUcontext ctx, struct cli_ctx **ctx_p)
{
    struct cli_ctx *c = ctx ? (struct cli_ctx *)ctx : cli_ctx_current();

    if (c == NULL || c->h.magic != CLI_HANDLE_MAGIC)
        return CUDA_ERROR_INVALID_CONTEXT;
    *ctx_p = c;
    return CUDA_SUCCESS;
}

/* ---- unused slots ----------------------------------------------------------------------- */

static CUresult et_cudart_unsupported(void)
{
    return cli_unsupported("export table CUDART_INTERFACE (unknown slot)");
}

static CUresult et_hooks_unsupported(void)
{
    return cli_unsupported("export table TOOLS_RUNTIME_CALLBACK_HOOKS (unknown slot)");
}

static CUresult et_tls_unsupported(void)
{
    return cli_unsupported("export table TOOLS_TLS (unknown slot)");
}

static CUresult et_checks_unsupported(void)
{
    return cli_unsupported("export table CONTEXT_CHECKS (unknown slot)");
}

static CUresult et_integrity_unsupported(void)
{
    return cli_unsupported("export table INTEGRITY_CHECK (unknown slot)");
}

/* The tools context table: cuBLAS calls a few slots and copes with outputs left unset. */
static CUresult et_tools_ctx_nop(void)
{
    return CUDA_SUCCESS;
}

/* ---- CUDART_INTERFACE ------------------------------------------------------------------- */

/* [2]: the device's primary context, not retained. cudart then passes it to cuCtxSetCurrent, so
 * it must be the very handle cuDevicePrimaryCtxRetain returns. */
static CUresult et_cudart_primary_ctx(CUcontext *pctx, CUdevice dev)
{
    struct cli_ctx *c;

    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    c = cli_primary_ctx(dev);
    if (c == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

static const void *const et_cudart_interface[13] = {
    ET_SIZE(13),
    ET_FN(et_cudart_unsupported),
    ET_FN(et_cudart_primary_ctx),
    ET_FN(et_cudart_unsupported),
    ET_FN(et_cudart_unsupported),
    ET_FN(et_cudart_unsupported),
    ET_FN(et_cudart_unsupported),
    ET_FN(et_cudart_unsupported),
    ET_FN(et_cudart_unsupported),
    ET_FN(et_cudart_unsupported),
    ET_FN(et_cudart_unsupported),
    ET_FN(et_cudart_unsupported),
    ET_FN(et_cudart_unsupported),
};

/* ---- TOOLS_RUNTIME_CALLBACK_HOOKS ------------------------------------------------------- */

static char et_hooks_buffer2[1024];
static char et_hooks_buffer6[14];

static void et_hooks_buffer_a(void **ptr, size_t *size)
{
    *ptr = et_hooks_buffer2;
    *size = sizeof(et_hooks_buffer2);
}

static void et_hooks_buffer_b(void **ptr, size_t *size)
{
    *ptr = et_hooks_buffer6;
    *size = sizeof(et_hooks_buffer6);
}

static const void *const et_tools_hooks[7] = {
    ET_SIZE(7),
    ET_FN(et_hooks_unsupported),
    ET_FN(et_hooks_buffer_a),
    ET_FN(et_hooks_unsupported),
    ET_FN(et_hooks_unsupported),
    ET_FN(et_hooks_unsupported),
    ET_FN(et_hooks_buffer_b),
};

/* ---- TOOLS_TLS -------------------------------------------------------------------------- */

static CUresult et_tls_current_ctx(CUcontext *pctx)
{
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)cli_ctx_current();
    return CUDA_SUCCESS;
}

static const void *const et_tools_tls[4] = {
    ET_SIZE(4),
    ET_FN(et_tls_unsupported),
    ET_FN(et_tls_current_ctx),
    ET_FN(et_tls_unsupported),
};

/* ---- CONTEXT_LOCAL_STORAGE -------------------------------------------------------------- */

/* The destructor cudart registers; run with (context, key, value) when the context goes away. */
typedef void (*et_cls_dtor)(CUcontext ctx, void *key, void *value);

struct et_cls_entry {
    void *key, *value;
    et_cls_dtor dtor;
    struct et_cls_entry *next;
};

/* One lock for every context's list: entries are few and the operations short. */
static pthread_mutex_t et_cls_lock = PTHREAD_MUTEX_INITIALIZER;

static struct et_cls_entry **et_cls_find(struct cli_ctx *c, void *key)
{
    struct et_cls_entry **pp = (struct et_cls_entry **)&c->cls;

    while (*pp != NULL && (*pp)->key != key)
        pp = &(*pp)->next;
    return pp;
}

static CUresult et_cls_put(CUcontext ctx, void *key, void *value, et_cls_dtor dtor)
{
    struct et_cls_entry **pp, *e;
    struct cli_ctx *c;
    CUresult res = et_ctx(ctx, &c);

    if (res != CUDA_SUCCESS)
        return res;
    pthread_mutex_lock(&et_cls_lock);
    pp = et_cls_find(c, key);
    e = *pp;
    if (e == NULL) {
        e = calloc(1, sizeof(*e));
        if (e == NULL) {
            res = CUDA_ERROR_OUT_OF_MEMORY;
            goto out_unlock;
        }
        e->key = key;
        *pp = e;
    }
    e->value = value;
    e->dtor = dtor;
out_unlock:
    pthread_mutex_unlock(&et_cls_lock);
    return res;
}

/* Deleting does not run the destructor, and deleting an absent key succeeds. */
static CUresult et_cls_delete(CUcontext ctx, void *key)
{
    struct et_cls_entry **pp, *e;
    struct cli_ctx *c;
    CUresult res = et_ctx(ctx, &c);

    if (res != CUDA_SUCCESS)
        return res;
    pthread_mutex_lock(&et_cls_lock);
    pp = et_cls_find(c, key);
    e = *pp;
    if (e != NULL)
        *pp = e->next;
    pthread_mutex_unlock(&et_cls_lock);
    free(e);
    return CUDA_SUCCESS;
}

static CUresult et_cls_get(void **value, CUcontext ctx, void *key)
{
    struct et_cls_entry *e;
    struct cli_ctx *c;
    CUresult res = et_ctx(ctx, &c);

    if (res != CUDA_SUCCESS)
        return res;
    if (value == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&et_cls_lock);
    e = *et_cls_find(c, key);
    if (e != NULL)
        *value = e->value;
    pthread_mutex_unlock(&et_cls_lock);
    return e != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* Context-local storage goes with its context (context teardown hook). */
static void cls_destroy(struct cli_ctx *ctx)
{
    struct et_cls_entry *e, *next;

    if (ctx == NULL)
        return;
    pthread_mutex_lock(&et_cls_lock);
    e = ctx->cls;
    ctx->cls = NULL;
    pthread_mutex_unlock(&et_cls_lock);
    /* Outside the lock: a destructor may call back into the driver. */
    for (; e != NULL; e = next) {
        next = e->next;
        if (e->dtor != NULL)
            e->dtor((CUcontext)ctx, e->key, e->value);
        free(e);
    }
}

static const void *const et_context_local_storage[4] = {
    ET_FN(et_cls_put),
    ET_FN(et_cls_delete),
    ET_FN(et_cls_get),
    NULL,
};

/* ---- CONTEXT_CHECKS --------------------------------------------------------------------- */

static CUresult et_checks_ctx(CUcontext ctx, uint32_t *result, void **unused)
{
    if (result != NULL)
        *result = 0;
    return CUDA_SUCCESS;
}

static CUresult et_checks_3(void)
{
    return CUDA_SUCCESS;
}

static const void *const et_context_checks[4] = {
    ET_SIZE(4),
    ET_FN(et_checks_unsupported),
    ET_FN(et_checks_ctx),
    ET_FN(et_checks_3),
};

/* ---- INTEGRITY_CHECK -------------------------------------------------------------------- */

static CUresult et_integrity(uint32_t version, uint64_t unix_secs, uint64_t out[2]);

static const void *const et_integrity_check[3] = {
    ET_SIZE(3),
    ET_FN(et_integrity),
    ET_FN(et_integrity_unsupported),
};

static const uint8_t et_integrity_key[16] = {
    0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52, 0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f,
};

/* The hashed message: this header, then one et_integrity_dev per device. */
struct __attribute__((packed)) et_integrity_head {
    uint32_t driver_version, version, pid, thread;
    const void *cudart_table, *integrity_table, *integrity_fn;
    uint64_t unix_secs;
};

struct __attribute__((packed)) et_integrity_dev {
    uint8_t uuid[16];
    int32_t pci_domain, pci_bus, pci_device;
};

/* Fill the devices' records (at most max); returns how many. */
static int et_integrity_devices(struct et_integrity_dev *devs, int max)
{
    int n = cli_device_count();

    if (n > max)
        n = max;
    for (int i = 0; i < n; i++) {
        const struct cli_device *d = cli_device(i);
        memset(&devs[i], 0, sizeof(devs[i]));
        if (d == NULL)
            continue;
        memcpy(devs[i].uuid, d->uuid.bytes, sizeof(devs[i].uuid));
        devs[i].pci_domain = d->pci_domain;
        devs[i].pci_bus = d->pci_bus;
        devs[i].pci_device = d->pci_device;
    }
    return n;
}

#define ET_INTEGRITY_MAX_DEVICES 64

/* [1]: cudart checks this answer and refuses to work (error 103) when it is wrong. */
static CUresult et_integrity(uint32_t version, uint64_t unix_secs, uint64_t out[2])
{
    static const uint64_t answer0[2] = {0x3341181C03CB675Cull, 0x8ED383AA1F4CD1E8ull};
    static const uint64_t answer1[2] = {0x1841181C03CB675Cull, 0x8ED383AA1F4CD1E8ull};
    struct et_integrity_dev devs[ET_INTEGRITY_MAX_DEVICES];
    struct et_integrity_head head;
    uint8_t mac[MD2_DIGEST];
    int ndev;

    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (version % 10 <= 1) {
        memcpy(out, version % 10 == 0 ? answer0 : answer1, sizeof(answer0));
        return CUDA_SUCCESS;
    }
    head = (struct et_integrity_head){
        .driver_version = CUDA_VERSION, /* what cuDriverGetVersion reports */
        .version = version,
        .pid = (uint32_t)getpid(),
        .thread = (uint32_t)pthread_self(),
        .cudart_table = et_cudart_interface,
        .integrity_table = et_integrity_check,
        .integrity_fn = et_integrity_check[1],
        .unix_secs = unix_secs,
    };
    ndev = et_integrity_devices(devs, ET_INTEGRITY_MAX_DEVICES);
    hmac_md2(
        et_integrity_key, sizeof(et_integrity_key),
        (const struct md2_part[]){{&head, sizeof(head)}, {devs, (size_t)ndev * sizeof(devs[0])}}, 2,
        mac);
    memcpy(out, mac, sizeof(mac));
    return CUDA_SUCCESS;
}

/* ---- tools context table (CU_ETID_ToolsContext), used by cuBLAS ------------------------- */

/* [4]: a context id, unique per context. */
static CUresult et_tools_ctx_id(CUcontext ctx, uint64_t *id)
{
    struct cli_ctx *c;
    CUresult res = et_ctx(ctx, &c);

    if (res != CUDA_SUCCESS)
        return res;
    if (id == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *id = c->h.id;
    return CUDA_SUCCESS;
}

#define ET_TOOLS_CTX_SLOTS 95
static const void *et_tools_ctx[ET_TOOLS_CTX_SLOTS];
static pthread_once_t et_tools_ctx_once = PTHREAD_ONCE_INIT;

static void et_tools_ctx_fill(void)
{
    et_tools_ctx[0] = ET_SIZE(ET_TOOLS_CTX_SLOTS);
    for (int i = 1; i < ET_TOOLS_CTX_SLOTS; i++)
        et_tools_ctx[i] = ET_FN(et_tools_ctx_nop);
    et_tools_ctx[4] = ET_FN(et_tools_ctx_id);
}

/* ---- a table cuBLASLt asks for on its fp16 path ------------------------------------------ */

/* 1734dc26-800d-4745-8726-c0f1e7dd8bca: cuBLASLt ignores a refusal of this table and calls its
 * slot 4 through a NULL pointer; when the slot returns an error it takes its fallback path. Its
 * meaning is not known, so every slot refuses (and says so once). */
static CUresult et_lt_unknown(void)
{
    return cli_unsupported_probe("export table 1734dc26 (used by cuBLASLt)");
}

#define ET_LT_SLOTS 32
static const void *et_lt[ET_LT_SLOTS];
static pthread_once_t et_lt_once = PTHREAD_ONCE_INIT;

static void et_lt_fill(void)
{
    et_lt[0] = ET_SIZE(ET_LT_SLOTS);
    for (int i = 1; i < ET_LT_SLOTS; i++)
        et_lt[i] = ET_FN(et_lt_unknown);
}

/* ---- the tools module table (CU_ETID_ToolsModule) --------------------------------------- */

/* 6e163fbe-b958-444d-835c-e182aff1991e, 99 slots. cuFFT walks the functions of the modules it
 * loads through slot 7 (observed on driver 580): (ctx, module, callback, user) calls
 * callback(user, function, name, 0) for each function of the module until one call returns
 * non-zero, then returns 1. The other slots' meanings are not known: they refuse. */
static CUresult et_tools_module_unknown(void)
{
    return cli_unsupported("export table 6e163fbe (tools module), a slot other than 7");
}

#define ET_TOOLS_MODULE_SLOTS 99
static const void *et_tools_module[ET_TOOLS_MODULE_SLOTS];
static pthread_once_t et_tools_module_once = PTHREAD_ONCE_INIT;

static void et_tools_module_fill(void)
{
    et_tools_module[0] = ET_SIZE(ET_TOOLS_MODULE_SLOTS);
    for (int i = 1; i < ET_TOOLS_MODULE_SLOTS; i++)
        et_tools_module[i] = ET_FN(et_tools_module_unknown);
    et_tools_module[7] = ET_FN(cli_module_walk);
}

/* ---- lookup by UUID --------------------------------------------------------------------- */

extern const void *const cli_compute_cache_table[7]; /* compute_cache.c */

struct et_entry {
    uint8_t uuid[16];
    const void *const *table;
};

#define ET_UUID(a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p)                                    \
    {                                                                                              \
        0x##a, 0x##b, 0x##c, 0x##d, 0x##e, 0x##f, 0x##g, 0x##h, 0x##i, 0x##j, 0x##k, 0x##l, 0x##m, \
            0x##n, 0x##o, 0x##p                                                                    \
    }

static const struct et_entry et_tables[] = {
    {ET_UUID(6b, d5, fb, 6c, 5b, f4, e7, 4a, 89, 87, d9, 39, 12, fd, 9d, f9), et_cudart_interface},
    {ET_UUID(a0, 94, 79, 8c, 2e, 74, 2e, 74, 93, f2, 08, 00, 20, 0c, 0a, 66), et_tools_hooks},
    {ET_UUID(42, d8, 5a, 81, 23, f6, cb, 47, 82, 98, f6, e7, 8a, 3a, ec, dc), et_tools_tls},
    {ET_UUID(c6, 93, 33, 6e, 11, 21, df, 11, a8, c3, 68, f3, 55, d8, 95, 93),
     et_context_local_storage},
    {ET_UUID(26, 3e, 88, 60, 7c, d2, 61, 43, 92, f6, bb, d5, 00, 6d, fa, 7e), et_context_checks},
    {ET_UUID(d4, 08, 20, 55, bd, e6, 70, 4b, 8d, 34, ba, 12, 3c, 66, e1, f2), et_integrity_check},
    {ET_UUID(21, 31, 8c, 60, 97, 14, 32, 48, 8c, a6, 41, ff, 73, 24, c8, f2), et_tools_ctx},
    {ET_UUID(17, 34, dc, 26, 80, 0d, 47, 45, 87, 26, c0, f1, e7, dd, 8b, ca), et_lt},
    {ET_UUID(6e, 16, 3f, be, b9, 58, 44, 4d, 83, 5c, e1, 82, af, f1, 99, 1e), et_tools_module},
    {ET_UUID(da, 91, 51, d3, 3a, e6, cc, 41, a5, c0, 4f, 26, d5, 33, e3, 28),
     cli_compute_cache_table},
};

const void *cli_export_table(const CUuuid *id)
{
    pthread_once(&et_tools_ctx_once, et_tools_ctx_fill);
    pthread_once(&et_lt_once, et_lt_fill);
    pthread_once(&et_tools_module_once, et_tools_module_fill);
    for (size_t i = 0; i < sizeof(et_tables) / sizeof(et_tables[0]); i++)
        if (memcmp(et_tables[i].uuid, id->bytes, sizeof(et_tables[i].uuid)) == 0)
            return et_tables[i].table;
    return NULL;
}

__attribute__((constructor)) static void cls_hooks(void)
{
    cli_ctx_on_teardown(cls_destroy);
}
