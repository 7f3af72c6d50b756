/* gpu-server's check at start that the driver finds GPUs (server/server.h): worker-library
 * code, run in a short-lived child, so the supervisor never opens the driver itself. */
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "server/driver.h"
#include "server/server.h"

/* Check in a child process, so the supervisor itself never holds a CUDA context. */
int srv_driver_check(const struct srv_config *cfg)
{
    pid_t pid = fork();
    int status = 1;

    if (pid == 0) {
        struct srv_driver drv;
        int n = 0;
        CUresult res;
        if (srv_driver_open(cfg->driver[0] ? cfg->driver : NULL, &drv) != RG_OK)
            _exit(1);
        if ((res = drv.cuInit(0)) != CUDA_SUCCESS || drv.cuDeviceGetCount(&n) != CUDA_SUCCESS ||
            n == 0) {
            const char *name = "?";
            drv.cuGetErrorName(res, &name);
            rg_error("the CUDA driver %s finds no GPU (cuInit: %s)", drv.path, name);
            _exit(1);
        }
        for (int i = 0; i < n; i++) {
            char dev_name[256] = "";
            size_t mem = 0;
            drv.cuDeviceGetName(dev_name, sizeof(dev_name), i);
            drv.cuDeviceTotalMem(&mem, i);
            rg_info("GPU %d: %s, %.1f GiB", i, dev_name, mem / 1073741824.0);
        }
        _exit(0);
    }
    if (pid > 0)
        waitpid(pid, &status, 0);
    return pid > 0 && WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
