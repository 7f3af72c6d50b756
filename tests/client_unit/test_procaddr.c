/* The built libcuda.so.1, loaded with dlopen and no server: every cuGetProcAddress lookup of
 * the recorded CUDA 13.0 traces (data/NAME.gpa.txt) must resolve to the symbol the trace names,
 * and cuGetExportTable must serve the tables cudart asks for. Nothing may connect at load. */
#include <dirent.h>
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

typedef CUresult (*gpa_v2_fn)(const char *, void **, int, cuuint64_t,
                              CUdriverProcAddressQueryResult *);
typedef CUresult (*gpa_v1_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult (*get_et_fn)(const void **, const CUuuid *);

static void *lib;
static gpa_v2_fn gpa;

static int setup(void **state)
{
    lib = dlopen(RGPU_CLIENT_LIB, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "dlopen %s: %s\n", RGPU_CLIENT_LIB, dlerror());
        return -1;
    }
    gpa = (gpa_v2_fn)dlsym(lib, "cuGetProcAddress_v2");
    return gpa ? 0 : -1;
}

static int teardown(void **state)
{
    dlclose(lib);
    return 0;
}

/* One trace line: name, version, flags and the expected symbol ("" for not found). */
static bool parse_line(const char *line, char *name, int *version, unsigned *flags, char *want)
{
    const char *p = strstr(line, "cuGetProcAddress_v2(\""), *arrow = strstr(line, ") -> ");

    if (p == NULL || arrow == NULL ||
        sscanf(p, "cuGetProcAddress_v2(\"%127[^\"]\", cudaVersion=%d, flags=%x", name, version,
               flags) != 3) {
        if (p &&
            sscanf(p, "cuGetProcAddress_v2(\"\", cudaVersion=%d, flags=%x", version, flags) == 2)
            name[0] = 0;
        else
            return false;
    }
    if (sscanf(arrow + 5, "%127s", want) != 1)
        return false;
    if (strncmp(want, "cu", 2) != 0) /* CUDA_ERROR_NOT_FOUND, or "(no export)" */
        want[0] = 0;
    return true;
}

static int check_file(const char *path, int *lines)
{
    char line[1024], name[128], want[128];
    int version, failures = 0;
    unsigned flags;
    FILE *f = fopen(path, "r");

    assert_non_null(f);
    while (fgets(line, sizeof(line), f)) {
        void *fn = (void *)1, *expect;
        CUdriverProcAddressQueryResult st = -1;
        CUresult r;
        Dl_info info = {0};

        if (!parse_line(line, name, &version, &flags, want))
            continue;
        (*lines)++;
        r = gpa(name, &fn, version, flags, &st);
        expect = want[0] ? dlsym(lib, want) : NULL;
        if (want[0] && (r != CUDA_SUCCESS || fn != expect || st != CU_GET_PROC_ADDRESS_SUCCESS)) {
            dladdr(fn, &info);
            fprintf(stderr, "%s@%d flags %u: want %s, got %s (%d)\n", name, version, flags, want,
                    info.dli_sname ? info.dli_sname : "?", r);
            failures++;
        } else if (!want[0] && (r != CUDA_ERROR_NOT_FOUND || fn != NULL)) {
            fprintf(stderr, "%s@%d flags %u: want NOT_FOUND, got %d\n", name, version, flags, r);
            failures++;
        }
    }
    fclose(f);
    return failures;
}

static void test_trace_replay(void **state)
{
    DIR *d = opendir(RGPU_TRACE_DIR);
    struct dirent *e;
    int files = 0, lines = 0, failures = 0;
    char path[4096];

    assert_non_null(d);
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n < 8 || strcmp(e->d_name + n - 8, ".gpa.txt") != 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", RGPU_TRACE_DIR, e->d_name);
        failures += check_file(path, &lines);
        files++;
    }
    closedir(d);
    printf("replayed %d lookups from %d traces, %d mismatches\n", lines, files, failures);
    assert_int_equal(files, 2);
    assert_true(lines > 1700);
    assert_int_equal(failures, 0);
}

