// vdbflow/simd.h - the host's vector path of closest / linear sampling (sample_points), bit-identical
// to the scalar path of sample.h.
//
// sample_points_simd replaces, on the host, both loops of sample_points for float and double data (the
// coherent loop one point at a time, the scattered one a batch at a time) for the modes closest and
// linear; it returns false (and the scalar loops run) for other modes, integer data, or when
// VDBFLOW_SIMD=0 is set in the environment (read at each call: the tests compare both paths).
//
// What is vector here, and why the results are the scalar path's to the last bit:
//   - evaluate: for C = 3 and 4 the trilinear value and Jacobian of one point are computed in 4 lanes,
//     one lane per component (GCC vector extensions: float32 in SSE2 registers on the baseline target,
//     float32 and float64 with AVX/FMA on x86-64-v3; float64 on the baseline and other C use the scalar
//     evaluate_cell_inline itself), with the expression tree of evaluate_cell_inline written once more
//     lane-wise.  Each lane performs the scalar code's operations on the scalar code's operands in the
//     same order; GCC contracts a + f * d into an FMA lane-wise exactly where it contracts the scalar
//     a + f * d (every product has one use, an addition: on x86-64-v3 11 FMAs and 11 subtractions a
//     component in both forms, checked with objdump; none on the baseline).
//     Across points (8 points in 8 lanes) would need gathers of the 8 corners, which cost ~9 ns per
//     8-lane gather on this project's Ice Lake servers (microcode mitigation of Gather Data Sampling)
//     against ~1.4 ns for 8 scalar loads: the lanes here are components, the corner loads plain loads.
//   - locate: the scalar locate_cell_inline's arithmetic (double transform, floor, base cell).  Points
//     in order keep the values of the current leaf and its 7 upper neighbours, so that stencils across
//     leaves (a third of all cells) need no lookup; other points take locate_cell_simd (locate_cell_inline
//     itself, with SimdReads: read_voxel inlined) out of line.  Either way the corner pointers are read_voxel's.
//   - the world-space Jacobian (J M^-1, in double) is the scalar write_jacobian_inline on the lanes.
//   - stores: outputs from 8 MiB on leave through full 64-byte lines of non-temporal stores (16 or 32
//     bytes each) instead of one 4- or 8-byte movnti per element (which the write-combining buffers
//     turn into partial-line writes: 1.5-6 GB/s measured, against ~18 GB/s for full lines); the values
//     themselves are the computed ones, copied.
// Known: on x86-64-v3 the scalar coherent loop itself rounds J M^-1 differently from the scalar
// scattered loop for float64 data with a run-time C (not 1, 3, 4) and world Jacobians; this path gives
// the scattered loop's bytes there (tests/test_simd.py).
// Periodic volumes (grid.h Period) take the general locate_cell_simd for every point: its base cell
// wrapped, its in-leaf shortcut only where the cell does not cross the end of a period.
#pragma once
#include "launch.h"
#include "sample.h"

#ifndef VDB_DEVICE_COMPILE
#include <cstdlib>
#include <cstring>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"  // 32-byte vectors in always-inlined functions only

