/* Where the program's calls of C++'s replaceable global operators new and delete go
 * (cxx_operators.c): to nicmalloc's definitions, or to the program's own replacements. */
#ifndef NIC_CXX_OPERATORS_H
#define NIC_CXX_OPERATORS_H

#include <stdbool.h>

/* The replaceable operators (x86-64 Itanium names in cxx_operators.c). */
enum nic_cxx_op {
  NIC_CXX_NEW,                  /* operator new(size_t) */
  NIC_CXX_NEW_ARRAY,            /* operator new[](size_t) */
  NIC_CXX_NEW_NOTHROW,          /* operator new(size_t, const std::nothrow_t &) */
  NIC_CXX_NEW_ARRAY_NOTHROW,    /* operator new[](size_t, const std::nothrow_t &) */
  NIC_CXX_DELETE,               /* operator delete(void *) */
  NIC_CXX_DELETE_ARRAY,         /* operator delete[](void *) */
  NIC_CXX_DELETE_SIZED,         /* operator delete(void *, size_t) */
  NIC_CXX_DELETE_ARRAY_SIZED,   /* operator delete[](void *, size_t) */
  NIC_CXX_DELETE_NOTHROW,       /* operator delete(void *, const std::nothrow_t &) */
  NIC_CXX_DELETE_ARRAY_NOTHROW, /* operator delete[](void *, const std::nothrow_t &) */
  /* Each of the above with a std::align_val_t after the size (the pointer of the unsized
   * deletes) is op + NIC_CXX_ALIGNED. */
  NIC_CXX_ALIGNED,
  NIC_CXX_OPS = 2 * NIC_CXX_ALIGNED
};

/* The two families of operators: the standard defines each form of a family but its basic new and
 * delete by the others of the same family, never of the other one. */
enum { NIC_CXX_UNALIGNED_FAMILY = 1, NIC_CXX_ALIGNED_FAMILY = 2, NIC_CXX_NOT_LOOKED = 4 };

static inline unsigned nic_cxx_family(enum nic_cxx_op op) {
  return op < NIC_CXX_ALIGNED ? NIC_CXX_UNALIGNED_FAMILY : NIC_CXX_ALIGNED_FAMILY;
}

/* A family's bit is set where the program replaced one of the operators the standard's default
 * definitions of its other forms call (operator new, new[], delete and delete[]): the calls the
 * program makes of it reach another definition than nicmalloc's. Every bit is set until
 * nic_cxx_replaced_families has looked. */
extern unsigned char nic_cxx_replaced __attribute__((visibility("hidden")));

/* Whether a family may be replaced, for the operators' fast paths: one test of the byte in
 * memory and a branch. An atomic load takes an instruction more (the compiler loads it into a
 * register before any test); the instruction reads the byte once, as such a load would. */
static inline bool nic_cxx_maybe_replaced(unsigned family) {
#if defined(__x86_64__) || defined(__i386__)
  bool set;
  __asm__("testb %1, %2" : "=@ccnz"(set) : "i"(family), "m"(nic_cxx_replaced));
  return __builtin_expect(set, 0);
#else
  return __builtin_expect(__atomic_load_n(&nic_cxx_replaced, __ATOMIC_RELAXED) & family, 0);
#endif
}

/* These never throw (nothrow: cxx_new.c, built with -fexceptions, needs no unwinding tables, nor
 * libgcc_s, for the scopes it holds around them). The replaced families, looked up the first time
 * (in the symbol table, which may allocate: call it inside nicmalloc's internal scope) and read
 * after. A call made while this thread looks answers none replaced, and looks again next time. */
unsigned nic_cxx_replaced_families(void) __attribute__((nothrow));

/* What the program's calls of op reach (its replacement, or nicmalloc's own definition), where
 * op's family is replaced; NULL where it is not. */
void *nic_cxx_program_operator(enum nic_cxx_op op) __attribute__((nothrow));

/* The C++ runtime's own definition of op, looked up the first time in the object that defines
 * std::get_new_handler (libstdc++, or a program that links it statically), not in lookup order:
 * libmimalloc, which nicmalloc needs, defines the operators too. NULL where there is none, or
 * where the definition found is nicmalloc's. */
void *nic_cxx_runtime_operator(enum nic_cxx_op op) __attribute__((nothrow));

#endif
