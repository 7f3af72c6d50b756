/* The export tables, linked with stand-ins for the rest of the client (cli_standin.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cli_standin.h"
#include "client/api/md2.h"

static const CUuuid uuid_cudart = {{0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87,
                                    0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9}};
static const CUuuid uuid_hooks = {{0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08,
                                   0x00, 0x20, 0x0c, 0x0a, 0x66}};
static const CUuuid uuid_tls = {{0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6,
                                 0xe7, 0x8a, 0x3a, 0xec, 0xdc}};
static const CUuuid uuid_cls = {{0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68,
                                 0xf3, 0x55, 0xd8, 0x95, 0x93}};
static const CUuuid uuid_checks = {{0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6,
                                    0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e}};
static const CUuuid uuid_integrity = {{0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34,
                                       0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2}};
static const CUuuid uuid_tools_ctx = {{0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6,
                                       0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2}};

static const CUuuid uuid_tools_module = {{0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d, 0x83,
                                          0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e}};

static void *const *table(const CUuuid *id)
{
    void *const *t = (void *const *)cli_export_table(id);
    assert_non_null(t);
    return t;
}

static void test_sizes(void **state)
{
    assert_int_equal((uintptr_t)table(&uuid_cudart)[0], 13 * 8);
    assert_int_equal((uintptr_t)table(&uuid_hooks)[0], 7 * 8);
    assert_int_equal((uintptr_t)table(&uuid_tls)[0], 4 * 8);
    assert_int_equal((uintptr_t)table(&uuid_checks)[0], 4 * 8);
    assert_int_equal((uintptr_t)table(&uuid_integrity)[0], 3 * 8);
    assert_int_equal((uintptr_t)table(&uuid_tools_ctx)[0], 95 * 8);
    assert_non_null(table(&uuid_cls)[2]);
    assert_null(table(&uuid_cls)[3]);
    CUuuid unknown = {{0xf8, 0xcf, 0xf9, 0x51, 0x21, 0x46, 0x8b, 0x4e, 0xb9, 0xe2, 0xfb, 0x46, 0x9e,
                       0x7c, 0x0d, 0xd9}};
    assert_null(cli_export_table(&unknown));
}

static void test_cudart_primary_ctx(void **state)
{
    CUresult (*get)(CUcontext *, CUdevice) =
        (CUresult(*)(CUcontext *, CUdevice))table(&uuid_cudart)[2];
    CUresult (*other)(void) = (CUresult(*)(void))table(&uuid_cudart)[1];
    CUcontext ctx = NULL;

    assert_int_equal(get(&ctx, 0), CUDA_SUCCESS);
    assert_ptr_equal(ctx, &standin_primary);
    assert_int_equal(other(), CUDA_ERROR_NOT_SUPPORTED);
    assert_int_equal(other(), CUDA_ERROR_NOT_SUPPORTED); /* logged once, still refused */
}

static void test_hooks_and_checks(void **state)
{
    void (*buf)(void **, size_t *);
    void *p = NULL;
    size_t n = 0;
    uint32_t u = 7;

    buf = (void (*)(void **, size_t *))table(&uuid_hooks)[2];
    buf(&p, &n);
    assert_non_null(p);
    assert_int_equal(n, 1024);
    buf = (void (*)(void **, size_t *))table(&uuid_hooks)[6];
    buf(&p, &n);
    assert_non_null(p);
    assert_int_equal(n, 14);
    assert_int_equal(
        ((CUresult(*)(CUcontext, uint32_t *, void **))table(&uuid_checks)[2])(NULL, &u, &p),
        CUDA_SUCCESS);
    assert_int_equal(u, 0);
    assert_int_equal(((CUresult(*)(void))table(&uuid_checks)[3])(), CUDA_SUCCESS);
}

