/* Entry points that runtimes call before anything else: cuGetProcAddress (v1 and v2),
 * cuGetExportTable and cuDriverGetVersion. None of them needs the server. */

/* cuda.h maps cuGetProcAddress to cuGetProcAddress_v2; we define both ABIs. */
#ifndef __CUDA_API_VERSION_INTERNAL
#define __CUDA_API_VERSION_INTERNAL 1
#endif
#include <stdlib.h>
#include <string.h>

#include "client/api/api.h"
#include "procaddr_table.h"

static int pa_compare(const void *key, const void *elem)
{
    return strcmp(key, ((const struct cli_pa_entry *)elem)->name);
}

/* The newest of abis[0..n) (ascending by version) at or below version, or NULL. */
static cli_pa_fn pa_pick(const struct cli_pa_abi *abis, unsigned n, int version)
{
    cli_pa_fn fn = NULL;

    for (unsigned i = 0; i < n && abis[i].version <= version; i++)
        fn = abis[i].fn;
    return fn;
}

/* The ABI of symbol for cudaVersion; per-thread variants when asked for and present (else the
 * legacy ABI, as cuda.h documents). */
static CUdriverProcAddressQueryResult pa_lookup(const char *symbol, int version, bool per_thread,
                                                cli_pa_fn *fn_p)
{
    const struct cli_pa_entry *e;
    cli_pa_fn fn = NULL;

    e = bsearch(symbol, cli_pa_entries, cli_pa_entry_count, sizeof(cli_pa_entries[0]), pa_compare);
    if (e == NULL)
        return CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (per_thread)
        fn = pa_pick(&cli_pa_abis[e->pt_first], e->pt_count, version);
    if (fn == NULL)
        fn = pa_pick(&cli_pa_abis[e->first], e->count, version);
    if (fn == NULL)
        return CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    *fn_p = fn;
    return CU_GET_PROC_ADDRESS_SUCCESS;
}

/* Documented behaviour: pfn is set to NULL when nothing is found; CUDA 12+ returns NOT_FOUND. */
CLI_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                        cuuint64_t flags,
                                        CUdriverProcAddressQueryResult *symbolStatus)
{
    CUdriverProcAddressQueryResult found;
    cli_pa_fn fn = NULL;

    if (symbol == NULL || pfn == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    found = pa_lookup(symbol, cudaVersion,
                      (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0, &fn);
    if (symbolStatus != NULL)
        *symbolStatus = found;
    *pfn = (void *)fn;
    return found == CU_GET_PROC_ADDRESS_SUCCESS ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CLI_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags)
{
    return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL);
}

/* An unknown table gives NOT_FOUND and leaves *ppExportTable alone: cudart copes with that. */
CLI_EXPORT CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    const void *table;

    if (ppExportTable == NULL || pExportTableId == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    table = cli_export_table(pExportTableId);
    if (table == NULL) {
        const unsigned char *b = (const unsigned char *)pExportTableId->bytes;
        rg_debug("cuGetExportTable: unknown table %02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
                 "%02x%02x%02x%02x%02x%02x",
                 b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
                 b[13], b[14], b[15]);
        return CUDA_ERROR_NOT_FOUND;
    }
    *ppExportTable = table;
    return CUDA_SUCCESS;
}

/* The API version of our headers, whatever the server runs: CUDA 13 runtimes refuse anything
 * older, and the integrity check hashes this same number. */
CLI_EXPORT CUresult cuDriverGetVersion(int *driverVersion)
{
    if (driverVersion == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = CUDA_VERSION;
    return CUDA_SUCCESS;
}
