/* CUDA IPC between two client processes of one gpu-server (each with its own session: a forked
 * child may not use its parent's, so the importer is this program exec'd again).
 *
 *   ipc                  exporter: allocates, writes pattern A, exports the memory (by a pointer
 *                        inside it) and an interprocess event, runs `ipc import` with the two
 *                        handles on its stdin, then checks what the importer left: its pattern
 *                        B in the first half and a memset after it (IPC_EXPECT=refused: A
 *                        everywhere). IPC_IMPORT_TENANT / IPC_IMPORT_TOKEN: the importer's
 *                        tenant (RGPU_TENANT / RGPU_TOKEN).
 *   ipc export           writes the two handles (128 bytes) to stdout and ends its session.
 *   ipc import ok|refused  reads the handles from stdin. ok: opens both, waits on the event,
 *                        checks A, writes B and the memset, records the event, allocates as
 *                        much again (opened memory is not charged to its quota), checks that
 *                        forged bytes are refused, closes. refused: both opens fail with
 *                        CUDA_ERROR_INVALID_VALUE.
 * The exporter prints PASS when every check of both held; the importer "importer passed". */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "expect.h"

#define SIZE    (6u << 20)
#define HALF    (SIZE / 2)
#define SET_LEN 4096u

struct handles {
    CUipcMemHandle mem;
    CUipcEventHandle event;
};

static unsigned char pattern(size_t i, int which)
{
    return which == 0 ? (unsigned char)(i * 7 + 3) : (unsigned char)(i * 13 + 1);
}

static void fill(unsigned char *buf, size_t n, int which)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = pattern(i, which);
}

/* Does buf[from, to) hold pattern which (or the byte value -1 - which when which < 0)? */
static int holds(const unsigned char *buf, size_t from, size_t to, int which)
{
    for (size_t i = from; i < to; i++)
        if (buf[i] != (which < 0 ? (unsigned char)(-1 - which) : pattern(i, which)))
            return 0;
    return 1;
}

static int context_up(void)
{
    CUdevice dev;
    CUcontext ctx;

    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
        printf("FAIL: no CUDA context\n");
        return -1;
    }
    return 0;
}

