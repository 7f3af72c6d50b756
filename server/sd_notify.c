/* sd_notify's datagram protocol (server/sd_notify.h). */
#include "server/sd_notify.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"

/* The socket address of $NOTIFY_SOCKET; its length through len_p. */
static rg_status_t notify_addr(const char *name, struct sockaddr_un *sa, socklen_t *len_p)
{
    size_t n = strlen(name);

    if ((name[0] != '/' && name[0] != '@') || n < 2 || n >= sizeof(sa->sun_path))
        return RG_ERR_INVALID;
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    memcpy(sa->sun_path, name, n);
    if (name[0] == '@')
        sa->sun_path[0] = '\0'; /* abstract namespace: no terminating NUL counts */
    *len_p = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (name[0] == '/'));
    return RG_OK;
}

rg_status_t srv_notify(const char *state)
{
    const char *name = getenv("NOTIFY_SOCKET");
    struct sockaddr_un sa;
    struct timespec now;
    socklen_t len;
    char msg[512];
    int fd, n;

    if (name == NULL || name[0] == '\0')
        return RG_OK;
    if (notify_addr(name, &sa, &len) != RG_OK) {
        rg_warn("NOTIFY_SOCKET=%s is not a socket path or @name; no notifications sent", name);
        return RG_ERR_INVALID;
    }
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (strncmp(state, "RELOADING=1", 11) == 0)
        n = snprintf(msg, sizeof(msg), "%s\nMONOTONIC_USEC=%llu", state,
                     (unsigned long long)now.tv_sec * 1000000ULL +
                         (unsigned long long)now.tv_nsec / 1000ULL);
    else
        n = snprintf(msg, sizeof(msg), "%s", state);
    if (n < 0 || (size_t)n >= sizeof(msg))
        return RG_ERR_INVALID;
    if ((fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) < 0) {
        rg_warn("sd_notify: socket: %m");
        return RG_ERR_IO;
    }
    if (sendto(fd, msg, (size_t)n, MSG_NOSIGNAL, (struct sockaddr *)&sa, len) != n) {
        rg_warn("sd_notify: cannot send to %s: %m", name);
        close(fd);
        return RG_ERR_IO;
    }
    close(fd);
    return RG_OK;
}
