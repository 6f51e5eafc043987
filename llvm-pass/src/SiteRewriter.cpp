#include "SiteRewriter.h"

#include "AllocCalls.h"

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
  Function *cloneFor(const Function &W);
  CallBase *rewrite(CallBase &Call, Value *SiteId);
  void remark(CallBase &Call, const SiteRecord &Rec);

  Module &M;
  const DataplaneResult &R;
  std::vector<SiteRecord> Records;
  std::vector<CallBase *> RecordCalls;  // the original call of each record
  std::map<CallBase *, size_t> InPlace; // original call -> its record
  std::map<const Function *, Function *> Clones;
  std::map<const Function *, ValueToValueMapTy> CloneMaps;
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
    if (Rec.K != SiteRecord::Kind::Skipped) InPlace[Call] = Records.size();
    Records.push_back(std::move(Rec));
    RecordCalls.push_back(Call);
  }
}

Function *Rewriter::cloneFor(const Function &W) {
  auto Found = Clones.find(&W);
  if (Found != Clones.end()) return Found->second;
  SmallVector<Type *, 8> Params(W.getFunctionType()->params());
  Params.push_back(Type::getInt32Ty(M.getContext()));
  auto *Ty = FunctionType::get(W.getReturnType(), Params, false);
  Function *Clone = Function::Create(Ty, GlobalValue::InternalLinkage, W.getAddressSpace(),
                                     W.getName() + CloneSuffix, &M);
  Clones[&W] = Clone;
  ValueToValueMapTy &VMap = CloneMaps[&W];
  for (const Argument &A : W.args()) {
    Clone->getArg(A.getArgNo())->setName(A.getName());
    VMap[&A] = Clone->getArg(A.getArgNo());
  }
  SmallVector<ReturnInst *, 4> Returns;
  CloneFunctionInto(Clone, &W, VMap, CloneFunctionChangeType::LocalChangesOnly, Returns);
  Clone->setLinkage(GlobalValue::InternalLinkage);
  Clone->setVisibility(GlobalValue::DefaultVisibility);
  Clone->setComdat(nullptr);
  Argument *SiteId = Clone->getArg(Params.size() - 1);
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
    // One site function serves new and new[]: the family (delete vs delete[]) goes on the call.
    if (Alloc->Kind == AllocKind::New || Alloc->Kind == AllocKind::NewAligned ||
        Alloc->Kind == AllocKind::NewNothrow)
      New->addFnAttr(Attribute::get(M.getContext(), "alloc-family", Alloc->Family));
    return New;
  }
  // A wrapper call: call the wrapper's clone, which tags its allocation with this id.
  Function *Clone = cloneFor(*Callee);
  return replaceWithExtraArgument(Call, Clone, SiteId);
}

void Rewriter::remark(CallBase &Call, const SiteRecord &Rec) {
  OptimizationRemarkEmitter ORE(Call.getFunction());
  if (Rec.K == SiteRecord::Kind::Skipped) {
    ORE.emit(OptimizationRemarkMissed(RemarkName, "SkippedSite", &Call)
             << Rec.Callee << " reaches " << Rec.Sink << " but " << Rec.Reason);
    return;
  }
  ORE.emit(OptimizationRemark(RemarkName, "DataplaneSite", &Call)
           << Rec.Callee << " -> " << Rec.Replacement << " (site " << std::to_string(Rec.Id)
           << "): reaches " << Rec.Sink);
}

std::vector<SiteRecord> Rewriter::run() {
  plan();
  assignSiteIds(M.getSourceFileName(), Records);
  // Clones are made from the untouched originals first, then the originals are rewritten.
  std::vector<std::pair<CallBase *, size_t>> Work(InPlace.begin(), InPlace.end());
  std::sort(Work.begin(), Work.end(),
            [](const auto &A, const auto &B) { return A.second < B.second; });
  for (const auto &[Call, Index] : Work)
    if (Records[Index].K == SiteRecord::Kind::WrapperCall) cloneFor(*directCallee(*Call));
  for (size_t I = 0; I < Records.size(); ++I)
    if (Records[I].K == SiteRecord::Kind::Skipped) remark(*RecordCalls[I], Records[I]);
  for (const auto &[Call, Index] : Work) {
    CallBase *New =
        rewrite(*Call, ConstantInt::get(Type::getInt32Ty(M.getContext()), Records[Index].Id));
    remark(*New, Records[Index]);
  }
  return Records;
}

std::vector<SiteRecord> rewriteDataplaneSites(Module &M, const DataplaneResult &R) {
  if (R.Exhausted) return {}; // an incomplete solution could miss flows: change nothing
  return Rewriter(M, R).run();
}

} // namespace nicpass
