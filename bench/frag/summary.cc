// The end-of-run line and the summary.csv row (summary.h).
#include "summary.h"

#include <cstdio>

#include "util.h"

namespace frag {
namespace {

// Share of the bytes freed by the shrink that came back between two samples of held memory.
double returned_pct(const Result &r, double before, double after) {
  size_t freed = r.live_before - r.live_after;
  return 100.0 * (before - after) / (double)freed;
}

} // namespace

void print_result(const Options &o, const Result &r) {
  fprintf(stderr,
          "frag_churn: %s %s: %zu items, sizes mean %.0f (interpolated table %.0f, paper %.0f); "
          "fill %.1fs churn %.1fs; peak mem/live %.3f; %.1f%% of freed bytes returned\n",
          o.pool.c_str(), o.label.c_str(), r.filled, r.size_mean_sample, r.size_mean_model,
          r.size_mean_paper, r.t_fill, r.t_churn, (double)r.peak_mem / r.peak_live,
          returned_pct(r, r.mem_before, r.mem_after));
}

void append_summary(const Options &o, const Result &r) {
  FILE *s = fopen(o.summary.c_str(), "a");
  if (!s) die("cannot append to %s", o.summary.c_str());
  if (ftell(s) == 0)
    fprintf(s, "pool,allocator,api,shrink,chunk_bytes,page_kind,live_target,items_filled,"
               "size_mean_sample,size_mean_model,size_mean_paper,peak_mem_ratio,"
               "churn_end_ratio,peak_rss_ratio,peak_usable_ratio,live_before,live_after,mem_before,"
               "mem_idle,"
               "mem_after,returned_idle_pct,returned_pct,rss_returned_pct,after_ratio,"
               "oracle_4k_pct,oracle_64k_pct,oracle_2m_pct,oracle_chunk_pct,"
               "slab_noautomove_ratio,slab_item_ratio,fallbacks,seconds,malloc_lib\n");
  // Slab memory per live item byte (header and key included): the slab scheme's own waste.
  double item_ratio = r.slab ? (double)r.slab->bytes_automove() / (double)r.peak_items : 0;
  auto pct = [&](double before, double after) { return returned_pct(r, before, after); };
  fprintf(s,
          "%s,%s,%s,%s,%zu,%s,%zu,%zu,%.1f,%.1f,%.1f,%.4f,%.4f,%.4f,%.4f,%zu,%zu,%zu,%zu,%zu,%.2f,"
          "%.2f,%.2f,%.4f,%.2f,%.2f,%.2f,%.2f,%.4f,%.4f,%llu,%.1f,%s\n",
          o.pool.c_str(), o.label.c_str(), o.api.c_str(), o.shrink.c_str(),
          o.api == "nic" ? r.heap.chunk : 0, r.heap.kind, o.live_target, r.filled,
          r.size_mean_sample, r.size_mean_model, r.size_mean_paper,
          (double)r.peak_mem / r.peak_live, (double)r.mem_before / (double)r.live_before,
          (double)r.peak_rss / r.peak_live, (double)r.peak_usable / r.peak_live, r.live_before,
          r.live_after, r.mem_before, r.mem_idle, r.mem_after, pct(r.mem_before, r.mem_idle),
          pct(r.mem_before, r.mem_after), pct(r.rss_before, r.rss_after),
          (double)r.mem_after / (double)r.live_after, pct(r.mem_before, r.kept[0]),
          pct(r.mem_before, r.kept[1]), pct(r.mem_before, r.kept[2]), pct(r.mem_before, r.kept[3]),
          r.slab ? (double)r.slab->bytes_no_automove() / r.peak_live : 0, item_ratio,
          (unsigned long long)r.heap.fallbacks, now_s() - r.t0, r.lib.c_str());
  fclose(s);
}

} // namespace frag
