#include "DataplaneAnalysis.h"

#include "llvm/IR/DebugInfoMetadata.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>

using namespace llvm;

namespace nicpass {

/// A function can be cloned with an extra site-id parameter and returns a pointer. Not one
/// with address-taken blocks (computed goto): a clone's blockaddress constants would still
/// point into the original, as the inliner knows.
static bool canBeWrapper(const Function &F) {
  if (F.isDeclaration() || F.isVarArg() || !F.getReturnType()->isPointerTy() ||
      F.getName() == "main")
    return false;
  for (const BasicBlock &BB : F)
    if (BB.hasAddressTaken()) return false;
  return true;
}

/// Wrappers for the next round: functions that return an object they created.
static DenseSet<const Function *> findWrappers(const Module &M, const PointsToGraph &G,
                                               const DenseSet<const Function *> &Banned) {
  DenseSet<const Function *> Found;
  for (const Function &F : M) {
    if (!canBeWrapper(F) || Banned.count(&F)) continue;
    for (Pointee P : G.returnsOf(&F))
      if (G.createdIn(pointeeObject(P), &F)) {
        Found.insert(&F);
        break;
      }
  }
  return Found;
}

/// A wrapper whose fresh object is also kept somewhere other than its own stack (a global list,
/// another object) would let that copy miss what callers store through their per-call-site
/// object; such functions stay context-insensitive.
static void banLeakyWrappers(const PointsToGraph &G, const DenseSet<const Function *> &Wrappers,
                             DenseSet<const Function *> &Banned) {
  std::map<ObjectId, std::set<ObjectId>> Holders; // object -> objects with a cell pointing to it
  for (ObjectId Obj = 0; Obj < G.numObjects(); ++Obj)
    for (uint32_t Off : G.cellOffsets(Obj))
      for (Pointee P : G.cell(Obj, Off))
        Holders[pointeeObject(P)].insert(Obj);
  for (const Function *W : Wrappers)
    for (Pointee P : G.returnsOf(W)) {
      ObjectId Fresh = pointeeObject(P);
      if (!G.createdIn(Fresh, W)) continue;
      for (ObjectId Holder : Holders[Fresh]) {
        const AbstractObject &H = G.object(Holder);
        bool OwnStack = H.Kind == ObjectKind::Stack && H.Creator == W;
        if (!OwnStack && Holder != Fresh) Banned.insert(W);
      }
    }
}

static bool mayBeSocket(const PointsToGraph &G, const Value *Fd) {
  for (Pointee P : G.pointsTo(Fd))
    if (pointeeObject(P) == G.socketObject()) return true;
  return false;
}

static bool stepMatches(uint32_t CellOffset, uint32_t Base, const SinkStep &Step) {
  uint64_t Want = uint64_t(Base) + Step.Offset;
  if (CellOffset < Want) return false;
  uint64_t Past = CellOffset - Want;
  return Step.Stride ? Past % Step.Stride == 0 : Past == 0;
}

static void followSink(const PointsToGraph &G, const SinkUse &Use,
                       std::map<ObjectId, SinkWitness> &Reaching) {
  const SinkSpec &Spec = *Use.Spec;
  const CallBase &Call = *Use.Call;
  if (Spec.SocketFdArg >= 0 && (unsigned(Spec.SocketFdArg) >= Call.arg_size() ||
                                !mayBeSocket(G, Call.getArgOperand(Spec.SocketFdArg))))
    return;
  for (unsigned Arg = 0; Arg < Call.arg_size(); ++Arg) {
    if (Spec.ArgIndex >= 0 ? Arg != unsigned(Spec.ArgIndex)
                           : !Call.getArgOperand(Arg)->getType()->isPointerTy())
      continue;
    // Breadth-first down the path, remembering how each pointee was reached.
    std::map<Pointee, std::vector<Pointee>> Frontier;
    for (Pointee P : G.pointsTo(Call.getArgOperand(Arg)))
      Frontier.emplace(P, std::vector<Pointee>{});
    for (const SinkStep &Step : Spec.Path) {
      std::map<Pointee, std::vector<Pointee>> Next;
      for (const auto &[P, Chain] : Frontier) {
        ObjectId Obj = pointeeObject(P);
        for (uint32_t Off : G.cellOffsets(Obj)) {
          // A collapsed object's cells are all one, at offset 0, whatever the step's offset.
          if (G.collapsed(Obj) ? Off != 0 : !stepMatches(Off, pointeeOffset(P), Step)) continue;
          std::vector<Pointee> Longer = Chain;
          Longer.push_back(makePointee(Obj, Off));
          for (Pointee Q : G.cell(Obj, Off))
            Next.emplace(Q, Longer);
        }
      }
      Frontier = std::move(Next);
    }
    for (const auto &[P, Chain] : Frontier)
      Reaching.emplace(pointeeObject(P), SinkWitness{&Call, Use.Sink, &Spec, Arg, Chain});
  }
}

DataplaneResult analyzeDataplane(const Module &M, const SinkCatalog &Sinks, uint64_t Budget) {
  DataplaneResult R;
  DenseSet<const Function *> Banned;
  // Objects that overflow their offsets are collapsed from the start of a new solve (see
  // PointsToGraph::overflowed). A round starts with those of the rounds before: finding them
  // again costs a solve per burst, and the solves that find the last ones cost about as much as
  // the whole round. Objects are named by their site, as a new round numbers them anew.
  std::set<ObjectKey> Collapse;
  // Wrappers are found from a solution and change the next one (a wrapper of a wrapper shows
  // up only once the inner one is cloned), so iterate until the set is stable.
  for (R.Rounds = 1;; ++R.Rounds) {
    // The budget covers all the solves of a round.
    uint64_t Spent = 0;
    for (unsigned Solve = 1;; ++Solve) {
      R.Graph = std::make_unique<PointsToGraph>(M, Sinks, R.Wrappers, Collapse);
      R.Graph->solve(Budget - std::min(Budget, Spent));
      Spent += R.Graph->work();
      if (getenv("NICMALLOC_PASS_STATS"))
        errs() << "nic-dataplane-sites: round " << R.Rounds
               << (Solve > 1 ? ", solve " + std::to_string(Solve) : std::string()) << ": "
               << R.Graph->statistics() << "\n";
      if (R.Graph->exhausted()) {
        R.Exhausted = true;
        return R;
      }
      if (R.Graph->overflowed().empty()) break;
      for (ObjectId Obj : R.Graph->overflowed())
        Collapse.insert(R.Graph->key(Obj));
    }
    banLeakyWrappers(*R.Graph, R.Wrappers, Banned);
    DenseSet<const Function *> Next = findWrappers(M, *R.Graph, Banned);
    if (Next == R.Wrappers || R.Rounds == 8) break;
    // A new wrapper's objects stand for its callers' memory no longer (each call site gets an
    // object of its own): they may not overflow any more, so they are found again or not.
    for (auto It = Collapse.begin(); It != Collapse.end();) {
      const auto *Site = dyn_cast_or_null<Instruction>(It->second);
      bool Cloned =
          (It->first == ObjectKind::HeapAlloc || It->first == ObjectKind::WrapperResult) && Site &&
          Next.count(Site->getFunction()) && !R.Wrappers.count(Site->getFunction());
      It = Cloned ? Collapse.erase(It) : std::next(It);
    }
    R.Wrappers = std::move(Next);
  }
  for (const SinkUse &Use : R.Graph->sinkUses())
    followSink(*R.Graph, Use, R.Reaching);
  return R;
}

std::vector<const CallBase *> DataplaneResult::returnedAllocations(const Function &W) const {
  std::set<ObjectId> Fresh;
  for (Pointee P : Graph->returnsOf(&W))
    if (Graph->createdIn(pointeeObject(P), &W)) Fresh.insert(pointeeObject(P));
  std::vector<const CallBase *> Calls;
  for (ObjectId Obj : Fresh) // object ids follow program order
    Calls.push_back(cast<CallBase>(Graph->object(Obj).Site));
  return Calls;
}

std::string describeLocation(const Instruction &I) {
  std::string S;
  raw_string_ostream OS(S);
  if (const DebugLoc &Loc = I.getDebugLoc())
    OS << "at " << Loc->getFilename() << ":" << Loc.getLine() << ":" << Loc.getCol() << " ";
  OS << "in " << I.getFunction()->getName();
  return OS.str();
}

std::string describeObject(const PointsToGraph &G, ObjectId Obj) {
  const AbstractObject &O = G.object(Obj);
  std::string S;
  raw_string_ostream OS(S);
  switch (O.Kind) {
  case ObjectKind::HeapAlloc:
  case ObjectKind::WrapperResult: {
    const auto *Call = cast<CallBase>(O.Site);
    const Function *Callee = dyn_cast<Function>(Call->getCalledOperand()->stripPointerCasts());
    OS << (Callee ? Callee->getName() : "?") << "() " << describeLocation(*Call);
    break;
  }
  case ObjectKind::Stack:
    OS << "stack '" << (O.Site->hasName() ? O.Site->getName() : "?") << "' in "
       << O.Creator->getName();
    break;
  case ObjectKind::Global:
    OS << "global '" << O.Site->getName() << "'";
    break;
  case ObjectKind::Function:
    OS << "function '" << O.Site->getName() << "'";
    break;
  case ObjectKind::SocketFd:
    OS << "socket descriptor";
    break;
  case ObjectKind::External:
    if (const auto *Call = dyn_cast<CallBase>(O.Site))
      OS << "result of external call " << describeLocation(*Call);
    else
      OS << "caller's memory behind '" << O.Site->getName() << "' of " << O.Creator->getName();
    break;
  }
  return OS.str();
}

} // namespace nicpass
