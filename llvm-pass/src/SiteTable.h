// Site records, their ids, and the JSON site table the runtime reads.
#ifndef NICMALLOC_LLVM_PASS_SITE_TABLE_H
#define NICMALLOC_LLVM_PASS_SITE_TABLE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace llvm {
class Instruction;
namespace json {
class Value;
}
} // namespace llvm

namespace nicpass {

/// Same bound as nicmalloc.h's NIC_MAX_SITES.
constexpr uint32_t MaxSites = 65536;

struct SiteRecord {
  enum class Kind { Allocation, WrapperCall, Skipped };
  Kind K = Kind::Allocation;
  uint32_t Id = 0;     ///< what the rewritten call passes
  uint32_t HashId = 0; ///< the hash before probing past an in-module collision
  std::string File;
  unsigned Line = 0, Column = 0;
  unsigned Ordinal = 0; ///< index among the function's calls: tells sites apart without -g
  std::string Function; ///< caller
  std::string Callee;   ///< malloc, _Znwm, or the wrapper
  std::string Replacement;
  std::string Reason; ///< Skipped: why
  std::string Sink;   ///< "sendmsg arg 1 at net.c:40:3 in reply"
  std::string SinkSpec;
  std::vector<std::string> Path;  ///< allocation first, sink last
  std::vector<std::string> Inner; ///< WrapperCall: the allocations tagged through the clone
  std::vector<std::string> CollidesWith;
};

/// Fills File/Line/Column/Ordinal/Function from the call's debug location.
void locateSite(const llvm::Instruction &Call, SiteRecord &R);

/// Hash of (module, file, line, column, function[, ordinal without a line]) folded below
/// MaxSites: stable across builds and distinct across modules with high probability.
uint32_t hashSiteId(llvm::StringRef Module, const SiteRecord &R);

/// Sets HashId and Id for the non-skipped records; two sites of one module that hash alike are
/// both told (CollidesWith) and the later one probes to the next free id.
void assignSiteIds(llvm::StringRef Module, std::vector<SiteRecord> &Sites);

/// One line of JSON for this module: {"module":..., "sites":[...], "skipped":[...]}, plus
/// "incomplete": the reason when the analysis gave up and nothing was rewritten.
std::string siteTableLine(llvm::StringRef Module, const std::vector<SiteRecord> &Sites,
                          llvm::StringRef Incomplete = "");

/// Puts Line (Module's table) into the table at Path in place of the line Module wrote before,
/// if any, so that compiling a module again does not list its sites twice. Done under an
/// exclusive flock on the table, so parallel compilations sharing one table never lose or
/// interleave lines; the table is rewritten aside and renamed into place, and a symbolic link
/// at Path is refused rather than followed.
llvm::Error writeSiteTable(llvm::StringRef Path, llvm::StringRef Module, llvm::StringRef Line);

} // namespace nicpass

#endif
