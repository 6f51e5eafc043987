// In secure execution the libraries a backend plugin loads read no environment
// (regcache/cache/plugin_env.h): their getenv imports answer nothing, and RUNTIME_DIRECTORY with
// a folder no user names. Secure execution is simulated (nic_settings_reload); setuid.sh checks
// DPDK's EAL in a real setuid-root process.
#include <gtest/gtest.h>

extern "C" {
#include "plugin_env.h"
#include "settings.h"
}

#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>

namespace {

using Getter = const char *(*)(const char *);

Getter Load(const char *path, const char *symbol) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  EXPECT_NE(h, nullptr) << dlerror();
  return h ? reinterpret_cast<Getter>(dlsym(h, symbol)) : nullptr;
}

std::string Or(const char *s) {
  return s ? s : "(null)";
}

const std::string kNoFolder = geteuid() == 0 ? "/var/run" : "/dev/null";

} // namespace

// The mark is taken before the load, as open_plugin does before its dlopen.
TEST(PluginEnv, LibrariesLoadedSinceTheMarkReadNoEnvironmentInSecureExecution) {
  setenv("RUNTIME_DIRECTORY", "/tmp/chosen-by-the-user", 1);
  setenv("XDG_RUNTIME_DIR", "/tmp/also-chosen", 1);
  setenv("MLX5_DEBUG_FILE", "/tmp/debug-file", 1);

  nic_settings_reload(true);
  nic_plugin_env_mark();
  Getter first = Load(ENV_READER_MODULE, "env_reader_get");
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(Or(first("RUNTIME_DIRECTORY")), "/tmp/chosen-by-the-user") << "before the guard";
  EXPECT_EQ(nic_plugin_env_guard(), 1u);
  EXPECT_EQ(Or(first("RUNTIME_DIRECTORY")), kNoFolder);
  EXPECT_EQ(Or(first("XDG_RUNTIME_DIR")), "(null)");
  EXPECT_EQ(Or(first("MLX5_DEBUG_FILE")), "(null)");
  EXPECT_EQ(Or(getenv("XDG_RUNTIME_DIR")), "/tmp/also-chosen") << "the program's own getenv";

  // A library the first one loads later (a provider, a driver): covered when asked again.
  Getter later = Load(ENV_READER_MODULE_2, "env_reader_get_2");
  ASSERT_NE(later, nullptr);
  EXPECT_EQ(Or(later("MLX5_DEBUG_FILE")), "/tmp/debug-file");
  EXPECT_EQ(nic_plugin_env_guard(), 2u);
  EXPECT_EQ(Or(later("MLX5_DEBUG_FILE")), "(null)");
  EXPECT_EQ(Or(later("RUNTIME_DIRECTORY")), kNoFolder);

  // Outside secure execution nothing is redirected.
  nic_settings_reload(false);
  EXPECT_EQ(nic_plugin_env_guard(), 0u);
}

// The redirection comes after a load, too late for constructors (libnl's under rdma-core) and
// for what a plugin's open loads and runs at once (EAL's drivers): from before the load until
// the open returns, getenv answers for nicmalloc. The environment itself is untouched: what is
// set meanwhile stays. (The module binds to the getenv this test links in, as a plugin's
// libraries bind to libnicmalloc's.)
TEST(PluginEnv, ConstructorsOfWhatAPluginLoadsSeeOnlyNicmallocsEnvironment) {
  setenv("NIC_TEST_CTOR_VAR", "/tmp/chosen-by-the-user", 1);
  setenv("RUNTIME_DIRECTORY", "/tmp/chosen-by-the-user", 1);
  unsetenv("NIC_TEST_SET_BY_LIBRARY");

  nic_settings_reload(true);
  nic_plugin_env_hide();
  EXPECT_EQ(Or(getenv("NIC_TEST_CTOR_VAR")), "(null)");
  void *h = dlopen(ENV_CTOR_MODULE, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  nic_plugin_env_show();
  auto seen = reinterpret_cast<const char *(*)(int)>(dlsym(h, "env_ctor_seen"));
  ASSERT_NE(seen, nullptr);
  EXPECT_EQ(std::string(seen(0)), "(null)") << "the constructor read the user's variable";
  EXPECT_EQ(std::string(seen(1)), kNoFolder);
  EXPECT_EQ(Or(getenv("NIC_TEST_CTOR_VAR")), "/tmp/chosen-by-the-user") << "not given back";
  EXPECT_EQ(Or(getenv("RUNTIME_DIRECTORY")), "/tmp/chosen-by-the-user")
      << "nicmalloc's own answer stayed in the program's environment";
  EXPECT_EQ(Or(getenv("NIC_TEST_SET_BY_LIBRARY")), "set at load") << "what the library set";
  EXPECT_EQ(Or(getenv("")), "(null)");

  // Outside secure execution the environment is the user's own throughout.
  nic_settings_reload(false);
  nic_plugin_env_hide();
  EXPECT_EQ(Or(getenv("NIC_TEST_CTOR_VAR")), "/tmp/chosen-by-the-user");
  nic_plugin_env_show();
}