namespace vdbflow {

// Whether the vector path runs (VDBFLOW_SIMD=0: the scalar path of schemes.h).
inline bool simd_enabled() {
  const char* s = std::getenv("VDBFLOW_SIMD");
  return s == nullptr || s[0] != '0';
}

// Four lanes of R: 16 bytes of float (one SSE / NEON register); 32 of double where one AVX register
// holds them (elsewhere double data evaluates with the scalar function).
template <class R> struct Lanes4 { static constexpr bool enabled = false; };
template <> struct Lanes4<float> {
  static constexpr bool enabled = true;
  typedef float type __attribute__((vector_size(16)));
};
#ifdef __AVX__
template <> struct Lanes4<double> {
  static constexpr bool enabled = true;
  typedef double type __attribute__((vector_size(32)));
};
#endif

// The C (3 or 4) components at p (any alignment) in lanes 0 .. C-1, zero above: loads straight into
// a register (a memcpy into a zeroed vector would go through the stack and stall store forwarding).
template <class T, int C>
VDB_INLINE inline typename Lanes4<T>::type load_lanes(const T* p) {
  typedef typename Lanes4<T>::type V;
  V v;
  if constexpr (C == 4) {
    std::memcpy(&v, p, sizeof(V));
  } else {
#if defined(__SSE2__)
    if constexpr (sizeof(T) == 4) {
      return (V)_mm_movelh_ps(_mm_castpd_ps(_mm_load_sd((const double*)p)), _mm_load_ss((const float*)p + 2));
    }
#endif
    v = (V){load(p, 0), load(p, 1), load(p, 2), (T)0};
  }
  return v;
}

// leaf_slot and read_voxel of grid.h, always inlined (the same slot and pointer).
template <class T>
VDB_INLINE inline int leaf_slot_inline(const GridView<T>& g, int x, int y, int z, LeafCache& cache) {
  const int lx = x >> 3, ly = y >> 3, lz = z >> 3;
  const int w = LeafCache::way(lx, ly, lz);
  if (!(cache.x[w] == lx && cache.y[w] == ly && cache.z[w] == lz)) {
    cache.x[w] = lx;
    cache.y[w] = ly;
    cache.z[w] = lz;
    cache.slot[w] = table_find(g.tables[0], lx, ly, lz);
  }
  return cache.slot[w];
}

template <class T>
VDB_INLINE inline const T* read_voxel_inline(const GridView<T>& g, i64 i, i64 j, i64 k, LeafCache& cache) {
  if (g.period.any()) wrap_voxel(g.period, i, j, k);
  if (!in_index_range(i, j, k)) return g.background;
  const int x = (int)i, y = (int)j, z = (int)k;
  const int slot = leaf_slot_inline(g, x, y, z, cache);
  if (slot >= 0) {
    if (!g.index_layout) return g.values + leaf_values_base(g, slot) + (i64)voxel_offset(x, y, z) * g.components;
    return leaf_value(g, slot, voxel_offset(x, y, z));
  }
  return tile_or_background(g, slot, x, y, z);
}

// locate_cell_inline of sample.h, the same cell: leaf_slot and read_voxel inlined, and the corners of a stencil
// across leaves (per-leaf layout) read with one slot lookup a leaf.
struct SimdReads {
  template <class T>
  VDB_INLINE static inline int slot(const GridView<T>& g, int x, int y, int z, LeafCache& cache) {
    return leaf_slot_inline(g, x, y, z, cache);
  }
  template <class T>
  VDB_INLINE static inline const T* voxel(const GridView<T>& g, i64 i, i64 j, i64 k, LeafCache& cache) {
    return read_voxel_inline(g, i, j, k, cache);
  }
  template <class T>
  VDB_INLINE static inline bool across_leaves(const GridView<T>& g, i64 bi, i64 bj, i64 bk, int C, const T** corner,
                                              LeafCache& cache) {
    if (!g.index_layout && !g.period.any() && in_index_range(bi, bj, bk) && bi < INDEX_MAX && bj < INDEX_MAX &&
        bk < INDEX_MAX) {
      // A stencil across leaves (per-leaf layout): the slots of its 2, 4 or 8 leaves, looked up once each
      // (corners o and o | bit share a leaf along an axis the stencil does not cross), then the corners
      // as read_voxel places them.
      const int x = (int)bi, y = (int)bj, z = (int)bk;
      const int cross = (((bi & 7) == 7) << 2) | (((bj & 7) == 7) << 1) | ((bk & 7) == 7);
      int slots[8];
#pragma GCC unroll 8
      for (int o = 0; o < 8; ++o) {
        if ((o & ~cross) != 0) {
          slots[o] = slots[o & cross];
          continue;
        }
        slots[o] = leaf_slot_inline(g, x + (o >> 2), y + ((o >> 1) & 1), z + (o & 1), cache);
      }
#pragma GCC unroll 8
      for (int o = 0; o < 8; ++o) {
        const int cx = x + (o >> 2), cy = y + ((o >> 1) & 1), cz = z + (o & 1);
        corner[o] = slots[o] >= 0 ? g.values + leaf_values_base(g, slots[o]) + (i64)voxel_offset(cx, cy, cz) * C
                                   : tile_or_background(g, slots[o], cx, cy, cz);
      }
      return true;
    }
    return false;
  }
};

template <class T, int NC>
VDB_INLINE inline void locate_cell_simd(const GridView<T>& g, const PointTransform& xf, const double p[3], int mode,
                                        Cell<T>& cell, LeafCache& cache) {
  locate_cell_inline<T, NC, SimdReads>(g, xf, p, mode, cell, cache);
}

// evaluate_cell_inline of sample.h for a linear cell's 8 corners, one lane per component (C = 3, 4):
// the same numbers.
template <class T, int NC>
VDB_INLINE inline void lerp_corners_simd(const PointTransform& xf, const T* const* corner, const typename RealOf<T>::type* f,
                                         bool want_jacobian, T* value, typename RealOf<T>::type* jacobian) {
  typedef typename RealOf<T>::type R;
  typedef typename Lanes4<R>::type V;
  const R fx = f[0], fy = f[1], fz = f[2];
  const V v000 = load_lanes<T, NC>(corner[0]), v001 = load_lanes<T, NC>(corner[1]);
  const V v010 = load_lanes<T, NC>(corner[2]), v011 = load_lanes<T, NC>(corner[3]);
  const V v100 = load_lanes<T, NC>(corner[4]), v101 = load_lanes<T, NC>(corner[5]);
  const V v110 = load_lanes<T, NC>(corner[6]), v111 = load_lanes<T, NC>(corner[7]);
  // evaluate_cell_inline's expressions, lane-wise
  const V d00 = v001 - v000, d01 = v011 - v010, d10 = v101 - v100, d11 = v111 - v110;
  const V c00 = v000 + fz * d00, c01 = v010 + fz * d01, c10 = v100 + fz * d10, c11 = v110 + fz * d11;
  const V e0 = c01 - c00, e1 = c11 - c10;
  const V b0v = c00 + fy * e0, b1v = c10 + fy * e1;
  const V z0 = d00 + fy * (d01 - d00), z1 = d10 + fy * (d11 - d10);
  const V dx = b1v - b0v;
  const V acc = b0v + fx * dx;
  const V jy = e0 + fx * (e1 - e0);
  const V jz = z0 + fx * (z1 - z0);
#pragma GCC unroll 4
  for (int c = 0; c < NC; ++c) value[c] = acc[c];
  if (!want_jacobian) return;
  if (!xf.jacobian_world) {
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) {
      jacobian[3 * c] = dx[c];
      jacobian[3 * c + 1] = jy[c];
      jacobian[3 * c + 2] = jz[c];
    }
  } else {
    R J[NC][3];
    for (int c = 0; c < NC; ++c) {
      J[c][0] = dx[c];
      J[c][1] = jy[c];
      J[c][2] = jz[c];
    }
    write_jacobian_inline(xf, NC, (const R(*)[3])J, jacobian);
  }
}

