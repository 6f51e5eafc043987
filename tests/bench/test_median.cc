// The median the C benchmarks print (bench/bench_median.h): the middle sample of an odd count,
// the mean of the two middle ones of an even count, whatever order the samples came in.
#include "bench_median.h"

#include <gtest/gtest.h>

TEST(BenchMedian, OddCountIsTheMiddleSample) {
  double v[] = {9, 1, 5};
  EXPECT_EQ(bench_median(v, 3), 5);
  double one[] = {7};
  EXPECT_EQ(bench_median(one, 1), 7);
}

TEST(BenchMedian, EvenCountIsTheMeanOfTheTwoMiddleSamples) {
  double v[] = {4, 1, 3, 2};
  EXPECT_EQ(bench_median(v, 4), 2.5);
  double two[] = {10, 20};
  EXPECT_EQ(bench_median(two, 2), 15);
}

TEST(BenchMedian, LeavesTheSamplesSortedForTheExtremes) {
  double v[] = {8, 2, 6, 4, 10, 0};
  EXPECT_EQ(bench_median(v, 6), 5);
  for (int i = 0; i < 6; i++)
    EXPECT_EQ(v[i], 2 * i);
}
