// The module pass: finds allocation sites whose objects reach an I/O sink and rewrites them to
// nicmalloc's site ABI, then appends the module's site table.
#ifndef NICMALLOC_LLVM_PASS_DATAPLANE_SITES_PASS_H
#define NICMALLOC_LLVM_PASS_DATAPLANE_SITES_PASS_H

#include "SiteTable.h"

#include "llvm/IR/PassManager.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace nicpass {

struct DataplaneSitesOptions {
  std::string SiteTablePath; ///< empty: no table written
  std::vector<std::string> SinkFiles;
  bool DefaultSinks = true;
  uint64_t AnalysisBudget = 20'000'000; ///< solver work before giving up on a module
  /// Link time (full LTO): the merged module is analysed again even though each translation
  /// unit in it already was, so flows between them are found.
  bool LinkTime = false;
};

/// -nic-site-table / NICMALLOC_SITE_TABLE_OUT, -nic-sink-file / NICMALLOC_SINK_FILE
/// (colon-separated), -nic-default-sinks, -nic-analysis-budget / NICMALLOC_ANALYSIS_BUDGET.
/// Command-line options win over the environment.
DataplaneSitesOptions optionsFromCommandLine();

struct DataplaneSitesSummary {
  std::vector<SiteRecord> Sites;
  unsigned AnalysisRounds = 0;
  unsigned Wrappers = 0;
  unsigned AnnotatedSinks = 0;
  bool Changed = false;
  bool BudgetExhausted = false;
};

/// The whole job on one module, for the pass and for tools/tests that drive it directly.
llvm::Expected<DataplaneSitesSummary> runDataplaneSites(llvm::Module &M,
                                                        const DataplaneSitesOptions &Opts);

class DataplaneSitesPass : public llvm::PassInfoMixin<DataplaneSitesPass> {
public:
  DataplaneSitesPass() : Opts(optionsFromCommandLine()) {}
  explicit DataplaneSitesPass(DataplaneSitesOptions Opts) : Opts(std::move(Opts)) {}
  llvm::PreservedAnalyses run(llvm::Module &M, llvm::ModuleAnalysisManager &);
  /// Runs at -O0 too: placement is about correctness of zero-copy, not speed.
  static bool isRequired() { return true; }

private:
  DataplaneSitesOptions Opts;
};

} // namespace nicpass

#endif
