#include "DataplaneSitesPass.h"

#include "DataplaneAnalysis.h"
#include "SinkSpecs.h"
#include "SiteRewriter.h"

#include "llvm/IR/DiagnosticInfo.h"
#include "llvm/IR/DiagnosticPrinter.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/CommandLine.h"

#include <cstdlib>

using namespace llvm;

namespace nicpass {

static cl::opt<std::string>
    SiteTableOpt("nic-site-table",
                 cl::desc("Write this module's nicmalloc site table (JSON line) here"),
                 cl::value_desc("path"));
static cl::list<std::string> SinkFileOpt("nic-sink-file",
                                         cl::desc("Extra I/O sinks: lines 'name spec'"),
                                         cl::value_desc("path"));
static cl::opt<uint64_t>
    BudgetOpt("nic-analysis-budget", cl::init(0),
              cl::desc("Points-to work after which a module is left unchanged (0: default)"));
static cl::opt<bool> DefaultSinksOpt("nic-default-sinks", cl::init(true),
                                     cl::desc("Use the built-in sink list (send, sendmsg, ...)"));

/// Marks a module as done, so that the pass registered at two extension points runs once.
static const char DoneMetadata[] = "nic.dataplane_sites";
/// Set once the merged module of a link was analysed (LTO merges every unit's DoneMetadata).
static const char LinkDoneMetadata[] = "nic.dataplane_sites.link";

DataplaneSitesOptions optionsFromCommandLine() {
  DataplaneSitesOptions O;
  O.SiteTablePath = SiteTableOpt;
  if (O.SiteTablePath.empty())
    if (const char *Env = std::getenv("NICMALLOC_SITE_TABLE_OUT")) O.SiteTablePath = Env;
  O.SinkFiles.assign(SinkFileOpt.begin(), SinkFileOpt.end());
  if (O.SinkFiles.empty())
    if (const char *Env = std::getenv("NICMALLOC_SINK_FILE")) {
      SmallVector<StringRef, 2> Paths;
      StringRef(Env).split(Paths, ':', -1, false);
      for (StringRef P : Paths)
        O.SinkFiles.push_back(P.str());
    }
  O.DefaultSinks = DefaultSinksOpt;
  if (BudgetOpt)
    O.AnalysisBudget = BudgetOpt;
  else if (const char *Env = std::getenv("NICMALLOC_ANALYSIS_BUDGET"))
    StringRef(Env).getAsInteger(10, O.AnalysisBudget);
  return O;
}

Expected<DataplaneSitesSummary> runDataplaneSites(Module &M, const DataplaneSitesOptions &Opts) {
  DataplaneSitesSummary Summary;
  const char *Done = Opts.LinkTime ? LinkDoneMetadata : DoneMetadata;
  if (M.getNamedMetadata(Done)) return Summary;
  M.getOrInsertNamedMetadata(Done);

  SinkCatalog Sinks;
  if (Opts.DefaultSinks) Sinks.addDefaults();
  for (const std::string &Path : Opts.SinkFiles)
    if (Error E = Sinks.addFile(Path)) return Expected<DataplaneSitesSummary>(std::move(E));
  Expected<unsigned> Annotated = Sinks.takeAnnotatedSinks(M);
  if (!Annotated) return Annotated.takeError();
  Summary.AnnotatedSinks = *Annotated;

  DataplaneResult Result = analyzeDataplane(M, Sinks, Opts.AnalysisBudget);
  Summary.BudgetExhausted = Result.Exhausted;
  Summary.AnalysisRounds = Result.Rounds;
  Summary.Wrappers = Result.Wrappers.size();
  Summary.Sites = rewriteDataplaneSites(M, Result);
  Summary.Changed = *Annotated > 0 || !Summary.Sites.empty();

  if (!Opts.SiteTablePath.empty())
    if (Error E =
            writeSiteTable(Opts.SiteTablePath, M.getSourceFileName(),
                           siteTableLine(M.getSourceFileName(), Summary.Sites,
                                         Result.Exhausted ? "points-to budget exhausted" : "")))
      return Expected<DataplaneSitesSummary>(std::move(E));
  return Summary;
}

namespace {
/// A plugin diagnostic: clang shows it as a warning on the command line (-Wbackend-plugin).
class NicWarning : public DiagnosticInfo {
public:
  explicit NicWarning(const Twine &Msg) : DiagnosticInfo(kind(), DS_Warning), Msg(Msg.str()) {}
  void print(DiagnosticPrinter &DP) const override { DP << Msg; }
  static int kind() {
    static const int Kind = getNextAvailablePluginDiagnosticKind();
    return Kind;
  }

private:
  std::string Msg;
};
} // namespace

PreservedAnalyses DataplaneSitesPass::run(Module &M, ModuleAnalysisManager &) {
  Expected<DataplaneSitesSummary> Summary = runDataplaneSites(M, Opts);
  if (!Summary) {
    M.getContext().emitError("nicmalloc dataplane sites: " + toString(Summary.takeError()));
    return PreservedAnalyses::all();
  }
  if (Summary->BudgetExhausted)
    M.getContext().diagnose(
        NicWarning("nicmalloc dataplane sites: the points-to analysis of " + M.getSourceFileName() +
                   " exceeded its budget (-nic-analysis-budget / NICMALLOC_ANALYSIS_BUDGET); no "
                   "allocation in it was rewritten"));
  return Summary->Changed ? PreservedAnalyses::none() : PreservedAnalyses::all();
}

} // namespace nicpass
