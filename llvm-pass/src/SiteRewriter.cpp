#include "SiteRewriter.h"

#include "AllocCalls.h"

#include "llvm/ADT/SetVector.h"
#include "llvm/Analysis/OptimizationRemarkEmitter.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/Module.h"
#include "llvm/Transforms/Utils/Cloning.h"

#include <map>

using namespace llvm;

namespace nicpass {

namespace {

constexpr const char *RemarkName = "nic-dataplane-sites";

class Rewriter {
public:
  Rewriter(Module &M, const DataplaneResult &R) : M(M), R(R) {}
  std::vector<SiteRecord> run();

private:
  void plan();
  void describePath(ObjectId Obj, SiteRecord &Out);
  void innerAllocations(const Function &W, std::vector<std::string> &Out, unsigned Depth);
  bool canHost(const Function &F, std::string &Why);
  Function *copyLocally(const Function &F, ArrayRef<Type *> ExtraParams, StringRef Suffix,
                        ValueToValueMapTy &VMap);
  Function *cloneFor(const Function &W);
  void redirectToLocalCopies();
  CallBase *rewrite(CallBase &Call, Value *SiteId);
  void remark(CallBase &Call, const SiteRecord &Rec, const Function *SharedHost = nullptr);

  Module &M;
  const DataplaneResult &R;
  std::vector<SiteRecord> Records;
  std::vector<CallBase *> RecordCalls;  // the original call of each record
  std::map<CallBase *, size_t> InPlace; // original call -> its record
  std::map<const Function *, Function *> Clones;
  std::map<const Function *, ValueToValueMapTy> CloneMaps;
  /// Functions whose definition other modules share that are changed through a local copy:
  /// those holding a rewritten call, and their callers whose definition is shared too.
  SetVector<const Function *> Hosts;
  std::map<const Function *, std::string> HostVerdicts; // "" when F can host a rewrite
  std::map<const Function *, Function *> LocalCopies;
  std::map<const Function *, ValueToValueMapTy> LocalMaps;
};

} // namespace

static CallBase *mutableCall(const Value *Site) {
  return const_cast<CallBase *>(cast<CallBase>(Site));
}

static const Function *directCallee(const CallBase &Call) {
  return dyn_cast<Function>(Call.getCalledOperand()->stripPointerCasts());
}

/// A call through a cast (C lets an unprototyped declaration or a cast function pointer call
/// with other types) cannot be given the callee's site variant, which is built from the
/// callee's type: the new call would not match its arguments. Such sites stay as they are.
static bool callMatchesCallee(const CallBase &Call) {
  const Function *Callee = directCallee(Call);
  return Callee && Call.getFunctionType() == Callee->getFunctionType();
}

namespace {
/// Own: this module's definition is the one that runs. Shared: every module that uses F has a
/// copy the linker may pick, all meant to be equal (ODR), so changing this module's copy alone
/// changes the program only when the linker happens to keep it. Replaceable: another module may
/// define F differently and win, so this copy's body is not necessarily F.
enum class Definition { Own, Shared, Replaceable };
} // namespace

static Definition definitionOf(const Function &F) {
  if (GlobalValue::isInterposableLinkage(F.getLinkage())) return Definition::Replaceable;
  if (F.hasLinkOnceODRLinkage() || F.hasWeakODRLinkage() || F.hasAvailableExternallyLinkage() ||
      F.hasComdat())
    return Definition::Shared;
  return Definition::Own;
}

static std::string linkageText(const Function &F) {
  // IR names, for remarks; a function in a comdat may have any linkage.
  static const std::pair<GlobalValue::LinkageTypes, const char *> Names[] = {
      {GlobalValue::LinkOnceAnyLinkage, "linkonce"},
      {GlobalValue::LinkOnceODRLinkage, "linkonce_odr"},
      {GlobalValue::WeakAnyLinkage, "weak"},
      {GlobalValue::WeakODRLinkage, "weak_odr"},
      {GlobalValue::AvailableExternallyLinkage, "available_externally"},
      {GlobalValue::CommonLinkage, "common"},
      {GlobalValue::ExternalWeakLinkage, "extern_weak"},
      {GlobalValue::InternalLinkage, "internal"},
      {GlobalValue::PrivateLinkage, "private"}};
  std::string Text = "external";
  for (const auto &[Linkage, Name] : Names)
    if (F.getLinkage() == Linkage) Text = Name;
  if (F.hasComdat()) Text += ", in a comdat";
  return Text;
}

/// A shared function copied to local linkage grows the module; past this many copies for one
/// site the site is reported instead.
constexpr size_t MaxLocalCopies = 64;

void Rewriter::describePath(ObjectId Obj, SiteRecord &Out) {
  const SinkWitness &W = R.Reaching.at(Obj);
  const PointsToGraph &G = *R.Graph;
  Out.Path.push_back(describeObject(G, Obj));
  for (auto It = W.Chain.rbegin(); It != W.Chain.rend(); ++It)
    Out.Path.push_back("stored at +" + std::to_string(pointeeOffset(*It)) + " of " +
                       describeObject(G, pointeeObject(*It)));
  Out.Sink =
      (W.SinkFunction->getName() + " arg " + Twine(W.Arg) + " " + describeLocation(*W.Sink)).str();
  Out.Path.push_back("argument " + std::to_string(W.Arg) + " of " + Out.Sink);
  Out.SinkSpec = W.Spec->Text;
}

void Rewriter::innerAllocations(const Function &W, std::vector<std::string> &Out, unsigned Depth) {
  if (Depth > 8) return;
  for (const CallBase *Call : R.returnedAllocations(W)) {
    std::optional<ObjectId> Obj = R.Graph->objectCreatedBy(Call);
    if (!Obj) continue;
    const AbstractObject &O = R.Graph->object(*Obj);
    if (O.Kind == ObjectKind::WrapperResult) {
      innerAllocations(*O.Wrapper, Out, Depth + 1);
      continue;
    }
    std::optional<AllocFunction> Alloc = classifyAllocCall(*Call);
    std::string Text = describeObject(*R.Graph, *Obj);
    if (Alloc && Alloc->SiteFunction.empty()) Text += " (not rewritable: no site ABI)";
    Out.push_back(Text);
  }
}

/// Whether a call in F can be rewritten without changing code other modules share. A shared F
/// (and every shared function that calls it, up to a function of this module's own) is rewritten
/// in a local copy that this module's own functions call instead; the shared definition stays as
/// it is. Calls through F's address (vtables, function pointers) keep the shared definition.
bool Rewriter::canHost(const Function &F, std::string &Why) {
  auto Known = HostVerdicts.find(&F);
  if (Known != HostVerdicts.end()) {
    Why = Known->second;
    return Why.empty();
  }
  std::string &Verdict = HostVerdicts[&F];
  Definition D = definitionOf(F);
  if (D == Definition::Replaceable) {
    Verdict = "it is in " + F.getName().str() + " (" + linkageText(F) +
              "), which another module may define differently and replace: neither this "
              "definition nor a local copy of it is sure to be the code that runs";
  } else if (D == Definition::Shared) {
    SetVector<const Function *> Closure;
    Closure.insert(&F);
    bool CalledFromOwn = false;
    for (size_t I = 0; I < Closure.size() && Closure.size() <= MaxLocalCopies; ++I)
      for (const Use &U : Closure[I]->uses()) {
        const auto *Call = dyn_cast<CallBase>(U.getUser());
        if (!Call || !Call->isCallee(&U)) continue;
        const Function &Caller = *Call->getFunction();
        Definition CallerD = definitionOf(Caller);
        if (CallerD == Definition::Own) CalledFromOwn = true;
        if (CallerD == Definition::Shared) Closure.insert(&Caller);
      }
    if (Closure.size() > MaxLocalCopies)
      Verdict = "it is in " + F.getName().str() + " (" + linkageText(F) +
                "), whose definition other modules share, and more than " +
                std::to_string(MaxLocalCopies) +
                " such functions call it: they would all need local copies";
    else if (!CalledFromOwn)
      Verdict = "it is in " + F.getName().str() + " (" + linkageText(F) +
                "), whose definition other modules share, and no function this module defines "
                "alone calls it directly (only through its address or through functions other "
                "modules may replace): rewriting it would change every module's copy";
    else
      Hosts.insert(Closure.begin(), Closure.end());
  }
  Why = Verdict;
  return Why.empty();
}

void Rewriter::plan() {
  for (const auto &[Obj, Witness] : R.Reaching) {
    const AbstractObject &O = R.Graph->object(Obj);
    if (O.Kind != ObjectKind::HeapAlloc && O.Kind != ObjectKind::WrapperResult) continue;
    CallBase *Call = mutableCall(O.Site);
    SiteRecord Rec;
    locateSite(*Call, Rec);
    describePath(Obj, Rec);
    if (O.Kind == ObjectKind::WrapperResult) {
      Rec.K = SiteRecord::Kind::WrapperCall;
      Rec.Callee = O.Wrapper->getName().str();
      Rec.Replacement = Rec.Callee + CloneSuffix;
      innerAllocations(*O.Wrapper, Rec.Inner, 0);
    } else {
      std::optional<AllocFunction> Alloc = classifyAllocCall(*Call);
      Rec.Callee = Alloc->Name.str();
      if (Alloc->SiteFunction.empty()) {
        Rec.K = SiteRecord::Kind::Skipped;
        Rec.Reason = "nicmalloc has no site variant of " + Rec.Callee;
      } else {
        Rec.Replacement = Alloc->SiteFunction.str();
      }
    }
    if (Rec.K != SiteRecord::Kind::Skipped && !callMatchesCallee(*Call)) {
      Rec.K = SiteRecord::Kind::Skipped;
      Rec.Reason = "the call's type differs from " + Rec.Callee +
                   "'s (a cast or an unprototyped declaration)";
    }
    if (Rec.K != SiteRecord::Kind::Skipped && !canHost(*Call->getFunction(), Rec.Reason))
      Rec.K = SiteRecord::Kind::Skipped;
    if (Rec.K != SiteRecord::Kind::Skipped) InPlace[Call] = Records.size();
    Records.push_back(std::move(Rec));
    RecordCalls.push_back(Call);
  }
}

/// A copy of F that no other module sees (local linkage, out of F's comdat), so that changing
/// it changes this module only; ExtraParams follow F's own parameters.
Function *Rewriter::copyLocally(const Function &F, ArrayRef<Type *> ExtraParams, StringRef Suffix,
                                ValueToValueMapTy &VMap) {
  SmallVector<Type *, 8> Params(F.getFunctionType()->params());
  Params.append(ExtraParams.begin(), ExtraParams.end());
  // A wrapper clone's site id follows the fixed parameters, where a variadic call would not put
  // it: clones stay non-variadic as they always were; plain copies keep F's type.
  auto *Ty = FunctionType::get(F.getReturnType(), Params, F.isVarArg() && ExtraParams.empty());
  Function *Copy = Function::Create(Ty, GlobalValue::InternalLinkage, F.getAddressSpace(),
                                    F.getName() + Suffix, &M);
  for (const Argument &A : F.args()) {
    Copy->getArg(A.getArgNo())->setName(A.getName());
    VMap[&A] = Copy->getArg(A.getArgNo());
  }
  SmallVector<ReturnInst *, 4> Returns;
  CloneFunctionInto(Copy, &F, VMap, CloneFunctionChangeType::LocalChangesOnly, Returns);
  Copy->setLinkage(GlobalValue::InternalLinkage);
  Copy->setVisibility(GlobalValue::DefaultVisibility);
  Copy->setDLLStorageClass(GlobalValue::DefaultStorageClass);
  Copy->setComdat(nullptr);
  return Copy;
}

Function *Rewriter::cloneFor(const Function &W) {
  auto Found = Clones.find(&W);
  if (Found != Clones.end()) return Found->second;
  ValueToValueMapTy &VMap = CloneMaps[&W];
  Function *Clone = copyLocally(W, {Type::getInt32Ty(M.getContext())}, CloneSuffix, VMap);
  Clones[&W] = Clone;
  Argument *SiteId = Clone->getArg(Clone->arg_size() - 1);
  SiteId->setName("nic.site_id");

  // In the clone, what the wrapper returns is tagged with the caller's site id; allocations that
  // reach a sink on their own keep their own constant id.
  std::set<CallBase *> Tagged;
  for (const CallBase *Orig : R.returnedAllocations(W)) {
    auto *Copy = cast<CallBase>(VMap[Orig]);
    auto Own = InPlace.find(mutableCall(Orig));
    if (Own != InPlace.end()) continue; // handled below with its constant id
    if (!callMatchesCallee(*Orig)) continue;
    std::optional<ObjectId> Obj = R.Graph->objectCreatedBy(Orig);
    if (R.Graph->object(*Obj).Kind == ObjectKind::HeapAlloc) {
      std::optional<AllocFunction> Alloc = classifyAllocCall(*Orig);
      if (!Alloc || Alloc->SiteFunction.empty()) continue;
    }
    Tagged.insert(Copy);
  }
  for (const auto &[Orig, Index] : InPlace)
    if (Orig->getFunction() == &W)
      rewrite(*cast<CallBase>(VMap[Orig]),
              ConstantInt::get(Type::getInt32Ty(M.getContext()), Records[Index].Id));
  for (CallBase *Copy : Tagged)
    rewrite(*Copy, SiteId);
  return Clone;
}

CallBase *Rewriter::rewrite(CallBase &Call, Value *SiteId) {
  const Function *Callee = directCallee(Call);
  if (std::optional<AllocFunction> Alloc = classifyAllocCall(Call)) {
    FunctionCallee Site = getSiteFunction(M, *Alloc, *Callee);
    CallBase *New = replaceWithExtraArgument(Call, Site, SiteId);
    // The call carries the family (delete vs delete[]) too: an LTO module may merge calls from
    // objects an older plugin built, whose nic_new_site served new[] as well.
    if (Alloc->Kind == AllocKind::New || Alloc->Kind == AllocKind::NewAligned ||
        Alloc->Kind == AllocKind::NewNothrow)
      New->addFnAttr(Attribute::get(M.getContext(), "alloc-family", Alloc->Family));
    return New;
  }
  // A wrapper call: call the wrapper's clone, which tags its allocation with this id.
  Function *Clone = cloneFor(*Callee);
  return replaceWithExtraArgument(Call, Clone, SiteId);
}

void Rewriter::remark(CallBase &Call, const SiteRecord &Rec, const Function *SharedHost) {
  OptimizationRemarkEmitter ORE(Call.getFunction());
  if (Rec.K == SiteRecord::Kind::Skipped) {
    ORE.emit(OptimizationRemarkMissed(RemarkName, "SkippedSite", &Call)
             << Rec.Callee << " reaches " << Rec.Sink << " but " << Rec.Reason);
    return;
  }
  ORE.emit(OptimizationRemark(RemarkName, "DataplaneSite", &Call)
           << Rec.Callee << " -> " << Rec.Replacement << " (site " << std::to_string(Rec.Id)
           << "): reaches " << Rec.Sink
           << (SharedHost ? " (in " + (SharedHost->getName() + LocalCopySuffix).str() +
                                ", this module's copy of a function other modules share: " +
                                linkageText(*SharedHost) + ")"
                          : std::string()));
}

/// This module's own functions (wrapper clones and local copies among them) call the local
/// copies; shared definitions keep calling each other, as in every other module.
void Rewriter::redirectToLocalCopies() {
  for (const auto &[Original, Copy] : LocalCopies)
    for (Use &U : make_early_inc_range(const_cast<Function *>(Original)->uses())) {
      auto *Call = dyn_cast<CallBase>(U.getUser());
      if (Call && Call->isCallee(&U) && definitionOf(*Call->getFunction()) == Definition::Own)
        U.set(Copy);
    }
}

std::vector<SiteRecord> Rewriter::run() {
  plan();
  assignSiteIds(M.getSourceFileName(), Records);
  // Copies and clones are made from the untouched originals first, then the rewrites are made.
  for (const Function *F : Hosts)
    LocalCopies[F] = copyLocally(*F, {}, LocalCopySuffix, LocalMaps[F]);
  std::vector<std::pair<CallBase *, size_t>> Work(InPlace.begin(), InPlace.end());
  std::sort(Work.begin(), Work.end(),
            [](const auto &A, const auto &B) { return A.second < B.second; });
  for (const auto &[Call, Index] : Work)
    if (Records[Index].K == SiteRecord::Kind::WrapperCall) cloneFor(*directCallee(*Call));
  for (size_t I = 0; I < Records.size(); ++I)
    if (Records[I].K == SiteRecord::Kind::Skipped) remark(*RecordCalls[I], Records[I]);
  for (const auto &[Call, Index] : Work) {
    const Function *Host = Call->getFunction();
    bool Shared = LocalCopies.count(Host);
    CallBase *Target = Shared ? cast<CallBase>(LocalMaps[Host][Call]) : Call;
    CallBase *New =
        rewrite(*Target, ConstantInt::get(Type::getInt32Ty(M.getContext()), Records[Index].Id));
    remark(*New, Records[Index], Shared ? Host : nullptr);
  }
  redirectToLocalCopies();
  return Records;
}

std::vector<SiteRecord> rewriteDataplaneSites(Module &M, const DataplaneResult &R) {
  if (R.Exhausted) return {}; // an incomplete solution could miss flows: change nothing
  return Rewriter(M, R).run();
}

} // namespace nicpass
