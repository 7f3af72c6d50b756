/* NCCL on the worker (server/handlers_nccl.c): the GPU host's real NCCL, loaded at the first
 * NCCL call of a session, runs the NCCL shim's operations (nccl/) in the session's context and
 * on its streams. Trust model and configuration: docs/nccl.md. */
#ifndef RGPU_SERVER_NCCL_H
#define RGPU_SERVER_NCCL_H

#include "server/server.h"
#include "server/session.h"

/* Once per worker, before any call: nccl_library (default libnccl.so.2), nccl_secret (mixed
 * into the key that binds unique ids to a tenant), nccl_timeout (seconds a collective may
 * stay unfinished before its communicator is aborted; default 600) and nccl_connect_pairs
 * (connect the point-to-point pairs of a communicator the session holds whole at its creation;
 * default yes). */
void srv_nccl_configure(const struct srv_config *cfg);
/* A call that may wait for the GPU (an op flagged `synchronizing`) is about to run: a
 * communicator whose latest collectives were issued while the watchdog's event was still
 * pending on their stream gets the event recorded again after them, so that the watchdog sees
 * them in flight while the call waits (a survivor blocked in a synchronization whose peer died
 * is then found: nccl_watchdog.c). Costs one flag test when nothing is pending. The session's
 * NCCL state is the component srv_nccl_component (server/components.def). */
void srv_nccl_before_wait(struct srv_session *s);

#endif
