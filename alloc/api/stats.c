/* nic_get_stats, the readable report NICMALLOC_STATS=1 prints at exit and the JSON form
 * NICMALLOC_STATS=json prints. The fields come from one list (nicmalloc_stats_fields.h); each
 * layer fills its own. */
#include "stats.h"
#include "alloc.h"
#include "api_errors.h"
#include "base_stats.h"
#include "bounded_lock.h"
#include "export.h"
#include "fence.h"
#include "heap_stats.h"
#include "log.h"
#include "nicmalloc.h"
#include "nocancel.h"
#include "os_stats.h"
#include "pin.h"
#include "pressure.h"
#include "rcache_stats.h"
#include "routing_stats.h"
#include "safety.h"
#include "thread.h"
#include "vspace.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

NIC_EXPORT const char *nic_page_kind_name(enum nic_page_kind kind) {
  return nic_page_kind_str(kind);
}

/* The header fields before the first figure: a size below this leaves nowhere to say anything. */
#define STATS_HEADER_SIZE offsetof(struct nic_stats, control_committed)

static void collect(struct nic_stats *s) {
  nic_base_fill_stats(s);
  nic_os_fill_stats(s);
  nic_heap_fill_stats(s);
  nic_routing_fill_stats(s);
  nic_core_fill_stats(s);
  nic_regcache_fill_stats(s);
  nic_safety_fill_stats(s);
}

NIC_EXPORT int nic_get_stats(struct nic_stats *out) {
  if (!out) {
    nic_api_error(other, "nic_get_stats(NULL): nowhere to write the statistics; ignored");
    return -EINVAL;
  }
  size_t size = __atomic_load_n(&out->size, __ATOMIC_RELAXED);
  if (size == 0) size = NIC_STATS_SIZE_V1;
  if (size < STATS_HEADER_SIZE) {
    nic_api_error(other,
                  "nic_get_stats: size %zu is too small for any statistics (set it to sizeof "
                  "(struct nic_stats), or use NIC_STATS_INIT); nothing written",
                  size);
    return -EINVAL;
  }
  if (size > sizeof *out) size = sizeof *out; /* a newer header: its extra fields stay as set */
  NIC_INTERNAL_SCOPE();
  struct nic_stats s;
  memset(&s, 0, sizeof s);
  collect(&s);
  s.size = (uint32_t)size;
  s.version = NIC_STATS_VERSION;
  memcpy(out, &s, size);
  return 0;
}

/* ---- One table of the fields, made from the list, for the report and the JSON form. ---- */

enum unit { UNIT_bytes, UNIT_bytes_total, UNIT_count, UNIT_percent, UNIT_name, UNIT_page_kind };

struct field {
  const char *group, *name, *label;
  enum unit unit;
  unsigned short offset, size;
};

#define DESCRIBE(group, name, type, unit, label, help)                                             \
  {group,                                                                                          \
   #name,                                                                                          \
   label,                                                                                          \
   UNIT_##unit,                                                                                    \
   offsetof(struct nic_stats, name),                                                               \
   sizeof(((struct nic_stats *)0)->name)},
