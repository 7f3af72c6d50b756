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
ncclResult_t ncclReduce(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
                        nccl_stream_t);
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
ncclResult_t ncclDevCommCreate(void);
ncclResult_t ncclAlltoAll(const void *, void *, size_t, ncclDataType_t, ncclComm_t, nccl_stream_t);
ncclResult_t ncclGather(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t,
                        nccl_stream_t);
ncclResult_t ncclScatter(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t,
                         nccl_stream_t);
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *info);
ncclResult_t ncclCommWindowRegister(ncclComm_t, void *, size_t, ncclWindow_t *, int);
ncclResult_t ncclCommShrink(ncclComm_t, int *, int, ncclComm_t *, ncclConfig_t *, int);
ncclResult_t ncclCommInitRankScalable(ncclComm_t *, int, int, int, ncclUniqueId *, ncclConfig_t *);
int ncclLLA2ACalcSlots(int, int);
ncclTeam_t ncclTeamWorld(ncclComm_t);
ncclResult_t pncclAllReduce(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            nccl_stream_t);
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

/* NCCL 2.28's calls check their arguments as NCCL does, before anything is sent. */
static void calls_of_2_28_refuse_bad_arguments(void **state)
{
    ncclSimInfo_t bad = {sizeof(bad), 0x1234, 0, 0};
    ncclWindow_t win;
    ncclComm_t out;
    ncclUniqueId ids[40];
    ncclTeam_t t;

    (void)state;
    assert_int_equal(ncclAlltoAll(buf, buf, 1, ncclFloat32, NULL, NULL), ncclInvalidArgument);
    assert_int_equal(ncclAlltoAll(buf, buf, 1, (ncclDataType_t)99, &fake, NULL),
                     ncclInvalidArgument);
    assert_int_equal(ncclAlltoAll(NULL, buf, 1, ncclFloat32, &fake, NULL), ncclInvalidArgument);
    assert_int_equal(ncclGather(buf, buf, 1, ncclFloat32, 4, &fake, NULL), ncclInvalidArgument);
    assert_int_equal(ncclScatter(buf, buf, 1, ncclFloat32, -1, &fake, NULL), ncclInvalidArgument);
    assert_int_equal(ncclGroupSimulateEnd(&bad), ncclInvalidArgument);
    assert_int_equal(ncclCommWindowRegister(&fake, buf, 16, NULL, 0), ncclInvalidArgument);
    assert_int_equal(ncclCommWindowRegister(NULL, buf, 16, &win, 0), ncclInvalidArgument);
    assert_int_equal(ncclCommShrink(&fake, NULL, 2, &out, NULL, 0), ncclInvalidArgument);
    assert_int_equal(ncclCommInitRankScalable(&out, 2, 0, 40, ids, NULL), ncclInvalidArgument);
    assert_int_equal(ncclLLA2ACalcSlots(3, 9), 6);
    t = ncclTeamWorld(&fake);
    assert_int_equal(t.nRanks, 4);
    assert_int_equal(t.rank, 1);
    assert_int_equal(t.stride, 1);
}

static void groups_and_unsupported(void **state)
{
    (void)state;
    assert_int_equal(ncclGroupEnd(), ncclInvalidUsage);
    assert_int_equal(ncclDevCommCreate(), ncclInvalidUsage);
    assert_non_null(strstr(ncclGetLastError(NULL), "ncclDevCommCreate"));
    assert_int_equal(ncclDevCommCreate(), ncclInvalidUsage); /* logged once, refused always */
    assert_string_equal(ncclGetErrorString(ncclSuccess), "success");
    assert_non_null(strstr(ncclGetErrorString(ncclRemoteError), "peer"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(collectives_refuse_bad_arguments),
        cmocka_unit_test(communicators_refuse_bad_arguments),
        cmocka_unit_test(calls_of_2_28_refuse_bad_arguments),
        cmocka_unit_test(groups_and_unsupported),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
