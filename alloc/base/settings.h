/* NICMALLOC_* settings as the process started with them: copied once, so a program that rewrites
 * its environment (nginx does) changes nothing we read later, and checked against the one table
 * of known names (settings_table.h). */
#ifndef NIC_SETTINGS_H
#define NIC_SETTINGS_H

#include <stdbool.h>

/* The value of a declared NICMALLOC_* variable at start-up, or NULL when it was unset, or when
 * the process runs in secure execution (setuid, setgid, file capabilities: AT_SECURE), where
 * every setting is ignored. Never allocates. */
const char *nic_getenv(const char *name);

/* True when the kernel started this process in secure execution. */
bool nic_secure_execution(void);

/* Reads the environment again, as in secure execution when `secure` (for the tests: a setenv
 * after start-up is otherwise never seen). Not safe against concurrent nic_getenv callers. */
void nic_settings_reload(bool secure);

#endif
