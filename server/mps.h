/* The MPS control daemon a gpu-server with "[server] sharing = mps" owns (docs/tenants.md):
 * started by the supervisor before it accepts anything, with its own pipe and log directories
 * (so it neither meets nor disturbs another MPS on the host), and stopped when the supervisor
 * ends. The workers become its clients (server/tenancy.c sets their environment from the
 * directories this writes into the session table). */
#ifndef RGPU_SERVER_MPS_H
#define RGPU_SERVER_MPS_H

#include <sys/types.h>

#include "common/status.h"
#include "server/session_table.h"

struct srv_mps;

/* Start nvidia-cuda-mps-control (found on PATH) in the foreground as a child, in a new
 * directory under $XDG_RUNTIME_DIR (or /tmp), and wait up to 5 s for it to come up; on success
 * the table says SRV_SHARING_MPS and names the directories. Logged; RG_ERR_IO when it cannot
 * start (the server then refuses to start: the operator asked for MPS). */
rg_status_t srv_mps_start(struct srv_table *t, struct srv_mps **mps_p);
/* The supervisor reaped pid: if it was the daemon, say so (sessions that start afterwards fail
 * to connect to it and run without MPS; running ones lose their GPU work). True if it was. */
bool srv_mps_reaped(struct srv_mps *m, pid_t pid, int status);
/* Ask the daemon to quit, wait up to 10 s, kill it if it is still there, remove its
 * directories. NULL: nothing. */
void srv_mps_stop(struct srv_mps *m);

#endif