// Whether a (T, NC) instance has the lane-wise evaluate.
template <class T, int NC>
constexpr bool simd_lanes() {
  return (NC == 3 || NC == 4) && Lanes4<typename RealOf<T>::type>::enabled;
}

// evaluate_cell_inline of sample.h, lane-wise where simd_lanes: the same numbers.
template <class T, int NC>
VDB_INLINE inline void evaluate_cell_simd(const GridView<T>& g, const PointTransform& xf, const Cell<T>& cell,
                                          bool want_jacobian, T* value, typename RealOf<T>::type* jacobian) {
  if constexpr (simd_lanes<T, NC>()) {
    if (cell.kind == CELL_LINEAR) {
      lerp_corners_simd<T, NC>(xf, cell.corner, cell.f, want_jacobian, value, jacobian);
      return;
    }
  }
  evaluate_cell_inline<T, NC>(g, xf, cell, want_jacobian, value, jacobian);
}

// ---- output: full lines of non-temporal stores ----------------------------------------------------

#if defined(__SSE2__) && defined(__x86_64__)
#define VDBFLOW_SIMD_STREAM 1
#endif

// A thread's output stream of elements E: the caller writes elements into put(k) and commits them; the
// stream writes every complete 64-byte line of the destination with non-temporal stores, and the
// partial lines at the start and end of a run (begin .. finish) with plain stores, so that no line is
// written both ways by one run (neighbouring runs of other threads may share a partial line).
template <class E>
struct LineStream {
  static constexpr int LINE = 64;
  static constexpr int CAPACITY = 2048 / sizeof(E);  // staged elements (a block of points' results)
  E* next;                                           // destination of staged[0]
  int count;
  bool stream;                                       // non-temporal (large outputs) or plain stores
  alignas(64) E staged[CAPACITY + LINE / sizeof(E)];

