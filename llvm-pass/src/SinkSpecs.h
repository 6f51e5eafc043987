// Which functions send data to the NIC, and where in their arguments the sent bytes live.
#ifndef NICMALLOC_LLVM_PASS_SINK_SPECS_H
#define NICMALLOC_LLVM_PASS_SINK_SPECS_H

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>

namespace llvm {
class Function;
class Module;
} // namespace llvm

namespace nicpass {

/// One dereference on the way from a sink argument to the data: load the pointer stored at
/// Offset bytes into the current object. Stride != 0 also accepts Offset + k*Stride, for arrays
/// (iovec[]) that are indexed with byte arithmetic rather than typed GEPs.
struct SinkStep {
  uint32_t Offset = 0;
  uint32_t Stride = 0;
};

/// Spec text: ARG[:STEP,STEP...][;sockfd=N]
///   ARG   argument index, or * for every pointer argument
///   STEP  OFFSET[/STRIDE] in bytes (one pointer dereference each)
///   sockfd=N  sink only when argument N may hold a socket descriptor (write, writev)
/// Example: sendmsg is "1:16,0": argument 1 is a msghdr, the pointer at +16 (msg_iov) leads to
/// an iovec array whose iov_base (+0; the array's elements are smashed) points at the data.
struct SinkSpec {
  int ArgIndex = -1; ///< -1: every pointer argument
  llvm::SmallVector<SinkStep, 2> Path;
  int SocketFdArg = -1; ///< -1: no condition
  std::string Text;
};

llvm::Expected<SinkSpec> parseSinkSpec(llvm::StringRef Text);

/// The set of sinks the pass uses: built-in defaults, sink files, NIC_SINK records.
class SinkCatalog {
public:
  void addDefaults();
  /// Lines "NAME SPEC"; '#' starts a comment.
  llvm::Error addFile(llvm::StringRef Path);
  llvm::Error addLine(llvm::StringRef Line);
  void add(llvm::StringRef Name, SinkSpec Spec);
  /// Reads the NIC_SINK records (globals in section .nic_sinks) and deletes them so they do not
  /// reach the object file. Returns the number read.
  llvm::Expected<unsigned> takeAnnotatedSinks(llvm::Module &M);

  /// Specs for a callee (by NIC_SINK identity first, then by name); empty when not a sink.
  llvm::ArrayRef<SinkSpec> lookup(const llvm::Function &F) const;
  size_t size() const { return ByName.size() + ByFunction.size(); }

private:
  llvm::StringMap<llvm::SmallVector<SinkSpec, 1>> ByName;
  llvm::DenseMap<const llvm::Function *, llvm::SmallVector<SinkSpec, 1>> ByFunction;
};

/// The built-in sink list as sink-file text (also what `-nic-print-default-sinks` shows).
llvm::StringRef defaultSinkFileText();

} // namespace nicpass

#endif
