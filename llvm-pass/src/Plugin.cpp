// Plugin entry: `clang -fpass-plugin=` runs the pass at the early-simplification extension point
// (SSA built, nothing inlined yet, so wrappers and helpers are still separate functions);
// `opt -load-pass-plugin= -passes=nic-dataplane-sites` runs it by name.
#include "DataplaneSitesPass.h"

#include "llvm/Passes/PassBuilder.h"
#include "llvm/Passes/PassPlugin.h"

using namespace llvm;

static void registerCallbacks(PassBuilder &PB) {
  PB.registerPipelineParsingCallback(
      [](StringRef Name, ModulePassManager &MPM, ArrayRef<PassBuilder::PipelineElement>) {
        if (Name != "nic-dataplane-sites" && Name != "nic-dataplane-sites-link") return false;
        nicpass::DataplaneSitesOptions Opts = nicpass::optionsFromCommandLine();
        Opts.LinkTime = Name == "nic-dataplane-sites-link";
        MPM.addPass(nicpass::DataplaneSitesPass(std::move(Opts)));
        return true;
      });
  PB.registerPipelineEarlySimplificationEPCallback([](ModulePassManager &MPM, OptimizationLevel) {
    MPM.addPass(nicpass::DataplaneSitesPass());
  });
  // Whole programs: under full LTO (`-flto -fuse-ld=lld-16 -Wl,--load-pass-plugin=`) the merged
  // module is analysed once more before it is optimised, so flows that cross translation units
  // (a slab allocator in one file, sendmsg in another) are seen.
  PB.registerFullLinkTimeOptimizationEarlyEPCallback([](ModulePassManager &MPM, OptimizationLevel) {
    nicpass::DataplaneSitesOptions Opts = nicpass::optionsFromCommandLine();
    Opts.LinkTime = true;
    MPM.addPass(nicpass::DataplaneSitesPass(std::move(Opts)));
  });
}

extern "C" LLVM_ATTRIBUTE_WEAK PassPluginLibraryInfo llvmGetPassPluginInfo() {
  return {LLVM_PLUGIN_API_VERSION, "NicDataplaneSites", "0.1", registerCallbacks};
}
