/* Opening the driver backend: the real libcuda.so.1, or a test double given by path. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "server/driver.h"

#define STR2(x) #x
#define STR(x)  STR2(x)

rg_status_t srv_driver_open(const char *path, struct srv_driver *drv)
{
    memset(drv, 0, sizeof(*drv));
    snprintf(drv->path, sizeof(drv->path), "%s", path ? path : "libcuda.so.1");
    drv->dl = dlopen(drv->path, RTLD_NOW | RTLD_LOCAL);
    if (drv->dl == NULL) {
        rg_error("cannot load the CUDA driver %s: %s", drv->path, dlerror());
        return RG_ERR_NOT_FOUND;
    }
    /* STR(fn) expands cuda.h's #define first: cuMemAlloc -> "cuMemAlloc_v2". */
#define SRV_DRIVER_RESOLVE(fn)                                                                     \
    drv->fn = (__typeof__(fn) *)dlsym(drv->dl, STR(fn));                                           \
    if (drv->fn == NULL) {                                                                         \
        rg_error("the CUDA driver %s lacks %s", drv->path, STR(fn));                               \
        srv_driver_close(drv);                                                                     \
        return RG_ERR_NOT_FOUND;                                                                   \
    }
    SRV_DRIVER_FUNCS(SRV_DRIVER_RESOLVE)
#undef SRV_DRIVER_RESOLVE
    return RG_OK;
}

void srv_driver_close(struct srv_driver *drv)
{
    if (drv->dl != NULL)
        dlclose(drv->dl);
    drv->dl = NULL;
}
