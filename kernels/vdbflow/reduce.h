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
#endif

namespace vdbflow {

constexpr int REDUCE_MAX_CHANNELS = 32;
constexpr int REDUCE_MAX_HISTOGRAMS = 8;
constexpr int REDUCE_MAX_CONDITIONALS = 16;
constexpr i64 REDUCE_BLOCK = 4096;
constexpr int MOMENT_FIELDS = 8;  // count, nan count, mean, M2, M3, M4, min, max
// Counts a GPU block keeps in shared memory (32 KiB of 32-bit counters; a block counts at most REDUCE_BLOCK
// points, so no counter overflows); the counts of a call past these add straight to the global ones.
constexpr i64 REDUCE_SHARED_COUNTS = 8192;
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
VDB_HD void moment_push(double* m, double x, int order) {
  const double n1 = m[0], n = n1 + 1.0;
  const double delta = x - m[1], dn = delta / n, term = delta * dn * n1;
  m[0] = n;
  m[1] += dn;
  if (order >= 4) m[4] += term * dn * dn * (n * n - 3.0 * n + 3.0) + 6.0 * dn * dn * m[2] - 4.0 * dn * m[3];
  if (order >= 3) m[3] += term * dn * (n - 2.0) - 3.0 * dn * m[2];
  m[2] += term;
}

// b merged into a: (n, mean, M2[, M3, M4]) of the union.
VDB_HD void moment_merge(double* a, const double* b, int order) {
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

// Moment partial b merged into a (both MOMENT_FIELDS wide).
VDB_HD void moment_fields_merge(double* a, const double* b) {
  double ca[5] = {a[0], a[2], a[3], a[4], a[5]}, cb[5] = {b[0], b[2], b[3], b[4], b[5]};
  moment_merge(ca, cb, 4);
  a[0] = ca[0], a[2] = ca[1], a[3] = ca[2], a[4] = ca[3], a[5] = ca[4];
  a[1] += b[1];
  a[6] = b[6] < a[6] ? b[6] : a[6];
  a[7] = b[7] > a[7] ? b[7] : a[7];
}

// The bin of x among edges e[0..bins] (numpy's searchsorted(side="right") - 1, the right edge closing the
// last bin): -1 outside, -2 NaN.
VDB_HD i64 bin_of(double x, const double* e, int bins) {
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

// ---- one block of points: counts, moments and per-bin floats -------------------------------------------------

// The features of a block, row r and channel f read by at(r, f): given rows (row-major, `channels` a row),
// or columns of REDUCE_BLOCK (what the sampling pass writes: a moment then reads one channel contiguously, and
// the compiler knows it).
template <class R>
struct RowFeatures {
  const R* x;
  i64 channels;
  VDB_HD double at(i64 r, int f) const { return (double)x[r * channels + f]; }
};

template <class R>
struct ColumnFeatures {
  const R* x;
  VDB_HD double at(i64 r, int f) const { return (double)x[r + (i64)f * REDUCE_BLOCK]; }
};

// The count slot (in ints) of row r in histogram h: a bin, outside or nan.
template <class V>
VDB_HD i64 histogram_slot(const ReduceSpec& s, const double* edges, const V& x, i64 r, int h, i64* bin) {
  const int dims = s.hist_dims[h];
  i64 flat = 0, bad = 0, total = 1;
  for (int d = 0; d < dims; ++d) {
    const int bins = s.hist_bins[h][d];
    const i64 b = bin_of(x.at(r, s.hist_channel[h][d]), edges + s.hist_edges[h][d], bins);
    if (b == -2) bad = -2;
    else if (b == -1 && bad == 0) bad = -1;
    flat = flat * bins + b;
    total *= bins;
  }
  *bin = bad ? -1 : flat;
  return s.hist_counts[h] + (bad == -2 ? total + 1 : bad == -1 ? total : flat);
}

// The count slot of row r in conditional k, and its bin (-1 for outside or nan).
template <class V>
VDB_HD i64 conditional_slot(const ReduceSpec& s, const double* edges, const V& x, i64 r, int k, i64* bin) {
  const int bins = s.cond_bins[k];
  const double of = x.at(r, s.cond_of[k]);
  const i64 b = bin_of(x.at(r, s.cond_given[k]), edges + s.cond_edges[k], bins);
  *bin = b >= 0 && of == of ? b : -1;
  return s.cond_counts[k] + (b == -2 || of != of ? bins + 1 : b == -1 ? bins : b);
}

// Row r's counts: count(slot) once for each histogram and each conditional (integers: any order).
template <class V, class Count>
VDB_HD void count_row(const ReduceSpec& s, const double* edges, const V& x, i64 r, Count& count) {
  i64 bin;
  for (int h = 0; h < s.histograms; ++h) count(histogram_slot(s, edges, x, r, h, &bin));
  for (int k = 0; k < s.conditionals; ++k) count(conditional_slot(s, edges, x, r, k, &bin));
}

// Items of a block's per-bin floats: the weighted histograms (item h < histograms), then the conditionals.
VDB_HD int reduce_items(const ReduceSpec& s) { return s.histograms + s.conditionals; }

// Item `item` of the block's rows 0..count-1, in row order, into dense (the block's reals, zero where not
// touched): a weighted histogram's sums, or a conditional's (n, mean, M2) per bin; touch(slot, width) is
// called for every slot written (width 1 or 3).  An unweighted histogram has none.
template <class V, class Touch>
VDB_HD void accumulate_item(const ReduceSpec& s, const double* edges, const V& x, i64 count, int item,
                            double* dense, Touch& touch) {
  i64 bin;
  if (item < s.histograms) {
    const int h = item, w = s.hist_weight[h];
    if (w < 0) return;
    for (i64 r = 0; r < count; ++r) {
      histogram_slot(s, edges, x, r, h, &bin);
      if (bin < 0) continue;
      const i64 slot = s.hist_sums[h] + bin;
      dense[slot] += x.at(r, w);
      touch(slot, 1);
    }
    return;
  }
  const int k = item - s.histograms;
  for (i64 r = 0; r < count; ++r) {
    conditional_slot(s, edges, x, r, k, &bin);
    if (bin < 0) continue;
    const i64 slot = s.cond_stats[k] + 3 * bin;
    moment_push(dense + slot, x.at(r, s.cond_of[k]), 2);
    touch(slot, 3);
  }
}

// Moment m of the block's rows 0..count-1 into p (MOMENT_FIELDS): the block's mean first, then its central
// sums (two passes over the block's values: no division a value, and more accurate than the running
// update).  Each sum is kept in LANES partial sums (value r in lane r % LANES) added in lane order at the
// end: a fixed order, and LANES chains of additions the CPU overlaps instead of one it waits on.
// +infinity, where NVRTC has no math.h and so no INFINITY
VDB_HD double reduce_infinity() {
#ifdef VDB_DEVICE_COMPILE
  return __longlong_as_double(0x7ff0000000000000LL);
#else
  return INFINITY;
#endif
}

VDB_HD void moment_first(double v, double& sum, i64& n, double& lo, double& hi) {
  const bool ok = v == v;  // NaN left out (and counted)
  sum += ok ? v : 0.0;
  n += ok;
  lo = ok && v < lo ? v : lo;
  hi = ok && v > hi ? v : hi;
}

VDB_HD void moment_second(double v, double mean, double& m2, double& m3, double& m4) {
  const double d = v == v ? v - mean : 0.0, d2 = d * d;
  m2 += d2;
  m3 += d2 * d;
  m4 += d2 * d2;
}

template <class V>
VDB_HD void block_moment(const ReduceSpec& s, const V& x, i64 count, int m, double* p) {
  constexpr int LANES = 4;
  const int f = s.moment_channel[m];
  double sum[LANES] = {0.0, 0.0, 0.0, 0.0}, lo[LANES], hi[LANES];
  i64 n[LANES] = {0, 0, 0, 0};
  for (int l = 0; l < LANES; ++l) lo[l] = reduce_infinity(), hi[l] = -reduce_infinity();
  i64 r = 0;
  for (; r + LANES <= count; r += LANES)
    for (int l = 0; l < LANES; ++l) moment_first(x.at(r + l, f), sum[l], n[l], lo[l], hi[l]);
  for (; r < count; ++r) moment_first(x.at(r, f), sum[r % LANES], n[r % LANES], lo[r % LANES], hi[r % LANES]);
  const i64 finite = (n[0] + n[1]) + (n[2] + n[3]);
  const double mean = finite ? ((sum[0] + sum[1]) + (sum[2] + sum[3])) / (double)finite : 0.0;
  double m2[LANES] = {0.0, 0.0, 0.0, 0.0}, m3[LANES] = {0.0, 0.0, 0.0, 0.0}, m4[LANES] = {0.0, 0.0, 0.0, 0.0};
  for (r = 0; r + LANES <= count; r += LANES)
    for (int l = 0; l < LANES; ++l) moment_second(x.at(r + l, f), mean, m2[l], m3[l], m4[l]);
  for (; r < count; ++r) moment_second(x.at(r, f), mean, m2[r % LANES], m3[r % LANES], m4[r % LANES]);
  p[0] = (double)finite, p[1] = (double)(count - finite), p[2] = mean;
  p[3] = (m2[0] + m2[1]) + (m2[2] + m2[3]);
  p[4] = (m3[0] + m3[1]) + (m3[2] + m3[3]);
  p[5] = (m4[0] + m4[1]) + (m4[2] + m4[3]);
  p[6] = fmin(fmin(lo[0], lo[1]), fmin(lo[2], lo[3]));
  p[7] = fmax(fmax(hi[0], hi[1]), fmax(hi[2], hi[3]));
}

// Channel f of a point from its values v (C), Jacobian j (3 C) and derived quantities d[q] (derived_width(q)).
template <class T, class R>
VDB_HD R point_channel(const ReduceSpec& s, int f, const T* v, const R* j, R* const* d) {
  const int i = s.index[f];
  if (s.source[f] == CHANNEL_VALUE) return (R)v[i];
  if (s.source[f] == CHANNEL_JACOBIAN) return j[i];
  return d[i / 4][i % 4];
}

// Slot (width 1 or 3) b's block partial merged into the total, as the CPU merges a block's sparse entries.
VDB_HD void merge_slot(double* total, const double* partial, int width) {
  if (width == 3)
    moment_merge(total, partial, 2);
  else
    total[0] += partial[0];
}

}  // namespace vdbflow

#ifndef VDB_DEVICE_COMPILE
namespace vdbflow {

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
  ReduceThread(i64 n_ints, i64 n_reals) : ints(n_ints, 0), dense(n_reals, 0.0), mark(n_reals, 0) {}

  void operator()(i64 slot) { ++ints[slot]; }  // a count
  void operator()(i64 slot, int width) {       // a slot of dense written
    if (!mark[slot]) {
      mark[slot] = (unsigned char)width;
      touched.push_back(slot);
    }
  }
};

// The rows of one block into the thread's counts, its moment partial (moments_out: moments x MOMENT_FIELDS)
// and its sparse per-bin entries (appended to `entries`).
template <class V>
inline void accumulate_block(const ReduceSpec& s, const double* edges, const V& x, i64 count,
                             ReduceThread& t, double* moments_out, std::vector<SparseEntry>& entries) {
  if (s.histograms + s.conditionals)
    for (i64 r = 0; r < count; ++r) count_row(s, edges, x, r, t);
  for (int item = 0; item < reduce_items(s); ++item) accumulate_item(s, edges, x, count, item, t.dense.data(), t);
  for (int m = 0; m < s.moments; ++m) block_moment(s, x, count, m, moments_out + m * MOMENT_FIELDS);
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
    for (const SparseEntry& e : block_entries[b]) merge_slot(reals + e.slot, e.m, e.width);
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

// The reduction of n points whose features make(first, count, buffer, state) gives (RowFeatures or
// ColumnFeatures of count rows, in `buffer`: REDUCE_BLOCK x channels of R, or elsewhere): blocks handed out
// dynamically, each accumulated alone, merged in order.
template <class R, class State, class Make>
inline void reduce_blocks(const ReduceSpec& s, const double* edges, i64 n, i64 n_ints, i64 n_reals, i64* ints,
                          double* reals, Make make) {
  const i64 blocks = (n + REDUCE_BLOCK - 1) / REDUCE_BLOCK;
  const int threads = threads_for(blocks, 1);
  std::vector<ReduceThread> per;
  per.reserve(threads);
  for (int t = 0; t < threads; ++t) per.emplace_back(n_ints, n_reals);
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
      const auto features = make(first, count, buffer.data(), state);
      accumulate_block(s, edges, features, count, t, block_moments.data() + b * s.moments * MOMENT_FIELDS,
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
                            [&](i64 first, i64, R*, NoState&) {
                              return RowFeatures<R>{features + first * s.channels, s.channels};
                            });
}

// A block's features from its values v (count x C), Jacobians j (count x C x 3) and derived quantities, one
// channel (a column of REDUCE_BLOCK in out) at a time: a moment then reads its channel contiguously.
template <class T, class R>
inline ColumnFeatures<R> block_features(const ReduceSpec& s, const T* v, const R* j, R* const* derived, int C,
                                        i64 count, R* out) {
  for (int f = 0; f < s.channels; ++f) {
    const int i = s.index[f];
    R* column = out + f * REDUCE_BLOCK;
    if (s.source[f] == CHANNEL_VALUE)
      for (i64 r = 0; r < count; ++r) column[r] = (R)v[r * C + i];
    else if (s.source[f] == CHANNEL_JACOBIAN)
      for (i64 r = 0; r < count; ++r) column[r] = j[r * 3 * C + i];
    else {
      const R* d = derived[i / 4];
      const int w = derived_width(i / 4), e = i % 4;
      for (i64 r = 0; r < count; ++r) column[r] = d[r * w + e];
    }
  }
  return ColumnFeatures<R>{out};
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
    return block_features<T, R>(s, st.v.data(), st.j.data(), outs, C, count, buffer);
  });
}

// ---- the entries of sample_reduce, reduce_features and merge_partials (operations.h) ---------------------------
VDBFLOW_CPU_ENTRY(sample_reduce) {
  const KernelAbi& a = *(const KernelAbi*)k;
  with_instance<true>(a.value_kind, a.components, points_double, [&](auto t, auto nc, auto p) {
    typedef type_of<decltype(t)> T;
    typedef type_of<decltype(p)> P;
    sample_reduce_points<T, decltype(nc)::value, P>(a, (const P*)points, n, *(const ReduceSpec*)spec, edges, n_ints,
                                                    n_reals, ints, reals, order);
  });
}

VDBFLOW_CPU_ENTRY(reduce_features) {
  const ReduceSpec& s = *(const ReduceSpec*)spec;
  if (is_double)
    reduce_feature_rows<double>(s, edges, (const double*)features, n, n_ints, n_reals, ints, reals);
  else
    reduce_feature_rows<float>(s, edges, (const float*)features, n, n_ints, n_reals, ints, reals);
}

VDBFLOW_CPU_ENTRY(merge_partials) {
  merge_partial_into(*(const ReduceSpec*)spec, n_ints, ints, reals, ints_b, reals_b);
}

}  // namespace vdbflow
#endif  // host