static void test_lookup_edges(void **state)
{
    gpa_v1_fn gpa1 = (gpa_v1_fn)dlsym(lib, "cuGetProcAddress");
    CUdriverProcAddressQueryResult st;
    void *fn = (void *)1;

    assert_int_equal(gpa("", &fn, 0, 0, &st), CUDA_ERROR_NOT_FOUND);
    assert_int_equal(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    assert_null(fn);
    assert_int_equal(gpa("cuMemAllocAsync", &fn, 11000, 0, &st), CUDA_ERROR_NOT_FOUND);
    assert_int_equal(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    assert_int_equal(gpa("cuMemAlloc", &fn, 13000, 0, NULL), CUDA_SUCCESS);
    assert_ptr_equal(fn, dlsym(lib, "cuMemAlloc_v2"));
    /* flag 2 without a per-thread ABI gives the legacy one */
    assert_int_equal(
        gpa("cuMemAlloc", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, NULL),
        CUDA_SUCCESS);
    assert_ptr_equal(fn, dlsym(lib, "cuMemAlloc_v2"));
    assert_non_null(gpa1);
    assert_int_equal(gpa1("cuCtxSynchronize", &fn, 13000, 0), CUDA_SUCCESS);
    assert_ptr_equal(fn, dlsym(lib, "cuCtxSynchronize_v2"));
    assert_int_equal(gpa(NULL, &fn, 13000, 0, NULL), CUDA_ERROR_INVALID_VALUE);
}

static void test_export_tables(void **state)
{
    static const CUuuid known[] = {
        {{0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d,
          0xf9}},
        {{0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a,
          0x66}},
        {{0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec,
          0xdc}},
        {{0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95,
          0x93}},
        {{0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa,
          0x7e}},
        {{0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1,
          0xf2}},
        {{0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8,
          0xf2}},
    };
    static const CUuuid unknown = {{0xf8, 0xcf, 0xf9, 0x51, 0x21, 0x46, 0x8b, 0x4e, 0xb9, 0xe2,
                                    0xfb, 0x46, 0x9e, 0x7c, 0x0d, 0xd9}};
    get_et_fn get = (get_et_fn)dlsym(lib, "cuGetExportTable");
    const void *t;
    uint64_t out[2];
    int v = 0;

    assert_non_null(get);
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
        t = NULL;
        assert_int_equal(get(&t, &known[i]), CUDA_SUCCESS);
        assert_non_null(t);
    }
    t = (const void *)0x1234;
    assert_int_equal(get(&t, &unknown), CUDA_ERROR_NOT_FOUND);
    assert_ptr_equal(t, (const void *)0x1234);

    assert_int_equal(get(&t, &known[5]), CUDA_SUCCESS); /* INTEGRITY_CHECK fixed answer */
    assert_int_equal(
        ((CUresult(*)(uint32_t, uint64_t, uint64_t *))((void *const *)t)[1])(13000, 1, out),
        CUDA_SUCCESS);
    assert_int_equal(out[0], 0x3341181C03CB675Cull);

    assert_int_equal(((CUresult(*)(int *))dlsym(lib, "cuDriverGetVersion"))(&v), CUDA_SUCCESS);
    assert_int_equal(v, 13000);
}

static void test_error_strings(void **state)
{
    CUresult (*name)(CUresult, const char **) = dlsym(lib, "cuGetErrorName");
    CUresult (*text)(CUresult, const char **) = dlsym(lib, "cuGetErrorString");
    const char *s = "x";

    assert_int_equal(name(CUDA_ERROR_INVALID_VALUE, &s), CUDA_SUCCESS);
    assert_string_equal(s, "CUDA_ERROR_INVALID_VALUE");
    assert_int_equal(text(CUDA_ERROR_NOT_FOUND, &s), CUDA_SUCCESS);
    assert_non_null(strstr(s, "named symbol"));
    assert_int_equal(name((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
    assert_null(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trace_replay),
        cmocka_unit_test(test_lookup_edges),
        cmocka_unit_test(test_export_tables),
        cmocka_unit_test(test_error_strings),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
