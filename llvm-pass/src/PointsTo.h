// Field-sensitive, inclusion-based (Andersen-style) points-to analysis over a whole module.
//
// Abstract objects are allocation calls, call sites of allocation wrappers (one object per call
// site: heap cloning), allocas, globals, functions and one "socket descriptor" pseudo-object.
// A pointee is (object, byte offset); every (object, offset) that is stored to or loaded from
// is a memory cell with its own points-to set. Integers are tracked like pointers, so pointers
// that go through uintptr_t (ibv_sge.addr) and socket descriptors are followed too.
#ifndef NICMALLOC_LLVM_PASS_POINTS_TO_H
#define NICMALLOC_LLVM_PASS_POINTS_TO_H

#include "SinkSpecs.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SparseBitVector.h"

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace llvm {
class CallBase;
class Constant;
class DataLayout;
class Function;
class GEPOperator;
class Instruction;
class Module;
class Type;
class Value;
} // namespace llvm

namespace nicpass {

using ObjectId = uint32_t;
/// (object, byte offset) packed in one integer.
using Pointee = uint64_t;
inline Pointee makePointee(ObjectId Obj, uint32_t Offset) {
  return (uint64_t(Obj) << 32) | Offset;
}
inline ObjectId pointeeObject(Pointee P) {
  return ObjectId(P >> 32);
}
inline uint32_t pointeeOffset(Pointee P) {
  return uint32_t(P);
}
/// DenseMap's own hash of a 64-bit key keeps only its low bits (the offset here): mix them all.
struct PointeeKeyInfo {
  static Pointee getEmptyKey() { return ~Pointee(0); }
  static Pointee getTombstoneKey() { return ~Pointee(0) - 1; }
  static unsigned getHashValue(Pointee P) { return unsigned((P * 0x9e3779b97f4a7c15ULL) >> 32); }
  static bool isEqual(Pointee A, Pointee B) { return A == B; }
};

/// The solver numbers pointees as they first appear and keeps sets of those numbers as sparse
/// bit vectors: merging two sets is a word-wise or, not a tree insertion per element.
using PointeeBits = llvm::SparseBitVector<>;

/// A solved points-to set, read-only: iterates the pointees in the order they were numbered
/// (not sorted).
class PointeeSet {
public:
  PointeeSet(const PointeeBits &Bits, const std::vector<Pointee> &Table)
      : Bits(&Bits), Table(&Table) {}
  class iterator {
  public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = Pointee;
    using difference_type = std::ptrdiff_t;
    using pointer = const Pointee *;
    using reference = Pointee;
    iterator(PointeeBits::iterator It, const std::vector<Pointee> *Table) : It(It), Table(Table) {}
    Pointee operator*() const { return (*Table)[*It]; }
    iterator &operator++() {
      ++It;
      return *this;
    }
    bool operator==(const iterator &O) const { return It == O.It; }
    bool operator!=(const iterator &O) const { return It != O.It; }

