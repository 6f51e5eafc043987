/* See imports.h. The entries are found through the object's dynamic section (its PLT and its
 * other relocations: a function whose address the object takes is imported through GLOB_DAT);
 * an entry inside the object's RELRO segment, read-only after relocation, is opened for the
 * one write. */
#define _GNU_SOURCE
#include "imports.h"

#include <elf.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

struct object {
  uintptr_t base;
  uintptr_t relro_start, relro_end;
};

static int find_relro(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  struct object *o = arg;
  if (info->dlpi_addr != o->base) return 0;
  for (int i = 0; i < info->dlpi_phnum; i++)
    if (info->dlpi_phdr[i].p_type == PT_GNU_RELRO) {
      o->relro_start = o->base + info->dlpi_phdr[i].p_vaddr;
      o->relro_end = o->relro_start + info->dlpi_phdr[i].p_memsz;
    }
  return 1;
}

/* A dynamic entry's address: the C library relocates some in place, others stay offsets. */
static uintptr_t dyn_address(const struct object *o, uintptr_t value) {
  return value < o->base ? value + o->base : value;
}

/* Raw system calls: the interposed mprotect would take a RELRO page for the program's. */
static void set_slot(const struct object *o, void **slot, void *to) {
  const uintptr_t a = (uintptr_t)slot;
  const bool read_only = a >= o->relro_start && a < o->relro_end;
  const uintptr_t page = a & ~(uintptr_t)(sysconf(_SC_PAGESIZE) - 1);
  if (read_only) syscall(SYS_mprotect, page, (size_t)sysconf(_SC_PAGESIZE), PROT_READ | PROT_WRITE);
  __atomic_store_n(slot, to, __ATOMIC_RELEASE);
  if (read_only) syscall(SYS_mprotect, page, (size_t)sysconf(_SC_PAGESIZE), PROT_READ);
}

static void patch_table(const struct object *o, const ElfW(Rela) * rela, size_t bytes,
                        const ElfW(Sym) * symbols, const char *strings, struct nic_import *imports,
                        unsigned n) {
  for (size_t i = 0; rela && i < bytes / sizeof *rela; i++) {
    const unsigned type = ELF64_R_TYPE(rela[i].r_info);
    if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) continue;
    const char *name = strings + symbols[ELF64_R_SYM(rela[i].r_info)].st_name;
    for (unsigned k = 0; k < n; k++)
      if (!strcmp(name, imports[k].name)) {
        set_slot(o, (void **)(o->base + rela[i].r_offset), imports[k].to);
        imports[k].done = true;
      }
  }
}

bool nic_imports_redirect(const struct link_map *map, struct nic_import *imports, unsigned n) {
  struct object o = {.base = map->l_addr};
  dl_iterate_phdr(find_relro, &o);
  const ElfW(Sym) *symbols = NULL;
  const char *strings = NULL;
  const ElfW(Rela) *plt = NULL, *rela = NULL;
  size_t plt_bytes = 0, rela_bytes = 0;
  for (const ElfW(Dyn) *d = map->l_ld; d->d_tag != DT_NULL; d++)
    switch (d->d_tag) {
    case DT_SYMTAB:
      symbols = (const ElfW(Sym) *)dyn_address(&o, d->d_un.d_ptr);
      break;
    case DT_STRTAB:
      strings = (const char *)dyn_address(&o, d->d_un.d_ptr);
      break;
    case DT_JMPREL:
      plt = (const ElfW(Rela) *)dyn_address(&o, d->d_un.d_ptr);
      break;
    case DT_PLTRELSZ:
      plt_bytes = d->d_un.d_val;
      break;
    case DT_RELA:
      rela = (const ElfW(Rela) *)dyn_address(&o, d->d_un.d_ptr);
      break;
    case DT_RELASZ:
      rela_bytes = d->d_un.d_val;
      break;
    }
  if (!symbols || !strings) return false;
  patch_table(&o, plt, plt_bytes, symbols, strings, imports, n);
  patch_table(&o, rela, rela_bytes, symbols, strings, imports, n);
  return true;
}
