#include "AllocCalls.h"

#include "llvm/IR/Instructions.h"
#include "llvm/IR/Module.h"

using namespace llvm;

namespace nicpass {

namespace {
struct KnownAlloc {
  const char *Name;
  AllocKind Kind;
  const char *SiteFunction;
  const char *Family;
  int OutArg;
  int AlignArg;
};
} // namespace

// x86-64 Itanium names for operator new (size_t is unsigned long: 'm'). Each site function
// takes the operator's own arguments plus the id, so a rewrite only appends an argument. new and
// new[] have site functions of their own: where a program replaced them, the runtime's site
// calls the operator the expression called, and the two may differ.
static const KnownAlloc KnownAllocs[] = {
    {"malloc", AllocKind::Malloc, "nic_malloc_site", "malloc", -1, -1},
    {"calloc", AllocKind::Calloc, "nic_calloc_site", "malloc", -1, -1},
    {"realloc", AllocKind::Realloc, "nic_realloc_site", "malloc", -1, -1},
    {"aligned_alloc", AllocKind::AlignedAlloc, "nic_aligned_alloc_site", "malloc", -1, 0},
    {"posix_memalign", AllocKind::PosixMemalign, "nic_posix_memalign_site", "malloc", 0, -1},
    {"_Znwm", AllocKind::New, "nic_new_site", "_Znwm", -1, -1},
    {"_Znam", AllocKind::New, "nic_new_array_site", "_Znam", -1, -1},
    {"_ZnwmSt11align_val_t", AllocKind::NewAligned, "nic_new_aligned_site", "_Znwm", -1, 1},
    {"_ZnamSt11align_val_t", AllocKind::NewAligned, "nic_new_array_aligned_site", "_Znam", -1, 1},
    {"_ZnwmRKSt9nothrow_t", AllocKind::NewNothrow, "nic_new_nothrow_site", "_Znwm", -1, -1},
    {"_ZnamRKSt9nothrow_t", AllocKind::NewNothrow, "nic_new_array_nothrow_site", "_Znam", -1, -1},
    {"_ZnwmSt11align_val_tRKSt9nothrow_t", AllocKind::NewNothrow, "nic_new_aligned_nothrow_site",
     "_Znwm", -1, 1},
    {"_ZnamSt11align_val_tRKSt9nothrow_t", AllocKind::NewNothrow,
     "nic_new_array_aligned_nothrow_site", "_Znam", -1, 1},
    // Allocations the site ABI cannot express: tracked (their objects still flow) and reported
    // in the site table as skipped, never rewritten.
    {"memalign", AllocKind::Other, "", "malloc", -1, 0},
    {"valloc", AllocKind::Other, "", "malloc", -1, -1},
    {"pvalloc", AllocKind::Other, "", "malloc", -1, -1},
    {"strdup", AllocKind::Other, "", "malloc", -1, -1},
    {"strndup", AllocKind::Other, "", "malloc", -1, -1},
    {"reallocarray", AllocKind::Other, "", "malloc", -1, -1},
};

std::optional<AllocFunction> classifyAllocFunction(const Function &Callee) {
  // A module that defines malloc itself (an allocator) is not allocating through it.
  if (!Callee.isDeclaration()) return std::nullopt;
  StringRef Name = Callee.getName();
  for (const KnownAlloc &K : KnownAllocs)
    if (Name == K.Name)
      return AllocFunction{K.Kind, K.Name, K.SiteFunction, K.Family, K.OutArg, K.AlignArg};
  return std::nullopt;
}

std::optional<AllocFunction> classifyAllocCall(const CallBase &Call) {
  const auto *Callee = dyn_cast<Function>(Call.getCalledOperand()->stripPointerCasts());
  if (!Callee) return std::nullopt;
  return classifyAllocFunction(*Callee);
}

static AllocFnKind allocKindFor(const AllocFunction &A) {
  switch (A.Kind) {
  case AllocKind::Calloc:
    return AllocFnKind::Alloc | AllocFnKind::Zeroed;
  case AllocKind::Realloc:
    // Neither uninitialized nor zeroed: realloc copies the old bytes, and either word would let
    // GVN fold loads from the new block before any store (to undef or to zero).
    return AllocFnKind::Realloc;
  default:
    return AllocFnKind::Alloc | AllocFnKind::Uninitialized |
           (A.AlignArg >= 0 ? AllocFnKind::Aligned : AllocFnKind::Unknown);
  }
}

FunctionCallee getSiteFunction(Module &M, const AllocFunction &Alloc, const Function &Original) {
  LLVMContext &Ctx = M.getContext();
  FunctionType *OrigTy = Original.getFunctionType();
  SmallVector<Type *, 4> Params(OrigTy->params());
  Params.push_back(Type::getInt32Ty(Ctx));
  FunctionType *Ty = FunctionType::get(OrigTy->getReturnType(), Params, false);
  FunctionCallee Callee = M.getOrInsertFunction(Alloc.SiteFunction, Ty);
  auto *Fn = dyn_cast<Function>(Callee.getCallee());
  if (!Fn || !Fn->isDeclaration() || Fn->getFunctionType() != Ty) return Callee;

  // Start from whatever the original declaration carries (memory effects, nounwind, noalias
  // result, allocptr/allocalign parameters) and make sure the allocator facts are there.
  AttributeList OrigAttrs = Original.getAttributes();
  AttrBuilder FnAttrs(Ctx, OrigAttrs.getFnAttrs());
  FnAttrs.removeAttribute(Attribute::NoBuiltin); // meaningless off a library name
  if (Alloc.Kind != AllocKind::PosixMemalign) {
    FnAttrs.addAllocKindAttr(allocKindFor(Alloc));
    FnAttrs.addAttribute("alloc-family", Alloc.Family);
    switch (Alloc.Kind) {
    case AllocKind::Calloc:
      FnAttrs.addAllocSizeAttr(0, 1);
      break;
    case AllocKind::Realloc:
    case AllocKind::AlignedAlloc: // aligned_alloc(alignment, size)
      FnAttrs.addAllocSizeAttr(1, std::nullopt);
      break;
    default:
      FnAttrs.addAllocSizeAttr(0, std::nullopt);
      break;
    }
  }
  AttrBuilder RetAttrs(Ctx, OrigAttrs.getRetAttrs());
  if (Ty->getReturnType()->isPointerTy()) RetAttrs.addAttribute(Attribute::NoAlias);
  SmallVector<AttributeSet, 4> ParamAttrs;
  for (unsigned I = 0; I < OrigTy->getNumParams(); ++I)
    ParamAttrs.push_back(OrigAttrs.getParamAttrs(I));
  if (Alloc.Kind == AllocKind::Realloc)
    ParamAttrs[0] = ParamAttrs[0].addAttribute(Ctx, Attribute::AllocatedPointer);
  if (Alloc.AlignArg >= 0 && unsigned(Alloc.AlignArg) < ParamAttrs.size())
    ParamAttrs[Alloc.AlignArg] =
        ParamAttrs[Alloc.AlignArg].addAttribute(Ctx, Attribute::AllocAlign);
  ParamAttrs.push_back(AttributeSet::get(Ctx, {Attribute::get(Ctx, Attribute::NoUndef)}));
  Fn->setAttributes(AttributeList::get(Ctx, AttributeSet::get(Ctx, FnAttrs),
                                       AttributeSet::get(Ctx, RetAttrs), ParamAttrs));
  return Callee;
}

CallBase *replaceWithExtraArgument(CallBase &Call, FunctionCallee Callee, Value *Extra) {
  SmallVector<Value *, 6> Args(Call.args());
  Args.push_back(Extra);
  SmallVector<OperandBundleDef, 1> Bundles;
  Call.getOperandBundlesAsDefs(Bundles);
  CallBase *New;
  if (auto *Invoke = dyn_cast<InvokeInst>(&Call)) {
    New = InvokeInst::Create(Callee, Invoke->getNormalDest(), Invoke->getUnwindDest(), Args,
                             Bundles, "", &Call);
  } else {
    auto *NewCall = CallInst::Create(Callee, Args, Bundles, "", &Call);
    // musttail needs the callee's prototype to match the caller's, which the extra argument
    // breaks; a plain tail call is what is left of it.
    CallInst::TailCallKind Kind = cast<CallInst>(Call).getTailCallKind();
    NewCall->setTailCallKind(Kind == CallInst::TCK_MustTail ? CallInst::TCK_Tail : Kind);
    New = NewCall;
  }
  LLVMContext &Ctx = Call.getContext();
  AttributeList Attrs = Call.getAttributes();
  SmallVector<AttributeSet, 6> ParamAttrs;
  for (unsigned I = 0; I < Call.arg_size(); ++I)
    ParamAttrs.push_back(Attrs.getParamAttrs(I));
  ParamAttrs.push_back(AttributeSet::get(Ctx, {Attribute::get(Ctx, Attribute::NoUndef)}));
  New->setAttributes(AttributeList::get(Ctx, Attrs.getFnAttrs(), Attrs.getRetAttrs(), ParamAttrs));
  New->setCallingConv(Call.getCallingConv());
  New->copyMetadata(Call);
  New->setDebugLoc(Call.getDebugLoc());
  New->takeName(&Call);
  Call.replaceAllUsesWith(New);
  Call.eraseFromParent();
  return New;
}

} // namespace nicpass