  private:
    PointeeBits::iterator It;
    const std::vector<Pointee> *Table;
  };
  iterator begin() const { return iterator(Bits->begin(), Table); }
  iterator end() const { return iterator(Bits->end(), Table); }
  size_t size() const { return Bits->count(); }
  bool empty() const { return Bits->empty(); }

private:
  const PointeeBits *Bits;
  const std::vector<Pointee> *Table;
};

/// Offsets are folded modulo this (consistently, so it only merges fields): p += 16 in a loop
/// or a memmove inside an array must not create new fields forever.
constexpr uint32_t MaxFieldOffset = 4096;
/// An object addressed at more distinct offsets than this (pointer arithmetic that walks it
/// through memory, where no phi shows the loop) is collapsed: one field for everything, from
/// the start of a solve (see PointsToGraph::overflowed).
constexpr size_t MaxOffsetsPerObject = 64;

/// External: memory this module did not allocate, seen through a parameter of an exported
/// function or the pointer result of an unknown external call (one object per parameter/call).
enum class ObjectKind { HeapAlloc, WrapperResult, Stack, Global, Function, SocketFd, External };

/// Names an object in any graph of the module: object ids are numbered as a graph is built and
/// shift when the wrappers change (each wrapper call site adds an object).
using ObjectKey = std::pair<ObjectKind, const llvm::Value *>;

struct AbstractObject {
  ObjectKind Kind;
  const llvm::Value *Site = nullptr;       ///< allocating call, wrapper call, alloca, global
  const llvm::Function *Creator = nullptr; ///< function whose body holds Site
  const llvm::Function *Wrapper = nullptr; ///< WrapperResult: the wrapper called at Site
};

struct SinkUse {
  const llvm::CallBase *Call;
  const llvm::Function *Sink;
  const SinkSpec *Spec;
};

/// Byte offset a GEP adds to the pointer, with arrays smashed: struct fields are exact, array
/// indices (and pointer arithmetic over aggregates) add nothing, constant pointer arithmetic
/// over scalars (i8 GEPs) adds its bytes.
int64_t gepFieldOffset(const llvm::GEPOperator &GEP, const llvm::DataLayout &DL);

class PointsToGraph {
public:
  /// Wrappers: functions whose direct call sites each get their own result object.
  /// Collapse: objects that have a single field from the start (from overflowed() of earlier
  /// graphs, whatever their wrappers).
  PointsToGraph(const llvm::Module &M, const SinkCatalog &Sinks,
                const llvm::DenseSet<const llvm::Function *> &Wrappers,
                const std::set<ObjectKey> &Collapse = {});
  ~PointsToGraph();
  /// Solves to a fixed point, or stops after Budget units of work (pointees pushed along
  /// edges, edges added): compile time stays bounded on modules the solver handles badly.
  /// Also stops early once objects overflow (see overflowed()): when the work done reaches twice
  /// what it had taken to find the first.
  void solve(uint64_t Budget = DefaultBudget);
  /// True when solve() ran out of budget: the solution is incomplete and must not be used.
  bool exhausted() const { return Exhausted; }
  /// Objects found addressed at more than MaxOffsetsPerObject offsets. Collapsing an object
  /// halfway through a solve would leave its older pointees at their old offsets in the sets
  /// they had reached, which sets depending on the order of the work, so such an object is not
  /// collapsed: the solution is not used, and the module is solved again with these objects
  /// (and those of earlier solves) collapsed from the start, until a solve has none: its
  /// solution is the one of the module with those objects collapsed. Which objects that is
  /// can depend on which each solve finds before it stops: collapsing an object can also keep
  /// another under the limit (a memcpy from a collapsed object has one source offset, not
  /// many), so it is not always the smallest set.
  const std::vector<ObjectId> &overflowed() const { return Overflowed; }
  uint64_t work() const { return Work; }
  static constexpr uint64_t DefaultBudget = 20'000'000;
  /// One line of sizes (nodes, edges, objects, cells, work) for -nic-sites-stats.
  std::string statistics() const;

  PointeeSet pointsTo(const llvm::Value *V) const;
  PointeeSet returnsOf(const llvm::Function *F) const;
  PointeeSet cell(ObjectId Obj, uint32_t Offset) const;
  const std::set<uint32_t> &cellOffsets(ObjectId Obj) const;
  const AbstractObject &object(ObjectId Obj) const { return Objects[Obj]; }
  ObjectKey key(ObjectId Obj) const { return {Objects[Obj].Kind, Objects[Obj].Site}; }
  /// A collapsed object has one field, at offset 0, standing for all its offsets.
  bool collapsed(ObjectId Obj) const { return Collapsed[Obj]; }
  size_t numObjects() const { return Objects.size(); }
  /// The heap or wrapper-result object created by a call, if any.
  std::optional<ObjectId> objectCreatedBy(const llvm::CallBase *Call) const;
  bool createdIn(ObjectId Obj, const llvm::Function *F) const;
  const std::vector<SinkUse> &sinkUses() const { return SinkUses; }
  ObjectId socketObject() const { return SocketObject; }

private:
  using NodeId = uint32_t;
  /// What made an edge, so that the statistics can say where the work comes from.
  enum class EdgeOrigin : uint8_t { Build, Load, Store, Call, CopyMem, Wrapper, Count };
  struct Edge {
    NodeId Dst;
    int64_t Delta = 0;                          ///< added to every pointee's offset
    const llvm::Function *RenameFrom = nullptr; ///< wrapper call: objects created in it...
    ObjectId RenameTo = 0;                      ///< ...become the call site's object
    EdgeOrigin Origin = EdgeOrigin::Build;
  };
  /// Sets Origin for the edges added while it lives.
  class OriginScope {
  public:
    OriginScope(PointsToGraph &G, EdgeOrigin O) : G(G), Saved(G.Origin) { G.Origin = O; }
    ~OriginScope() { G.Origin = Saved; }

