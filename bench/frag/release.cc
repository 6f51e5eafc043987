// Release calls of nicmalloc and the peers, and the non-moving best case (release.h).
#include "release.h"

#include <algorithm>
#include <cstdint>
#include <dlfcn.h>
#include <utility>
#ifdef FRAG_WITH_NIC
#include <nicmalloc.h>
#endif

namespace frag {

Peer find_peer() {
  Peer p;
  Dl_info info;
  void *fn = dlsym(RTLD_DEFAULT, "malloc");
  if (!fn || !dladdr(fn, &info) || !info.dli_fname) return p;
  p.lib = info.dli_fname;
  void *h = dlopen(info.dli_fname, RTLD_NOLOAD | RTLD_LAZY);
  if (!h) return p;
  static void (*nic)(), (*mi)(bool), (*tc)();
  static int (*trim)(size_t);
  static int (*je)(const char *, void *, size_t *, void *, size_t);
  if ((*(void **)&nic = dlsym(h, "nic_collect"))) {
    // nicmalloc's malloc_trim: nic_collect, mimalloc's collect, and the free 4 KiB pages inside
    // the calling thread's control pages in use.
    *(void **)&trim = dlsym(h, "malloc_trim");
    p.release = [] { trim ? (void)trim(0) : nic(); };
  } else if ((*(void **)&mi = dlsym(h, "mi_collect"))) {
    p.release = [] { mi(true); };
  } else if ((*(void **)&je = dlsym(h, "mallctl"))) {
    p.release = [] { je("arena.4096.purge", nullptr, nullptr, nullptr, 0); }; // all arenas
  } else if ((*(void **)&tc = dlsym(h, "MallocExtension_ReleaseFreeMemory"))) {
    p.release = [] { tc(); };
  } else if ((*(void **)&trim = dlsym(h, "malloc_trim"))) {
    p.release = [] { trim(0); };
  }
  return p;
}

// nicmalloc frees a chunk only once it is empty, NICMALLOC_RELEASE_DELAY_MS later, and only
// after this (owner) thread came back to dataplane code: call nic_collect until pinned bytes
// stop moving for two delays and no chunk is draining.
void give_back(bool nic, const Peer &peer) {
#ifdef FRAG_WITH_NIC
  if (nic) {
    const char *env = getenv("NICMALLOC_RELEASE_DELAY_MS");
    double delay = (env ? atof(env) : 1000) / 1000, stable_since = now_s(), start = now_s();
    size_t pinned = SIZE_MAX;
    while (now_s() - start < 30) {
      nic_collect();
      nic_stats st = NIC_STATS_INIT;
      nic_get_stats(&st);
      if (st.dataplane_pinned != pinned || st.chunks_draining) {
        pinned = st.dataplane_pinned;
        stable_since = now_s();
      } else if (now_s() - stable_since > 2 * delay + 0.1) {
        return;
      }
      sleep_ms(20);
    }
    fprintf(stderr, "frag_churn: pinned bytes still moving after 30 s\n");
    return;
  }
#else
  (void)nic;
#endif
  if (peer.release) peer.release();
  sleep_ms(200);
}

void best_case_kept(const Item *items, size_t n, const size_t gran[4], double kept[4]) {
  MapArray<std::pair<uintptr_t, uint32_t>> v; // not from the allocator under test
  v.map(n + 1);
  for (size_t i = 0; i < n; i++)
    v.p[i] = {(uintptr_t)items[i].ptr, (uint32_t)items[i].size};
  std::sort(v.p, v.p + n);
  for (int g = 0; g < 4; g++) {
    size_t blocks = 0, last = SIZE_MAX; // items are sorted and disjoint: ends only grow
    for (size_t i = 0; i < n; i++) {
      size_t first = v.p[i].first / gran[g], end = (v.p[i].first + v.p[i].second - 1) / gran[g];
      if (last != SIZE_MAX && first <= last) first = last + 1;
      if (end >= first) blocks += end - first + 1, last = end;
    }
    kept[g] = (double)blocks * gran[g];
  }
  v.unmap();
}

} // namespace frag
