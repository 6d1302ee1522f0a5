// cpu_reduce_spec.h - a reduction's spec (reduce.h ReduceSpec), read from the bytes Python built and checked
// against a call's arrays before any kernel reads or writes through its offsets.  Included by cpu_module.cpp
// only, in the module's compilation.
#pragma once
#include <cstring>
#include <stdexcept>
#include <string>

#include "vdbflow/reduce.h"

namespace {

using namespace vdbflow;

void spec_check(bool ok, const char* message) {
  if (!ok) throw std::invalid_argument(message);
}

// The spec of a reduction, from the bytes Python built (vdbflow.ops.reductions), checked against the call's
// arrays: every channel, bin, edge and offset inside what the kernels will read and write.
ReduceSpec read_spec(const char* bytes, size_t size, int components, bool sampled, size_t n_edges, size_t n_ints,
                     size_t n_reals, const double* edges) {
  if (size != sizeof(ReduceSpec))
    throw std::invalid_argument("expected a reduction spec of " + std::to_string(sizeof(ReduceSpec)) + " bytes, got " +
                                std::to_string(size));
  ReduceSpec s;
  std::memcpy(&s, bytes, sizeof(ReduceSpec));
  spec_check(s.channels >= 1 && s.channels <= REDUCE_MAX_CHANNELS, "a reduction needs 1 to 32 channels");
  for (int f = 0; f < s.channels && sampled; ++f) {
    const int i = s.index[f];
    if (s.source[f] == CHANNEL_VALUE) spec_check(i >= 0 && i < components, "a value channel names a missing component");
    else if (s.source[f] == CHANNEL_JACOBIAN) spec_check(i >= 0 && i < 3 * components, "a Jacobian channel is out of range");
    else if (s.source[f] == CHANNEL_DERIVED)
      spec_check(components == 3 && i >= 0 && i / 4 < DERIVED_COUNT && i % 4 < derived_width(i / 4),
            "a derived channel needs a vec3 grid and one of the kernels' quantities");
    else spec_check(false, "unknown channel source");
  }
  // Every size and offset is checked against the call's arrays before it is added or multiplied, so that no
  // sum or product overflows (a spec of 3 x 2^22 bins is refused, not wrapped to a small count array).
  auto span_ok = [](i64 at, i64 count, size_t n) {  // [at, at + count) inside an array of n, without overflow
    return at >= 0 && count >= 0 && (u64)at <= (u64)n && (u64)count <= (u64)n - (u64)at;
  };
  auto edges_ok = [&](i64 at, int bins) {
    spec_check(bins >= 1 && span_ok(at, (i64)bins + 1, n_edges), "bin edges outside the edges array");
    for (int b = 0; b < bins; ++b) spec_check(edges[at + b] < edges[at + b + 1], "bin edges must increase");
  };
  auto channel_ok = [&](int c) { spec_check(c >= 0 && c < s.channels, "a statistic names a missing channel"); };
  spec_check(s.histograms >= 0 && s.histograms <= REDUCE_MAX_HISTOGRAMS, "at most 8 histograms a call");
  for (int h = 0; h < s.histograms; ++h) {
    spec_check(s.hist_dims[h] >= 1 && s.hist_dims[h] <= 3, "histograms have 1 to 3 dimensions");
    i64 total = 1;
    for (int d = 0; d < s.hist_dims[h]; ++d) {
      channel_ok(s.hist_channel[h][d]);
      edges_ok(s.hist_edges[h][d], s.hist_bins[h][d]);
      spec_check(total <= (i64)(n_ints / (size_t)s.hist_bins[h][d]), "histogram bins beyond the counts array");
      total *= s.hist_bins[h][d];  // at most n_ints: no overflow
    }
    spec_check(span_ok(s.hist_counts[h], total + 2, n_ints), "histogram counts out of range");
    if (s.hist_weight[h] >= 0) {
      channel_ok(s.hist_weight[h]);
      spec_check(span_ok(s.hist_sums[h], total, n_reals), "histogram sums out of range");
    }
  }
  spec_check(s.moments >= 0 && s.moments <= REDUCE_MAX_CHANNELS, "at most 32 moment channels");
  for (int m = 0; m < s.moments; ++m) {
    channel_ok(s.moment_channel[m]);
    spec_check(span_ok(s.moment_at[m], MOMENT_FIELDS, n_reals), "moments out of range");
  }
  spec_check(s.conditionals >= 0 && s.conditionals <= REDUCE_MAX_CONDITIONALS, "at most 16 binned means a call");
  for (int k = 0; k < s.conditionals; ++k) {
    channel_ok(s.cond_given[k]);
    channel_ok(s.cond_of[k]);
    edges_ok(s.cond_edges[k], s.cond_bins[k]);
    spec_check(span_ok(s.cond_counts[k], (i64)s.cond_bins[k] + 2, n_ints), "binned counts out of range");
    spec_check(span_ok(s.cond_stats[k], 3 * (i64)s.cond_bins[k], n_reals), "binned means out of range");
  }
  return s;
}

}  // namespace
