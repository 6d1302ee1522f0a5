// vdbflow/reduce.h - statistics of sampled quantities, accumulated in the sampling pass: histograms of one
// to three quantities (optionally weighted), moments up to order 4 with minimum and maximum, and means and
// variances of a quantity binned by another.  No per-point array leaves the call.
//
// A point's quantities are its channels (ReduceSpec): value components, Jacobian entries and derived
// quantities (derived.h), taken from the value and Jacobian a block of points was just sampled into.
//
// Reproducible to the last bit whatever the number of threads: points are accumulated in blocks of
// REDUCE_BLOCK, each block in point order into its own partial, and the partials are merged in block
// order.  Counts are integers (exact in any order).  Moments and per-bin means use the pairwise update of
// Pebay (2008) (mean and the central sums M2, M3, M4), so variance, skewness and flatness stay accurate
// where raw power sums cancel.  The block partials of per-bin floats are sparse (the bins a block
// touched), so memory stays at the touched bins, not blocks x bins.
//
// Bins follow numpy.histogramdd: edges given (numpy.linspace), bin b holds edge[b] <= x < edge[b + 1],
// the last bin also x == its right edge; a point with a NaN coordinate counts as nan, one outside the
// edges in any dimension as outside.
#pragma once
#include "derived.h"
#ifndef VDB_DEVICE_COMPILE
#include <cmath>
#include <vector>

namespace vdbflow {

constexpr int REDUCE_MAX_CHANNELS = 32;
constexpr int REDUCE_MAX_HISTOGRAMS = 8;
constexpr int REDUCE_MAX_CONDITIONALS = 16;
constexpr i64 REDUCE_BLOCK = 4096;
constexpr int MOMENT_FIELDS = 8;  // count, nan count, mean, M2, M3, M4, min, max
enum ChannelSource { CHANNEL_VALUE = 0, CHANNEL_JACOBIAN = 1, CHANNEL_DERIVED = 2 };

// What to reduce, as plain data (built by vdbflow.ops.reductions; its layout is exported by offsetof).
// Offsets point into the call's int64 array `ints` and float64 array `reals` and its bin edges `edges`.
struct ReduceSpec {
  int channels;
  int source[REDUCE_MAX_CHANNELS];  // ChannelSource
  int index[REDUCE_MAX_CHANNELS];   // value: component c; Jacobian: 3 c + a; derived: 4 q + entry
  int histograms;
  int hist_dims[REDUCE_MAX_HISTOGRAMS];
  int hist_channel[REDUCE_MAX_HISTOGRAMS][3];
  int hist_bins[REDUCE_MAX_HISTOGRAMS][3];
  int hist_weight[REDUCE_MAX_HISTOGRAMS];  // a channel, or -1
  i64 hist_edges[REDUCE_MAX_HISTOGRAMS][3];  // first edge of each dimension in `edges`
  i64 hist_counts[REDUCE_MAX_HISTOGRAMS];    // ints: bins (C order), then outside, then nan
  i64 hist_sums[REDUCE_MAX_HISTOGRAMS];      // reals: the weights' sum of each bin (weighted only)
  int moments;
  int moment_channel[REDUCE_MAX_CHANNELS];
  i64 moment_at[REDUCE_MAX_CHANNELS];        // reals: MOMENT_FIELDS each
  int conditionals;
  int cond_given[REDUCE_MAX_CONDITIONALS];
  int cond_of[REDUCE_MAX_CONDITIONALS];
  int cond_bins[REDUCE_MAX_CONDITIONALS];
  i64 cond_edges[REDUCE_MAX_CONDITIONALS];
  i64 cond_counts[REDUCE_MAX_CONDITIONALS];  // ints: bins, then outside, then nan (given or of)
  i64 cond_stats[REDUCE_MAX_CONDITIONALS];   // reals: (n, mean, M2) of `of` in each bin
};

// ---- the pairwise update ---------------------------------------------------------------------------------

// One value x into (n, mean, M2, M3, M4) (order: up to 4; fewer central sums are left alone).
inline void moment_push(double* m, double x, int order) {
  const double n1 = m[0], n = n1 + 1.0;
  const double delta = x - m[1], dn = delta / n, term = delta * dn * n1;
  m[0] = n;
  m[1] += dn;
  if (order >= 4) m[4] += term * dn * dn * (n * n - 3.0 * n + 3.0) + 6.0 * dn * dn * m[2] - 4.0 * dn * m[3];
  if (order >= 3) m[3] += term * dn * (n - 2.0) - 3.0 * dn * m[2];
  m[2] += term;
}

// b merged into a: (n, mean, M2[, M3, M4]) of the union.
inline void moment_merge(double* a, const double* b, int order) {
  const double na = a[0], nb = b[0];
  if (nb == 0.0) return;
  if (na == 0.0) {
    for (int f = 0; f <= order; ++f) a[f] = b[f];
    return;
  }
  const double n = na + nb, d = b[1] - a[1], d2 = d * d;
  const double m2a = a[2], m2b = b[2];
  if (order >= 4)
    a[4] += b[4] + d2 * d2 * na * nb * (na * na - na * nb + nb * nb) / (n * n * n) +
            6.0 * d2 * (na * na * m2b + nb * nb * m2a) / (n * n) + 4.0 * d * (na * b[3] - nb * a[3]) / n;
  if (order >= 3) a[3] += b[3] + d2 * d * na * nb * (na - nb) / (n * n) + 3.0 * d * (na * m2b - nb * m2a) / n;
  a[2] = m2a + m2b + d2 * na * nb / n;
  a[1] += d * nb / n;
  a[0] = n;
}

// The bin of x among edges e[0..bins] (numpy's searchsorted(side="right") - 1, the right edge closing the
// last bin): -1 outside, -2 NaN.
inline i64 bin_of(double x, const double* e, int bins) {
  if (x != x) return -2;
  if (!(x >= e[0] && x <= e[bins])) return -1;
  if (x == e[bins]) return bins - 1;
  i64 b = (i64)((x - e[0]) * ((double)bins / (e[bins] - e[0])));  // a guess, then exact against the edges
  if (b < 0) b = 0;
  if (b > bins - 1) b = bins - 1;
  while (b > 0 && x < e[b]) --b;
  while (b < bins - 1 && x >= e[b + 1]) ++b;
  return b;
}

// ---- one thread's accumulator ------------------------------------------------------------------------------

struct SparseEntry {
  i64 slot;   // in reals
  int width;  // 1: a weighted histogram's sum; 3: a conditional bin's (n, mean, M2)
  double m[3];
};

struct ReduceThread {
  std::vector<i64> ints;            // this thread's counts, summed over threads at the end
  std::vector<double> dense;        // per-bin floats of the block being accumulated (zero between blocks)
  std::vector<unsigned char> mark;  // the width of each slot of `dense` this block touched (0: untouched)
  std::vector<i64> touched;
  std::vector<double> moments;      // the block's moment partials
  ReduceThread(i64 n_ints, i64 n_reals, int moments_asked)
      : ints(n_ints, 0), dense(n_reals, 0.0), mark(n_reals, 0), moments((size_t)moments_asked * MOMENT_FIELDS) {}

