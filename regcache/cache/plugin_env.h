/* In secure execution nicmalloc reads no setting, and a backend plugin reads none either; but the
 * libraries a plugin brings read the environment themselves. DPDK 22.11's EAL makes its runtime
 * directory under $RUNTIME_DIRECTORY, or $XDG_RUNTIME_DIR when the real uid is not root, even
 * with --no-shconf: a user running a setuid-root program that opened DPDK had root make
 * directories wherever the user named. So in secure execution the getenv imports of the objects
 * loaded since the first plugin are pointed at one that answers nothing, but RUNTIME_DIRECTORY:
 * root's own /var/run when the process runs as root (where DPDK puts it for root), otherwise
 * /dev/null, under which nothing can be made (EAL then says so and goes on without one). What a
 * library loads later on its own (rdma-core's provider for a device, which reads MLX5_DEBUG_FILE
 * and opens that file for appending when the device is opened; the drivers of EAL's driver
 * directory) is covered when the plugin asks again (plugin_host.h, quiet_env) before it runs
 * them, not in their constructors. Outside secure execution the environment is the user's own
 * and nothing changes. The objects are walked with dl_iterate_phdr, under the loader's lock: a
 * dlclose on another thread cannot free one under us. */
#ifndef NIC_PLUGIN_ENV_H
#define NIC_PLUGIN_ENV_H

/* In secure execution, from before a plugin is loaded until its open returns, getenv answers as
 * the redirected imports do (alloc/os/interpose_env.h): the redirection comes only after a load,
 * too late for the constructors of what the plugin brings (libnl, under rdma-core, reads NLDBG
 * and opens $NLSYSCONFDIR/classid) and for what a plugin's open loads and runs at once (EAL's
 * drivers read DPRC and DSA_DEV_PATH inside rte_eal_init). Meanwhile the program's other threads
 * get the same answers from getenv (not from the C library's own reads). Under the backend
 * lock; outside secure execution they do nothing. */
void nic_plugin_env_hide(void);
void nic_plugin_env_show(void);

/* Before loading a plugin: in secure execution, the objects loaded now, the first time only. */
void nic_plugin_env_mark(void);
/* In secure execution, redirects getenv in every object loaded since the mark; how many objects
 * import it. */
unsigned nic_plugin_env_guard(void);

#endif
