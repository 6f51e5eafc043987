/* The exported getenv, and the window in which it answers for nicmalloc (interpose_env.c). */
#ifndef NIC_INTERPOSE_ENV_H
#define NIC_INTERPOSE_ENV_H

/* From now until nic_env_show, getenv answers runtime_directory for RUNTIME_DIRECTORY and
 * nothing for any other name. Not nested; under the caller's lock. */
void nic_env_hide(const char *runtime_directory);
void nic_env_show(void);

#endif
