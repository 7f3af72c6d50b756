/* Issue 15: a session may not reach past its buffers or its quota. Each test drives a worker on
 * the fake driver over the wire (tests/worker/wire_peer.h) the way a hostile or merely unusual
 * client would, and checks what it may hold. */
#include "tests/worker/wire_peer.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "server/tenant_config.h"

#define H(n, type) ((((uint64_t)(n)) << 4) | (type))

/* A graph memcpy node between a shadow and device memory must fit the shadow's length: its
 * width x height at its pitch, not one byte of it (the worker wrote 1 MiB into 4 KiB). */
static void test_graph_memcpy_node_bounds(void **state)
{
    struct peer p;
    const uint64_t g = H(10, PROTO_H_GRAPH), shadow = H(11, PROTO_H_SHADOW);
    uint64_t dev;

    (void)state;
    peer_open(&p, NULL, NULL);
    assert_int_equal(peer_call(&p, WIRE_OP(MEM_ALLOC, .size = 1 << 20), &dev, 1), CUDA_SUCCESS);
    assert_int_equal(peer_call(&p, WIRE_OP(SHADOW_ALLOC, .id = shadow, .size = 4096), NULL, 0),
                     CUDA_SUCCESS);
    assert_int_equal(peer_call(&p, WIRE_OP(GRAPH_CREATE, .id = g), NULL, 0), CUDA_SUCCESS);
    /* The fake driver takes one row only (Height 1), so the cases are single rows; the
     * worker checks (height - 1) * pitch + width for more. */
    /* device -> shadow, targ [srckind, src, srcpitch, dstkind, dst, dstpitch, width, height] */
    struct {
        uint64_t width, height, pitch;
        CUresult want;
    } cases[] = {
        {4096, 1, 4096, CUDA_SUCCESS},                   /* exactly the shadow */
        {1 << 20, 1, 1 << 20, CUDA_ERROR_INVALID_VALUE}, /* 1 MiB into 4 KiB */
        {4097, 1, 4097, CUDA_ERROR_INVALID_VALUE},       /* one byte past */
        {0, 1, 0, CUDA_SUCCESS},                         /* nothing */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const uint64_t pitch = cases[i].pitch, width = cases[i].width, height = cases[i].height;

        assert_int_equal(
            peer_call(&p,
                      WIRE_OP(GRAPH_ADD_NODE, .graph = g, .node = H(100 + i, PROTO_H_GRAPH_NODE),
                              .type = CU_GRAPH_NODE_TYPE_MEMCPY,
                              .targ = {0, dev, pitch, 1, shadow, pitch, width, height}),
                      NULL, 0),
            cases[i].want);
        /* the same with the shadow as the source (the worker's heap read back) */
        assert_int_equal(
            peer_call(&p,
                      WIRE_OP(GRAPH_ADD_NODE, .graph = g, .node = H(200 + i, PROTO_H_GRAPH_NODE),
                              .type = CU_GRAPH_NODE_TYPE_MEMCPY,
                              .targ = {1, shadow, pitch, 0, dev, pitch, width, height}),
                      NULL, 0),
            cases[i].want);
    }
    assert_int_equal(peer_call(&p, WIRE_OP(NOP), NULL, 0), CUDA_SUCCESS);
    assert_int_equal(peer_finish(&p), 0);
}

/* Load text as a config file's tenants. */
static rg_status_t load_tenants(const char *text, struct srv_tenants *ts)
{
    char path[] = "/tmp/rgpu-limits-XXXXXX";
    int fd = mkstemp(path);
    struct srv_config *c = malloc(sizeof(*c));
    rg_status_t st;

    assert_true(fd >= 0 && c != NULL);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    srv_config_init(c);
    st = srv_config_load_file(c, path, NULL, NULL);
    *ts = c->tenants;
    free(c);
    unlink(path);
    return st;
}

/* A malformed token_sha256 (63 hex digits) left the tenant with no token, open to anyone; any
 * setting of a tenant that does not parse now fails the load. A '#' inside a token is kept. */