  void begin(E* dst, bool nt) {
    next = dst;
    count = 0;
    stream = nt;
  }
  E* put() { return staged + count; }
  // after writing k elements at put(): drain when a block's worth is staged (room for `reserve` more)
  void commit(int k, int reserve) {
    count += k;
    if (count + reserve > CAPACITY) drain(false);
  }
  void finish() { drain(true); }

  __attribute__((noinline)) void drain(bool last) {
    if (count == 0) return;
#ifdef VDBFLOW_SIMD_STREAM
    if (stream) {
      char* dst = (char*)next;
      const char* src = (const char*)staged;
      size_t bytes = (size_t)count * sizeof(E);
      const size_t head = (size_t)(-(uintptr_t)dst) & (LINE - 1);  // bytes to the next line boundary
      if (head >= bytes) {  // nothing past the first partial line
        if (!last) return;  // it may fill up yet
        std::memcpy(dst, src, bytes);
        next += count;
        count = 0;
        return;
      }
      std::memcpy(dst, src, head);
      dst += head;
      src += head;
      bytes -= head;
      for (; bytes >= LINE; bytes -= LINE, dst += LINE, src += LINE) {
#ifdef __AVX__
        _mm256_stream_si256((__m256i*)dst, _mm256_loadu_si256((const __m256i*)src));
        _mm256_stream_si256((__m256i*)(dst + 32), _mm256_loadu_si256((const __m256i*)(src + 32)));
#else
        for (int q = 0; q < LINE; q += 16)
          _mm_stream_si128((__m128i*)(dst + q), _mm_loadu_si128((const __m128i*)(src + q)));
#endif
      }
      // what is left (less than a line) is this run's last partial line, or staged for the next drain
      const int left = (int)(bytes / sizeof(E));
      if (last) {
        std::memcpy(dst, src, bytes);
        next += count;
        count = 0;
      } else {
        std::memmove(staged, src, bytes);
        next += count - left;
        count = left;
      }
      return;
    }
#endif
    (void)last;
    std::memcpy(next, staged, (size_t)count * sizeof(E));
    next += count;
    count = 0;
  }
};

constexpr i64 SIMD_CHUNK = 8192;          // points a thread takes at a time (the scalar loops' chunk)
constexpr i64 STREAM_MIN_BYTES = 8 << 20;  // outputs from this size on bypass the caches

// Point i located and evaluated the general way (locate_cell_simd, evaluate_cell_simd): out of line,
// so that the coherent loop's fast path keeps its registers.
template <class T, int NC, class P>
__attribute__((noinline)) void sample_point_simd(const GridView<T>& g, const PointTransform& xf, int mode,
                                                 const double p[3], bool want_jacobian, T* value,
                                                 typename RealOf<T>::type* jacobian, LeafCache& cache) {
  Cell<T> cell;
  locate_cell_simd<T, NC>(g, xf, p, mode, cell, cache);
  evaluate_cell_simd<T, NC>(g, xf, cell, want_jacobian, value, jacobian);
}