  private:
    PointsToGraph &G;
    EdgeOrigin Saved;
  };
  struct EdgeKey {
    NodeId Src, Dst;
    int64_t Delta, Rename;
  };
  struct EdgeKeyInfo {
    static EdgeKey getEmptyKey() { return {~NodeId(0), ~NodeId(0), 0, 0}; }
    static EdgeKey getTombstoneKey() { return {~NodeId(0), ~NodeId(0) - 1, 0, 0}; }
    static unsigned getHashValue(const EdgeKey &K) {
      uint64_t H = (uint64_t(K.Src) << 32 | K.Dst) * 0x9e3779b97f4a7c15ULL;
      H ^= uint64_t(K.Delta) * 0xc2b2ae3d27d4eb4fULL + uint64_t(K.Rename);
      return unsigned(H >> 32) ^ unsigned(H);
    }
    static bool isEqual(const EdgeKey &A, const EdgeKey &B) {
      return A.Src == B.Src && A.Dst == B.Dst && A.Delta == B.Delta && A.Rename == B.Rename;
    }
  };
  struct LoadConstraint {
    NodeId Ptr, Dst;
  };
  struct StoreConstraint {
    NodeId Ptr, Val;
  };
  struct CopyMemConstraint {
    NodeId DstPtr, SrcPtr;
    std::optional<uint64_t> Len;
  };
  struct IndirectCallConstraint {
    const llvm::CallBase *Call;
    NodeId Callee;
  };
  struct WrapperCellsConstraint {
    NodeId Ret;
    const llvm::Function *Wrapper;
    ObjectId Result;
  };

  // Building.
  void buildGlobals();
  void buildFunction(const llvm::Function &F);
  void buildInstruction(const llvm::Instruction &I);
  void buildCall(const llvm::CallBase &Call);
  void bindCall(const llvm::CallBase &Call, const llvm::Function &Callee, bool Direct);
  /// Arguments (and offsets) a function returns when it returns nothing but them, seen
  /// through casts, GEPs, phis and selects: such helpers are applied per call site.
  const std::optional<std::vector<std::pair<unsigned, int64_t>>> &
  passThrough(const llvm::Function &F);
  void addInitializer(ObjectId Obj, const llvm::Constant *Init, int64_t Offset);
  ObjectId newObject(ObjectKind Kind, const llvm::Value *Site, const llvm::Function *Creator,
                     const llvm::Function *Wrapper = nullptr);
  ObjectId objectForGlobal(const llvm::Value *G);
  NodeId node(const llvm::Value *V);
  NodeId freshNode();
  NodeId retNode(const llvm::Function *F);
  NodeId cellNode(ObjectId Obj, uint32_t Offset);
  void constantPointees(const llvm::Constant *C, PointeeBits &Out);
  bool tracked(const llvm::Type *Ty) const;

  // Solving.
  enum class ComplexKind : uint8_t { Load, Store, IndirectCall, CopySrc, CopyDst, WrapperRet };
  void addLoad(LoadConstraint C);
  void addStore(StoreConstraint C);
  void addIndirect(IndirectCallConstraint C);
  void addCopyMem(CopyMemConstraint C);
  void addWrapperCells(WrapperCellsConstraint C);
  void copyCell(size_t Index, ObjectId SrcObj, uint32_t Start, uint32_t Off,
                const std::vector<Pointee> &Dsts);
  /// A memcpy from a collapsed object (or a wrapper's collapsed object seen through its call
  /// site's): its one cell holds what any of its offsets holds, so it goes to every field of
  /// the destination in the copied range (Len bytes from Dst, or to its end), now and as they
  /// appear.
  void spreadCell(ObjectId SrcObj, Pointee Dst, std::optional<uint64_t> Len);
  struct SpreadWatch {
    ObjectId Src;
    uint32_t Start; ///< the copy's first byte in the destination
    uint64_t Len;   ///< UINT64_MAX: to the end
  };
  void spreadTo(const SpreadWatch &W, ObjectId DstObj, uint32_t Off);
  void newCell(ObjectId Obj, uint32_t Off);
  /// P moved by Delta bytes; the one place offsets are made, so collapsing stays consistent.
  /// NoPointee past the offsets an object may have (see overflowed()).
  Pointee shift(Pointee P, int64_t Delta);
  static constexpr Pointee NoPointee = ~Pointee(0);
  void attach(NodeId N, ComplexKind K, size_t Index);
  void applyIncremental(ComplexKind K, size_t Index, const PointeeBits &New);
  bool addEdge(NodeId Src, Edge E);
  void addPointees(NodeId N, const PointeeBits &New);
  void addPointee(NodeId N, Pointee P);
  void propagate(const PointeeBits &From, const Edge &E);
  /// The number of P, numbering it if it is new.
  uint32_t idOf(Pointee P);
  std::vector<Pointee> pointeesOf(const PointeeBits &Bits) const;
  PointeeSet view(const PointeeBits &Bits) const { return PointeeSet(Bits, PointeeOf); }
  void drain();
  /// Past the budget, or well past the first overflow: the solution will not be used, and
  /// nothing more is added to the graph (one memcpy can pair very many cells before the solver
  /// looks at the budget again). Without collapsing, the overflowing objects keep up to
  /// MaxOffsetsPerObject offsets each and a memcpy pairs all their cells: solving on to the end
  /// can cost a hundred times the solve that has them collapsed. Objects overflow in bursts
  /// (a C++ module's string and container buffers), so stopping at twice the work that found
  /// the first still finds most of the burst in one solve.
  bool stopped() const { return Work > Budget || Work > OverflowStop; }
  /// A plain copy edge moves pointees as they are: no offset change, no renaming.
  static bool plain(const Edge &E) { return !E.Delta && !E.RenameFrom; }
  /// The node that stands for N and every node merged with it.
  NodeId find(NodeId N);
  NodeId representative(NodeId N) const;
  /// Merges X into R (both representatives): one set, the edges and constraints of both.
  void unite(NodeId R, NodeId X);
  /// Drops the plain edges of R that now lead back to R, and edges that became duplicates.
  void tidyEdges(NodeId R);
  /// Strongly connected components of the representatives, over plain edges only or over all
  /// edges, each given to Visit once complete (so in reverse topological order).
  template <typename VisitFn> void components(bool PlainOnly, VisitFn Visit) const;
  /// Merges every cycle of plain copy edges: all its nodes end with the same pointees, and
  /// around an unmerged cycle every pointee is pushed once per node.
  void mergeCycles();
  void push(NodeId N);
  /// Cycles of plain copy edges still unmerged. Returns (cycles, nodes in them, largest).
  std::tuple<uint64_t, uint64_t, uint64_t> copyCycles() const;

