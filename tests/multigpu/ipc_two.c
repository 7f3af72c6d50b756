/* CUDA IPC with two servers that answer the same addresses (multigpu_e2e.sh): a process of
 * server b exports device memory; a process of servers a and b opens it on device 1 (server b).
 * Opened where device 0's memory already is, the open is refused (CUDA_ERROR_MAP_FAILED: the
 * worker would answer the same address again); opened clear of it, it works and names device 1.
 * Usage: ipc_two export FILE   (one server: writes the handle to FILE, waits for FILE.done)
 *        ipc_two import FILE   (two servers; prints PASS) */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            fprintf(stderr, "line %d: %s failed: %d\n", __LINE__, #call, (int)r_);                 \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "line %d: ", __LINE__);                                                \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define LEN (1u << 20)

static unsigned char byte_at(size_t i)
{
    return (unsigned char)(i * 29 + 3);
}

static int exporter(const char *file)
{
    CUcontext c;
    CUdeviceptr d;
    CUipcMemHandle h;
    unsigned char *p = malloc(LEN);
    char done[512];
    FILE *f;

    for (size_t i = 0; i < LEN; i++)
        p[i] = byte_at(i);
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&c, 0));
    CHECK(cuCtxSetCurrent(c));
    CHECK(cuMemAlloc(&d, LEN));
    CHECK(cuMemcpyHtoD(d, p, LEN));
    CHECK(cuIpcGetMemHandle(&h, d));
    snprintf(done, sizeof(done), "%s.tmp", file);
    EXPECT((f = fopen(done, "wb")) != NULL && fwrite(&h, sizeof(h), 1, f) == 1 && fclose(f) == 0,
           "cannot write %s", done);
    EXPECT(rename(done, file) == 0, "cannot rename to %s", file);
    snprintf(done, sizeof(done), "%s.done", file);
    for (int i = 0; i < 600 && access(done, F_OK) != 0; i++) /* the importer is done */
        usleep(50000);
    CHECK(cuMemFree(d));
    free(p);
    return 0;
}

static int importer(const char *file)
{
    CUcontext c0, c1;
    CUdeviceptr a0, b1, opened;
    CUipcMemHandle h;
    unsigned char *p = malloc(LEN);
    char done[512];
    FILE *f = NULL;
    int ord = -1;
    CUresult r;

    for (int i = 0; i < 600 && (f = fopen(file, "rb")) == NULL; i++)
        usleep(50000);
    EXPECT(f != NULL && fread(&h, sizeof(h), 1, f) == 1, "no handle in %s", file);
    fclose(f);
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&c0, 0));
    CHECK(cuDevicePrimaryCtxRetain(&c1, 1));
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuMemAlloc(&a0, 4 * LEN)); /* server a's first address, which b answers first too */
    CHECK(cuCtxSetCurrent(c1));
    r = cuIpcOpenMemHandle(&opened, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    EXPECT(r == CUDA_ERROR_MAP_FAILED,
           "opened over device 0's memory: %d (at %#llx, device 0's at %#llx)", (int)r,
           r == CUDA_SUCCESS ? (unsigned long long)opened : 0ull, (unsigned long long)a0);
    CHECK(cuMemAlloc(&b1, 8 * LEN)); /* moves server b's next address past device 0's memory */
    CHECK(cuIpcOpenMemHandle(&opened, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    EXPECT(opened + LEN <= a0 || a0 + 4 * LEN <= opened, "opened memory overlaps device 0's");
    CHECK(cuMemcpyDtoH(p, opened, LEN));
    for (size_t i = 0; i < LEN; i++)
        EXPECT(p[i] == byte_at(i), "opened memory: byte %zu is %u", i, p[i]);
    CHECK(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, opened));
    EXPECT(ord == 1, "opened memory names device %d", ord);
    CHECK(cuIpcCloseMemHandle(opened));
    CHECK(cuMemFree(b1));
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuMemFree(a0));
    snprintf(done, sizeof(done), "%s.done", file);
    EXPECT((f = fopen(done, "w")) != NULL && fclose(f) == 0, "cannot write %s", done);
    free(p);
    printf("PASS\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "export") == 0)
        return exporter(argv[2]);
    if (argc == 3 && strcmp(argv[1], "import") == 0)
        return importer(argv[2]);
    fprintf(stderr, "usage: ipc_two export|import FILE\n");
    return 2;
}
