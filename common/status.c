#include "common/status.h"

const char *rg_status_str(rg_status_t status)
{
    switch (status) {
    case RG_OK:
        return "ok";
    case RG_ERR_INVALID:
        return "invalid argument";
    case RG_ERR_NOMEM:
        return "out of host memory";
    case RG_ERR_IO:
        return "i/o error";
    case RG_ERR_CLOSED:
        return "connection closed by peer";
    case RG_ERR_TIMEOUT:
        return "timed out";
    case RG_ERR_UNSUPPORTED:
        return "not supported";
    case RG_ERR_PROTO:
        return "protocol violation";
    case RG_ERR_REFUSED:
        return "refused by peer";
    case RG_ERR_NOT_FOUND:
        return "not found";
    case RG_ERR_BUSY:
        return "busy";
    }
    return "unknown status";
}
