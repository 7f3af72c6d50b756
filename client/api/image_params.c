/* Kernel parameter layouts read from a module image, so that a kernel's first launch needs no
 * round trip to ask the driver (FUNC_GET_PARAM_LAYOUT): cuDNN loads a runtime-compiled cubin
 * for about every new key length of an LLM decode, and asking cost 1.7 ms per kernel there.
 *
 * A cubin (an ELF of machine EM_CUDA) describes each kernel in a section ".nv.info.<name>": a
 * run of records {u8 format, u8 attribute, u16 value or size}, a format-4 record followed by
 * `size` bytes. A parameter is an EIATTR_KPARAM_INFO record (0x17, 12 bytes: u32 index, u16
 * ordinal, u16 offset, u32 whose top 14 bits are the size); EIATTR_CBANK_PARAM_SIZE (0x19) is
 * where the parameters end. The same ordinals, offsets and sizes as cuKernelGetParamInfo
 * (checked on an H100 with RGPU_LAYOUT_CHECK=1, docs/frameworks.md). A fatbin is read through
 * its first uncompressed ELF entry: a parameter layout is the C++ ABI's, the same for every
 * architecture. Whatever is not understood (a compressed entry, another record layout, gaps
 * between parameters that no alignment explains) leaves that kernel out, and the client asks
 * the worker as before. A kernel is looked up when the program asks for it (by name, in the
 * section headers): PyTorch registers hundreds of MiB of fatbins at start, most of whose
 * kernels never run, so nothing is read at load. */
#include <elf.h>
#include <stdlib.h>
#include <string.h>

#include "client/api/image_params.h"

#define FATBIN_MAGIC            0xBA55ED50u
#define FATBIN_KIND_ELF         2
#define FATBIN_FLAGS_KNOWN      0x00ffull /* 64-bit, debug, Linux...; compression bits are above */
#define EM_CUDA_                190
#define SHT_CUDA_INFO           0x70000000u
#define INFO_PREFIX             ".nv.info."
#define EIFMT_SVAL              4
#define EIATTR_PARAM_CBANK      0x0a
#define EIATTR_KPARAM_INFO      0x17
#define EIATTR_CBANK_PARAM_SIZE 0x19
#define PARAMS_MAX              1024
/* Padding accepted between parameters. Offsets are relative to the parameter bank, whose base
 * is not aligned as much as a grid-constant CUtensorMap (64 bytes): nvcc puts one after a char
 * at offset 112. A size too large for the record's 14 bits would leave a gap of 16 KiB or more. */
#define ALIGN_GAP_MAX 255

struct kernel_params {
    unsigned n;
    uint32_t *off, *size; /* n each, by ordinal */
};

static uint16_t rd16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

/* One parameter record into kp; false when it is malformed or repeats an ordinal. */
static bool param_record(struct kernel_params *kp, const uint8_t *v, uint16_t len)
{
    unsigned ord = rd16(v + 4);
    uint32_t size = rd32(v + 8) >> 18;

    if (len != 12 || ord >= PARAMS_MAX || size == 0)
        return false;
    if (ord >= kp->n) {
        uint32_t *off = realloc(kp->off, (ord + 1) * sizeof(*off));
        uint32_t *sz = off != NULL ? realloc(kp->size, (ord + 1) * sizeof(*sz)) : NULL;

        if (off != NULL)
            kp->off = off;
        if (sz == NULL)
            return false;
        kp->size = sz;
        for (unsigned i = kp->n; i <= ord; i++)
            kp->size[i] = 0; /* not seen yet */
        kp->n = ord + 1;
    }
    if (kp->size[ord] != 0)
        return false;
    kp->off[ord] = rd16(v + 6);
    kp->size[ord] = size;
    return true;
}

/* The parameters fill [0, end) in ordinal order with no more than alignment padding between
 * them, and end where the record of the parameter bank's size says (when there is one). */
static bool params_consistent(const struct kernel_params *kp, long bank_size)
{
    size_t at = 0;

    for (unsigned i = 0; i < kp->n; i++) {
        if (kp->size[i] == 0 || kp->off[i] < at || kp->off[i] - at > ALIGN_GAP_MAX)
            return false;
        at = (size_t)kp->off[i] + kp->size[i];
    }
    return bank_size < 0 ? kp->n == 0 || at > 0 : (size_t)bank_size == at;
}

