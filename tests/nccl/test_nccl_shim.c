/* The NCCL shim's own checks, with no rgpu server: each call below must be refused by the shim
 * before it would reach the client library (which, with no server, would answer
 * ncclSystemError or ncclUnhandledCudaError instead of the result checked here). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "nccl/nccl_shim.h"

ncclResult_t ncclAllReduce(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                           nccl_stream_t);
ncclResult_t ncclBroadcast(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t,
                           nccl_stream_t);
ncclResult_t ncclReduce(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, int,
                        ncclComm_t, nccl_stream_t);
ncclResult_t ncclSend(const void *, size_t, ncclDataType_t, int, ncclComm_t, nccl_stream_t);
ncclResult_t ncclRecv(void *, size_t, ncclDataType_t, int, ncclComm_t, nccl_stream_t);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config);
ncclResult_t ncclCommCount(ncclComm_t comm, int *n);
ncclResult_t ncclCommUserRank(ncclComm_t comm, int *r);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommSplit(ncclComm_t, int, int, ncclComm_t *, ncclConfig_t *);
ncclResult_t ncclRedOpDestroy(ncclRedOp_t, ncclComm_t);
ncclResult_t ncclMemAlloc(void **p, size_t n);
ncclResult_t ncclAlltoAll(void);
ncclResult_t pncclAllReduce(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                            ncclComm_t, nccl_stream_t);
const char *ncclGetErrorString(ncclResult_t r);
const char *ncclGetLastError(ncclComm_t comm);

/* A communicator as the shim makes them (rank 1 of 4), never known to any worker. */
static struct ncclComm fake = {.magic = NCCL_SHIM_COMM_MAGIC, .nranks = 4, .rank = 1, .id = 77};
static float buf[16];

static void collectives_refuse_bad_arguments(void **state)
{
    (void)state;
    assert_int_equal(ncclAllReduce(buf, buf, 4, ncclFloat32, ncclSum, NULL, NULL),
                     ncclInvalidArgument);
    assert_int_equal(ncclAllReduce(buf, buf, 4, (ncclDataType_t)12, ncclSum, &fake, NULL),
                     ncclInvalidArgument);
    assert_int_equal(ncclAllReduce(buf, buf, 4, ncclFloat32, (ncclRedOp_t)-3, &fake, NULL),
                     ncclInvalidArgument);
    assert_int_equal(ncclAllReduce(NULL, buf, 4, ncclFloat32, ncclSum, &fake, NULL),
                     ncclInvalidArgument);
    assert_int_equal(ncclBroadcast(buf, buf, 4, ncclFloat32, 4, &fake, NULL), ncclInvalidArgument);
    assert_int_equal(ncclBroadcast(buf, buf, 4, ncclFloat32, -1, &fake, NULL), ncclInvalidArgument);
    assert_int_equal(ncclReduce(buf, buf, 4, ncclFloat32, ncclSum, 9, &fake, NULL),
                     ncclInvalidArgument);
    assert_int_equal(ncclSend(buf, 4, ncclFloat32, 4, &fake, NULL), ncclInvalidArgument);
    assert_int_equal(ncclRecv(NULL, 4, ncclFloat32, 0, &fake, NULL), ncclInvalidArgument);
    assert_int_equal(pncclAllReduce(buf, buf, 4, ncclFloat32, ncclSum, NULL, NULL),
                     ncclInvalidArgument);
    assert_non_null(strstr(ncclGetLastError(NULL), "ncclAllReduce"));
}

static void communicators_refuse_bad_arguments(void **state)
{
    ncclUniqueId id = {{0}};
    ncclConfig_t config = {.size = sizeof(config), .magic = 0x1234};
    ncclComm_t comm;
    int n = 0;

    (void)state;
    assert_int_equal(ncclCommInitRank(&comm, 2, id, 2), ncclInvalidArgument);
    assert_int_equal(ncclCommInitRank(&comm, 0, id, 0), ncclInvalidArgument);
    assert_int_equal(ncclCommInitRank(NULL, 1, id, 0), ncclInvalidArgument);
    assert_int_equal(ncclCommInitRankConfig(&comm, 1, id, 0, &config), ncclInvalidArgument);
    assert_int_equal(ncclCommSplit(&fake, -5, 0, &comm, NULL), ncclInvalidArgument);
    assert_int_equal(ncclCommCount(&fake, &n), ncclSuccess);
    assert_int_equal(n, 4);
    assert_int_equal(ncclCommUserRank(&fake, &n), ncclSuccess);
    assert_int_equal(n, 1);
    assert_int_equal(ncclCommCount(NULL, &n), ncclInvalidArgument);
    assert_int_equal(ncclCommDestroy(NULL), ncclSuccess); /* NULL is a no-op, as in NCCL */
    assert_int_equal(ncclCommFinalize(NULL), ncclInvalidArgument);
    assert_int_equal(ncclRedOpDestroy(ncclSum, &fake), ncclInvalidArgument);
    assert_int_equal(ncclMemAlloc(NULL, 16), ncclInvalidArgument);
}

static void groups_and_unsupported(void **state)
{
    (void)state;
    assert_int_equal(ncclGroupEnd(), ncclInvalidUsage);
    assert_int_equal(ncclAlltoAll(), ncclInvalidUsage);
    assert_non_null(strstr(ncclGetLastError(NULL), "ncclAlltoAll"));
    assert_int_equal(ncclAlltoAll(), ncclInvalidUsage); /* logged once, refused always */
    assert_string_equal(ncclGetErrorString(ncclSuccess), "success");
    assert_non_null(strstr(ncclGetErrorString(ncclRemoteError), "peer"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(collectives_refuse_bad_arguments),
        cmocka_unit_test(communicators_refuse_bad_arguments),
        cmocka_unit_test(groups_and_unsupported),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
