/* Sizing module images: the driver API passes only a pointer, the wire needs a length. */
#include <elf.h>
#include <string.h>

#include "client/api/module.h"

#define FATBIN_WRAPPER_MAGIC 0x466243B1u
#define FATBIN_MAGIC         0xBA55ED50u
#define IMAGE_MAX            ((size_t)1 << 32)

struct fatbin_wrapper {
    uint32_t magic;
    uint32_t version;
    const void *data;
    const void *filename_or_fatbins;
};

struct fatbin_header {
    uint32_t magic;
    uint16_t version;
    uint16_t header_size;
    uint64_t fat_size;
};

static size_t elf_size(const Elf64_Ehdr *eh)
{
    const uint8_t *base = (const uint8_t *)eh;
    size_t end = sizeof(*eh);
    size_t sh_end = eh->e_shoff + (size_t)eh->e_shnum * eh->e_shentsize;
    size_t ph_end = eh->e_phoff + (size_t)eh->e_phnum * eh->e_phentsize;

    if (eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_shentsize != sizeof(Elf64_Shdr))
        return 0;
    end = sh_end > end ? sh_end : end;
    end = ph_end > end ? ph_end : end;
    for (unsigned i = 0; i < eh->e_shnum; i++) {
        const Elf64_Shdr *sh = (const Elf64_Shdr *)(base + eh->e_shoff) + i;
        size_t sec_end = sh->sh_offset + sh->sh_size;
        if (sh->sh_type != SHT_NOBITS && sec_end > end)
            end = sec_end;
    }
    return end;
}

CUresult cli_image_size(const void *image, const void **start_p, size_t *len_p)
{
    uint32_t magic;
    size_t len;

    if (image == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(&magic, image, sizeof(magic));
    if (magic == FATBIN_WRAPPER_MAGIC) {
        image = ((const struct fatbin_wrapper *)image)->data;
        if (image == NULL)
            return CUDA_ERROR_INVALID_IMAGE;
        memcpy(&magic, image, sizeof(magic));
    }
    if (magic == FATBIN_MAGIC) {
        const struct fatbin_header *fh = image;
        len = fh->header_size + fh->fat_size;
    } else if (memcmp(image, ELFMAG, SELFMAG) == 0) {
        len = elf_size(image);
    } else {
        len = strnlen(image, IMAGE_MAX) + 1; /* PTX text */
        if (len < 8 || strstr(image, ".version") == NULL)
            return CUDA_ERROR_INVALID_IMAGE;
    }
    if (len == 0 || len > IMAGE_MAX)
        return CUDA_ERROR_INVALID_IMAGE;
    *start_p = image;
    *len_p = len;
    return CUDA_SUCCESS;
}
