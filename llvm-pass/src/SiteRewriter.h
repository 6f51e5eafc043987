// Turns the analysis result into code: allocation calls that reach a sink become nicmalloc site
// calls; calls of allocation wrappers that reach a sink call a clone of the wrapper that takes
// the site id as an extra parameter (other callers keep the original, control-heap wrapper).
// A call inside a function whose definition other modules share is rewritten in a local copy.
#ifndef NICMALLOC_LLVM_PASS_SITE_REWRITER_H
#define NICMALLOC_LLVM_PASS_SITE_REWRITER_H

#include "DataplaneAnalysis.h"
#include "SiteTable.h"

#include <vector>

namespace llvm {
class Module;
}

namespace nicpass {

/// Rewrites M and returns one record per site (rewritten or skipped), in program order.
std::vector<SiteRecord> rewriteDataplaneSites(llvm::Module &M, const DataplaneResult &R);

/// Suffix of the per-call-site clone of a wrapper.
constexpr const char *CloneSuffix = ".nic_site";
/// Suffix of this module's own copy of a function whose definition other modules share
/// (linkonce_odr, weak_odr, available_externally, comdat): a rewrite in such a function is made
/// in the copy, which this module's functions call, so that every module's copy of the original
/// stays the same.
constexpr const char *LocalCopySuffix = ".nic_local";

} // namespace nicpass

#endif
