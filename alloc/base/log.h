/* Messages to stderr that never allocate: usable inside malloc and free. */
#ifndef NIC_LOG_H
#define NIC_LOG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One line "nicmalloc: error: ..." on stderr. */
void nic_log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void nic_log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A warning of any length: `prefix` then `text` on one line. */
void nic_log_warn_text(const char *prefix, const char *text);
/* Printed only when NICMALLOC_VERBOSE=1. */
void nic_log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The three above for callers that hold a va_list (the plugins' logger, plugin_host.c). */
enum nic_log_level { NIC_LOG_INFO, NIC_LOG_WARN, NIC_LOG_ERROR };
void nic_log_v(enum nic_log_level level, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
/* True for the first caller only: a message printed once per kind, however often its cause
 * recurs (the count belongs in the statistics). */
static inline bool nic_first_time(int *flag) {
  return __atomic_load_n(flag, __ATOMIC_RELAXED) == 0 &&
         __atomic_exchange_n(flag, 1, __ATOMIC_RELAXED) == 0;
}
#define nic_log_warn_once(...)                                                                     \
  do {                                                                                             \
    static int nic_warned_;                                                                        \
    if (nic_first_time(&nic_warned_)) nic_log_warn(__VA_ARGS__);                                   \
  } while (0)
#define nic_log_error_once(...)                                                                    \
  do {                                                                                             \
    static int nic_warned_;                                                                        \
    if (nic_first_time(&nic_warned_)) nic_log_error(__VA_ARGS__);                                  \
  } while (0)

/* The same where one call site says several kinds (an entry point's name, an errno): true the
 * first time this (site, a, b) is seen. Lock-free, so usable anywhere; past 128 kinds nothing
 * more is said (the statistics still count). */
bool nic_first_time_key(uintptr_t site, uintptr_t a, uintptr_t b);

/* nicmalloc runs inside programs that treat any stderr output as failure (build tools merge a
 * child's stderr, test suites compare it). A fallback it takes on its own (smaller pages,
 * unpinned memory, the control heap, no address space) is no error: it is counted in the
 * statistics and said only with NICMALLOC_VERBOSE=1. It is a warning only where it refuses what
 * the user explicitly set (NICMALLOC_ON_PIN_FAIL=fail, NICMALLOC_PAGE_KIND). */
void nic_log_fallback(bool explicit_setting_refused, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
#define nic_log_fallback_once(refused, ...)                                                        \
  do {                                                                                             \
    static int nic_said_;                                                                          \
    if (nic_first_time(&nic_said_)) nic_log_fallback(refused, __VA_ARGS__);                        \
  } while (0)

/* Says why on stderr, then aborts: only where going on would corrupt memory. */
_Noreturn void nic_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Notes which file fd 2 is at start-up, and keeps a copy of it if keep_copy (only output at exit
 * asked for needs one); and where the program pointed it on purpose (dup2/dup3 onto fd 2). */
void nic_log_note_stderr(bool keep_copy);
void nic_log_stderr_redirected(void);
/* Where lines for stderr go now: fd 2 while it is still the start-up stderr, else the copy, else
 * -1 (nothing is written, and the line is counted as dropped). */
int nic_log_fd(void);
unsigned long nic_log_dropped(void);

/* Writes a formatted line to fd with a stack buffer. Returns bytes written. */
size_t nic_fdprintf(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
