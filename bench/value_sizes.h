// Value sizes drawn like memcached's at Facebook (shared/workloads/fb-memcache-value-sizes.csv,
// from "Scaling Memcache at Facebook", NSDI'13, Table 3): piecewise-linear between the published
// percentiles, with the tails closed at half of p5 and twice p99 (the paper gives no min/max).
#pragma once

#include <cstdint>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

struct ValuePool {
  std::string name;
  double mean = 0;
  std::vector<std::pair<double, double>> points; // (percentile 0..100, bytes)

  size_t sample(std::mt19937_64 &rng) const {
    double u = std::uniform_real_distribution<double>(0, 100)(rng);
    for (size_t i = 1; i < points.size(); i++)
      if (u <= points[i].first) {
        auto [p0, v0] = points[i - 1];
        auto [p1, v1] = points[i];
        double v = v0 + (v1 - v0) * (u - p0) / (p1 - p0);
        return v < 1 ? 1 : static_cast<size_t>(v);
      }
    return static_cast<size_t>(points.back().second);
  }
};

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
    p.points.push_back({100, std::stod(cells[8]) * 2});
    pools.push_back(p);
  }
  if (pools.empty()) throw std::runtime_error("no pools in " + csv);
  return pools;
}
