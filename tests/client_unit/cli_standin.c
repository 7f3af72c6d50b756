/* Stand-ins for the client functions export_tables.c uses, so the tables are tested alone:
 * one device with a known UUID and PCI location, and a settable current context. */
#include "cli_standin.h"

struct cli_ctx standin_primary = {.h = {.id = 0x4201, .magic = CLI_HANDLE_MAGIC}};
struct cli_ctx *standin_current;
int standin_ndev = 1;

static const struct cli_device standin_dev = {
    .ordinal = 0,
    .uuid = {.bytes = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}},
    .pci_domain = 0,
    .pci_bus = 0x3b,
    .pci_device = 0,
};

struct cli_ctx *cli_ctx_current(void)
{
    return standin_current;
}
struct cli_ctx *cli_primary_ctx(int dev)
{
    return dev == 0 ? &standin_primary : NULL;
}
int cli_device_count(void)
{
    return standin_ndev;
}
void (*standin_teardown)(struct cli_ctx *ctx);
void cli_ctx_on_teardown(void (*hook)(struct cli_ctx *ctx))
{
    standin_teardown = hook;
}
const struct cli_device *cli_device(int i)
{
    return i == 0 ? &standin_dev : NULL;
}

/* The module walk (module.c) visits two functions of any module; the second visit stops it. */
CUresult cli_module_walk(CUcontext ctx, CUmodule mod, cli_function_visitor visit, void *user)
{
    if (visit(user, (CUfunction)0x10, "first", 0) != 0)
        return (CUresult)1;
    return visit(user, (CUfunction)0x20, "second", 0) != 0 ? (CUresult)1 : CUDA_SUCCESS;
}

/* compute_cache.c counts its lookups for RGPU_STATS (call_stats.c). */
void cli_stats_note_compute_cache(bool hit)
{
    (void)hit;
}
