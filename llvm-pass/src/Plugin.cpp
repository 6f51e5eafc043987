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
        if (Name != "nic-dataplane-sites") return false;
        MPM.addPass(nicpass::DataplaneSitesPass());
        return true;
      });
  PB.registerPipelineEarlySimplificationEPCallback([](ModulePassManager &MPM, OptimizationLevel) {
    MPM.addPass(nicpass::DataplaneSitesPass());
  });
}

extern "C" LLVM_ATTRIBUTE_WEAK PassPluginLibraryInfo llvmGetPassPluginInfo() {
  return {LLVM_PLUGIN_API_VERSION, "NicDataplaneSites", "0.1", registerCallbacks};
}