#ifdef VDB_DEVICE_COMPILE
namespace vdbflow {

// A GPU block's counts: in shared memory for the first n_shared slots, the others straight to the global counts.
struct BlockCounts {
  unsigned* shared;
  i64 n_shared;
  unsigned long long* global;
  __device__ void operator()(i64 slot) {
    if (slot < n_shared)
      atomicAdd(shared + slot, 1u);
    else
      atomicAdd(global + slot, 1ull);
  }
};

// A GPU block's per-bin floats: the width of each slot written (the merge reads it).
struct MarkSlots {
  unsigned char* mark;
  __device__ void operator()(i64 slot, int width) { mark[slot] = (unsigned char)width; }
};

// Point i's features (sample_point and derive_point, as the fused sampling entry computes them) to
// x[f * REDUCE_BLOCK] for each channel f.  A run-time count (NC = 0, never 3: derive is false) samples each
// value or Jacobian channel's component alone (component_view), so no frame holds MAX_COMPONENTS' values.
template <class T, int NC>
__device__ __forceinline__ void reduce_point_features(const GridView<T>& g, const PointTransform& xf, int mode,
                                                          bool derive, const ReduceSpec& s, const double* pts, i64 i,
                                                          typename RealOf<T>::type* x, LeafCache& cache) {
  typedef typename RealOf<T>::type R;
  double p[3];
  load_point(pts, i, p);
  if constexpr (NC == 0) {
    for (int f = 0; f < s.channels; ++f) {  // derived channels need C = 3 (never a run-time count): NaN
      const bool value = s.source[f] == CHANNEL_VALUE;
      T v = T(0);
      R j[3] = {(R)nan(""), (R)nan(""), (R)nan("")};
      if (s.source[f] != CHANNEL_DERIVED)
        sample_point<T, 1>(component_view(g, value ? s.index[f] : s.index[f] / 3), xf, p, mode, true, &v, j, cache);
      x[f * REDUCE_BLOCK] = value ? (R)v : j[s.source[f] == CHANNEL_DERIVED ? 0 : s.index[f] % 3];
    }
  } else {
    T v[NC];
    R j[3 * NC];
    sample_point<T, NC>(g, xf, p, mode, true, v, j, cache);
    for (int f = 0; f < s.channels; ++f) {
      if (s.source[f] != CHANNEL_DERIVED) {
        x[f * REDUCE_BLOCK] = point_channel<T, R>(s, f, v, j, nullptr);
        continue;
      }
      // a derived channel: its quantity alone (derive_point computes each one from J and u by itself), so the
      // frame holds one quantity's entries, not all DERIVED_COUNT of them (and their pointers: 368 B for double)
      R d[4] = {(R)nan(""), (R)nan(""), (R)nan(""), (R)nan("")};
      if constexpr (NC == 3) {
        if (derive) {
          R* outs[DERIVED_COUNT];
          for (int q = 0; q < DERIVED_COUNT; ++q) outs[q] = q == s.index[f] / 4 ? d : nullptr;
          const R u[3] = {(R)v[0], (R)v[1], (R)v[2]};
          derive_point<R>(j, u, outs, 0);
        }
      }
      const int e = s.index[f] % 4;  // a select, not an index: d stays in registers
      x[f * REDUCE_BLOCK] = e == 0 ? d[0] : (e == 1 ? d[1] : (e == 2 ? d[2] : d[3]));
    }
  }
}

// The first launch (reduce_kernel; grid: one block of threads per REDUCE_BLOCK points of the
// call's n points): the block's points sampled (reduce_point_features), their features written in columns
// to its slice of `features` (blocks x channels x REDUCE_BLOCK), then counted by all its threads into
// shared-memory counters (flushed to the global counts at the end), while one thread a moment and one an
// item of per-bin floats go through the rows in order, exactly as the CPU accumulates a block: the block's
// moment partials to block_moments (blocks x moments x MOMENT_FIELDS), its per-bin floats to its slice of
// dense (blocks x n_reals, zero on entry) with the width of each slot it wrote in mark.
template <class T, int NC>
VDB_ENTRY void reduce_block_points(const KernelAbi& k, const double* pts, i64 n, const ReduceSpec& s,
                                   const double* edges, i64 n_ints, i64 n_reals, unsigned long long* ints,
                                   typename RealOf<T>::type* features, double* block_moments, double* dense,
                                   unsigned char* mark) {
  typedef typename RealOf<T>::type R;
  __shared__ unsigned counts[REDUCE_SHARED_COUNTS];
  const int tid = threadIdx.x, threads = blockDim.x;
  const i64 b = blockIdx.x, first = b * REDUCE_BLOCK, count = n - first < REDUCE_BLOCK ? n - first : REDUCE_BLOCK;
  const i64 n_shared = n_ints < REDUCE_SHARED_COUNTS ? n_ints : REDUCE_SHARED_COUNTS;
  for (i64 i = tid; i < n_shared; i += threads) counts[i] = 0u;
  R* x = features + b * s.channels * REDUCE_BLOCK;
  {
    const GridView<T> g = abi_grid<T>(k);
    const PointTransform xf = abi_transform(k);
    LeafCache cache;
    bool derive = false;
    for (int f = 0; f < s.channels; ++f) derive = derive || s.source[f] == CHANNEL_DERIVED;
    for (i64 r = tid; r < count; r += threads)
      reduce_point_features<T, NC>(g, xf, k.mode, derive && k.components == 3, s, pts, first + r, x + r, cache);
  }
  __syncthreads();
  const ColumnFeatures<R> view{x};
  BlockCounts counter{counts, n_shared, ints};
  if (s.histograms + s.conditionals)
    for (i64 r = tid; r < count; r += threads) count_row(s, edges, view, r, counter);
  if (tid < s.moments) {
    block_moment(s, view, count, tid, block_moments + (b * s.moments + tid) * MOMENT_FIELDS);
  } else if (tid - s.moments < reduce_items(s)) {
    MarkSlots touch{mark + b * n_reals};
    accumulate_item(s, edges, view, count, tid - s.moments, dense + b * n_reals, touch);
  }
  __syncthreads();
  for (i64 i = tid; i < n_shared; i += threads)
    if (counts[i]) atomicAdd(ints + i, (unsigned long long)counts[i]);
}

VDB_HD void merge_block_item(const ReduceSpec& s, i64 blocks, i64 n_reals, double* reals,
                             const double* block_moments, double* dense, unsigned char* mark, i64 item) {
  if (item < s.moments) {
    for (i64 b = 0; b < blocks; ++b)
      moment_fields_merge(reals + s.moment_at[item], block_moments + (b * s.moments + item) * MOMENT_FIELDS);
    return;
  }
  const i64 slot = item - s.moments;
  for (i64 b = 0; b < blocks; ++b) {
    unsigned char* m = mark + b * n_reals + slot;
    if (!*m) continue;
    double* partial = dense + b * n_reals + slot;
    merge_slot(reals + slot, partial, *m);
    for (int f = 0; f < *m; ++f) partial[f] = 0.0;
    *m = 0;
  }
}

// The second launch (vdbflow_reduce_merge, one thread a moment and a slot of reals): the blocks'
// partials of reduce_block_points merged in block order into reals, as merge_blocks merges the CPU's; dense
// and mark left zero for the next launch.  A kernel of its own: in the same kernel as the sampling, ptxas
// spilled registers for both.
VDB_ENTRY void merge_block_partials(const ReduceSpec& s, i64 blocks, i64 n_reals, double* reals,
                                    const double* block_moments, double* dense, unsigned char* mark) {
  for_each<1>(s.moments + n_reals, [=, &s](i64 item) {
    merge_block_item(s, blocks, n_reals, reals, block_moments, dense, mark, item);
  });
}

// ---- the entries of sample_reduce and its step reduce_merge_blocks (operations.h) -------------------------------
// The first of two launches a call of n points: one block of threads per REDUCE_BLOCK points (its features to
// `features`, counts through shared memory into ints, its moment and per-bin partials to block_moments, dense and
// mark); reduce_merge_blocks then merges the partials in block order.  The CPU's accumulation in the CPU's order
// (counts equal; floats to rounding where compilers fuse multiply-adds differently); its threads synchronize
// (cuda_build.BLOCK_SYNCHRONIZED).
template <class T, int NC>
__global__ void VDB_BOUNDS VDBFLOW_GPU_ENTRY(sample_reduce) {
  reduce_block_points<T, NC>(*abi, points, n, *spec, edges, n_ints, n_reals, ints, features, block_moments, dense,
                             mark);
}

// The blocks' partials of a reduce_kernel launch (blocks of them) merged in block order into reals (grid-stride
// over moments + n_reals), dense and mark left zero.
extern "C" __global__ void VDB_BOUNDS_FILL VDBFLOW_GPU_ENTRY(reduce_merge_blocks) {
  merge_block_partials(*spec, blocks, n_reals, reals, block_moments, dense, mark);
}

}  // namespace vdbflow
#endif  // device