static void test_bad_tenant_settings_fail_load(void **state)
{
    struct srv_tenants ts;
    const char *why = NULL;
    char hex[65];

    (void)state;
    srv_token_hash_hex("h4sh", hex);
    hex[63] = '\0';
    char text[256];
    snprintf(text, sizeof(text), "[tenant bob]\ntoken_sha256 = %s\n", hex);
    assert_int_not_equal(load_tenants(text, &ts), RG_OK);
    assert_int_not_equal(load_tenants("[tenant bob]\nmem_quota = lots\n", &ts), RG_OK);
    assert_int_not_equal(load_tenants("[tenant bob]\ntoken = \"s3cret\n", &ts), RG_OK);
    assert_int_equal(load_tenants("[tenant bob]\ntoken = beta#secret # comment\n", &ts), RG_OK);
    assert_null(srv_tenant_auth(&ts, "bob", "beta", &why));
    assert_non_null(srv_tenant_auth(&ts, "bob", "beta#secret", &why));
}

/* Admit the next workers as tenant "alice" with the given quota (bytes, as a size string). */
static void quota_tenant(const char *quota)
{
    memset(&peer_cfg.tenants, 0, sizeof(peer_cfg.tenants));
    assert_int_equal(srv_tenant_key(&peer_cfg.tenants, "alice", "token", "s3cret"), RG_OK);
    assert_int_equal(srv_tenant_key(&peer_cfg.tenants, "alice", "mem_quota", quota), RG_OK);
}

static CUresult vmm_create(struct peer *p, uint64_t id, uint64_t size)
{
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    return peer_call_data(p, WIRE_OP(MEM_CREATE, .id = H(id, PROTO_H_MEM_HANDLE), .size = size),
                          &prop, sizeof(prop), NULL, 0, NULL, 0);
}

static uint64_t mem_free(struct peer *p)
{
    uint64_t out[2] = {0};

    assert_int_equal(peer_call(p, WIRE_OP(MEM_GET_INFO), out, 2), CUDA_SUCCESS);
    return out[0];
}

/* VMM physical memory stays charged while a mapping holds it, whether or not its handle was
 * released: the vectorAddMMAP pattern (create, map, release, use, unmap) under a 4 MiB quota.
 * Before, the release gave the charge back and a session held 1.6 GiB under 256 MiB. */