static void test_tls_and_tools_ctx(void **state)
{
    CUresult (*tls)(CUcontext *) = (CUresult(*)(CUcontext *))table(&uuid_tls)[2];
    CUresult (*id)(CUcontext, uint64_t *) =
        (CUresult(*)(CUcontext, uint64_t *))table(&uuid_tools_ctx)[4];
    CUcontext ctx = (CUcontext)1;
    uint64_t v = 0;

    standin_current = NULL;
    assert_int_equal(tls(&ctx), CUDA_SUCCESS);
    assert_null(ctx);
    standin_current = &standin_primary;
    assert_int_equal(tls(&ctx), CUDA_SUCCESS);
    assert_ptr_equal(ctx, &standin_primary);
    assert_int_equal(id(NULL, &v), CUDA_SUCCESS);
    assert_int_equal(v, standin_primary.h.id);
    assert_int_equal(((CUresult(*)(void))table(&uuid_tools_ctx)[51])(), CUDA_SUCCESS);
    standin_current = NULL;
}

typedef void (*cls_dtor)(CUcontext, void *, void *);
static int dtor_calls;
static void *dtor_key, *dtor_value;

static void record_dtor(CUcontext ctx, void *key, void *value)
{
    assert_ptr_equal(ctx, &standin_primary);
    dtor_calls++;
    dtor_key = key;
    dtor_value = value;
}