/* Allocate and fill with A, export by an inner pointer, record an interprocess event. */
static void export_both(CUdeviceptr *d, CUevent *ev, struct handles *h)
{
    unsigned char *a = malloc(SIZE);
    unsigned capable = 0;
    CUstream st;

    fill(a, SIZE, 0);
    OK(cuMemAlloc(d, SIZE));
    OK(cuMemcpyHtoD(*d, a, SIZE));
    OK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    OK(cuEventCreate(ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
    OK(cuEventRecord(*ev, st));
    OK(cuPointerGetAttribute(&capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, *d));
    EXPECT(capable == 1, "cuMemAlloc memory is legacy-IPC capable");
    OK(cuIpcGetMemHandle(&h->mem, *d + 4096));
    OK(cuIpcGetEventHandle(&h->event, *ev));
    EXPECT_RESULT(cuIpcGetEventHandle(NULL, *ev), CUDA_ERROR_INVALID_VALUE);
    OK(cuStreamSynchronize(st));
    OK(cuStreamDestroy(st));
    free(a);
}

static void child_env(const char *from, const char *to)
{
    const char *v = getenv(from);

    if (v != NULL)
        setenv(to, v, 1);
}

/* Run `self import mode` with the handles on its stdin; its exit status. */
static int run_importer(const struct handles *h, const char *mode)
{
    int fds[2], status;
    pid_t pid;

    if (pipe(fds) != 0 || (pid = fork()) < 0)
        return -1;
    if (pid == 0) {
        dup2(fds[0], 0);
        close(fds[0]);
        close(fds[1]);
        child_env("IPC_IMPORT_TENANT", "RGPU_TENANT");
        child_env("IPC_IMPORT_TOKEN", "RGPU_TOKEN");
        execl("/proc/self/exe", "ipc", "import", mode, (char *)NULL);
        _exit(127);
    }
    close(fds[0]);
    EXPECT(write(fds[1], h, sizeof(*h)) == (ssize_t)sizeof(*h), "handles written");
    close(fds[1]);
    if (waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int exporter(void)
{
    const char *expect = getenv("IPC_EXPECT") ? getenv("IPC_EXPECT") : "ok";
    bool refused = strcmp(expect, "refused") == 0;
    unsigned char *back = malloc(SIZE);
    struct handles h;
    CUdeviceptr d;
    CUevent ev;
    int rc;

    if (context_up() != 0)
        return 1;
    export_both(&d, &ev, &h);
    rc = run_importer(&h, refused ? "refused" : "ok");
    EXPECT(rc == 0, "the importer exited with %d", rc);
    OK(cuEventSynchronize(ev)); /* recorded by the importer too (ok) */
    OK(cuMemcpyDtoH(back, d, SIZE));
    if (refused)
        EXPECT(holds(back, 0, SIZE, 0), "the exporter's memory is untouched");
    else
        EXPECT(holds(back, 0, HALF, 1) && holds(back, HALF, HALF + SET_LEN, -1 - 0x5a) &&
                   holds(back, HALF + SET_LEN, SIZE, 0),
               "the importer's writes are in the exporter's memory");
    OK(cuEventDestroy(ev));
    OK(cuMemFree(d));
    free(back);
    printf(failures == 0 ? "PASS\n" : "FAIL: %d check(s)\n", failures);
    return failures != 0;
}

/* The handles to stdout, then the session ends with the process (nothing freed by hand). */
static int export_only(void)
{
    struct handles h;
    CUdeviceptr d;
    CUevent ev;

    if (context_up() != 0)
        return 1;
    export_both(&d, &ev, &h);
    if (failures != 0 || fwrite(&h, sizeof(h), 1, stdout) != 1)
        return 1;
    return fflush(stdout) != 0;
}

/* Forged bytes of either kind are refused. */
static void forged(const struct handles *h)
{
    struct handles f = *h;
    CUdeviceptr p;
    CUevent ev;

    f.mem.reserved[9] ^= 0x20;
    f.event.reserved[9] ^= 0x20;
    EXPECT_RESULT(cuIpcOpenMemHandle(&p, f.mem, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
                  CUDA_ERROR_INVALID_VALUE);
    EXPECT_RESULT(cuIpcOpenEventHandle(&ev, f.event), CUDA_ERROR_INVALID_VALUE);
    memset(&f, 0, sizeof(f));
    EXPECT_RESULT(cuIpcOpenMemHandle(&p, f.mem, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
                  CUDA_ERROR_INVALID_VALUE);
}

/* What the client knows of the opened pointer: device memory, the whole allocation. */
static void check_records(CUdeviceptr p)
{
    unsigned type = 0;
    CUdeviceptr base = 0;
    size_t size = 0;

    OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p + 100));
    EXPECT(type == CU_MEMORYTYPE_DEVICE, "opened memory is device memory (type %u)", type);
    OK(cuMemGetAddressRange(&base, &size, p + 100));
    EXPECT(base == p && size >= SIZE, "range [%llx, +%zu) of %llx", (unsigned long long)base, size,
           (unsigned long long)p);
}

/* Read A, write B into the first half and 0x5a after it, as the stream allows. */
static void use_memory(CUdeviceptr p, CUevent ev)
{
    unsigned char *buf = malloc(SIZE);
    CUstream st;

    OK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    OK(cuStreamWaitEvent(st, ev, 0));
    OK(cuStreamSynchronize(st));
    OK(cuMemcpy((CUdeviceptr)(uintptr_t)buf, p, SIZE)); /* direction from the client's records */
    EXPECT(holds(buf, 0, SIZE, 0), "the exporter's pattern is in the opened memory");
    fill(buf, HALF, 1);
    OK(cuMemcpy(p, (CUdeviceptr)(uintptr_t)buf, HALF));
    OK(cuMemsetD8Async(p + HALF, 0x5a, SET_LEN, st));
    OK(cuEventRecord(ev, st));
    OK(cuStreamSynchronize(st));
    OK(cuStreamDestroy(st));
    free(buf);
}

static int import_ok(const struct handles *h)
{
    CUdeviceptr p, own;
    CUevent ev;

    OK(cuIpcOpenMemHandle(&p, h->mem, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    OK(cuIpcOpenEventHandle(&ev, h->event));
    if (failures != 0)
        return 1;
    check_records(p);
    use_memory(p, ev);
    OK(cuMemAlloc(&own, SIZE)); /* within a quota that holds one SIZE, not two */
    OK(cuMemFree(own));
    forged(h);
    EXPECT_RESULT(cuIpcCloseMemHandle(p + 4096), CUDA_ERROR_INVALID_VALUE);
    OK(cuIpcCloseMemHandle(p));
    EXPECT_RESULT(cuIpcCloseMemHandle(p), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RESULT(cuMemGetAddressRange(NULL, NULL, p), CUDA_ERROR_NOT_FOUND);
    OK(cuEventDestroy(ev));
    return 0;
}

static int importer(const char *mode)
{
    struct handles h;
    CUdeviceptr p;
    CUevent ev;

    if (fread(&h, sizeof(h), 1, stdin) != 1) {
        printf("FAIL: no handles on stdin\n");
        return 1;
    }
    if (context_up() != 0)
        return 1;
    if (strcmp(mode, "refused") == 0) {
        EXPECT_RESULT(cuIpcOpenMemHandle(&p, h.mem, 0), CUDA_ERROR_INVALID_VALUE);
        EXPECT_RESULT(cuIpcOpenEventHandle(&ev, h.event), CUDA_ERROR_INVALID_VALUE);
    } else {
        import_ok(&h);
    }
    printf(failures == 0 ? "importer passed\n" : "importer FAIL: %d check(s)\n", failures);
    return failures != 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "export") == 0)
        return export_only();
    if (argc > 1 && strcmp(argv[1], "import") == 0)
        return importer(argc > 2 ? argv[2] : "ok");
    return exporter();
}
