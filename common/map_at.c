#include "common/map_at.h"

#include <sys/mman.h>

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000 /* Linux 4.17 */
#endif

bool rg_map_at(uintptr_t at, size_t len)
{
    void *p = mmap((void *)at, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);

    if (p == MAP_FAILED)
        return false;
    if ((uintptr_t)p != at) { /* a kernel older than the flag took it as a hint */
        munmap(p, len);
        return false;
    }
    return true;
}