static void test_vmm_release_while_mapped(void **state)
{
    struct peer p;
    const uint64_t mib2 = 2u << 20;
    CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    uint64_t va, word = 0;

    (void)state;
    quota_tenant("4MiB");
    peer_open(&p, "alice", "s3cret");
    assert_int_equal(peer_call(&p, WIRE_OP(MEM_ADDRESS_RESERVE, .size = 2 * mib2), &va, 1),
                     CUDA_SUCCESS);
    assert_int_equal(vmm_create(&p, 1, mib2), CUDA_SUCCESS);
    assert_int_equal(
        peer_call(&p, WIRE_OP(MEM_MAP, .ptr = va, .size = mib2, .handle = H(1, PROTO_H_MEM_HANDLE)),
                  NULL, 0),
        CUDA_SUCCESS);
    assert_int_equal(peer_call_data(&p, WIRE_OP(MEM_SET_ACCESS, .ptr = va, .size = mib2), &acc,
                                    sizeof(acc), NULL, 0, NULL, 0),
                     CUDA_SUCCESS);
    assert_int_equal(
        peer_call(&p, WIRE_OP(MEM_RELEASE, .handle = H(1, PROTO_H_MEM_HANDLE)), NULL, 0),
        CUDA_SUCCESS);
    assert_int_equal(mem_free(&p), mib2); /* the mapping still holds 2 MiB */
    /* use it after the release: memset a word, read it back */
    assert_int_equal(peer_call(&p,
                               WIRE_OP(MEMSET, .dst = va, .value = 0x5a, .elemsize = 1, .count = 8,
                                       .stream = PROTO_STREAM_NULL),
                               NULL, 0),
                     CUDA_SUCCESS);
    assert_int_equal(
        peer_call_data(&p, WIRE_OP(MEMCPY_DTOH, .src = va, .size = 8, .stream = PROTO_STREAM_NULL),
                       NULL, 0, NULL, 0, &word, 8),
        CUDA_SUCCESS);
    assert_int_equal(word, 0x5a5a5a5a5a5a5a5aull);
    /* the quota holds: 2 MiB more fit, 2 MiB after that do not */
    assert_int_equal(vmm_create(&p, 2, mib2), CUDA_SUCCESS);
    assert_int_equal(vmm_create(&p, 3, mib2), CUDA_ERROR_OUT_OF_MEMORY);
    assert_int_equal(peer_call(&p, WIRE_OP(MEM_ALLOC, .size = 1 << 20), NULL, 0),
                     CUDA_ERROR_OUT_OF_MEMORY);
    /* the last mapping gone, the charge goes with it */
    assert_int_equal(peer_call(&p, WIRE_OP(MEM_UNMAP, .ptr = va, .size = mib2), NULL, 0),
                     CUDA_SUCCESS);
    assert_int_equal(mem_free(&p), mib2);
    assert_int_equal(vmm_create(&p, 3, mib2), CUDA_SUCCESS);
    /* a handle mapped twice is charged once, until both mappings and the handle are gone */
    assert_int_equal(
        peer_call(&p, WIRE_OP(MEM_MAP, .ptr = va, .size = mib2, .handle = H(3, PROTO_H_MEM_HANDLE)),
                  NULL, 0),
        CUDA_SUCCESS);
    assert_int_equal(peer_call(&p,
                               WIRE_OP(MEM_MAP, .ptr = va + mib2, .size = mib2,
                                       .handle = H(3, PROTO_H_MEM_HANDLE)),
                               NULL, 0),
                     CUDA_SUCCESS);
    assert_int_equal(
        peer_call(&p, WIRE_OP(MEM_RELEASE, .handle = H(3, PROTO_H_MEM_HANDLE)), NULL, 0),
        CUDA_SUCCESS);
    assert_int_equal(mem_free(&p), 0);
    assert_int_equal(peer_call(&p, WIRE_OP(MEM_UNMAP, .ptr = va, .size = mib2), NULL, 0),
                     CUDA_SUCCESS);
    assert_int_equal(mem_free(&p), 0);
    assert_int_equal(peer_call(&p, WIRE_OP(MEM_UNMAP, .ptr = va + mib2, .size = mib2), NULL, 0),
                     CUDA_SUCCESS);
    assert_int_equal(mem_free(&p), mib2);
    /* released before any mapping: given back at once, as before */
    assert_int_equal(
        peer_call(&p, WIRE_OP(MEM_RELEASE, .handle = H(2, PROTO_H_MEM_HANDLE)), NULL, 0),
        CUDA_SUCCESS);
    assert_int_equal(mem_free(&p), 2 * mib2);
    assert_int_equal(peer_finish(&p), 0);
    memset(&peer_cfg.tenants, 0, sizeof(peer_cfg.tenants));
}

/* A function of a PTX module the fake driver knows (its parameter layout is known). */
static uint64_t load_function(struct peer *p, uint64_t mod_n, uint64_t fn_n, const char *name)
{
    static const char ptx[] = ".version 8.0\n.target sm_90\n.entry hello\n";
    /* the image as data, without image_len (optional: the image is sent whole) */
    assert_int_equal(peer_call_data(p, WIRE_OP_N(MODULE_LOAD, 2, .id = H(mod_n, PROTO_H_MODULE)),
                                    ptx, sizeof(ptx), NULL, 0, NULL, 0),
                     CUDA_SUCCESS);
    assert_int_equal(peer_call_data(p,
                                    WIRE_OP(MODULE_GET_FUNCTION, .id = H(fn_n, PROTO_H_FUNCTION),
                                            .parent = H(mod_n, PROTO_H_MODULE)),
                                    name, strlen(name), NULL, 0, NULL, 0),
                     CUDA_SUCCESS);
    return H(fn_n, PROTO_H_FUNCTION);
}

/* h_launch receives the parameters into session scratch, and srv_param_pointers then grew that
 * scratch for the pointer array and copied from the freed block (131,056 bytes of parameters:
 * the receive fills exactly 128 KiB, the pointer array needs more). Under ASan a
 * heap-use-after-free; without, the freed 128 KiB block is unmapped and the worker dies. */