// Points [first, last) in order.  A linear cell whose 2, 4 or 8 leaves around the leaf of its base
// voxel are leaves of the per-leaf layout takes the fast path: locate_cell_inline's arithmetic, the
// values of the base leaf and its 7 upper neighbours kept (looked up once each while the points stay in
// that leaf), the corners placed as read_voxel places them.  Every other point is sample_point_simd.
template <class T, int NC, class P>
__attribute__((noinline)) void coherent_run_simd(const GridView<T>& g, const PointTransform& xf, int mode, const P* pts,
                                                 i64 first, i64 last, bool want_jacobian, LineStream<T>& ov,
                                                 LineStream<typename RealOf<T>::type>& oj, LeafCache& cache) {
  typedef typename RealOf<T>::type R;
  const int C = NC > 0 ? NC : g.components;
  const bool fast = simd_lanes<T, NC>() && mode == MODE_LINEAR && !g.index_layout && !g.period.any();
  int lx = 2147483647, ly = 0, lz = 0;  // the fast path's leaf (none yet: an impossible key)
  // values of the leaves (lx + (o >> 2), ly + ((o >> 1) & 1), lz + (o & 1)), null where that leaf is a
  // tile or absent; `present` has bit o set where near[o] is a leaf
  const T* near[8] = {};
  int present = 0;
  // the leaves a cell needs, by the axes it crosses (bit 2: x, 1: y, 0: z): the submasks of `cross`
  constexpr unsigned char NEEDED[8] = {0x01, 0x03, 0x05, 0x0f, 0x11, 0x33, 0x55, 0xff};
  for (i64 i = first; i < last; ++i) {
    double p[3];
    load_point(pts, i, p);
    T* value = ov.put();
    R* jacobian = want_jacobian ? oj.put() : nullptr;
    bool done = false;
    if constexpr (simd_lanes<T, NC>()) {
      if (fast) {
        double u[3];
        to_index_space(xf, p, u);
        const double b0 = floor(u[0]), b1 = floor(u[1]), b2 = floor(u[2]);
        // |b| < 2^30: finite, clamp_far(b) == (i64)b and in_index_range, for b + 1 too
        constexpr double LIMIT = 1073741824.0;
        if (fabs(b0) < LIMIT && fabs(b1) < LIMIT && fabs(b2) < LIMIT) {
          const int x = (int)b0, y = (int)b1, z = (int)b2;
          if (!((x >> 3) == lx && (y >> 3) == ly && (z >> 3) == lz)) {  // a new leaf: its neighbours
            lx = x >> 3;
            ly = y >> 3;
            lz = z >> 3;
            present = 0;
            for (int o = 0; o < 8; ++o) {
              const int slot = leaf_slot_inline(g, (lx + (o >> 2)) * 8, (ly + ((o >> 1) & 1)) * 8, (lz + (o & 1)) * 8, cache);
              near[o] = slot >= 0 ? g.values + leaf_values_base(g, slot) : nullptr;
              present |= (slot >= 0) << o;
            }
          }
          const int cross = (((x & 7) == 7) << 2) | (((y & 7) == 7) << 1) | ((z & 7) == 7);
          const bool leaves = (NEEDED[cross] & ~present) == 0;  // the cell's leaves are all leaves
          if (leaves) {
            const R f[3] = {(R)(u[0] - b0), (R)(u[1] - b1), (R)(u[2] - b2)};
            const T* corner[8];
            if (cross == 0) {  // one leaf: locate_cell_inline's fast path
              const T* p0 = near[0] + (i64)voxel_offset(x, y, z) * C;
              const i64 sx = 64 * C, sy = 8 * C, sz = C;
              corner[0] = p0;           corner[1] = p0 + sz;
              corner[2] = p0 + sy;      corner[3] = p0 + sy + sz;
              corner[4] = p0 + sx;      corner[5] = p0 + sx + sz;
              corner[6] = p0 + sx + sy; corner[7] = p0 + sx + sy + sz;
            } else {
#pragma GCC unroll 8
              for (int o = 0; o < 8; ++o)
                corner[o] = near[o & cross] + (i64)voxel_offset(x + (o >> 2), y + ((o >> 1) & 1), z + (o & 1)) * C;
            }
            lerp_corners_simd<T, NC>(xf, corner, f, want_jacobian, value, jacobian);
            done = true;
          }
        }
      }
    }
    if (!done) sample_point_simd<T, NC, P>(g, xf, mode, p, want_jacobian, value, jacobian, cache);
    ov.commit(C, C);
    if (want_jacobian) oj.commit(3 * C, 3 * C);
  }
}

