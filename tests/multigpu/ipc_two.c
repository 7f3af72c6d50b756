/* CUDA IPC with two servers that answer the same addresses (multigpu_e2e.sh): a process exports
 * device memory and an interprocess event (as PyTorch's _share_cuda_ does) on its device DEV;
 * a process of servers a and b opens both on device 1 (server b).
 * Opened where device 0's memory already is, the open is refused (CUDA_ERROR_MAP_FAILED: the
 * worker would answer the same address again); opened clear of it, it works and names device 1.
 * Usage: ipc_two export FILE [DEV]  (writes the handles to FILE, waits for FILE.done; DEV 0 of
 *                                     server b alone, or 1 of servers a and b)
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

static int exporter(const char *file, int dev)
{
    CUcontext c;
    CUdeviceptr d;
    CUipcMemHandle h;
    CUipcEventHandle eh;
    CUevent ev;
    unsigned char *p = malloc(LEN);
    char done[512];
    FILE *f;

    for (size_t i = 0; i < LEN; i++)
        p[i] = byte_at(i);
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&c, dev));
    CHECK(cuCtxSetCurrent(c));
    CHECK(cuMemAlloc(&d, LEN));
    CHECK(cuMemcpyHtoD(d, p, LEN));
    CHECK(cuIpcGetMemHandle(&h, d));
    CHECK(cuEventCreate(&ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventRecord(ev, NULL));
    CHECK(cuIpcGetEventHandle(&eh, ev));
    snprintf(done, sizeof(done), "%s.tmp", file);
    EXPECT((f = fopen(done, "wb")) != NULL && fwrite(&h, sizeof(h), 1, f) == 1 &&
               fwrite(&eh, sizeof(eh), 1, f) == 1 && fclose(f) == 0,
           "cannot write %s", done);
    EXPECT(rename(done, file) == 0, "cannot rename to %s", file);
    snprintf(done, sizeof(done), "%s.done", file);
    for (int i = 0; i < 600 && access(done, F_OK) != 0; i++) /* the importer is done */
        usleep(50000);
    CHECK(cuEventDestroy(ev));
    CHECK(cuMemFree(d));
    free(p);
    return 0;
}

static int importer(const char *file)
{
    CUcontext c0, c1;
    CUdeviceptr a0, b1, opened;
    CUipcMemHandle h;
    CUipcEventHandle eh;
    CUevent ev;
    unsigned char *p = malloc(LEN);
    char done[512];
    FILE *f = NULL;
    int ord = -1;
    CUresult r;

    for (int i = 0; i < 600 && (f = fopen(file, "rb")) == NULL; i++)
        usleep(50000);
    EXPECT(f != NULL && fread(&h, sizeof(h), 1, f) == 1 && fread(&eh, sizeof(eh), 1, f) == 1,
           "no handles in %s", file);
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
    CHECK(cuIpcOpenEventHandle(&ev, eh)); /* the exporter's event, waited for on device 1 */
    CHECK(cuEventSynchronize(ev));
    CHECK(cuEventDestroy(ev));
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
    if ((argc == 3 || argc == 4) && strcmp(argv[1], "export") == 0)
        return exporter(argv[2], argc == 4 ? atoi(argv[3]) : 0);
    if (argc == 3 && strcmp(argv[1], "import") == 0)
        return importer(argv[2]);
    fprintf(stderr, "usage: ipc_two export FILE [DEV] | import FILE\n");
    return 2;
}