  const llvm::Module &M;
  const llvm::DataLayout &DL;
  const SinkCatalog &Sinks;
  const llvm::DenseSet<const llvm::Function *> &Wrappers;

  std::vector<AbstractObject> Objects;
  std::vector<std::set<uint32_t>> ObjectCells;
  llvm::DenseMap<const llvm::Value *, ObjectId> GlobalObjects;
  llvm::DenseMap<const llvm::CallBase *, ObjectId> CallObjects;
  ObjectId SocketObject = 0;

  std::vector<Pointee> PointeeOf; ///< pointee by number
  llvm::DenseMap<Pointee, uint32_t, PointeeKeyInfo> PointeeIds;
  std::vector<PointeeBits> Pts;
  std::vector<PointeeBits> Pending; ///< difference propagation: pointees not yet pushed on
  std::vector<std::vector<std::pair<ComplexKind, uint32_t>>> ComplexAt;
  std::vector<std::vector<Edge>> Succ;
  llvm::DenseSet<EdgeKey, EdgeKeyInfo> EdgeKeys;
  llvm::DenseMap<const llvm::Value *, NodeId> ValueNodes;
  llvm::DenseMap<const llvm::Function *, NodeId> RetNodes;
  llvm::DenseMap<Pointee, NodeId, PointeeKeyInfo> CellNodes;
  std::vector<NodeId> Worklist;
  std::vector<bool> InWorklist;
  std::vector<NodeId> Parent; ///< union-find over merged nodes
  uint64_t WorkAtMerge = 0, MergedNodes = 0, MergePasses = 0;
  bool PlainEdgesSinceMerge = false;

  std::vector<LoadConstraint> Loads;
  std::vector<StoreConstraint> Stores;
  std::vector<CopyMemConstraint> CopyMems;
  std::vector<IndirectCallConstraint> IndirectCalls;
  std::vector<WrapperCellsConstraint> WrapperCells;
  std::set<std::pair<const llvm::CallBase *, const llvm::Function *>> BoundIndirect;
  std::vector<SinkUse> SinkUses;
  /// Objects whose future cells feed a memcpy (constraint, source start) or a wrapper result.
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> CopyWatch;
  std::vector<std::vector<uint32_t>> WrapperWatch;
  llvm::DenseSet<std::tuple<ObjectId, uint32_t, uint32_t>> Watching;
  /// Objects whose future cells take a collapsed object's cell (see spreadCell).
  std::vector<std::vector<SpreadWatch>> SpreadWatchOf;
  llvm::DenseSet<std::tuple<ObjectId, Pointee, uint64_t>> Spreading;
  std::vector<Pointee> NewCells;
  std::vector<std::set<uint32_t>> ObjectOffsets;
  std::vector<bool> Collapsed;
  const std::set<ObjectKey> Collapse;
  std::vector<ObjectId> Overflowed;
  std::vector<bool> Overflows;
  uint64_t Budget = UINT64_MAX;
  uint64_t OverflowStop = UINT64_MAX; ///< see stopped()
  uint64_t Work = 0;
  EdgeOrigin Origin = EdgeOrigin::Build;
  uint64_t EdgesBy[size_t(EdgeOrigin::Count)] = {};
  uint64_t PushedBy[size_t(EdgeOrigin::Count)] = {}; ///< pointees carried along edges
  bool Exhausted = false;
  std::map<const llvm::Function *, std::optional<std::vector<std::pair<unsigned, int64_t>>>>
      PassThrough;
};

} // namespace nicpass

#endif