static const struct field fields[] = {NIC_STATS_FIELDS(DESCRIBE)};
#undef DESCRIBE
#define CHECK_SIZE(group, name, type, unit, label, help)                                           \
  _Static_assert(sizeof(type) == 4 || sizeof(type) == 8, #name ": number() reads 4 or 8 bytes");
NIC_STATS_FIELDS(CHECK_SIZE)
#undef CHECK_SIZE
#define FIELD_COUNT (sizeof fields / sizeof fields[0])

/* Every numeric type of the list is an unsigned integer of 4 or 8 bytes. */
static uint64_t number(const struct nic_stats *s, const struct field *f) {
  const char *p = (const char *)s + f->offset;
  if (f->size == sizeof(uint32_t)) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
  }
  uint64_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

static const char *text(const struct nic_stats *s, const struct field *f) {
  if (f->unit == UNIT_page_kind) return nic_page_kind_name((enum nic_page_kind)number(s, f));
  const char *v;
  memcpy(&v, (const char *)s + f->offset, sizeof v);
  return v ? v : "";
}

/* Output gathered on the stack and written in few writes: no malloc, and a report is not
 * interleaved line by line with what other threads print at exit. After a failed write nothing
 * more is written, and the error is kept for the report at exit, which must not rename a cut
 * report into place. */
struct out {
  int fd;
  int error; /* errno of the failed write, 0 while none failed */
  size_t len;
  char buf[4096];
};

static void flush(struct out *o) {
  size_t done = 0;
  while (done < o->len && !o->error) {
    ssize_t n = nic_write_nocancel(o->fd, o->buf + done, o->len - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      o->error = n < 0 ? errno : EIO;
    else
      done += (size_t)n;
  }
  o->len = 0;
}

__attribute__((format(printf, 2, 3))) static void put(struct out *o, const char *fmt, ...) {
  char piece[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(piece, sizeof piece, fmt, ap);
  va_end(ap);
  if (n <= 0) return;
  size_t len = (size_t)n < sizeof piece ? (size_t)n : sizeof piece - 1;
  if (o->len + len > sizeof o->buf) flush(o);
  memcpy(o->buf + o->len, piece, len);
  o->len += len;
}

/* ---- The readable report: one line per group, each field as its label says. ---- */

#define MIB(x) ((x) >> 20), ((((x) & ((1ul << 20) - 1)) * 10) >> 20)

static void show(char *buf, size_t cap, const struct nic_stats *s, const struct field *f) {
  uint64_t v = f->unit == UNIT_name || f->unit == UNIT_page_kind ? 0 : number(s, f);
  switch (f->unit) {
  case UNIT_bytes:
    snprintf(buf, cap, "%llu.%llu MiB", (unsigned long long)(v >> 20),
             (unsigned long long)(((v & ((1ull << 20) - 1)) * 10) >> 20));
    break;
  case UNIT_percent:
    snprintf(buf, cap, "%llu%%", (unsigned long long)v);
    break;
  case UNIT_name:
  case UNIT_page_kind:
    snprintf(buf, cap, "%s", text(s, f));
    break;
  default:
    snprintf(buf, cap, "%llu", (unsigned long long)v);
  }
}

static void put_field(struct out *o, const struct nic_stats *s, const struct field *f) {
  char value[64];
  show(value, sizeof value, s, f);
  const char *mark = strchr(f->label, '#');
  if (!mark) {
    put(o, "%s %s", value, f->label);
    return;
  }
  put(o, "%.*s%s%s", (int)(mark - f->label), f->label, value, mark + 1);
}

/* Figures derived from several fields, and state that is no field, said at the start or the end
 * of their group's line. */
static void group_prefix(struct out *o, const struct nic_stats *s, const char *group) {
  if (!strcmp(group, "fence")) {
    static const char *const modes[] = {"off", "wait", "protect", "detect"};
    const enum nic_fence_mode mode = nic_safety_config()->fence;
    if (mode == NIC_FENCE_PROTECT)
      put(o, "%s (%s); ", modes[mode],
          nic_fence_protect_started() ? nic_fence_protect_detail() : "nothing posted yet");
    else
      put(o, "%s; ", modes[mode]);
  } else if (!strcmp(group, "sent")) {
    put(o, "%llu bytes, ", (unsigned long long)(s->sent_dataplane_bytes + s->sent_other_bytes));
  }
}

static void group_suffix(struct out *o, const struct nic_stats *s, const char *group) {
  if (!strcmp(group, "fallbacks") && !nic_control_size) {
    put(o, " (no control arena: bad frees may go unnoticed)");
  } else if (!strcmp(group, "NIC cache")) {
    char busiest[256];
    nic_pressure_describe(busiest, sizeof busiest);
    if (busiest[0]) put(o, "; busiest: %s", busiest);
  } else if (!strcmp(group, "sent")) {
    uint64_t sent = s->sent_dataplane_bytes + s->sent_other_bytes;
    uint64_t permille = sent ? s->sent_dataplane_bytes * 1000 / sent : 0;
    put(o, " (%llu.%llu%% from dataplane memory)", (unsigned long long)(permille / 10),
        (unsigned long long)(permille % 10));
  }
}

static void group_after(struct out *o, const struct nic_stats *s, const char *group) {
  if (!strcmp(group, "dataplane")) {
    size_t mapped = s->dataplane_mapped;
    size_t in_use = s->dataplane_in_use < mapped ? s->dataplane_in_use : mapped;
    size_t used = s->dataplane_live < mapped ? s->dataplane_live : mapped;
    put(o,
        "  dataplane free    %zu.%zu MiB of mapped chunks not in live blocks (%zu.%zu MiB held by "
        "no mimalloc segment)\n",
        MIB(mapped - used), MIB(mapped - in_use));
  }
}

static int print_text(int fd) {
  NIC_INTERNAL_SCOPE();
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  struct out o = {.fd = fd};
  put(&o, "nicmalloc report\n");
  for (size_t i = 0; i < FIELD_COUNT; i++) {
    const struct field *f = &fields[i];
    bool first = i == 0 || strcmp(fields[i - 1].group, f->group);
    if (first) {
      put(&o, "  %-18s", f->group);
      group_prefix(&o, &s, f->group);
    } else {
      put(&o, ", ");
    }
    put_field(&o, &s, f);
    if (i + 1 == FIELD_COUNT || strcmp(fields[i + 1].group, f->group)) {
      group_suffix(&o, &s, f->group);
      put(&o, "\n");
      group_after(&o, &s, f->group);
    }
  }
  const char *missed = nic_bounded_missed();
  if (missed)
    put(&o, "  some figures unavailable: a lock was held at exit (%s); they read 0\n", missed);
  flush(&o);
  return o.error;
}

NIC_EXPORT void nic_print_stats(int fd) {
  if (fd >= 0) print_text(fd);
}

/* ---- JSON: one object, every field by name. ---- */

static void put_json_string(struct out *o, const char *v) {
  put(o, "\"");
  for (; *v; v++) {
    unsigned char c = (unsigned char)*v;
    if (c == '"' || c == '\\')
      put(o, "\\%c", c);
    else if (c < 0x20)
      put(o, "\\u%04x", c);
    else
      put(o, "%c", c);
  }
  put(o, "\"");
}

static int print_json(int fd) {
  NIC_INTERNAL_SCOPE();
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  struct out o = {.fd = fd};
  put(&o, "{\"version\": %u", s.version);
  for (size_t i = 0; i < FIELD_COUNT; i++) {
    const struct field *f = &fields[i];
    put(&o, ", \"%s\": ", f->name);
    if (f->unit == UNIT_name || f->unit == UNIT_page_kind)
      put_json_string(&o, text(&s, f));
    else
      put(&o, "%llu", (unsigned long long)number(&s, f));
  }
  const char *missed = nic_bounded_missed();
  if (missed) put(&o, ", \"unavailable\": \"a lock was held at exit (%s)\"", missed);
  put(&o, "}\n");
  flush(&o);
  return o.error;
}

NIC_EXPORT void nic_print_stats_json(int fd) {
  if (fd >= 0) print_json(fd);
}

int nic_stats_report(int fd, bool json) {
  if (fd < 0) return EBADF;
  return json ? print_json(fd) : print_text(fd);
}