  void touch(i64 slot, int width) {
    if (!mark[slot]) {
      mark[slot] = (unsigned char)width;
      touched.push_back(slot);
    }
  }
};

// The rows of one block (features: count x channels, of R) into the thread's counts, its moment partial
// (moments_out: moments x MOMENT_FIELDS) and its sparse per-bin entries (appended to `entries`).
template <class R>
inline void accumulate_block(const ReduceSpec& s, const double* edges, const R* features, i64 count, ReduceThread& t,
                             double* moments_out, std::vector<SparseEntry>& entries) {
  const int F = s.channels;
  for (i64 r = 0; r < count; ++r) {
    const R* x = features + r * F;
    for (int h = 0; h < s.histograms; ++h) {
      const int dims = s.hist_dims[h];
      i64 flat = 0, bad = 0;
      for (int d = 0; d < dims; ++d) {
        const int bins = s.hist_bins[h][d];
        const i64 b = bin_of((double)x[s.hist_channel[h][d]], edges + s.hist_edges[h][d], bins);
        if (b == -2) bad = -2;
        else if (b == -1 && bad == 0) bad = -1;
        flat = flat * bins + b;
      }
      i64 total = 1;
      for (int d = 0; d < dims; ++d) total *= s.hist_bins[h][d];
      if (bad == -2) {
        ++t.ints[s.hist_counts[h] + total + 1];
      } else if (bad == -1) {
        ++t.ints[s.hist_counts[h] + total];
      } else {
        ++t.ints[s.hist_counts[h] + flat];
        if (s.hist_weight[h] >= 0) {
          const i64 slot = s.hist_sums[h] + flat;
          t.dense[slot] += (double)x[s.hist_weight[h]];
          t.touch(slot, 1);
        }
      }
    }
    for (int k = 0; k < s.conditionals; ++k) {
      const int bins = s.cond_bins[k];
      const double of = (double)x[s.cond_of[k]];
      const i64 b = bin_of((double)x[s.cond_given[k]], edges + s.cond_edges[k], bins);
      if (b == -2 || of != of) {
        ++t.ints[s.cond_counts[k] + bins + 1];
      } else if (b == -1) {
        ++t.ints[s.cond_counts[k] + bins];
      } else {
        ++t.ints[s.cond_counts[k] + b];
        const i64 slot = s.cond_stats[k] + 3 * b;
        moment_push(&t.dense[slot], of, 2);
        t.touch(slot, 3);
      }
    }
  }
  // moments: the block's mean first, then its central sums (two passes over the block's values: no division
  // a value, and more accurate than the running update).  Each sum is kept in LANES partial sums (value r in
  // lane r % LANES) added in lane order at the end: a fixed order, and LANES chains of additions the CPU
  // overlaps instead of one it waits on.
  constexpr int LANES = 4;
  for (int m = 0; m < s.moments; ++m) {
    double* p = moments_out + m * MOMENT_FIELDS;
    const R* x = features + s.moment_channel[m];
    double sum[LANES] = {}, lo[LANES], hi[LANES];
    i64 n[LANES] = {};
    for (int l = 0; l < LANES; ++l) lo[l] = INFINITY, hi[l] = -INFINITY;
    auto first_pass = [&](i64 r, int l) {
      const double v = (double)x[r * F];
      const bool ok = v == v;  // NaN left out (and counted)
      sum[l] += ok ? v : 0.0;
      n[l] += ok;
      lo[l] = ok && v < lo[l] ? v : lo[l];
      hi[l] = ok && v > hi[l] ? v : hi[l];
    };
    i64 r = 0;
    for (; r + LANES <= count; r += LANES)
      for (int l = 0; l < LANES; ++l) first_pass(r + l, l);
    for (; r < count; ++r) first_pass(r, (int)(r % LANES));
    const i64 finite = (n[0] + n[1]) + (n[2] + n[3]);
    const double mean = finite ? ((sum[0] + sum[1]) + (sum[2] + sum[3])) / (double)finite : 0.0;
    double m2[LANES] = {}, m3[LANES] = {}, m4[LANES] = {};
    auto second_pass = [&](i64 q, int l) {
      const double v = (double)x[q * F];
      const double d = v == v ? v - mean : 0.0, d2 = d * d;
      m2[l] += d2;
      m3[l] += d2 * d;
      m4[l] += d2 * d2;
    };
    for (r = 0; r + LANES <= count; r += LANES)
      for (int l = 0; l < LANES; ++l) second_pass(r + l, l);
    for (; r < count; ++r) second_pass(r, (int)(r % LANES));
    const double lowest = fmin(fmin(lo[0], lo[1]), fmin(lo[2], lo[3]));
    const double highest = fmax(fmax(hi[0], hi[1]), fmax(hi[2], hi[3]));
    p[0] = (double)finite, p[1] = (double)(count - finite), p[2] = mean;
    p[3] = (m2[0] + m2[1]) + (m2[2] + m2[3]);
    p[4] = (m3[0] + m3[1]) + (m3[2] + m3[3]);
    p[5] = (m4[0] + m4[1]) + (m4[2] + m4[3]);
    p[6] = lowest, p[7] = highest;
  }
  for (i64 slot : t.touched) {
    SparseEntry e{slot, t.mark[slot], {0.0, 0.0, 0.0}};
    for (int f = 0; f < e.width; ++f) {
      e.m[f] = t.dense[slot + f];
      t.dense[slot + f] = 0.0;
    }
    t.mark[slot] = 0;
    entries.push_back(e);
  }
  t.touched.clear();
}

// Moment partial b merged into a (both MOMENT_FIELDS wide).
inline void moment_fields_merge(double* a, const double* b) {
  double ca[5] = {a[0], a[2], a[3], a[4], a[5]}, cb[5] = {b[0], b[2], b[3], b[4], b[5]};
  moment_merge(ca, cb, 4);
  a[0] = ca[0], a[2] = ca[1], a[3] = ca[2], a[4] = ca[3], a[5] = ca[4];
  a[1] += b[1];
  a[6] = b[6] < a[6] ? b[6] : a[6];
  a[7] = b[7] > a[7] ? b[7] : a[7];
}

// The blocks' partials merged in block order into ints and reals (added to what they hold: a caller merges
// calls by passing the same arrays; then call order is the merge order).
inline void merge_blocks(const ReduceSpec& s, std::vector<ReduceThread>& threads, const std::vector<double>& block_moments,
                         const std::vector<std::vector<SparseEntry>>& block_entries, i64* ints, double* reals) {
  if (!threads.empty())
    for (size_t i = 0; i < threads[0].ints.size(); ++i) {
      i64 sum = 0;
      for (const ReduceThread& t : threads) sum += t.ints[i];
      ints[i] += sum;
    }
  const i64 blocks = (i64)block_entries.size();
  for (i64 b = 0; b < blocks; ++b) {
    for (int m = 0; m < s.moments; ++m)
      moment_fields_merge(reals + s.moment_at[m], block_moments.data() + (b * s.moments + m) * MOMENT_FIELDS);
    for (const SparseEntry& e : block_entries[b]) {
      if (e.width == 3)
        moment_merge(reals + e.slot, e.m, 2);
      else
        reals[e.slot] += e.m[0];
    }
  }
}

// Partial b (ints_b, reals_b) merged into a (ints, reals), as blocks are merged: counts and weighted sums
// added, binned means and moments by the pairwise update (the merge of the partials of Dask chunks).
inline void merge_partial_into(const ReduceSpec& s, i64 n_ints, i64* ints, double* reals, const i64* ints_b,
                               const double* reals_b) {
  for (i64 i = 0; i < n_ints; ++i) ints[i] += ints_b[i];
  for (int h = 0; h < s.histograms; ++h) {
    if (s.hist_weight[h] < 0) continue;
    i64 total = 1;
    for (int d = 0; d < s.hist_dims[h]; ++d) total *= s.hist_bins[h][d];
    for (i64 b = 0; b < total; ++b) reals[s.hist_sums[h] + b] += reals_b[s.hist_sums[h] + b];
  }
  for (int k = 0; k < s.conditionals; ++k)
    for (int b = 0; b < s.cond_bins[k]; ++b) moment_merge(reals + s.cond_stats[k] + 3 * b, reals_b + s.cond_stats[k] + 3 * b, 2);
  for (int m = 0; m < s.moments; ++m) moment_fields_merge(reals + s.moment_at[m], reals_b + s.moment_at[m]);
}

// ---- the loops ---------------------------------------------------------------------------------------------

inline int reduce_thread_id() {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

// The reduction of n points whose features make(block, first, count, buffer, state) gives (count x channels
// of R, in `buffer` or elsewhere): blocks handed out dynamically, each accumulated alone, merged in order.
template <class R, class State, class Make>
inline void reduce_blocks(const ReduceSpec& s, const double* edges, i64 n, i64 n_ints, i64 n_reals, i64* ints,
                          double* reals, Make make) {
  const i64 blocks = (n + REDUCE_BLOCK - 1) / REDUCE_BLOCK;
  const int threads = threads_for(blocks, 1);
  std::vector<ReduceThread> per;
  per.reserve(threads);
  for (int t = 0; t < threads; ++t) per.emplace_back(n_ints, n_reals, s.moments);
  std::vector<double> block_moments((size_t)(blocks * s.moments * MOMENT_FIELDS));
  std::vector<std::vector<SparseEntry>> block_entries((size_t)blocks);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    ReduceThread& t = per[reduce_thread_id()];
    std::vector<R> buffer((size_t)(REDUCE_BLOCK * s.channels));
    State state;
#pragma omp for schedule(dynamic, 1)
    for (i64 b = 0; b < blocks; ++b) {
      const i64 first = b * REDUCE_BLOCK, count = first + REDUCE_BLOCK < n ? REDUCE_BLOCK : n - first;
      const R* features = make(first, count, buffer.data(), state);
      accumulate_block<R>(s, edges, features, count, t, block_moments.data() + b * s.moments * MOMENT_FIELDS,
                          block_entries[b]);
    }
  }
  merge_blocks(s, per, block_moments, block_entries, ints, reals);
}

struct NoState {};

// Features given: (n, channels) of R.
template <class R>
VDB_ENTRY void reduce_feature_rows(const ReduceSpec& s, const double* edges, const R* features, i64 n, i64 n_ints,
                                   i64 n_reals, i64* ints, double* reals) {
  reduce_blocks<R, NoState>(s, edges, n, n_ints, n_reals, ints, reals,
                            [&](i64 first, i64, R*, NoState&) { return features + first * s.channels; });
}

// A block's features from its values v (count x C), Jacobians j (count x C x 3) and derived quantities, one
// channel (a column) at a time.
template <class T, class R>
inline void block_features(const ReduceSpec& s, const T* v, const R* j, R* const* derived, int C, i64 count, R* out) {
  const int F = s.channels;
  for (int f = 0; f < F; ++f) {
    const int i = s.index[f];
    if (s.source[f] == CHANNEL_VALUE)
      for (i64 r = 0; r < count; ++r) out[r * F + f] = (R)v[r * C + i];
    else if (s.source[f] == CHANNEL_JACOBIAN)
      for (i64 r = 0; r < count; ++r) out[r * F + f] = j[r * 3 * C + i];
    else {
      const R* d = derived[i / 4];
      const int w = derived_width(i / 4), e = i % 4;
      for (i64 r = 0; r < count; ++r) out[r * F + f] = d[r * w + e];
    }
  }
}

// The fused pass: each block of points is sampled into the thread's own buffers (values and Jacobians,
// exactly as sample_points writes them: the same inner loops, simd.h's where it runs), its derived quantities
// computed (derive_point, as the fused sampling pass computes them) and its features accumulated while they
// are in cache.
template <class T, int NC, class P>
VDB_ENTRY void sample_reduce_points(const KernelAbi& k, const P* pts, i64 n, const ReduceSpec& s, const double* edges,
                                    i64 n_ints, i64 n_reals, i64* ints, double* reals, int order) {
  typedef typename RealOf<T>::type R;
  const GridView<T> g = abi_grid<T>(k);
  const PointTransform transform = abi_transform(k);
  const int mode = k.mode, C = k.components;
  bool asked[DERIVED_COUNT] = {};
  for (int f = 0; f < s.channels; ++f)
    if (s.source[f] == CHANNEL_DERIVED) asked[s.index[f] / 4] = true;
  const bool simd = mode <= MODE_LINEAR && simd_enabled();
  const bool scattered = scattered_points(order, mode, pts, transform, n);
  struct State {
    std::vector<T> v;
    std::vector<R> j;
    std::vector<R> d[DERIVED_COUNT];
    LeafCache cache;
    LineStream<T> ov;
    LineStream<R> oj;
  };
  reduce_blocks<R, State>(s, edges, n, n_ints, n_reals, ints, reals, [&](i64 first, i64 count, R* buffer, State& st) {
    if (st.v.empty()) {
      st.v.resize((size_t)(REDUCE_BLOCK * C));
      st.j.resize((size_t)(REDUCE_BLOCK * 3 * C));
      for (int q = 0; q < DERIVED_COUNT; ++q)
        if (asked[q]) st.d[q].resize((size_t)(REDUCE_BLOCK * derived_width(q)));
    }
    const PointTransform xf = transform;
    const i64 last = first + count;
    if (simd) {
      st.ov.begin(st.v.data(), false);
      st.oj.begin(st.j.data(), false);
      if (scattered)
        scattered_run_simd<T, NC, P>(g, xf, mode, pts, first, last, true, st.ov, st.oj, st.cache);
      else
        coherent_run_simd<T, NC, P>(g, xf, mode, pts, first, last, true, st.ov, st.oj, st.cache);
      st.ov.finish();
      st.oj.finish();
    } else {
      double p[3];
      for (i64 r = 0; r < count; ++r) {
        load_point(pts, first + r, p);
        sample_point<T, NC>(g, xf, p, mode, true, st.v.data() + r * C, st.j.data() + r * 3 * C, st.cache);
      }
    }
    R* outs[DERIVED_COUNT];
    for (int q = 0; q < DERIVED_COUNT; ++q) outs[q] = asked[q] ? st.d[q].data() : nullptr;
    if (C == 3)
      for (i64 r = 0; r < count; ++r) {
        const R u[3] = {(R)st.v[3 * r], (R)st.v[3 * r + 1], (R)st.v[3 * r + 2]};
        derive_point<R>(st.j.data() + 9 * r, u, outs, r);
      }
    block_features<T, R>(s, st.v.data(), st.j.data(), outs, C, count, buffer);
    return (const R*)buffer;
  });
}

}  // namespace vdbflow
#endif  // host
