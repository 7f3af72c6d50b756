/* Peer access as the servers' drivers answer it (multigpu_e2e.sh): devices 0 and 1 of one
 * server are peers when its driver says so (the fake: FAKECUDA_DEVICES=2, FAKECUDA_P2P=1),
 * with the driver's P2P attributes and cuCtxEnablePeerAccess / cuCtxDisablePeerAccess done by
 * that driver; devices of two servers never are. Prints PASS.
 * Usage: p2p_answers EXPECTED (1: devices 0 and 1 are peers, 0: they are not) */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#define EXPECT_RES(call, want)                                                                     \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != (want)) {                                                                        \
            fprintf(stderr, "line %d: %s returned %d, expected %d\n", __LINE__, #call, (int)r_,    \
                    (int)(want));                                                                  \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define CHECK(call) EXPECT_RES(call, CUDA_SUCCESS)
#define EXPECT(cond, what, v)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "line %d: %s is %d\n", __LINE__, what, v);                             \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    int peers = argc > 1 ? atoi(argv[1]) : 0, n = 0, v = -1;
    CUcontext c0, c1;

    CHECK(cuInit(0));
    CHECK(cuDeviceGetCount(&n));
    EXPECT(n == 2, "the device count", n);
    for (int i = 0; i < 2; i++) { /* asked twice: the second answer is the cached one */
        CHECK(cuDeviceCanAccessPeer(&v, 0, 1));
        EXPECT(v == peers, "cuDeviceCanAccessPeer(0, 1)", v);
        CHECK(cuDeviceCanAccessPeer(&v, 1, 0));
        EXPECT(v == peers, "cuDeviceCanAccessPeer(1, 0)", v);
    }
    CHECK(cuDeviceCanAccessPeer(&v, 1, 1));
    EXPECT(v == 0, "cuDeviceCanAccessPeer(1, 1)", v);
    EXPECT_RES(cuDeviceCanAccessPeer(&v, 0, 2), CUDA_ERROR_INVALID_DEVICE);
    CHECK(cuDeviceGetP2PAttribute(&v, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 1));
    EXPECT(v == peers, "ACCESS_SUPPORTED", v);
    CHECK(cuDeviceGetP2PAttribute(&v, CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK, 1, 0));
    EXPECT(v == (peers ? 3 : 0), "PERFORMANCE_RANK (the fake driver's: 3)", v);
    EXPECT_RES(cuDeviceGetP2PAttribute(&v, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 1, 1),
               CUDA_ERROR_INVALID_DEVICE);

    CHECK(cuDevicePrimaryCtxRetain(&c0, 0));
    CHECK(cuDevicePrimaryCtxRetain(&c1, 1));
    CHECK(cuCtxSetCurrent(c0));
    if (peers) {
        CHECK(cuCtxEnablePeerAccess(c1, 0));
        EXPECT_RES(cuCtxEnablePeerAccess(c1, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
        CHECK(cuCtxDisablePeerAccess(c1));
    } else {
        EXPECT_RES(cuCtxEnablePeerAccess(c1, 0), CUDA_ERROR_PEER_ACCESS_UNSUPPORTED);
    }
    EXPECT_RES(cuCtxDisablePeerAccess(c1), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
    printf("PASS\n");
    return 0;
}
