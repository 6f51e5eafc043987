// Value sizes drawn like memcached's at Facebook (shared/workloads/fb-memcache-value-sizes.csv,
// from "Scaling Memcache at Facebook", NSDI'13, Table 3). The one size model of the benchmarks:
// bench/mr_miss.cc and bench/frag both draw from it, so their results describe the same values.
//
// Model: piecewise-linear between the published percentiles p5..p99, rounded to the nearest
// byte (at least 1; truncating would bias the sample mean half a byte low). The paper gives no
// minimum or maximum, so the tails are closed at p0 = p5/2 and p100 = 1.5*p99. Why 1.5*p99
// rather than 2*p99: the model's mean is closer to the paper's for three pools of four and in
// total (sum of |error| 43% against 47%):
//   pool        paper mean   p100 = 1.5*p99    p100 = 2*p99
//   wildcard        1110      1190 (+7.2%)      1236 (+11.3%)
//   app              881       752 (-14.6%)      778 (-11.6%)
//   replicated        66        66.5 (+0.8%)      66.7 (+1.0%)
//   regional       31800     38287 (+20.4%)    39240 (+23.4%)
// No straight tail fits all pools: app's mean would need p100 near 4*p99 (its real tail beyond
// p99 must be heavier), while wildcard and regional are already above with any longer tail.
// 1.5*p99 also keeps regional's largest value (572 KB) well under memcached's 1 MiB item limit.
// model_mean() is the model's exact mean; bench/frag prints it next to the paper's and the
// sample's (summary.md, "Value sizes").
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

struct ValuePool {
  std::string name;
  double mean = 0;                               // the paper's mean, a check on the model
  std::vector<std::pair<double, double>> points; // (percentile 0..100, bytes), p0 to p100

  // The size at percentile u in [0, 100). Callers with their own generator (bench/frag's
  // splitmix64, whose stream must not depend on the allocator) draw u themselves.
  size_t at_percentile(double u) const {
    size_t i = 0;
    while (i + 2 < points.size() && u >= points[i + 1].first)
      i++;
    auto [p0, v0] = points[i];
    auto [p1, v1] = points[i + 1];
    double v = v0 + (u - p0) / (p1 - p0) * (v1 - v0);
    return static_cast<size_t>(std::max(1.0, std::round(v)));
  }

  size_t sample(std::mt19937_64 &rng) const {
    return at_percentile(std::uniform_real_distribution<double>(0, 100)(rng));
  }

  // Exact mean of the piecewise-linear model (each segment contributes its midpoint).
  double model_mean() const {
    double m = 0;
    for (size_t i = 0; i + 1 < points.size(); i++)
      m += (points[i + 1].first - points[i].first) / 100 *
           (points[i].second + points[i + 1].second) / 2;
    return m;
  }
};

// Rows "pool,mean,stddev,p5,p25,p50,p75,p95,p99"; '#' lines and the header are skipped.
inline std::vector<ValuePool> load_value_pools(const std::string &csv) {
  std::ifstream in(csv);
  if (!in) throw std::runtime_error("cannot read " + csv);
  std::vector<ValuePool> pools;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#' || line.rfind("pool,", 0) == 0) continue;
    std::stringstream fields(line);
    std::string cell;
    std::vector<std::string> cells;
    while (std::getline(fields, cell, ','))
      cells.push_back(cell);
    if (cells.size() != 9) continue;
    ValuePool p;
    p.name = cells[0];
    p.mean = std::stod(cells[1]);
    const double pct[] = {5, 25, 50, 75, 95, 99};
    p.points.push_back({0, std::stod(cells[3]) / 2});
    for (int i = 0; i < 6; i++)
      p.points.push_back({pct[i], std::stod(cells[3 + i])});
    p.points.push_back({100, std::stod(cells[8]) * 1.5});
    pools.push_back(p);
  }
  if (pools.empty()) throw std::runtime_error("no pools in " + csv);
  return pools;
}
