/* One status type for internal errors; translated to CUresult at the client's edge. */
#ifndef RGPU_COMMON_STATUS_H
#define RGPU_COMMON_STATUS_H

typedef enum {
    RG_OK = 0,
    RG_ERR_INVALID = -1,     /* bad argument or malformed input */
    RG_ERR_NOMEM = -2,       /* host allocation failed */
    RG_ERR_IO = -3,          /* system call failed (errno is kept) */
    RG_ERR_CLOSED = -4,      /* peer closed the connection */
    RG_ERR_TIMEOUT = -5,     /* deadline passed */
    RG_ERR_UNSUPPORTED = -6, /* operation not offered by this backend */
    RG_ERR_PROTO = -7,       /* protocol violation: malformed or oversized frame */
    RG_ERR_REFUSED = -8,     /* peer refused (handshake, auth, admission) */
    RG_ERR_NOT_FOUND = -9,
    RG_ERR_BUSY = -10,
} rg_status_t;

const char *rg_status_str(rg_status_t status);

#endif
