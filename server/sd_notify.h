/* Service manager notifications: systemd's sd_notify protocol without libsystemd.
 * Under a unit with Type=notify, systemd passes $NOTIFY_SOCKET, the path of a unix datagram
 * socket (or "@name" for one in the abstract namespace); a notification is one datagram of
 * newline-separated KEY=VALUE lines: READY=1 once the service serves, RELOADING=1 and READY=1
 * around a reload, STOPPING=1 when it begins to stop, STATUS=text at any time. */
#ifndef RGPU_SERVER_SD_NOTIFY_H
#define RGPU_SERVER_SD_NOTIFY_H

#include "common/status.h"

/* Send state (e.g. "READY=1\nSTATUS=listening on 0.0.0.0:7070") to $NOTIFY_SOCKET.
 * RG_OK when sent or when there is no $NOTIFY_SOCKET (not started by a service manager);
 * RG_ERR_INVALID for an address that is neither a path nor "@name"; RG_ERR_IO when the
 * send fails (logged once, here). Never blocks. A RELOADING=1 state gets the
 * MONOTONIC_USEC=... line that systemd 253 and later ask for added. */
rg_status_t srv_notify(const char *state);

#endif