static void test_launch_params_grow_scratch(void **state)
{
    struct peer p;
    const size_t plen = 131056;
    uint8_t *params = calloc(1, plen);
    uint64_t dev, f;

    (void)state;
    peer_open(&p, NULL, NULL);
    /* vadd(a, b, c, n = 1) on a device block: c = a + b */
    assert_int_equal(peer_call(&p, WIRE_OP(MEM_ALLOC, .size = 64), &dev, 1), CUDA_SUCCESS);
    float ab[2] = {1.5f, 2.0f}, c = 0;
    uint64_t ptrs[3] = {dev, dev + 4, dev + 8};
    int n = 1;
    assert_int_equal(peer_call_data(&p,
                                    WIRE_OP(MEMCPY_HTOD, .dst = dev, .size = sizeof(ab),
                                            .stream = PROTO_STREAM_NULL),
                                    ab, sizeof(ab), NULL, 0, NULL, 0),
                     CUDA_SUCCESS);
    memcpy(params, ptrs, sizeof(ptrs));
    memcpy(params + 24, &n, sizeof(n));
    f = load_function(&p, 1, 2, "_Z4vaddPKfS0_Pfi");
    for (int i = 0; i < 2; i++) /* the second runs on the grown scratch */
        assert_int_equal(
            peer_call_bulk(&p,
                           WIRE_OP(LAUNCH, .func = f, .gx = 1, .gy = 1, .gz = 1, .bx = 1, .by = 1,
                                   .bz = 1, .stream = PROTO_STREAM_NULL, .params_len = plen),
                           NULL, 0, params, plen, NULL, 0, NULL, 0),
            CUDA_SUCCESS);
    assert_int_equal(
        peer_call_data(&p,
                       WIRE_OP(MEMCPY_DTOH, .src = dev + 8, .size = 4, .stream = PROTO_STREAM_NULL),
                       NULL, 0, NULL, 0, &c, 4),
        CUDA_SUCCESS);
    assert_true(c == 3.5f);
    /* parameters beyond SRV_LAUNCH_PARAMS_MAX are refused, not received into scratch */
    uint8_t *huge = calloc(1, SRV_LAUNCH_PARAMS_MAX + 16);
    assert_non_null(huge);
    memcpy(huge, ptrs, sizeof(ptrs));
    memcpy(huge + 24, &n, sizeof(n));
    assert_int_equal(
        peer_call_bulk(&p,
                       WIRE_OP(LAUNCH, .func = H(2, PROTO_H_FUNCTION), .gx = 1, .gy = 1, .gz = 1,
                               .bx = 1, .by = 1, .bz = 1, .stream = PROTO_STREAM_NULL,
                               .params_len = SRV_LAUNCH_PARAMS_MAX + 16),
                       NULL, 0, huge, SRV_LAUNCH_PARAMS_MAX + 16, NULL, 0, NULL, 0),
        CUDA_ERROR_INVALID_VALUE);
    free(huge);
    assert_int_equal(peer_call(&p, WIRE_OP(NOP), NULL, 0), CUDA_SUCCESS);
    assert_int_equal(peer_finish(&p), 0);
    free(params);
}

/* Bytes of the regular files in dir, and their count. */
static uint64_t dir_bytes(const char *dir, size_t *n_p)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    uint64_t total = 0;
    char path[600];
    struct stat st;

    *n_p = 0;
    while (d != NULL && (e = readdir(d)) != NULL) {
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (lstat(path, &st) == 0 && S_ISREG(st.st_mode))
            total += (uint64_t)st.st_size, (*n_p)++;
    }
    if (d != NULL)
        closedir(d);
    return total;
}

/* The module cache's bound holds past 4,096 files: eviction looked at the first 4,096 entries
 * only, so with 5,000 images of 2 KiB (10,000 KiB) under a 9 MiB bound it saw 8,192 KiB and
 * evicted nothing, and a cache of many small images grew without bound. */
