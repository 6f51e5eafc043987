// Sampling RSS and pinned bytes into the series CSV (metrics.h).
#include "metrics.h"

#include <algorithm>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>
#ifdef FRAG_WITH_NIC
#include <nicmalloc.h>
#endif

#include "util.h"

namespace frag {

size_t rss_bytes() {
  char buf[128] = {0};
  int fd = open("/proc/self/statm", O_RDONLY);
  ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
  if (fd >= 0) close(fd);
  unsigned long size = 0, res = 0;
  if (n <= 0 || sscanf(buf, "%lu %lu", &size, &res) != 2) return 0;
  return res * (size_t)sysconf(_SC_PAGESIZE);
}

void Series::open(const std::string &path) {
  out_ = fopen(path.c_str(), "w");
  if (!out_) die("cannot write %s", path.c_str());
  static char outbuf[1 << 16]; // stdio must not take its buffer from the allocator under test
  setvbuf(out_, outbuf, _IOFBF, sizeof outbuf);
  fprintf(out_, "phase,op,t_s,items,live_bytes,item_bytes,mem_bytes,rss_bytes,pinned_bytes,"
                "mapped_bytes,usable_bytes,slab_noautomove_bytes,chunks\n");
}

void Series::start() {
  rss_base_ = rss_bytes();
  t0_ = now_s();
}

void Series::take(const char *phase, const Counts &c, bool nic, const Slab *slab) {
  Sample s{phase, c.op, now_s() - t0_, c.items, c.live, c.item_bytes, 0, 0, 0, 0, 0, 0, 0};
  size_t rss = rss_bytes();
  s.rss = rss > rss_base_ ? rss - rss_base_ : 0;
  s.mem = s.rss;
#ifdef FRAG_WITH_NIC
  if (nic) {
    nic_stats st = NIC_STATS_INIT;
    nic_get_stats(&st);
    s.mem = s.pinned = st.dataplane_pinned;
    s.mapped = st.dataplane_mapped;
    s.usable = st.dataplane_live;
    s.chunks = st.chunks_live;
  }
#else
  (void)nic;
#endif
  if (slab) {
    s.mem = slab->bytes_automove();
    s.slab_noauto = slab->bytes_no_automove();
  }
  fprintf(out_, "%s,%llu,%.3f,%zu,%zu,%zu,%zu,%zu,%zu,%zu,%zu,%zu,%zu\n", s.phase,
          (unsigned long long)s.op, s.t, s.items, s.live, s.item_bytes, s.mem, s.rss, s.pinned,
          s.mapped, s.usable, s.slab_noauto, s.chunks);
  if (!strcmp(phase, "fill") || !strcmp(phase, "churn")) {
    peak_items = std::max(peak_items, s.item_bytes);
    peak_mem = std::max(peak_mem, s.mem);
    peak_live = std::max(peak_live, s.live);
    peak_rss = std::max(peak_rss, s.rss);
    peak_usable = std::max(peak_usable, s.usable);
  }
  last_ = s;
}

void Series::close() {
  if (out_) fclose(out_);
  out_ = nullptr;
}

HeapInfo heap_info(bool nic) {
  HeapInfo h;
#ifdef FRAG_WITH_NIC
  if (nic) {
    nic_stats st = NIC_STATS_INIT;
    nic_get_stats(&st);
    h.chunk = st.chunk_size;
    snprintf(h.kind, sizeof h.kind, "%s", nic_page_kind_name(st.page_kind));
    h.fallbacks = st.dataplane_fallbacks + st.dataplane_failures;
  }
#else
  (void)nic;
#endif
  return h;
}

} // namespace frag