/* Reads one .nv.info.<name> section's records; false when the layout cannot be trusted. */
static bool info_section(struct kernel_params *kp, const uint8_t *p, size_t len)
{
    long bank_size = -1;
    bool bank = false;

    for (size_t i = 0; i + 4 <= len;) {
        uint8_t fmt = p[i], attr = p[i + 1];
        uint16_t val = rd16(p + i + 2);
        size_t rec = fmt == EIFMT_SVAL ? 4 + (size_t)val : 4;

        if (fmt < 1 || fmt > EIFMT_SVAL || i + rec > len)
            return false;
        if (attr == EIATTR_KPARAM_INFO && (fmt != EIFMT_SVAL || !param_record(kp, p + i + 4, val)))
            return false;
        if (attr == EIATTR_CBANK_PARAM_SIZE)
            bank_size = val;
        bank |= attr == EIATTR_PARAM_CBANK;
        i += rec;
    }
    if (kp->n == 0 && (bank || bank_size > 0)) /* parameters described some other way */
        return false;
    return params_consistent(kp, bank_size);
}

/* The section header table of an EM_CUDA ELF64 in [elf, elf + len): its offset, count and
 * string table; false when there is none (headers are copied out: an image need not be
 * aligned). */
static bool elf_sections(const uint8_t *elf, size_t len, size_t *shoff_p, unsigned *n_p,
                         Elf64_Shdr *strtab)
{
    Elf64_Ehdr eh;

    if (len < sizeof(eh))
        return false;
    memcpy(&eh, elf, sizeof(eh));
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
        eh.e_machine != EM_CUDA_ || eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shoff > len ||
        (len - eh.e_shoff) / sizeof(Elf64_Shdr) < eh.e_shnum || eh.e_shstrndx >= eh.e_shnum)
        return false;
    memcpy(strtab, elf + eh.e_shoff + eh.e_shstrndx * sizeof(Elf64_Shdr), sizeof(*strtab));
    *shoff_p = eh.e_shoff;
    *n_p = eh.e_shnum;
    return strtab->sh_offset <= len && strtab->sh_size <= len - strtab->sh_offset;
}

/* The first uncompressed ELF entry of a fatbin, or NULL. */
static const uint8_t *fatbin_elf(const uint8_t *fat, size_t len, size_t *elf_len)
{
    size_t at, end;

    if (len < 16 || rd32(fat) != FATBIN_MAGIC || rd16(fat + 6) > len)
        return NULL;
    at = rd16(fat + 6);
    end = rd64(fat + 8) <= len - at ? at + rd64(fat + 8) : len;
    while (end - at >= 64) {
        uint32_t hdr = rd32(fat + at + 4);
        uint64_t payload = rd64(fat + at + 8);

        if (hdr < 64 || hdr > end - at || payload > end - at - hdr)
            return NULL;
        if (rd16(fat + at) == FATBIN_KIND_ELF && (rd64(fat + at + 40) & ~FATBIN_FLAGS_KNOWN) == 0) {
            *elf_len = payload;
            return fat + at + hdr;
        }
        at += hdr + payload;
    }
    return NULL;
}

/* The info section of kernel name in an ELF, or NULL. */
static const uint8_t *elf_info(const uint8_t *elf, size_t len, const char *name, size_t *info_len)
{
    size_t shoff, plen = strlen(INFO_PREFIX), nlen = strlen(name);
    Elf64_Shdr str, sh;
    unsigned n;

    if (!elf_sections(elf, len, &shoff, &n, &str))
        return NULL;
    for (unsigned i = 0; i < n; i++) {
        const char *sname;

        memcpy(&sh, elf + shoff + i * sizeof(sh), sizeof(sh));
        if (sh.sh_type != SHT_CUDA_INFO || sh.sh_name >= str.sh_size ||
            str.sh_size - sh.sh_name < plen + nlen + 1 || sh.sh_offset > len ||
            sh.sh_size > len - sh.sh_offset)
            continue;
        sname = (const char *)elf + str.sh_offset + sh.sh_name;
        if (memcmp(sname, INFO_PREFIX, plen) == 0 && memcmp(sname + plen, name, nlen + 1) == 0) {
            *info_len = sh.sh_size;
            return elf + sh.sh_offset;
        }
    }
    return NULL;
}

bool cli_image_kernel_params(const void *image, size_t len, const char *name, unsigned *n_p,
                             uint32_t **off_p, uint32_t **size_p)
{
    struct kernel_params kp = {0};
    const uint8_t *elf = image, *info;
    size_t info_len;

    if (image == NULL || name == NULL || *name == '\0' || len < 4)
        return false;
    if (rd32(elf) == FATBIN_MAGIC && (elf = fatbin_elf(image, len, &len)) == NULL)
        return false;
    if ((info = elf_info(elf, len, name, &info_len)) == NULL ||
        !info_section(&kp, info, info_len)) {
        free(kp.off);
        free(kp.size);
        return false;
    }
    *n_p = kp.n;
    *off_p = kp.off;
    *size_p = kp.size;
    return true;
}
