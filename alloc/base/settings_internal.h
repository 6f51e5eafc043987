/* Between the copy of the settings (settings.c) and their typed values (settings_value.c). */
#ifndef NIC_SETTINGS_INTERNAL_H
#define NIC_SETTINGS_INTERNAL_H

/* Forgets every typed value, so the next read parses the copy again: after a reload. */
void nic_setting_values_forget(void);

#endif
