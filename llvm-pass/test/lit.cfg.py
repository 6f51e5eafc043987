# lit configuration for the nicmalloc LLVM pass. Run through ctest (label llvm-pass) or:
#   python3 /usr/lib/llvm-16/build/utils/lit/lit.py -sv <build>/llvm-pass/test
import os
import shutil

import lit.formats

config.name = "nicmalloc-llvm-pass"
config.test_format = lit.formats.ShTest(True)
config.suffixes = [".ll", ".c", ".cpp"]
config.excludes = ["Inputs"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.nic_binary_dir, "test")

# opt, clang, FileCheck, not: always the LLVM 16 ones.
config.environment["PATH"] = os.pathsep.join(
    [config.llvm_tools_dir, config.environment.get("PATH", os.environ.get("PATH", ""))])
for var in ("NICMALLOC_SITE_TABLE_OUT", "NICMALLOC_SINK_FILE"):
    config.environment.pop(var, None)

config.substitutions.append(("%plugin", config.nic_plugin))
config.substitutions.append(
    ("%opt-nic", "opt -load-pass-plugin=%s -passes=nic-dataplane-sites" % config.nic_plugin))
config.substitutions.append(
    ("%clang-nic", "clang -fpass-plugin=%s -I%s -g -fno-discard-value-names"
     % (config.nic_plugin, config.nic_public_include)))
# memcheck runs clang with the plugin, for reads the optimised LLVM does not check.
if shutil.which("valgrind"):
    config.available_features.add("valgrind")

config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))

if config.nic_runtime_lib and os.path.exists(config.nic_runtime_lib):
    config.available_features.add("nicmalloc-runtime")
    config.substitutions.append(("%nicmalloc_so", config.nic_runtime_lib))
    config.substitutions.append(("%nicmalloc_dir", os.path.dirname(config.nic_runtime_lib)))