static void test_cls(void **state)
{
    void *const *t = table(&uuid_cls);
    CUresult (*put)(CUcontext, void *, void *, cls_dtor) =
        (CUresult(*)(CUcontext, void *, void *, cls_dtor))t[0];
    CUresult (*del)(CUcontext, void *) = (CUresult(*)(CUcontext, void *))t[1];
    CUresult (*get)(void **, CUcontext, void *) = (CUresult(*)(void **, CUcontext, void *))t[2];
    int k1, k2, v1, v2;
    void *v = NULL;

    standin_current = NULL;
    assert_int_equal(get(&v, NULL, &k1), CUDA_ERROR_INVALID_CONTEXT);
    assert_int_equal(put(NULL, &k1, &v1, record_dtor), CUDA_ERROR_INVALID_CONTEXT);
    standin_current = &standin_primary;
    assert_int_equal(get(&v, NULL, &k1), CUDA_ERROR_INVALID_HANDLE);
    assert_null(v);
    assert_int_equal(put(NULL, &k1, &v1, record_dtor), CUDA_SUCCESS);
    assert_int_equal(put((CUcontext)&standin_primary, &k2, &v2, record_dtor), CUDA_SUCCESS);
    assert_int_equal(get(&v, (CUcontext)&standin_primary, &k1), CUDA_SUCCESS);
    assert_ptr_equal(v, &v1);
    assert_int_equal(get(&v, NULL, &k2), CUDA_SUCCESS);
    assert_ptr_equal(v, &v2);
    assert_int_equal(del((CUcontext)&standin_primary, &k2), CUDA_SUCCESS);
    assert_int_equal(get(&v, NULL, &k2), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(dtor_calls, 0);

    assert_non_null(standin_teardown); /* the context's teardown reaches its storage */
    standin_teardown(&standin_primary);
    assert_int_equal(dtor_calls, 1);
    assert_ptr_equal(dtor_key, &k1);
    assert_ptr_equal(dtor_value, &v1);
    assert_int_equal(get(&v, NULL, &k1), CUDA_ERROR_INVALID_HANDLE);
    standin_current = NULL;
}

typedef CUresult (*integrity_fn)(uint32_t, uint64_t, uint64_t[2]);

static void test_integrity_fixed(void **state)
{
    integrity_fn f = (integrity_fn)table(&uuid_integrity)[1];
    uint64_t out[2];

    assert_int_equal(f(13000, 1700000000, out), CUDA_SUCCESS);
    assert_int_equal(out[0], 0x3341181C03CB675Cull);
    assert_int_equal(out[1], 0x8ED383AA1F4CD1E8ull);
    assert_int_equal(f(13001, 1700000000, out), CUDA_SUCCESS);
    assert_int_equal(out[0], 0x1841181C03CB675Cull);
    assert_int_equal(out[1], 0x8ED383AA1F4CD1E8ull);
}

/* The HMAC message, built independently here from the documented layout. */
static void expected_mac(uint32_t version, uint64_t secs, uint8_t mac[MD2_DIGEST])
{
    static const uint8_t key[16] = {0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52,
                                    0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f};
    uint8_t msg[48 + 28], *p = msg;
    uint32_t u32[4] = {13000, version, (uint32_t)getpid(), (uint32_t)pthread_self()};
    const void *ptrs[3] = {cli_export_table(&uuid_cudart), cli_export_table(&uuid_integrity),
                           table(&uuid_integrity)[1]};
    const struct cli_device *d = cli_device(0);
    int32_t pci[3] = {d->pci_domain, d->pci_bus, d->pci_device};

    memcpy(p, u32, 16), p += 16;
    memcpy(p, ptrs, 24), p += 24;
    memcpy(p, &secs, 8), p += 8;
    memcpy(p, d->uuid.bytes, 16), p += 16;
    memcpy(p, pci, 12), p += 12;
    hmac_md2(key, sizeof(key), &(struct md2_part){msg, (size_t)(p - msg)}, 1, mac);
}

static void test_integrity_hmac(void **state)
{
    integrity_fn f = (integrity_fn)table(&uuid_integrity)[1];
    uint64_t out[2], again[2];
    uint8_t want[MD2_DIGEST];

    assert_int_equal(f(13002, 1763800000, out), CUDA_SUCCESS);
    expected_mac(13002, 1763800000, want);
    assert_memory_equal(out, want, 16);
    assert_int_equal(f(13002, 1763800001, again), CUDA_SUCCESS);
    assert_memory_not_equal(out, again, 16);
    standin_ndev = 0; /* the device record is part of the message */
    assert_int_equal(f(13002, 1763800000, again), CUDA_SUCCESS);
    assert_memory_not_equal(out, again, 16);
    standin_ndev = 1;
}

/* Slot 7 of the tools module table walks a module's functions with the caller's visitor. */
static int visits;
static uintptr_t visitor(void *user, CUfunction f, const char *name, uintptr_t zero)
{
    visits++;
    return strcmp(name, (const char *)user) == 0;
}

static void test_tools_module_walk(void **state)
{
    typedef CUresult (*walk_fn)(CUcontext, CUmodule, cli_function_visitor, void *);
    void *const *t = table(&uuid_tools_module);
    walk_fn walk = (walk_fn)t[7];

    assert_int_equal((uintptr_t)t[0], 99 * 8);
    visits = 0;
    assert_int_equal(walk(NULL, NULL, visitor, "second"), 1);
    assert_int_equal(visits, 2);
    visits = 0;
    assert_int_equal(walk(NULL, NULL, visitor, "none"), CUDA_SUCCESS);
    assert_int_equal(visits, 2);
    assert_int_equal(((CUresult(*)(void))t[3])(), CUDA_ERROR_NOT_SUPPORTED);
}

static void test_unsupported(void **state)
{
    assert_int_equal(cli_unsupported("cuFakeEntryPoint"), CUDA_ERROR_NOT_SUPPORTED);
    assert_int_equal(cli_unsupported("cuFakeEntryPoint"), CUDA_ERROR_NOT_SUPPORTED);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_cudart_primary_ctx),
        cmocka_unit_test(test_hooks_and_checks),
        cmocka_unit_test(test_tls_and_tools_ctx),
        cmocka_unit_test(test_cls),
        cmocka_unit_test(test_integrity_fixed),
        cmocka_unit_test(test_integrity_hmac),
        cmocka_unit_test(test_unsupported),
        cmocka_unit_test(test_tools_module_walk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
