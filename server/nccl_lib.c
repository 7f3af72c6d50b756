/* The GPU host's NCCL on the worker: nccl_library dlopen'ed at a session's first NCCL call, its
 * entry points bound (those of every NCCL rgpu runs required; NCCL 2.28's further ones optional,
 * announced to the shim as NCCL_FEAT_* so that it answers as that NCCL would for the missing),
 * and how it connects: a session that drives several devices of this server connects its
 * communicators eagerly at creation (NCCL_RUNTIME_CONNECT=0 unless the operator set it), because
 * NCCL's lazy connection at a first collective waits on the host for the peers' own first call,
 * which for ranks of one session would sit behind it in the session's call order. NCCL still
 * connects point-to-point pairs lazily, at the first send/receive between two ranks, whatever
 * NCCL_RUNTIME_CONNECT says; for a communicator whose ranks one group's end made all in this
 * session, the worker connects every pair right after that end (nccl_connect_pairs, default on;
 * handlers_nccl_coll.c, "Pairs"), at the cost of n(n-1) connections' memory at creation. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "server/nccl_internal.h"

struct nccl_lib nccl_lib;
char nccl_lib_path[256] = "libnccl.so.2";
unsigned nccl_timeout_ms = 600000;
bool nccl_connect_pairs = true;
static int lib_state; /* 0 not tried, 1 loaded, -1 failed (logged once) */

void srv_nccl_configure(const struct srv_config *cfg)
{
    if (cfg->nccl_library[0] != '\0')
        snprintf(nccl_lib_path, sizeof(nccl_lib_path), "%s", cfg->nccl_library);
    if (cfg->nccl_timeout_s > 0)
        nccl_timeout_ms = (unsigned)cfg->nccl_timeout_s * 1000u;
    nccl_connect_pairs = cfg->nccl_connect_pairs;
    nccl_id_configure(cfg);
}

static bool bind_required(void *dl)
{
    struct nccl_lib *l = &nccl_lib;
#define BIND(f) (*(void **)&l->f = dlsym(dl, "nccl" #f)) != NULL
    return BIND(GetVersion) && BIND(GetUniqueId) && BIND(CommInitRankConfig) && BIND(CommSplit) &&
           BIND(CommFinalize) && BIND(CommDestroy) && BIND(CommAbort) && BIND(CommGetAsyncError) &&
           BIND(CommCount) && BIND(CommUserRank) && BIND(AllReduce) && BIND(Broadcast) &&
           BIND(Reduce) && BIND(AllGather) && BIND(ReduceScatter) && BIND(Send) && BIND(Recv) &&
           BIND(GroupStart) && BIND(GroupEnd) && BIND(MemAlloc) && BIND(MemFree) &&
           BIND(CommRegister) && BIND(CommDeregister) && BIND(RedOpCreatePreMulSum) &&
           BIND(RedOpDestroy);
#undef BIND
}

static void bind_optional(void *dl)
{
    static const struct {
        const char *name;
        size_t offset;
        uint64_t feature;
    } opt[] = {
        {"ncclAlltoAll", offsetof(struct nccl_lib, AlltoAll), NCCL_FEAT_ALLTOALL},
        {"ncclGather", offsetof(struct nccl_lib, Gather), NCCL_FEAT_GATHER},
        {"ncclScatter", offsetof(struct nccl_lib, Scatter), NCCL_FEAT_SCATTER},
        {"ncclGroupSimulateEnd", offsetof(struct nccl_lib, GroupSimulateEnd), NCCL_FEAT_SIMULATE},
        {"ncclCommWindowRegister", offsetof(struct nccl_lib, CommWindowRegister), 0},
        {"ncclCommWindowDeregister", offsetof(struct nccl_lib, CommWindowDeregister), 0},
        {"ncclCommShrink", offsetof(struct nccl_lib, CommShrink), NCCL_FEAT_SHRINK},
        {"ncclCommRevoke", offsetof(struct nccl_lib, CommRevoke), NCCL_FEAT_REVOKE},
        {"ncclCommInitRankScalable", offsetof(struct nccl_lib, CommInitRankScalable),
         NCCL_FEAT_SCALABLE},
        {"ncclTeamLsa", offsetof(struct nccl_lib, TeamLsa), 0},
        {"ncclTeamRail", offsetof(struct nccl_lib, TeamRail), 0},
        {"ncclTeamRankToLsa", offsetof(struct nccl_lib, TeamRankToLsa), 0},
    };
    struct nccl_lib *l = &nccl_lib;

    l->features = NCCL_FEAT_ASYNC_INIT;
    for (size_t i = 0; i < sizeof(opt) / sizeof(opt[0]); i++) {
        void *f = dlsym(dl, opt[i].name);

        memcpy((char *)l + opt[i].offset, &f, sizeof(f));
        if (f != NULL)
            l->features |= opt[i].feature;
    }
    if (l->CommWindowRegister != NULL && l->CommWindowDeregister != NULL)
        l->features |= NCCL_FEAT_WINDOW;
    if (l->TeamLsa != NULL && l->TeamRail != NULL && l->TeamRankToLsa != NULL)
        l->features |= NCCL_FEAT_TEAMS;
}

/* Devices of this server the session has made contexts on. */
static int devices_in_use(struct srv_session *s)
{
    int n = 0;

    for (int d = 0; d < s->ndevices && d < SRV_MAX_DEVICES; d++)
        n += s->primary[d] != NULL;
    return n > 0 || srv_ctx_created(s) == 0 ? n : 1;
}

bool nccl_lib_ready(struct srv_session *s)
{
    void *dl;

    if (lib_state != 0)
        return lib_state > 0;
    lib_state = -1;
    /* Before NCCL reads its parameters (at its first communicator). */
    if (devices_in_use(s) >= 2 && getenv("NCCL_RUNTIME_CONNECT") == NULL) {
        setenv("NCCL_RUNTIME_CONNECT", "0", 0);
        rg_info("nccl: the session drives %d devices: communicators connect at creation "
                "(NCCL_RUNTIME_CONNECT=0)",
                devices_in_use(s));
    }
    if ((dl = dlopen(nccl_lib_path, RTLD_NOW | RTLD_LOCAL)) == NULL) {
        rg_error("nccl: cannot load %s (nccl_library): %s", nccl_lib_path, dlerror());
        return false;
    }
    if (dlsym(dl, "rgpuNcclShim") != NULL) {
        rg_error("nccl: %s is rgpu's own NCCL shim, not the GPU host's NCCL; set nccl_library",
                 nccl_lib_path);
        return false;
    }
    if (!bind_required(dl) || nccl_lib.GetVersion(&nccl_lib.version) != ncclSuccess) {
        rg_error("nccl: %s lacks an NCCL entry point rgpu needs: %s", nccl_lib_path, dlerror());
        return false;
    }
    bind_optional(dl);
    rg_info("nccl: %s, version %d, features %#llx", nccl_lib_path, nccl_lib.version,
            (unsigned long long)nccl_lib.features);
    lib_state = 1;
    return true;
}
