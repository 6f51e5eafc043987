/* Messages to stderr that never allocate: usable inside malloc and free. */
#ifndef NIC_LOG_H
#define NIC_LOG_H

#include <stdarg.h>
#include <stddef.h>

/* One line "nicmalloc: error: ..." on stderr. */
void nic_log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void nic_log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Printed only when NICMALLOC_VERBOSE=1. */
void nic_log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Says why on stderr, then aborts: only where going on would corrupt memory. */
_Noreturn void nic_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Writes a formatted line to fd with a stack buffer. Returns bytes written. */
size_t nic_fdprintf(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
