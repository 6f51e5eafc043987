// Turns the analysis result into code: allocation calls that reach a sink become nicmalloc site
// calls; calls of allocation wrappers that reach a sink call a clone of the wrapper that takes
// the site id as an extra parameter (other callers keep the original, control-heap wrapper).
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

} // namespace nicpass

#endif
