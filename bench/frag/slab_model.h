// memcached reference (--api slab): memcached 1.6.18's slab allocator computed on the same size
// stream, with no allocation at all (README.md, "memcached reference").
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace frag {

// memcached 1.6.18's slab classes (slabs_init): 96 B first (48 B item header + 48 B -n),
// multiplied by the factor and aligned to 8, up to 512 KiB / factor, then one 512 KiB class.
// Stock memcached stops at 63 classes (checked against `memcached -vv -f F`); --slab-uncapped 1
// lifts that, as the Facebook paper's memcached did.
struct Slab {
  static constexpr uint32_t kPage = 1 << 20, kChunkMax = kPage / 2, kChunkHdr = 48;
  std::vector<uint32_t> size, perslab;
  std::vector<uint64_t> used, high; // chunks in use; per-class high-water mark of pages
  uint64_t pages_need = 0, pages_need_peak = 0, pages_high_sum = 0;
  uint32_t overhead; // item header 48 + CAS 8 + key + NUL + "\r\n"

  Slab(double factor, bool capped, uint32_t key_bytes) : overhead(48 + 8 + key_bytes + 1 + 2) {
    double s = 96;
    while ((!capped || size.size() < 62) && s < kChunkMax / factor) {
      uint32_t a = ((uint32_t)s + 7) & ~7u;
      size.push_back(a);
      s = (double)(uint32_t)(a * factor); // memcached multiplies an unsigned int
    }
    size.push_back(kChunkMax);
    for (uint32_t c : size)
      perslab.push_back(kPage / c);
    used.assign(size.size(), 0);
    high.assign(size.size(), 0);
  }
  unsigned cls(uint32_t bytes) const {
    return (unsigned)(std::lower_bound(size.begin(), size.end(), bytes) - size.begin());
  }
  void chunk(unsigned c, int dir) {
    uint64_t before = (used[c] + perslab[c] - 1) / perslab[c];
    used[c] += dir;
    uint64_t after = (used[c] + perslab[c] - 1) / perslab[c];
    pages_need += after - before;
    pages_need_peak = std::max(pages_need_peak, pages_need);
    if (after > high[c]) pages_high_sum += after - high[c], high[c] = after;
  }
  // Items above 512 KiB are chained (1.6 "large items"): a header item, full 512 KiB chunks,
  // and the tail in its best-fit class, each chunk with a 48 B chunk header (approximation).
  void item(uint32_t value, int dir) {
    uint32_t total = value + overhead;
    if (total <= kChunkMax) return chunk(cls(total), dir);
    chunk(cls(overhead + kChunkHdr), dir);
    uint64_t data = value + 2;
    for (; data > kChunkMax - kChunkHdr; data -= kChunkMax - kChunkHdr)
      chunk(cls(kChunkMax), dir);
    if (data) chunk(cls((uint32_t)data + kChunkHdr), dir);
  }
  // Pages move freely between classes (automove) but are never returned to the OS.
  size_t bytes_automove() const { return pages_need_peak * (size_t)kPage; }
  size_t bytes_no_automove() const { return pages_high_sum * (size_t)kPage; }
};

} // namespace frag
