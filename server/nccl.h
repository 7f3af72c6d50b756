/* NCCL on the worker (server/handlers_nccl.c): the GPU host's real NCCL, loaded at the first
 * NCCL call of a session, runs the NCCL shim's operations (nccl/) in the session's context and
 * on its streams. Trust model and configuration: docs/nccl.md. */
#ifndef RGPU_SERVER_NCCL_H
#define RGPU_SERVER_NCCL_H

#include "server/server.h"
#include "server/session.h"

/* Once per worker, before any call: nccl_library (default libnccl.so.2), nccl_secret (mixed
 * into the key that binds unique ids to a tenant) and nccl_timeout (seconds a collective may
 * stay unfinished before its communicator is aborted; default 600). */
void srv_nccl_configure(const struct srv_config *cfg);
/* End of the session, while its contexts live: stop the watchdog, abort every communicator
 * (peers may be gone, so never a blocking destroy), free NCCL memory, give the quota back. */
void srv_nccl_teardown(struct srv_session *s);

#endif