// Points [first, last) scattered: a batch located (and its value lines asked for) before the first of
// it is evaluated, as the scalar for_each_batch does.
template <class T, int NC, class P>
__attribute__((noinline)) void scattered_run_simd(const GridView<T>& g, const PointTransform& xf, int mode, const P* pts,
                                                  i64 first, i64 last, bool want_jacobian, LineStream<T>& ov,
                                                  LineStream<typename RealOf<T>::type>& oj, LeafCache& cache) {
  const int C = NC > 0 ? NC : g.components;
  Cell<T> cells[BATCH];
  double p[3];
  for (i64 b = first; b < last; b += BATCH) {
    const int count = (int)(last - b < BATCH ? last - b : BATCH);
    for (int q = 0; q < count; ++q) {
      load_point(pts, b + q, p);
      locate_cell_simd<T, NC>(g, xf, p, mode, cells[q], cache);
      prefetch_corners(cells[q], C);
    }
    for (int q = 0; q < count; ++q) {
      evaluate_cell_simd<T, NC>(g, xf, cells[q], want_jacobian, ov.put(), want_jacobian ? oj.put() : nullptr);
      ov.commit(C, C);
      if (want_jacobian) oj.commit(3 * C, 3 * C);
    }
  }
}

// Values (N, C) and Jacobians (N, C, 3) or none of n points, closest or linear, float or double data;
// false when the scalar loops of sample_points are to run instead.
template <class T, int NC, class P>
inline bool sample_points_simd(const GridView<T>& g, const PointTransform& transform, int mode, const P* pts, i64 n,
                               T* out_v, typename RealOf<T>::type* out_j, int order) {
  typedef typename RealOf<T>::type R;
  if constexpr (!HasNaN<T>::value) {
    return false;
  } else {
    if (mode > MODE_LINEAR || !simd_enabled()) return false;
    const int C = NC > 0 ? NC : g.components;
    const bool want_jacobian = out_j != nullptr;
    const bool scattered = scattered_points(order, mode, pts, transform, n);
    const bool nt = (double)n * C * (sizeof(T) + (want_jacobian ? 3 * sizeof(R) : 0)) >= (double)STREAM_MIN_BYTES;
    const i64 chunks = (n + SIMD_CHUNK - 1) / SIMD_CHUNK;
    [[maybe_unused]] const int threads = threads_for(chunks, 1);
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
      const PointTransform xf = transform;  // each thread's own copy
      LeafCache cache;
      LineStream<T> ov;
      LineStream<R> oj;
#pragma omp for schedule(dynamic, 1)
      for (i64 chunk = 0; chunk < chunks; ++chunk) {
        const i64 first = chunk * SIMD_CHUNK, last = first + SIMD_CHUNK < n ? first + SIMD_CHUNK : n;
        ov.begin(out_v + first * C, nt);
        if (want_jacobian) oj.begin(out_j + first * 3 * C, nt);
        if (scattered)
          scattered_run_simd<T, NC, P>(g, xf, mode, pts, first, last, want_jacobian, ov, oj, cache);
        else
          coherent_run_simd<T, NC, P>(g, xf, mode, pts, first, last, want_jacobian, ov, oj, cache);
        ov.finish();
        if (want_jacobian) oj.finish();
      }
#ifdef VDBFLOW_SIMD_STREAM
      _mm_sfence();
#endif
    }
    return true;
  }
}

}  // namespace vdbflow

#pragma GCC diagnostic pop
#endif  // host
