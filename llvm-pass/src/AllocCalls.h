// Allocation functions the pass recognises and the nicmalloc site function each one becomes.
#ifndef NICMALLOC_LLVM_PASS_ALLOC_CALLS_H
#define NICMALLOC_LLVM_PASS_ALLOC_CALLS_H

#include "llvm/ADT/StringRef.h"

#include <optional>

namespace llvm {
class CallBase;
class Function;
class FunctionCallee;
class Module;
class Value;
} // namespace llvm

namespace nicpass {

enum class AllocKind {
  Malloc,
  Calloc,
  Realloc,
  AlignedAlloc,
  PosixMemalign,
  New,        ///< operator new / new[] (each has its site function; the family tells them apart)
  NewAligned, ///< operator new(size, align_val_t) and new[]
  NewNothrow, ///< operator new(size, const nothrow_t &), also with align_val_t (AlignArg set)
  Other
};

struct AllocFunction {
  AllocKind Kind;
  llvm::StringRef Name;
  /// nicmalloc's site variant, or empty when the site ABI has none (memalign, strdup, ...).
  llvm::StringRef SiteFunction;
  /// LLVM's "alloc-family": the deallocator family the result pairs with.
  llvm::StringRef Family;
  /// posix_memalign: the object is returned through this argument, not the return value.
  int OutArg = -1;
  /// The argument that carries the alignment (aligned new), or -1.
  int AlignArg = -1;
};

/// Recognises a declared (not defined here) allocation function by name.
std::optional<AllocFunction> classifyAllocFunction(const llvm::Function &Callee);
/// The same for the direct callee of Call.
std::optional<AllocFunction> classifyAllocCall(const llvm::CallBase &Call);

/// Declares (or finds) the site variant of Alloc with the original callee's parameters plus a
/// trailing i32 site id, carrying the allocator attributes so the optimiser still sees an
/// allocation (allockind, allocsize, alloc-family, noalias result).
llvm::FunctionCallee getSiteFunction(llvm::Module &M, const AllocFunction &Alloc,
                                     const llvm::Function &Original);

/// Replaces Call (call or invoke) by a call of Callee with the same arguments plus Extra
/// appended, keeping attributes, bundles, metadata, calling convention and name. Returns it.
llvm::CallBase *replaceWithExtraArgument(llvm::CallBase &Call, llvm::FunctionCallee Callee,
                                         llvm::Value *Extra);

} // namespace nicpass

#endif
