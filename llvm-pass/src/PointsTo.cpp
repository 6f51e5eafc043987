#include "PointsTo.h"

#include "AllocCalls.h"

#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/GetElementPtrTypeIterator.h"
#include "llvm/IR/InlineAsm.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/IntrinsicInst.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Operator.h"

#include <algorithm>

using namespace llvm;

namespace nicpass {

static const PointeeBits EmptyBits;
static const std::set<uint32_t> EmptyOffsets;

static uint32_t foldOffset(int64_t Offset) {
  if (Offset < 0) return 0; // container_of past the start of what we know: the object itself
  return uint32_t(Offset % MaxFieldOffset);
}

static std::vector<uint32_t> offsetsOf(const std::set<uint32_t> &Cells) {
  return std::vector<uint32_t>(Cells.begin(), Cells.end());
}

int64_t gepFieldOffset(const GEPOperator &GEP, const DataLayout &DL) {
  int64_t Offset = 0;
  bool First = true;
  for (gep_type_iterator GTI = gep_type_begin(GEP), E = gep_type_end(GEP); GTI != E;
       ++GTI, First = false) {
    if (StructType *ST = GTI.getStructTypeOrNull()) {
      // A vector GEP's struct index is a vector constant: its lanes are taken as lane 0's field
      // (they agree in every splat; a GEP whose lanes pick different fields is not tracked
      // per lane).
      auto *Field = dyn_cast<ConstantInt>(GTI.getOperand());
      if (!Field)
        if (auto *C = dyn_cast<Constant>(GTI.getOperand()))
          Field = dyn_cast_or_null<ConstantInt>(C->getAggregateElement(0u));
      if (!Field) return Offset;
      Offset += DL.getStructLayout(ST)->getElementOffset(Field->getZExtValue());
      continue;
    }
    // Arrays are smashed: every element shares one set of fields, and so does pointer
    // arithmetic over elements (++p on an int *). Only byte arithmetic (p + 16 on a char *,
    // offsetof, what SROA emits) moves between fields.
    Type *Indexed = GTI.getIndexedType();
    if (First && Indexed->isIntegerTy(8))
      if (auto *Index = dyn_cast<ConstantInt>(GTI.getOperand()))
        Offset += Index->getSExtValue() * int64_t(DL.getTypeAllocSize(Indexed).getFixedValue());
  }
  return Offset;
}

/// A GEP that feeds back into its own base through phis (p = p + 16 in a loop) walks an array;
/// it is smashed like a typed array index instead of creating a new field every iteration.
static bool isRecurrence(const GetElementPtrInst &GEP) {
  SmallVector<const Value *, 8> Work{GEP.getPointerOperand()};
  SmallPtrSet<const Value *, 16> Seen;
  while (!Work.empty() && Seen.size() < 32) {
    const Value *V = Work.pop_back_val();
    if (V == &GEP) return true;
    if (!Seen.insert(V).second) continue;
    if (auto *Phi = dyn_cast<PHINode>(V))
      Work.append(Phi->op_begin(), Phi->op_end());
    else if (auto *Sel = dyn_cast<SelectInst>(V))
      Work.append({Sel->getTrueValue(), Sel->getFalseValue()});
    else if (auto *G = dyn_cast<GetElementPtrInst>(V))
      Work.push_back(G->getPointerOperand());
    else if (auto *Cast = dyn_cast<CastInst>(V))
      Work.push_back(Cast->getOperand(0));
  }
  return false;
}

PointsToGraph::PointsToGraph(const Module &M, const SinkCatalog &Sinks,
                             const DenseSet<const Function *> &Wrappers,
                             const std::set<ObjectKey> &Collapse)
    : M(M), DL(M.getDataLayout()), Sinks(Sinks), Wrappers(Wrappers), Collapse(Collapse) {
  SocketObject = newObject(ObjectKind::SocketFd, nullptr, nullptr);
  buildGlobals();
  for (const Function &F : M)
    if (!F.isDeclaration()) buildFunction(F);
}

PointsToGraph::~PointsToGraph() = default;

// ---- Building ----

ObjectId PointsToGraph::newObject(ObjectKind Kind, const Value *Site, const Function *Creator,
                                  const Function *Wrapper) {
  Objects.push_back(AbstractObject{Kind, Site, Creator, Wrapper});
  ObjectCells.emplace_back();
  CopyWatch.emplace_back();
  WrapperWatch.emplace_back();
  SpreadWatchOf.emplace_back();
  ObjectOffsets.emplace_back();
  Collapsed.push_back(Collapse.count({Kind, Site}));
  Overflows.push_back(false);
  return ObjectId(Objects.size() - 1);
}

ObjectId PointsToGraph::objectForGlobal(const Value *G) {
  auto It = GlobalObjects.find(G);
  if (It != GlobalObjects.end()) return It->second;
  ObjectId O = newObject(isa<Function>(G) ? ObjectKind::Function : ObjectKind::Global, G, nullptr);
  GlobalObjects[G] = O;
  return O;
}

PointsToGraph::NodeId PointsToGraph::freshNode() {
  Pts.emplace_back();
  Pending.emplace_back();
  ComplexAt.emplace_back();
  Succ.emplace_back();
  InWorklist.push_back(false);
  Parent.push_back(NodeId(Parent.size()));
  return NodeId(Pts.size() - 1);
}

PointsToGraph::NodeId PointsToGraph::node(const Value *V) {
  auto It = ValueNodes.find(V);
  if (It != ValueNodes.end()) return It->second;
  NodeId N = freshNode();
  ValueNodes[V] = N;
  if (auto *C = dyn_cast<Constant>(V)) {
    PointeeBits Seed;
    constantPointees(C, Seed);
    addPointees(N, Seed);
  }
  return N;
}

PointsToGraph::NodeId PointsToGraph::retNode(const Function *F) {
  auto It = RetNodes.find(F);
  if (It != RetNodes.end()) return It->second;
  NodeId N = freshNode();
  RetNodes[F] = N;
  return N;
}

PointsToGraph::NodeId PointsToGraph::cellNode(ObjectId Obj, uint32_t Offset) {
  Pointee Key = makePointee(Obj, Offset);
  auto It = CellNodes.find(Key);
  if (It != CellNodes.end()) return It->second;
  NodeId N = freshNode();
  CellNodes[Key] = N;
  ObjectCells[Obj].insert(Offset);
  if (!CopyWatch[Obj].empty() || !WrapperWatch[Obj].empty() || !SpreadWatchOf[Obj].empty() ||
      Collapsed[Obj])
    NewCells.push_back(Key);
  return N;
}

bool PointsToGraph::tracked(const Type *Ty) const {
  // Integers of 32 bits and up carry pointers cast to uintptr_t and socket descriptors.
  return Ty->isPointerTy() || Ty->isAggregateType() ||
         (Ty->isIntegerTy() && Ty->getIntegerBitWidth() >= 32);
}

void PointsToGraph::constantPointees(const Constant *C, PointeeBits &Out) {
  if (auto *Alias = dyn_cast<GlobalAlias>(C)) {
    if (const Constant *Aliasee = Alias->getAliasee()) constantPointees(Aliasee, Out);
    return;
  }
  if (isa<GlobalVariable>(C) || isa<Function>(C)) {
    Out.set(idOf(makePointee(objectForGlobal(C), 0)));
    return;
  }
  if (auto *GEP = dyn_cast<GEPOperator>(C)) {
    PointeeBits Base;
    constantPointees(cast<Constant>(GEP->getPointerOperand()), Base);
    int64_t Delta = gepFieldOffset(*GEP, DL);
    for (Pointee P : pointeesOf(Base))
      if (Pointee Q = shift(P, Delta); Q != NoPointee) Out.set(idOf(Q));
    return;
  }
  // Casts, pointer arithmetic done on integers, aggregates used as values: union of operands.
  if (isa<ConstantExpr>(C) || isa<ConstantAggregate>(C))
    for (const Use &Op : C->operands())
      constantPointees(cast<Constant>(Op.get()), Out);
}

void PointsToGraph::addInitializer(ObjectId Obj, const Constant *Init, int64_t Offset) {
  if (auto *CS = dyn_cast<ConstantStruct>(Init)) {
    const StructLayout *Layout = DL.getStructLayout(CS->getType());
    for (unsigned I = 0; I < CS->getNumOperands(); ++I)
      addInitializer(Obj, CS->getOperand(I), Offset + Layout->getElementOffset(I));
    return;
  }
  if (isa<ConstantArray>(Init) || isa<ConstantVector>(Init)) {
    for (const Use &Op : Init->operands()) // smashed: every element at the array's offset
      addInitializer(Obj, cast<Constant>(Op.get()), Offset);
    return;
  }
  PointeeBits Seed;
  constantPointees(Init, Seed);
  Pointee Field = shift(makePointee(Obj, 0), Offset);
  if (!Seed.empty() && Field != NoPointee) addPointees(cellNode(Obj, pointeeOffset(Field)), Seed);
}

void PointsToGraph::buildGlobals() {
  for (const GlobalVariable &G : M.globals())
    if (G.hasInitializer() && !G.getName().startswith("llvm."))
      addInitializer(objectForGlobal(&G), G.getInitializer(), 0);
}

void PointsToGraph::buildFunction(const Function &F) {
  // Callers outside the module pass memory we never see allocated; give it an object so that
  // what this module stores into it (c->iov[0].iov_base = buf) is still tracked.
  if (!F.hasLocalLinkage() || F.hasAddressTaken())
    for (const Argument &A : F.args())
      if (A.getType()->isPointerTy())
        addPointee(node(&A), makePointee(newObject(ObjectKind::External, &A, &F), 0));
  for (const BasicBlock &BB : F)
    for (const Instruction &I : BB)
      buildInstruction(I);
}

void PointsToGraph::buildInstruction(const Instruction &I) {
  auto Copy = [&](const Value *From, int64_t Delta = 0) {
    addEdge(node(From), Edge{node(&I), Delta});
  };
  if (auto *Alloca = dyn_cast<AllocaInst>(&I)) {
    ObjectId O = newObject(ObjectKind::Stack, Alloca, I.getFunction());
    addPointee(node(&I), makePointee(O, 0));
  } else if (auto *Load = dyn_cast<LoadInst>(&I)) {
    if (tracked(Load->getType())) addLoad({node(Load->getPointerOperand()), node(&I)});
  } else if (auto *Store = dyn_cast<StoreInst>(&I)) {
    if (tracked(Store->getValueOperand()->getType()))
      addStore({node(Store->getPointerOperand()), node(Store->getValueOperand())});
  } else if (auto *CmpXchg = dyn_cast<AtomicCmpXchgInst>(&I)) {
    addStore({node(CmpXchg->getPointerOperand()), node(CmpXchg->getNewValOperand())});
    addLoad({node(CmpXchg->getPointerOperand()), node(&I)});
  } else if (auto *RMW = dyn_cast<AtomicRMWInst>(&I)) {
    if (RMW->getOperation() == AtomicRMWInst::Xchg && tracked(RMW->getType())) {
      addStore({node(RMW->getPointerOperand()), node(RMW->getValOperand())});
      addLoad({node(RMW->getPointerOperand()), node(&I)});
    }
  } else if (auto *GEP = dyn_cast<GetElementPtrInst>(&I)) {
    int64_t Delta = gepFieldOffset(cast<GEPOperator>(*GEP), DL);
    if (Delta && isRecurrence(*GEP)) Delta = 0;
    Copy(GEP->getPointerOperand(), Delta);
  } else if (auto *Cast = dyn_cast<CastInst>(&I)) {
    if (tracked(Cast->getType()) && tracked(Cast->getSrcTy())) Copy(Cast->getOperand(0));
  } else if (auto *Bin = dyn_cast<BinaryOperator>(&I)) {
    // Pointer arithmetic done on uintptr_t keeps pointing into the same object.
    unsigned Op = Bin->getOpcode();
    auto IsAddress = [](const Value *V) { return isa<PtrToIntInst>(V); };
    if (!tracked(Bin->getType())) {
    } else if (Op == Instruction::Sub) {
      // q - p of two addresses is a distance, not a pointer.
      if (!IsAddress(Bin->getOperand(1))) Copy(Bin->getOperand(0));
    } else if (Op == Instruction::Add || Op == Instruction::And || Op == Instruction::Or ||
               Op == Instruction::Xor) {
      Copy(Bin->getOperand(0));
      Copy(Bin->getOperand(1));
    }
  } else if (auto *Phi = dyn_cast<PHINode>(&I)) {
    if (tracked(Phi->getType()))
      for (const Value *In : Phi->incoming_values())
        Copy(In);
  } else if (auto *Sel = dyn_cast<SelectInst>(&I)) {
    if (tracked(Sel->getType())) {
      Copy(Sel->getTrueValue());
      Copy(Sel->getFalseValue());
    }
  } else if (isa<ExtractValueInst>(&I) || isa<FreezeInst>(&I)) {
    if (tracked(I.getType())) Copy(I.getOperand(0));
  } else if (auto *Insert = dyn_cast<InsertValueInst>(&I)) {
    Copy(Insert->getAggregateOperand());
    if (tracked(Insert->getInsertedValueOperand()->getType()))
      Copy(Insert->getInsertedValueOperand());
  } else if (auto *Ret = dyn_cast<ReturnInst>(&I)) {
    if (const Value *V = Ret->getReturnValue())
      if (tracked(V->getType())) addEdge(node(V), Edge{retNode(I.getFunction())});
  } else if (auto *Call = dyn_cast<CallBase>(&I)) {
    buildCall(*Call);
  }
}

static std::optional<uint64_t> constantLength(const Value *V) {
  if (auto *C = dyn_cast<ConstantInt>(V)) return C->getZExtValue();
  return std::nullopt;
}

void PointsToGraph::buildCall(const CallBase &Call) {
  const Value *Target = Call.getCalledOperand()->stripPointerCasts();
  if (isa<InlineAsm>(Target)) return;
  const auto *Callee = dyn_cast<Function>(Target);
  if (!Callee) {
    addIndirect({&Call, node(Call.getCalledOperand())});
    return;
  }
  if (Callee->isIntrinsic()) {
    switch (Callee->getIntrinsicID()) {
    case Intrinsic::memcpy:
    case Intrinsic::memcpy_inline:
    case Intrinsic::memmove:
      addCopyMem({node(Call.getArgOperand(0)), node(Call.getArgOperand(1)),
                  constantLength(Call.getArgOperand(2))});
      break;
    default:
      break;
    }
    return;
  }
  bindCall(Call, *Callee, /*Direct=*/true);
}

void PointsToGraph::bindCall(const CallBase &Call, const Function &Callee, bool Direct) {
  for (const SinkSpec &Spec : Sinks.lookup(Callee)) {
    SinkUses.push_back({&Call, &Callee, &Spec});
    for (const Value *Arg : Call.args())
      node(Arg); // so that constant arguments (a global buffer) have their pointees
  }
  if (Callee.isDeclaration()) {
    StringRef Name = Callee.getName();
    if (std::optional<AllocFunction> Alloc = classifyAllocFunction(Callee)) {
      if (!Direct) return; // malloc through a function pointer: not a site we can rewrite
      ObjectId O = newObject(ObjectKind::HeapAlloc, &Call, Call.getFunction());
      CallObjects[&Call] = O;
      if (Alloc->OutArg >= 0 && unsigned(Alloc->OutArg) < Call.arg_size()) {
        NodeId Fresh = freshNode();
        addPointee(Fresh, makePointee(O, 0));
        addStore({node(Call.getArgOperand(Alloc->OutArg)), Fresh});
      } else {
        addPointee(node(&Call), makePointee(O, 0));
      }
      if (Alloc->Kind == AllocKind::Realloc) // the old contents move into the new block
        addCopyMem({node(&Call), node(Call.getArgOperand(0)), std::nullopt});
      return;
    }
    if (Name == "socket" || Name == "accept" || Name == "accept4") {
      addPointee(node(&Call), makePointee(SocketObject, 0));
    } else if (Name == "socketpair" && Call.arg_size() == 4) {
      NodeId Sock = freshNode(), Second = freshNode();
      addPointee(Sock, makePointee(SocketObject, 0));
      addEdge(node(Call.getArgOperand(3)), Edge{Second, 4});
      addStore({node(Call.getArgOperand(3)), Sock});
      addStore({Second, Sock});
    } else if ((Name == "memcpy" || Name == "memmove" || Name == "mempcpy" ||
                Name == "__memcpy_chk" || Name == "__memmove_chk") &&
               Call.arg_size() >= 3) {
      addCopyMem({node(Call.getArgOperand(0)), node(Call.getArgOperand(1)),
                  constantLength(Call.getArgOperand(2))});
      addEdge(node(Call.getArgOperand(0)), Edge{node(&Call)});
    } else if (Direct && Call.getType()->isPointerTy()) {
      ObjectId O = newObject(ObjectKind::External, &Call, Call.getFunction());
      addPointee(node(&Call), makePointee(O, 0));
    }
    return;
  }
  unsigned N = std::min<unsigned>(Call.arg_size(), Callee.arg_size());
  for (unsigned I = 0; I < N; ++I)
    if (tracked(Call.getArgOperand(I)->getType()))
      addEdge(node(Call.getArgOperand(I)), Edge{node(Callee.getArg(I))});
  if (!tracked(Call.getType())) return;
  if (Direct && Wrappers.count(&Callee)) {
    // Heap cloning: this call site gets its own object for what the wrapper allocates.
    ObjectId O = newObject(ObjectKind::WrapperResult, &Call, Call.getFunction(), &Callee);
    CallObjects[&Call] = O;
    addEdge(retNode(&Callee), Edge{node(&Call), 0, &Callee, O});
    addWrapperCells({retNode(&Callee), &Callee, O});
  } else if (const auto &Returned = passThrough(Callee); Direct && Returned) {
    // identity(p), to_header(p): the result is this caller's argument, not every caller's.
    for (const auto &[ArgNo, Delta] : *Returned)
      if (ArgNo < Call.arg_size())
        addEdge(node(Call.getArgOperand(ArgNo)), Edge{node(&Call), Delta});
  } else {
    addEdge(retNode(&Callee), Edge{node(&Call)});
  }
}

const std::optional<std::vector<std::pair<unsigned, int64_t>>> &
PointsToGraph::passThrough(const Function &F) {
  auto Found = PassThrough.find(&F);
  if (Found != PassThrough.end()) return Found->second;
  std::vector<std::pair<unsigned, int64_t>> Returned;
  SmallVector<std::pair<const Value *, int64_t>, 8> Work;
  for (const BasicBlock &BB : F)
    if (auto *Ret = dyn_cast<ReturnInst>(BB.getTerminator()))
      if (Ret->getReturnValue()) Work.push_back({Ret->getReturnValue(), 0});
  SmallPtrSet<const Value *, 16> Seen;
  bool Ok = !Work.empty();
  while (Ok && !Work.empty()) {
    auto [V, Delta] = Work.pop_back_val();
    if (!Seen.insert(V).second) continue;
    if (auto *A = dyn_cast<Argument>(V))
      Returned.push_back({A->getArgNo(), Delta});
    else if (isa<ConstantPointerNull>(V) || isa<UndefValue>(V))
      continue;
    else if (auto *Cast = dyn_cast<CastInst>(V))
      Work.push_back({Cast->getOperand(0), Delta});
    else if (auto *GEP = dyn_cast<GetElementPtrInst>(V))
      Work.push_back(
          {GEP->getPointerOperand(), Delta + gepFieldOffset(cast<GEPOperator>(*GEP), DL)});
    else if (auto *Phi = dyn_cast<PHINode>(V))
      for (const Value *In : Phi->incoming_values())
        Work.push_back({In, Delta});
    else if (auto *Sel = dyn_cast<SelectInst>(V))
      Work.append({{Sel->getTrueValue(), Delta}, {Sel->getFalseValue(), Delta}});
    else
      Ok = false;
  }
  auto &Slot = PassThrough[&F];
  if (Ok && Seen.size() < 64) Slot = std::move(Returned);
  return Slot;
}

// ---- Solving ----

bool PointsToGraph::createdIn(ObjectId Obj, const Function *F) const {
  const AbstractObject &O = Objects[Obj];
  return (O.Kind == ObjectKind::HeapAlloc || O.Kind == ObjectKind::WrapperResult) && O.Creator == F;
}

uint32_t PointsToGraph::idOf(Pointee P) {
  auto [It, New] = PointeeIds.try_emplace(P, uint32_t(PointeeOf.size()));
  if (New) PointeeOf.push_back(P);
  return It->second;
}

std::vector<Pointee> PointsToGraph::pointeesOf(const PointeeBits &Bits) const {
  std::vector<Pointee> Out;
  for (unsigned Id : Bits)
    Out.push_back(PointeeOf[Id]);
  return Out;
}

void PointsToGraph::push(NodeId N) {
  if (InWorklist[N]) return;
  InWorklist[N] = true;
  Worklist.push_back(N);
}

void PointsToGraph::addPointees(NodeId N, const PointeeBits &New) {
  Work += New.count();
  N = find(N);
  PointeeBits Fresh;
  Fresh.intersectWithComplement(New, Pts[N]);
  if (Fresh.empty()) return;
  Pts[N] |= Fresh;
  Pending[N] |= Fresh;
  push(N);
}

void PointsToGraph::addPointee(NodeId N, Pointee P) {
  PointeeBits One;
  One.set(idOf(P));
  addPointees(N, One);
}

void PointsToGraph::propagate(const PointeeBits &From, const Edge &E) {
  PushedBy[size_t(E.Origin)] += From.count();
  // A plain copy carries the set as it is: a collapsed object's pointees are at offset 0
  // already, so shift() would change none of them.
  if (!E.Delta && !E.RenameFrom) {
    addPointees(E.Dst, From);
    return;
  }
  PointeeBits Out;
  for (unsigned Id : From) {
    Pointee P = PointeeOf[Id];
    if (E.RenameFrom && createdIn(pointeeObject(P), E.RenameFrom))
      P = makePointee(E.RenameTo, pointeeOffset(P));
    if (Pointee Q = shift(P, E.Delta); Q != NoPointee) Out.set(idOf(Q));
  }
  addPointees(E.Dst, Out);
}

bool PointsToGraph::addEdge(NodeId Src, Edge E) {
  if (stopped()) return false;
  Src = find(Src);
  E.Dst = find(E.Dst);
  if (plain(E) && Src == E.Dst) return false; // inside a merged cycle
  int64_t Rename = E.RenameFrom ? int64_t(E.RenameTo) : -1;
  if (!EdgeKeys.insert(EdgeKey{Src, E.Dst, E.Delta, Rename}).second) return false;
  ++Work;
  E.Origin = Origin;
  ++EdgesBy[size_t(Origin)];
  PlainEdgesSinceMerge |= plain(E);
  Succ[Src].push_back(E);
  propagate(Pts[Src], E); // a new edge carries everything seen so far
  return true;
}

void PointsToGraph::attach(NodeId N, ComplexKind K, size_t Index) {
  N = find(N);
  ComplexAt[N].push_back({K, uint32_t(Index)});
  if (!Pts[N].empty()) {
    PointeeBits Current = Pts[N]; // applying the constraint may add nodes
    applyIncremental(K, Index, Current);
  }
}

void PointsToGraph::addLoad(LoadConstraint C) {
  Loads.push_back(C);
  attach(C.Ptr, ComplexKind::Load, Loads.size() - 1);
}

void PointsToGraph::addStore(StoreConstraint C) {
  Stores.push_back(C);
  attach(C.Ptr, ComplexKind::Store, Stores.size() - 1);
}

void PointsToGraph::addIndirect(IndirectCallConstraint C) {
  IndirectCalls.push_back(C);
  attach(C.Callee, ComplexKind::IndirectCall, IndirectCalls.size() - 1);
}

void PointsToGraph::addCopyMem(CopyMemConstraint C) {
  CopyMems.push_back(C);
  attach(C.SrcPtr, ComplexKind::CopySrc, CopyMems.size() - 1);
  attach(C.DstPtr, ComplexKind::CopyDst, CopyMems.size() - 1);
}

void PointsToGraph::addWrapperCells(WrapperCellsConstraint C) {
  WrapperCells.push_back(C);
  attach(C.Ret, ComplexKind::WrapperRet, WrapperCells.size() - 1);
}

void PointsToGraph::copyCell(size_t Index, ObjectId SrcObj, uint32_t Start, uint32_t Off,
                             const std::vector<Pointee> &Dsts) {
  const CopyMemConstraint &C = CopyMems[Index];
  if (Off < Start || (C.Len && Off - Start >= *C.Len)) return;
  for (Pointee D : Dsts) {
    if (stopped()) return;
    if (Collapsed[SrcObj] && !Collapsed[pointeeObject(D)]) {
      spreadCell(SrcObj, D, C.Len);
      continue;
    }
    Pointee To = shift(D, int64_t(Off) - Start);
    if (To == NoPointee) continue;
    uint32_t DstOff = pointeeOffset(To);
    // memmove inside one (smashed) array: the contents stay in the object; shifting them
    // would invent fields.
    if (pointeeObject(D) == SrcObj && DstOff != Off) continue;
    NodeId From = cellNode(SrcObj, Off);
    addEdge(From, Edge{cellNode(pointeeObject(D), DstOff)});
  }
}

void PointsToGraph::spreadCell(ObjectId SrcObj, Pointee Dst, std::optional<uint64_t> Len) {
  SpreadWatch W{SrcObj, pointeeOffset(Dst), Len.value_or(UINT64_MAX)};
  if (!Spreading.insert({SrcObj, Dst, W.Len}).second) return;
  ObjectId DstObj = pointeeObject(Dst);
  SpreadWatchOf[DstObj].push_back(W);
  cellNode(DstObj, W.Start);
  for (uint32_t Off : offsetsOf(ObjectCells[DstObj]))
    spreadTo(W, DstObj, Off);
}

void PointsToGraph::spreadTo(const SpreadWatch &W, ObjectId DstObj, uint32_t Off) {
  if (Off < W.Start || Off - W.Start >= W.Len) return;
  addEdge(cellNode(W.Src, 0), Edge{cellNode(DstObj, Off)});
}

Pointee PointsToGraph::shift(Pointee P, int64_t Delta) {
  ObjectId Obj = pointeeObject(P);
  if (Collapsed[Obj]) return makePointee(Obj, 0);
  if (!Delta) return P;
  uint32_t Off = foldOffset(int64_t(pointeeOffset(P)) + Delta);
  if (ObjectOffsets[Obj].size() == MaxOffsetsPerObject && !ObjectOffsets[Obj].count(Off)) {
    // The solution will not be used. Going on without the offsets past the limit computes
    // less than the full solution, so every object seen to overflow meanwhile would overflow
    // in it too: the next solve can collapse them all.
    if (Overflowed.empty()) OverflowStop = 2 * Work;
    if (!Overflows[Obj]) Overflowed.push_back(Obj);
    Overflows[Obj] = true;
    return NoPointee;
  }
  ObjectOffsets[Obj].insert(Off);
  return makePointee(Obj, Off);
}

void PointsToGraph::newCell(ObjectId Obj, uint32_t Off) {
  // A collapsed object's pointees are all at offset 0, but cells elsewhere can still appear
  // (a wrapper's object copied field by field into its call site's): tie them to cell 0.
  if (Collapsed[Obj] && Off) {
    // Tied both ways, the two cells are one: merge them rather than copy between them.
    NodeId Cell = find(cellNode(Obj, Off)), Zero = find(cellNode(Obj, 0));
    if (Cell != Zero) {
      unite(Zero, Cell);
      tidyEdges(Zero);
    }
  }
  // Copy the watcher lists: handling them may add watchers (and cells) to this object.
  std::vector<std::pair<uint32_t, uint32_t>> Copies = CopyWatch[Obj];
  OriginScope Scope(*this, EdgeOrigin::CopyMem);
  for (auto [Index, Start] : Copies) {
    NodeId Dst = find(CopyMems[Index].DstPtr);
    copyCell(Index, Obj, Start, Off, pointeesOf(Pts[Dst]));
  }
  std::vector<SpreadWatch> Spreads = SpreadWatchOf[Obj];
  for (const SpreadWatch &W : Spreads)
    spreadTo(W, Obj, Off);
  std::vector<uint32_t> Wrappers = WrapperWatch[Obj];
  OriginScope WrapperScope(*this, EdgeOrigin::Wrapper);
  for (uint32_t Index : Wrappers)
    addEdge(cellNode(Obj, Off), Edge{cellNode(WrapperCells[Index].Result, Off)});
}

void PointsToGraph::applyIncremental(ComplexKind K, size_t Index, const PointeeBits &NewBits) {
  static constexpr EdgeOrigin Origins[] = {EdgeOrigin::Load,    EdgeOrigin::Store,
                                           EdgeOrigin::Call,    EdgeOrigin::CopyMem,
                                           EdgeOrigin::CopyMem, EdgeOrigin::Wrapper};
  OriginScope Scope(*this, Origins[size_t(K)]);
  std::vector<Pointee> New = pointeesOf(NewBits);
  switch (K) {
  case ComplexKind::Load: {
    LoadConstraint C = Loads[Index];
    for (Pointee P : New)
      addEdge(cellNode(pointeeObject(P), pointeeOffset(P)), Edge{C.Dst});
    break;
  }
  case ComplexKind::Store: {
    StoreConstraint C = Stores[Index];
    for (Pointee P : New)
      addEdge(C.Val, Edge{cellNode(pointeeObject(P), pointeeOffset(P))});
    break;
  }
  case ComplexKind::IndirectCall: {
    IndirectCallConstraint C = IndirectCalls[Index];
    for (Pointee P : New) {
      const AbstractObject &O = Objects[pointeeObject(P)];
      if (O.Kind != ObjectKind::Function || pointeeOffset(P)) continue;
      const auto *F = cast<Function>(O.Site);
      if (BoundIndirect.insert({C.Call, F}).second) bindCall(*C.Call, *F, /*Direct=*/false);
    }
    break;
  }
  case ComplexKind::CopySrc: {
    // New source objects: copy their cells now, and their later cells as they appear.
    NodeId Dst = find(CopyMems[Index].DstPtr);
    for (Pointee S : New) {
      ObjectId Obj = pointeeObject(S);
      if (Watching.insert({Obj, uint32_t(Index), pointeeOffset(S)}).second)
        CopyWatch[Obj].push_back({uint32_t(Index), pointeeOffset(S)});
      std::vector<Pointee> Dsts = pointeesOf(Pts[Dst]);
      for (uint32_t Off : offsetsOf(ObjectCells[Obj]))
        copyCell(Index, Obj, pointeeOffset(S), Off, Dsts);
    }
    break;
  }
  case ComplexKind::CopyDst: {
    const std::vector<Pointee> &Dsts = New;
    NodeId Src = find(CopyMems[Index].SrcPtr);
    std::vector<Pointee> Srcs = pointeesOf(Pts[Src]);
    for (Pointee S : Srcs)
      for (uint32_t Off : offsetsOf(ObjectCells[pointeeObject(S)]))
        copyCell(Index, pointeeObject(S), pointeeOffset(S), Off, Dsts);
    break;
  }
  case ComplexKind::WrapperRet: {
    // What the wrapper stored into its fresh object (a header's data pointer) is visible
    // through the call site's object.
    WrapperCellsConstraint C = WrapperCells[Index];
    for (Pointee P : New) {
      ObjectId Obj = pointeeObject(P);
      if (!createdIn(Obj, C.Wrapper)) continue;
      if (Collapsed[Obj] && !Collapsed[C.Result]) {
        spreadCell(Obj, makePointee(C.Result, 0), std::nullopt);
        continue;
      }
      if (Watching.insert({Obj, uint32_t(Index), UINT32_MAX}).second)
        WrapperWatch[Obj].push_back(uint32_t(Index));
      for (uint32_t Off : offsetsOf(ObjectCells[Obj]))
        addEdge(cellNode(Obj, Off), Edge{cellNode(C.Result, Off)});
    }
    break;
  }
  }
}

void PointsToGraph::drain() {
  while (!Worklist.empty() || !NewCells.empty()) {
    if (stopped()) return;
    if (!NewCells.empty()) {
      Pointee Cell = NewCells.back();
      NewCells.pop_back();
      newCell(pointeeObject(Cell), pointeeOffset(Cell));
      continue;
    }
    // A pass costs about as much as the graph is large: one each time the work done since the
    // last reaches that size keeps them to half the time at most, and a cycle formed meanwhile
    // does not carry pointees round for long.
    if (PlainEdgesSinceMerge && Work - WorkAtMerge > Pts.size() + EdgeKeys.size()) mergeCycles();
    NodeId N = Worklist.back();
    Worklist.pop_back();
    if (find(N) != N) continue; // merged: its pointees are pending at its representative
    InWorklist[N] = false;
    PointeeBits New;
    std::swap(New, Pending[N]);
    if (New.empty()) continue;
    for (size_t I = 0; I < Succ[N].size(); ++I) {
      Edge E = Succ[N][I];
      propagate(New, E);
    }
    for (size_t I = 0; I < ComplexAt[N].size(); ++I) {
      auto [K, Index] = ComplexAt[N][I];
      applyIncremental(K, Index, New);
    }
  }
}

void PointsToGraph::solve(uint64_t Budget) {
  this->Budget = Budget;
  drain();
  Exhausted = Work > Budget;
}

PointsToGraph::NodeId PointsToGraph::find(NodeId N) {
  while (Parent[N] != N) {
    Parent[N] = Parent[Parent[N]];
    N = Parent[N];
  }
  return N;
}

PointsToGraph::NodeId PointsToGraph::representative(NodeId N) const {
  while (Parent[N] != N)
    N = Parent[N];
  return N;
}

void PointsToGraph::unite(NodeId R, NodeId X) {
  // Each half has pushed what it holds, but its pending pointees, along its own edges and to
  // its own constraints: what both halves have pushed is done, the rest is pending.
  PointeeBits DoneR, DoneX;
  DoneR.intersectWithComplement(Pts[R], Pending[R]);
  DoneX.intersectWithComplement(Pts[X], Pending[X]);
  DoneR &= DoneX;
  Pts[R] |= Pts[X];
  Pending[R].intersectWithComplement(Pts[R], DoneR);
  Succ[R].insert(Succ[R].end(), Succ[X].begin(), Succ[X].end());
  ComplexAt[R].insert(ComplexAt[R].end(), ComplexAt[X].begin(), ComplexAt[X].end());
  Pts[X].clear();
  Pending[X].clear();
  std::vector<Edge>().swap(Succ[X]);
  std::vector<std::pair<ComplexKind, uint32_t>>().swap(ComplexAt[X]);
  Parent[X] = R;
  ++MergedNodes;
  if (!Pending[R].empty()) push(R);
}

void PointsToGraph::tidyEdges(NodeId R) {
  DenseSet<std::tuple<NodeId, int64_t, int64_t>> Seen;
  std::vector<Edge> Kept;
  Kept.reserve(Succ[R].size());
  for (Edge E : Succ[R]) {
    E.Dst = find(E.Dst);
    if (plain(E) && E.Dst == R) continue;
    int64_t Rename = E.RenameFrom ? int64_t(E.RenameTo) : -1;
    if (!Seen.insert({E.Dst, E.Delta, Rename}).second) continue;
    EdgeKeys.insert(EdgeKey{R, E.Dst, E.Delta, Rename});
    Kept.push_back(E);
  }
  Succ[R] = std::move(Kept);
}

template <typename VisitFn> void PointsToGraph::components(bool PlainOnly, VisitFn Visit) const {
  // Tarjan's algorithm, iteratively (the graphs are deep).
  constexpr uint32_t Unvisited = UINT32_MAX;
  std::vector<uint32_t> Index(Pts.size(), Unvisited), Low(Pts.size());
  std::vector<bool> OnStack(Pts.size());
  std::vector<NodeId> Stack, Component;
  std::vector<std::pair<NodeId, size_t>> Path; // DFS: node, next successor to look at
  uint32_t Next = 0;
  for (NodeId Root = 0; Root < Pts.size(); ++Root) {
    if (Parent[Root] != Root || Index[Root] != Unvisited) continue;
    Path.push_back({Root, 0});
    Index[Root] = Low[Root] = Next++;
    Stack.push_back(Root);
    OnStack[Root] = true;
    while (!Path.empty()) {
      auto &[N, I] = Path.back();
      if (I < Succ[N].size()) {
        const Edge &E = Succ[N][I++];
        if (PlainOnly && !plain(E)) continue;
        NodeId D = representative(E.Dst);
        if (Index[D] == Unvisited) {
          Index[D] = Low[D] = Next++;
          Stack.push_back(D);
          OnStack[D] = true;
          Path.push_back({D, 0});
        } else if (OnStack[D]) {
          Low[N] = std::min(Low[N], Index[D]);
        }
        continue;
      }
      NodeId Done = N;
      Path.pop_back();
      if (!Path.empty()) Low[Path.back().first] = std::min(Low[Path.back().first], Low[Done]);
      if (Low[Done] != Index[Done]) continue;
      Component.clear();
      NodeId M;
      do {
        M = Stack.back();
        Stack.pop_back();
        OnStack[M] = false;
        Component.push_back(M);
      } while (M != Done);
      Visit(Component);
    }
  }
}

void PointsToGraph::mergeCycles() {
  ++MergePasses;
  PlainEdgesSinceMerge = false;
  WorkAtMerge = Work;
  std::vector<std::vector<NodeId>> Cycles;
  components(/*PlainOnly=*/true, [&](const std::vector<NodeId> &C) {
    if (C.size() > 1) Cycles.push_back(C);
  });
  std::vector<NodeId> Merged;
  for (const std::vector<NodeId> &C : Cycles) {
    // The largest set takes in the others: a union costs the size of the smaller sets.
    NodeId R = *std::max_element(
        C.begin(), C.end(), [&](NodeId A, NodeId B) { return Pts[A].count() < Pts[B].count(); });
    for (NodeId X : C)
      if (X != R) unite(R, X);
    Merged.push_back(R);
  }
  for (NodeId R : Merged)
    tidyEdges(R);
  // Elsewhere only edges into a merged node change: a node without one is tidy already (its
  // edges were added with their destinations merged as they were, and never twice).
  if (!Cycles.empty())
    for (NodeId N = 0; N < Succ.size(); ++N)
      if (Parent[N] == N && std::any_of(Succ[N].begin(), Succ[N].end(),
                                        [&](const Edge &E) { return Parent[E.Dst] != E.Dst; }))
        tidyEdges(N);
}

std::tuple<uint64_t, uint64_t, uint64_t> PointsToGraph::copyCycles() const {
  uint64_t Cycles = 0, InCycles = 0, Largest = 0;
  components(/*PlainOnly=*/true, [&](const std::vector<NodeId> &C) {
    if (C.size() < 2) return;
    ++Cycles;
    InCycles += C.size();
    Largest = std::max<uint64_t>(Largest, C.size());
  });
  return {Cycles, InCycles, Largest};
}

std::string PointsToGraph::statistics() const {
  uint64_t Pointees = 0, Largest = 0;
  for (const PointeeBits &S : Pts) {
    uint64_t Size = S.count();
    Pointees += Size;
    Largest = std::max(Largest, Size);
  }
  size_t CollapsedObjects = std::count(Collapsed.begin(), Collapsed.end(), true);
  std::string S = "nodes " + std::to_string(Pts.size()) + " (" + std::to_string(MergedNodes) +
                  " merged in " + std::to_string(MergePasses) + " passes), edges " +
                  std::to_string(EdgeKeys.size()) + ", objects " + std::to_string(Objects.size()) +
                  " (" + std::to_string(CollapsedObjects) + " collapsed), cells " +
                  std::to_string(CellNodes.size()) + ", pointees " + std::to_string(Pointees) +
                  " (largest set " + std::to_string(Largest) + "), work " + std::to_string(Work) +
                  (Exhausted ? ", budget exhausted" : "");
  static const char *const Names[] = {"build", "load", "store", "call", "memcpy", "wrapper"};
  S += "; edges/pointees carried by origin:";
  for (size_t I = 0; I < size_t(EdgeOrigin::Count); ++I)
    S += std::string(" ") + Names[I] + " " + std::to_string(EdgesBy[I]) + "/" +
         std::to_string(PushedBy[I]);
  auto [Cycles, InCycles, LargestCycle] = copyCycles();
  S += "; copy cycles " + std::to_string(Cycles) + " over " + std::to_string(InCycles) +
       " nodes (largest " + std::to_string(LargestCycle) + ")";
  return S;
}

// ---- Queries ----

PointeeSet PointsToGraph::pointsTo(const Value *V) const {
  auto It = ValueNodes.find(V);
  return view(It == ValueNodes.end() ? EmptyBits : Pts[representative(It->second)]);
}

PointeeSet PointsToGraph::returnsOf(const Function *F) const {
  auto It = RetNodes.find(F);
  return view(It == RetNodes.end() ? EmptyBits : Pts[representative(It->second)]);
}

PointeeSet PointsToGraph::cell(ObjectId Obj, uint32_t Offset) const {
  auto It = CellNodes.find(makePointee(Obj, Offset));
  return view(It == CellNodes.end() ? EmptyBits : Pts[representative(It->second)]);
}

const std::set<uint32_t> &PointsToGraph::cellOffsets(ObjectId Obj) const {
  return Obj < ObjectCells.size() ? ObjectCells[Obj] : EmptyOffsets;
}

std::optional<ObjectId> PointsToGraph::objectCreatedBy(const CallBase *Call) const {
  auto It = CallObjects.find(Call);
  if (It == CallObjects.end()) return std::nullopt;
  return It->second;
}

} // namespace nicpass
