/* Between the copy of the settings (settings.c) and their typed values (settings_value.c). */
#ifndef NIC_SETTINGS_INTERNAL_H
#define NIC_SETTINGS_INTERNAL_H

#include <stdbool.h>

/* Forgets every typed value, so the next read parses the copy again: after a reload. */
void nic_setting_values_forget(void);
/* Takes the settings unless they are; false while they cannot be taken yet (settings.c). */
bool nic_settings_taken(void);

#endif
