// Which allocations reach an I/O sink: runs the points-to analysis (with allocation wrappers
// cloned per call site), then follows every sink argument down its sink path.
#ifndef NICMALLOC_LLVM_PASS_DATAPLANE_ANALYSIS_H
#define NICMALLOC_LLVM_PASS_DATAPLANE_ANALYSIS_H

#include "PointsTo.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace nicpass {

/// How an object was found: the sink call and the objects walked through on the way.
struct SinkWitness {
  const llvm::CallBase *Sink = nullptr;
  const llvm::Function *SinkFunction = nullptr;
  const SinkSpec *Spec = nullptr;
  unsigned Arg = 0;
  /// (object, field offset) for every dereference of the sink path, outermost first.
  std::vector<Pointee> Chain;
};

struct DataplaneResult {
  std::unique_ptr<PointsToGraph> Graph;
  /// Functions whose call sites got per-call-site objects (allocation wrappers).
  llvm::DenseSet<const llvm::Function *> Wrappers;
  /// Every object whose bytes may reach a sink, with the first witness found.
  std::map<ObjectId, SinkWitness> Reaching;
  unsigned Rounds = 0;
  /// The solver ran out of budget: nothing may be rewritten from this result.
  bool Exhausted = false;

  /// Allocation calls and wrapper calls in W whose objects W returns (what a per-call-site
  /// clone of W must tag), in program order.
  std::vector<const llvm::CallBase *> returnedAllocations(const llvm::Function &W) const;
};

DataplaneResult analyzeDataplane(const llvm::Module &M, const SinkCatalog &Sinks,
                                 uint64_t Budget = PointsToGraph::DefaultBudget);

/// Human-readable names used in the site table and remarks.
std::string describeObject(const PointsToGraph &G, ObjectId Obj);
/// "at file:line:col in function", or "in function" without debug info.
std::string describeLocation(const llvm::Instruction &I);

} // namespace nicpass

#endif