static void test_module_cache_many_files(void **state)
{
    static const char ptx[] = ".version 8.0\n.target sm_90\n.entry fresh\n";
    char dir[] = "/tmp/rgpu-limits-cache-XXXXXX", sub[128], path[256], cmd[160];
    uint8_t filler[2048];
    struct peer p;
    size_t n;

    (void)state;
    memset(filler, 0x42, sizeof(filler));
    assert_non_null(mkdtemp(dir));
    snprintf(sub, sizeof(sub), "%s/-", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    for (unsigned i = 0; i < 5000; i++) { /* names of 64 hex digits, as the cache writes them */
        snprintf(path, sizeof(path), "%s/%064x", sub, i);
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, filler, sizeof(filler)), (ssize_t)sizeof(filler));
        close(fd);
    }
    snprintf(peer_cfg.module_cache, sizeof(peer_cfg.module_cache), "%s", dir);
    peer_cfg.module_cache_max = 9u << 20;
    peer_open(&p, NULL, NULL);
    assert_int_equal(/* the image as bulk, without image_len (optional: sent whole) */
                     peer_call_bulk(&p,
                                    WIRE_OP_N(MODULE_LOAD, 2, .id = H(1, PROTO_H_MODULE),
                                              .image_flags = PROTO_IMAGE_CACHE),
                                    NULL, 0, ptx, sizeof(ptx), NULL, 0, NULL, 0),
                     CUDA_SUCCESS);
    assert_int_equal(peer_finish(&p), 0);
    assert_true(dir_bytes(sub, &n) <= 9u << 20);
    assert_true(n > 4000 && n < 5000);
    peer_cfg.module_cache[0] = '\0';
    peer_cfg.module_cache_max = 0;
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* Memory a session made the worker hold without charging it (issue 15 item 9): pinned host
 * shadows, device memory that context limits reserve, contexts without number, and a pitched
 * allocation asked of the driver before the quota was looked at. */
static void test_uncharged_paths(void **state)
{
    struct peer p;
    const uint64_t mib = 1u << 20;
    uint64_t out[2];

    (void)state;
    quota_tenant("4MiB");
    peer_open(&p, "alice", "s3cret");
    /* shadows: 3 MiB pinned leaves 1 MiB */
    assert_int_equal(
        peer_call(&p, WIRE_OP(SHADOW_ALLOC, .id = H(1, PROTO_H_SHADOW), .size = 3 * mib), NULL, 0),
        CUDA_SUCCESS);
    assert_int_equal(mem_free(&p), mib);
    assert_int_equal(
        peer_call(&p, WIRE_OP(SHADOW_ALLOC, .id = H(2, PROTO_H_SHADOW), .size = 2 * mib), NULL, 0),
        CUDA_ERROR_OUT_OF_MEMORY);
    assert_int_equal(peer_call(&p, WIRE_OP(MEM_ALLOC, .size = 2 * mib), NULL, 0),
                     CUDA_ERROR_OUT_OF_MEMORY);
    assert_int_equal(peer_call(&p, WIRE_OP(SHADOW_FREE, .shadow = H(1, PROTO_H_SHADOW)), NULL, 0),
                     CUDA_SUCCESS);
    assert_int_equal(mem_free(&p), 4 * mib);
    /* limits: the malloc heap and the printf FIFO are charged, a new value replaces the old */
#define SET_LIMIT(lim, v) WIRE_OP(CTX_SET_LIMIT, .limit = (lim), .value = (v))
    assert_int_equal(peer_call(&p, SET_LIMIT(CU_LIMIT_MALLOC_HEAP_SIZE, 64ull << 30), NULL, 0),
                     CUDA_ERROR_OUT_OF_MEMORY);
    assert_int_equal(peer_call(&p, SET_LIMIT(CU_LIMIT_MALLOC_HEAP_SIZE, 3 * mib), NULL, 0),
                     CUDA_SUCCESS);
    assert_int_equal(mem_free(&p), mib);
    assert_int_equal(peer_call(&p, SET_LIMIT(CU_LIMIT_MALLOC_HEAP_SIZE, 2 * mib), NULL, 0),
                     CUDA_SUCCESS);
    assert_int_equal(mem_free(&p), 2 * mib);
    assert_int_equal(peer_call(&p, SET_LIMIT(CU_LIMIT_PRINTF_FIFO_SIZE, 3 * mib), NULL, 0),
                     CUDA_ERROR_OUT_OF_MEMORY);
    /* a stack of 1 KiB for each of 132 x 2048 resident threads is 264 MiB */
    assert_int_equal(peer_call(&p, SET_LIMIT(CU_LIMIT_STACK_SIZE, 1024), NULL, 0),
                     CUDA_ERROR_OUT_OF_MEMORY);
    /* reserves nothing worth charging */
    assert_int_equal(peer_call(&p, SET_LIMIT(CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH, 4), NULL, 0),
                     CUDA_SUCCESS);
#undef SET_LIMIT
    /* a pitched allocation over the quota is refused before the driver is asked (the fake
     * aborts on any request above 16 MiB: it was asked for 32 GiB) */
    assert_int_equal(
        peer_call(&p, WIRE_OP(MEM_ALLOC_PITCH, .width = 1 << 20, .height = 1 << 15, .elemsize = 4),
                  out, 2),
        CUDA_ERROR_OUT_OF_MEMORY);
    assert_int_equal(
        peer_call(&p, WIRE_OP(MEM_ALLOC_PITCH, .width = 1000, .height = 100, .elemsize = 4), out,
                  2),
        CUDA_SUCCESS);
    assert_int_equal(out[1], 1024);
    /* contexts: SRV_MAX_CONTEXTS, then refused until one goes */
    for (unsigned i = 0; i < SRV_MAX_CONTEXTS; i++)
        assert_int_equal(peer_call(&p, WIRE_OP(CTX_CREATE, .id = H(100 + i, PROTO_H_CTX)), NULL, 0),
                         CUDA_SUCCESS);
    assert_int_equal(
        peer_call(&p, WIRE_OP(CTX_CREATE, .id = H(100 + SRV_MAX_CONTEXTS, PROTO_H_CTX)), NULL, 0),
        CUDA_ERROR_OUT_OF_MEMORY);
    assert_int_equal(peer_call(&p, WIRE_OP(CTX_DESTROY, .ctx = H(100, PROTO_H_CTX)), NULL, 0),
                     CUDA_SUCCESS);
    assert_int_equal(
        peer_call(&p, WIRE_OP(CTX_CREATE, .id = H(100 + SRV_MAX_CONTEXTS, PROTO_H_CTX)), NULL, 0),
        CUDA_SUCCESS);
    assert_int_equal(peer_finish(&p), 0);
    memset(&peer_cfg.tenants, 0, sizeof(peer_cfg.tenants));
}

