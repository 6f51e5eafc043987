/* The library's constructor and destructor. Start-up itself runs on the first allocation
 * (base/startup.h), which may come long before this constructor; what is left here needs the
 * program's own start: the profile's send calls resolved, and the profile written at exit. The
 * report at exit is exit_report.c's. */
#include "interposed.h"
#include "mimalloc_imports.h"
#include "plugin_dir.h"
#include "profile.h"
#include "startup.h"
#include "thread.h"

__attribute__((constructor(101))) static void nic_init(void) {
  nic_interposed_check(); /* before start-up: mimalloc's commits must be seen from the first */
  nic_mimalloc_own_madvise();
  nic_startup();
  nic_thread_ready();
  nic_plugin_dir_find();     /* before the program can change its directory */
  nic_profile_start();       /* reads NICMALLOC_SITES, resolves the send calls: see profile.c */
  nic_thread_refresh_fast(); /* it may have lowered nic_dp_fast_max */
}

__attribute__((destructor)) static void nic_fini(void) {
  nic_profile_finish(); /* writes NICMALLOC_PROFILE */
}