/* The worker's peak resident memory (VmHWM), in MiB. */
static long peak_rss_mib(pid_t pid)
{
    char path[64], line[128];
    long kb = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    assert_non_null(f = fopen(path, "r"));
    while (fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, "VmHWM:", 6) == 0)
            kb = strtol(line + 6, NULL, 10);
    fclose(f);
    return kb / 1024;
}

/* A 2D copy moves through the worker in slabs of 16 MiB, whatever its size: before, the worker
 * held all its host rows at once (up to 4 GiB a call, and kept that scratch for the session).
 * 114 MiB of rows into a 117 MiB pitched allocation (the fake driver's device memory is the
 * worker's own, so it counts too), back again, and rows wider than a slab. */
static void test_copy_2d_in_slabs(void **state)
{
    const size_t w = 3000, h = 40000, pitch = 3072, len = w * h;
    const size_t ww = 20u << 20, wpitch = 21u << 20; /* two rows wider than a slab */
    uint8_t *rows, *back;
    uint64_t dev, wdev;
    struct peer p;

    (void)state;
    peer_open(&p, NULL, NULL); /* before the rows exist: the forked worker must not count them */
    rows = malloc(len), back = malloc(len);
    assert_non_null(rows);
    assert_non_null(back);
    for (size_t i = 0; i < len; i++)
        rows[i] = (uint8_t)(i * 7 + i / 4093);
    assert_int_equal(peer_call(&p, WIRE_OP(MEM_ALLOC, .size = pitch * h), &dev, 1), CUDA_SUCCESS);
    /* dir 0 (HtoD): the rows as bulk; dir 1 (DtoH): back as the reply's bulk */
    assert_int_equal(
        peer_call_bulk(&p,
                       WIRE_OP(MEMCPY_2D, .dir = 0, .dst = dev, .dpitch = pitch, .spitch = w,
                               .width = w, .height = h, .stream = PROTO_STREAM_NULL),
                       NULL, 0, rows, len, NULL, 0, NULL, 0),
        CUDA_SUCCESS);
    assert_int_equal(
        peer_call_bulk(&p,
                       WIRE_OP(MEMCPY_2D, .dir = 1, .dpitch = w, .src = dev, .spitch = pitch,
                               .width = w, .height = h, .stream = PROTO_STREAM_NULL),
                       NULL, 0, NULL, 0, NULL, 0, back, len),
        CUDA_SUCCESS);
    assert_memory_equal(rows, back, len);
    long peak = peak_rss_mib(p.pid);
    print_message("worker peak RSS after a %zu MiB 2D copy each way: %ld MiB\n", len >> 20, peak);
#ifndef __SANITIZE_ADDRESS__ /* ASan's shadow and quarantine make the number meaningless */
    assert_true(peak < 190); /* 117 of device memory, 16 of slab, 16 of staging, the rest */
#endif
    /* rows wider than a slab: pieces of a row */
    assert_int_equal(peer_call(&p, WIRE_OP(MEM_ALLOC, .size = 2 * wpitch), &wdev, 1), CUDA_SUCCESS);
    assert_int_equal(
        peer_call_bulk(&p,
                       WIRE_OP(MEMCPY_2D, .dir = 0, .dst = wdev, .dpitch = wpitch, .spitch = ww,
                               .width = ww, .height = 2, .stream = PROTO_STREAM_NULL),
                       NULL, 0, rows, 2 * ww, NULL, 0, NULL, 0),
        CUDA_SUCCESS);
    memset(back, 0, 2 * ww);
    assert_int_equal(
        peer_call_bulk(&p,
                       WIRE_OP(MEMCPY_2D, .dir = 1, .dpitch = ww, .src = wdev, .spitch = wpitch,
                               .width = ww, .height = 2, .stream = PROTO_STREAM_NULL),
                       NULL, 0, NULL, 0, NULL, 0, back, 2 * ww),
        CUDA_SUCCESS);
    assert_memory_equal(rows, back, 2 * ww);
    assert_int_equal(peer_finish(&p), 0);
    free(rows);
    free(back);
}

/* 3D copies with a host end move in slabs too: 40 slices of 1000 rows of 3000 bytes each way
 * into a pitched 3D block, and back. */
static void test_copy_3d_in_slabs(void **state)
{
    const size_t w = 3000, h = 1000, d = 40, pitch = 3072, len = w * h * d;
    uint8_t *rows, *back;
    uint64_t dev;
    struct peer p;

    (void)state;
    peer_open(&p, NULL, NULL);
    rows = malloc(len), back = malloc(len);
    assert_non_null(rows);
    assert_non_null(back);
    for (size_t i = 0; i < len; i++)
        rows[i] = (uint8_t)(i * 11 + i / 4091);
    assert_int_equal(peer_call(&p, WIRE_OP(MEM_ALLOC, .size = pitch * h * d), &dev, 1),
                     CUDA_SUCCESS);
    /* src and dst: kind (0 host, 1 device), then for a device (address, pitch, rows, 0) */
    assert_int_equal(
        peer_call_bulk(&p, /* host rows -> device */
                       WIRE_OP(MEMCPY_3D, .src = {0}, .dst = {1, dev, pitch, h}, .width = w,
                               .height = h, .depth = d, .stream = PROTO_STREAM_NULL),
                       NULL, 0, rows, len, NULL, 0, NULL, 0),
        CUDA_SUCCESS);
    assert_int_equal(
        peer_call_bulk(&p,
                       WIRE_OP(MEMCPY_3D, .src = {1, dev, pitch, h}, .dst = {0}, .width = w,
                               .height = h, .depth = d, .stream = PROTO_STREAM_NULL),
                       NULL, 0, NULL, 0, NULL, 0, back, len),
        CUDA_SUCCESS);
    assert_memory_equal(rows, back, len);
    long peak = peak_rss_mib(p.pid);
    print_message("worker peak RSS after a %zu MiB 3D copy each way: %ld MiB\n", len >> 20, peak);
#ifndef __SANITIZE_ADDRESS__
    assert_true(peak < 190);
#endif
    assert_int_equal(peer_finish(&p), 0);
    free(rows);
    free(back);
}

int main(void)
{
    setenv("FAKECUDA_ABORT_ABOVE_MB", "16", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_graph_memcpy_node_bounds),
        cmocka_unit_test(test_bad_tenant_settings_fail_load),
        cmocka_unit_test(test_vmm_release_while_mapped),
        cmocka_unit_test(test_launch_params_grow_scratch),
        cmocka_unit_test(test_module_cache_many_files),
        cmocka_unit_test(test_uncharged_paths),
        cmocka_unit_test(test_copy_2d_in_slabs),
        cmocka_unit_test(test_copy_3d_in_slabs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
