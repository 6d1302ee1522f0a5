// cpu_module.cpp - the CPU build of the kernels: nanobind wrappers, OpenMP over points.
//
// The sampling math itself lives in vdbflow/sample.h and vdbflow/grid.h and is shared verbatim
// with the CUDA entry points in sample.cu.  This file only owns host-side chores: building the
// hash tables both devices read, and looping over points.
//
// CPU targets (CMakeLists.txt): the module is compiled for the compiler's portable default target,
// and the kernel section below (the point loops) is compiled again, once per wider target such as
// x86-64-v3 (AVX2 + FMA), with VDBFLOW_KERNEL_VARIANT set.  Such a compilation holds the kernel
// section only, with the namespace vdbflow renamed (vdbflow_<variant>) so that no template of the
// headers is shared between targets, and exports a table of its entry points.  The module picks
// the widest table the CPU runs at import (VDBFLOW_CPU_TARGET overrides it); _core.CPU_TARGET says
// which.
#ifndef VDBFLOW_KERNEL_VARIANT
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>
#endif

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <algorithm>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#if defined(__SSE2__) && defined(__x86_64__)
#include <immintrin.h>
#define VDBFLOW_HAVE_STREAM_STORE 1
#endif

#include "vdbflow/abi.h"
#include "vdbflow/adjoint.h"
#include "vdbflow/advect.h"
#include "vdbflow/coverage.h"
#include "vdbflow/hessian.h"
#include "vdbflow/route.h"
#include "vdbflow/sample.h"
#include "vdbflow/schemes.h"

using namespace vdbflow;

// The entry points of one compilation of the kernel section.  Arguments travel as the section's
// own structs (SampleArgs, GridGradientArgs: a KernelAbi record and the call's arrays), laid out
// alike in every compilation.
struct VdbflowCpuKernels {
  void (*sample)(const void* args);         // values, Jacobians, or the reverse mode
  void (*hessian)(const void* args);        // values, Jacobians and Hessians
  void (*grid_gradient)(const void* args);  // node Jacobians of every active voxel
  void (*stencil_inside)(const void* args); // coverage: whether each point's stencil reads only defined voxels
  void (*route)(const void* args);           // the partition of each point and a stable sort by partition
  void (*advect)(const void* args);          // particle trajectories through a steady vec3 volume
};

namespace {

// ---- kernel section: compiled once per CPU target ------------------------------------------------

// Copies n elements with non-temporal stores where the CPU has them.
template <class E>
inline void stream_store(E* dst, const E* src, int n) {
#ifdef VDBFLOW_HAVE_STREAM_STORE
  if (sizeof(E) == 4) {
    for (int e = 0; e < n; ++e) {
      int bits;
      std::memcpy(&bits, src + e, 4);
      _mm_stream_si32((int*)(dst + e), bits);
    }
    return;
  }
  if (sizeof(E) == 8) {
    for (int e = 0; e < n; ++e) {
      long long bits;
      std::memcpy(&bits, src + e, 8);
      _mm_stream_si64((long long*)(dst + e), bits);
    }
    return;
  }
#endif
  for (int e = 0; e < n; ++e) dst[e] = src[e];
}

// Memory hint for scattered points: ask for the lines holding a located cell's corner values
// (pairs along z are adjacent in memory; a pair may straddle a line).
constexpr i64 BATCH = 16;

template <class T>
inline void prefetch_corners(const Cell<T>& cell, int C) {
  if (cell.kind == CELL_NAN) return;
  const int corners = cell.kind == CELL_LINEAR ? 8 : 1;
  for (int o = 0; o < corners; o += 2) {
    __builtin_prefetch(cell.corner[o]);
    __builtin_prefetch(cell.corner[o] + 2 * C - 1);
  }
}

// Point order: measured (auto), or given by the caller.
enum PointOrder { ORDER_AUTO = 0, ORDER_COHERENT = 1, ORDER_SCATTERED = 2 };
constexpr i64 SCATTERED_MIN_POINTS = 16384;  // below this the volume's hot part stays in cache anyway
constexpr double COHERENT_FRACTION = 0.5;    // neighbour pairs sharing a leaf, above which points are coherent

struct SampleArgs {
  KernelAbi k;  // the grid, its transform, the mode and the spaces (abi.h)
  const void* points;
  bool points_double;
  i64 n;
  void* out_values;
  void* out_jacobian;  // nullptr: values only
  int order;           // ORDER_AUTO, ORDER_COHERENT or ORDER_SCATTERED: how the points lie in space
  // reverse mode (sample_vjp)
  bool adjoint = false;
  const void* adj_values = nullptr;    // (N, C) R
  const void* adj_jacobian = nullptr;  // (N, C, 3) R or null
  double* accumulator = nullptr;       // (k.value_rows + k.tile_rows + 1, C)
  void* adj_points = nullptr;          // (N, 3) R
  // sample_hessian
  void* out_hessian = nullptr;  // (N, C, 3, 3) R
};

// Points per chunk of the reverse mode: shares are computed in parallel, then added in order.
constexpr i64 ADJOINT_CHUNK = 1 << 14;

// Reverse mode on the CPU, deterministic: the corner shares of a chunk of points are computed in
// parallel into a buffer, then added to the accumulator in point order, corner order - the same
// sums in the same order whatever the thread count.
template <class T, int NC, class P>
void run_adjoint(const GridView<T>& g, const SampleArgs& a) {
  typedef typename RealOf<T>::type R;
  const int C = a.k.components;
  const AdjointRows rows{a.k.value_rows, a.k.tile_rows};
  const P* pts = (const P*)a.points;
  const R* adj_v = (const R*)a.adj_values;
  const R* adj_j = (const R*)a.adj_jacobian;
  R* adj_p = (R*)a.adj_points;
  const i64 n = a.n;
  const i64 chunk = n < ADJOINT_CHUNK ? n : ADJOINT_CHUNK;
  std::vector<i64> row((size_t)chunk * 8);
  std::vector<double> share((size_t)chunk * 8 * C);
  for (i64 first = 0; first < n; first += chunk) {
    const i64 count = (n - first) < chunk ? (n - first) : chunk;
#pragma omp parallel
    {
      const PointTransform xf = abi_transform(a.k);  // each thread's own copy
      LeafCache cache;
#pragma omp for schedule(static, 256)
      for (i64 k = 0; k < count; ++k) {
        const i64 i = first + k;
        const double p[3] = {(double)pts[3 * i], (double)pts[3 * i + 1], (double)pts[3 * i + 2]};
        for (int o = 0; o < 8; ++o) row[(size_t)(k * 8 + o)] = -1;
        auto sink = [&](int o, i64 r, int c, R x) {
          row[(size_t)(k * 8 + o)] = r;
          share[(size_t)((k * 8 + o) * C + c)] = (double)x;
        };
        adjoint_point<T, NC>(g, rows, xf, p, a.k.mode, adj_v + i * C, adj_j ? adj_j + i * 3 * C : nullptr, sink,
                             adj_p + 3 * i, cache);
      }
    }
    for (i64 e = 0; e < count * 8; ++e) {
      const i64 r = row[(size_t)e];
      if (r < 0) continue;
      double* dst = a.accumulator + r * C;
      const double* src = share.data() + e * C;
      for (int c = 0; c < C; ++c) dst[c] += src[c];
    }
  }
}
// Fraction of sampled neighbour pairs (i, i + 1) whose base cells share a leaf: high for points
// sorted in space or walking along lines and planes, near zero for scattered points.
template <class P>
double leaf_coherence(const P* pts, const PointTransform& xf, i64 n) {
  if (n < 2) return 1.0;
  const i64 pairs = n - 1 < 2048 ? n - 1 : 2048;
  const i64 step = (n - 1) / pairs;
  i64 same = 0;
  for (i64 s = 0; s < pairs; ++s) {
    const i64 i = s * step;
    i64 key[2][3];
    for (int q = 0; q < 2; ++q) {
      const double p[3] = {(double)pts[3 * (i + q)], (double)pts[3 * (i + q) + 1], (double)pts[3 * (i + q) + 2]};
      double u[3];
      to_index_space(xf, p, u);
      for (int axis = 0; axis < 3; ++axis) key[q][axis] = finite3(u) ? (clamp_far(floor(u[axis])) >> 3) : 0;
    }
    same += key[0][0] == key[1][0] && key[0][1] == key[1][1] && key[0][2] == key[1][2];
  }
  return (double)same / (double)pairs;
}

template <class T, int NC, class P>
void run(const SampleArgs& a) {
  typedef typename RealOf<T>::type R;
  const GridView<T> g = abi_grid<T>(a.k, a.adjoint);
  if (a.adjoint) {
    run_adjoint<T, NC, P>(g, a);
    return;
  }
  const PointTransform xf_shared = abi_transform(a.k);  // for the coherence probe; threads take copies
  const int mode = a.k.mode;
  const int C = a.k.components;
  const P* pts = (const P*)a.points;
  T* out_v = (T*)a.out_values;
  R* out_j = (R*)a.out_jacobian;
  const bool want_jacobian = out_j != nullptr;
  const i64 n = a.n;
  const bool scattered = mode <= MODE_LINEAR && (a.order == ORDER_SCATTERED ||
                         (a.order == ORDER_AUTO && n >= SCATTERED_MIN_POINTS &&
                          leaf_coherence(pts, xf_shared, n) < COHERENT_FRACTION));
  auto load = [&](i64 i, double p[3]) {
    p[0] = (double)pts[3 * i];
    p[1] = (double)pts[3 * i + 1];
    p[2] = (double)pts[3 * i + 2];
  };
#pragma omp parallel
  {
    const PointTransform xf = xf_shared;  // each thread's own copy: kept in registers and its stack
    LeafCache cache;
    double p[3];
    if (!scattered) {
#pragma omp for schedule(dynamic, 8192)
      for (i64 i = 0; i < n; ++i) {
        load(i, p);
        sample_point<T, NC>(g, xf, p, mode, want_jacobian, out_v + i * C,
                            want_jacobian ? out_j + i * 3 * C : nullptr, cache);
      }
    } else {
      // Scattered points, a batch at a time: locate every point's stencil first and ask for its
      // value lines, then evaluate them, so that the cache misses of a whole batch overlap.
      // Results leave through non-temporal stores: the output stream then does not evict the
      // volume's values from the last-level cache.
      T v[NC > 0 ? NC : MAX_COMPONENTS];
      R j[3 * (NC > 0 ? NC : MAX_COMPONENTS)];
      Cell<T> cells[BATCH];
      const i64 batches = (n + BATCH - 1) / BATCH;
#pragma omp for schedule(dynamic, 512)
      for (i64 b = 0; b < batches; ++b) {
        const i64 first = b * BATCH, count = (n - first) < BATCH ? (n - first) : BATCH;
        for (i64 k = 0; k < count; ++k) {
          load(first + k, p);
          locate_cell<T, NC>(g, xf, p, mode, cells[k], cache);
          prefetch_corners(cells[k], C);
        }
        for (i64 k = 0; k < count; ++k) {
          const i64 i = first + k;
          evaluate_cell<T, NC>(g, xf, cells[k], want_jacobian, v, want_jacobian ? j : nullptr);
          stream_store(out_v + i * C, v, C);
          if (want_jacobian) stream_store(out_j + i * 3 * C, j, 3 * C);
        }
      }
#ifdef VDBFLOW_HAVE_STREAM_STORE
      _mm_sfence();
#endif
    }
  }
}

template <class T, class P>
void dispatch_components(const SampleArgs& a) {
  switch (a.k.components) {
    case 1: run<T, 1, P>(a); break;
    case 3: run<T, 3, P>(a); break;
    case 4: run<T, 4, P>(a); break;
    default: run<T, 0, P>(a); break;
  }
}

template <class T>
void dispatch_points(const SampleArgs& a) {
  if (a.points_double)
    dispatch_components<T, double>(a);
  else
    dispatch_components<T, float>(a);
}

// Values, Jacobians and Hessians (N, C, 3, 3) of float data, OpenMP over points.
template <class T, int NC, class P>
void run_hessian(const SampleArgs& a) {
  typedef typename RealOf<T>::type R;
  const GridView<T> g = abi_grid<T>(a.k);
  const int C = a.k.components;
  const P* pts = (const P*)a.points;
  T* out_v = (T*)a.out_values;
  R* out_j = (R*)a.out_jacobian;
  R* out_h = (R*)a.out_hessian;
#pragma omp parallel
  {
    const PointTransform xf = abi_transform(a.k);  // each thread's own copy
    LeafCache cache;
#pragma omp for schedule(dynamic, 1024)
    for (i64 i = 0; i < a.n; ++i) {
      const double p[3] = {(double)pts[3 * i], (double)pts[3 * i + 1], (double)pts[3 * i + 2]};
      sample_point_hessian<T, NC>(g, xf, p, a.k.mode, a.k.hessian_world != 0, out_v + i * C, out_j ? out_j + i * 3 * C : nullptr,
                                  out_h + i * 9 * C, cache);
    }
  }
}

template <class T, class P>
void dispatch_hessian(const SampleArgs& a) {
  switch (a.k.components) {
    case 1: run_hessian<T, 1, P>(a); break;
    case 3: run_hessian<T, 3, P>(a); break;
    case 4: run_hessian<T, 4, P>(a); break;
    default: run_hessian<T, 0, P>(a); break;
  }
}

// Gradient field: fd2/fd4/fd6 Jacobians at every active voxel, leaf by leaf, rows in OnIndex order
// (leaves in order, voxels by mask bit).  The same per-node function as point sampling at a node.
template <class T, int NC>
void run_grid_gradient(const GridView<T>& g, const PointTransform& xf, const int32_t* origins, const i64* first_row,
                       i64 leaves, int scheme, typename RealOf<T>::type* out_j) {
  const int C = NC > 0 ? NC : g.components;
#pragma omp parallel
  {
    LeafCache cache;
    T value[NC > 0 ? NC : MAX_COMPONENTS];
#pragma omp for schedule(dynamic, 16)
    for (i64 l = 0; l < leaves; ++l) {
      i64 row = first_row[l];
      for (int w = 0; w < 8; ++w) {
        u64 m = g.masks[l * 8 + w];
        while (m) {
          const int n = w * 64 + __builtin_ctzll(m);
          m &= m - 1;
          const double u[3] = {(double)(origins[3 * l] + (n >> 6)), (double)(origins[3 * l + 1] + ((n >> 3) & 7)),
                               (double)(origins[3 * l + 2] + (n & 7))};
          gradient_at_node<T, NC>(g, xf, u, scheme, true, value, out_j + row * 3 * C, cache);
          ++row;
        }
      }
    }
  }
}

template <class T>
void dispatch_grid_gradient(const GridView<T>& g, const PointTransform& xf, const int32_t* origins,
                            const i64* first_row, i64 leaves, int scheme, void* out) {
  typedef typename RealOf<T>::type R;
  switch (g.components) {
    case 1: run_grid_gradient<T, 1>(g, xf, origins, first_row, leaves, scheme, (R*)out); break;
    case 3: run_grid_gradient<T, 3>(g, xf, origins, first_row, leaves, scheme, (R*)out); break;
    case 4: run_grid_gradient<T, 4>(g, xf, origins, first_row, leaves, scheme, (R*)out); break;
    default: run_grid_gradient<T, 0>(g, xf, origins, first_row, leaves, scheme, (R*)out); break;
  }
}

struct GridGradientArgs {
  KernelAbi k;  // the grid, its transform; k.mode is the scheme (fd2 .. fd8)
  const int32_t* origins;
  const i64* first_row;
  i64 leaves;
  void* out_jacobian;
};

// Entry points (called without the GIL; arguments checked by the module).
void sample_entry(const void* args) {
  const SampleArgs& a = *(const SampleArgs*)args;
  switch (a.k.value_kind) {
    case KIND_F32: dispatch_points<float>(a); break;
    case KIND_F64: dispatch_points<double>(a); break;
    case KIND_I32: dispatch_points<int32_t>(a); break;
    case KIND_I64: dispatch_points<int64_t>(a); break;
    case KIND_U32: dispatch_points<uint32_t>(a); break;
  }
}

void hessian_entry(const void* args) {
  const SampleArgs& a = *(const SampleArgs*)args;
  if (a.k.value_kind == KIND_F32) {
    if (a.points_double) dispatch_hessian<float, double>(a);
    else dispatch_hessian<float, float>(a);
  } else {
    if (a.points_double) dispatch_hessian<double, double>(a);
    else dispatch_hessian<double, float>(a);
  }
}

template <class T>
void grid_gradient_typed(const GridGradientArgs& a) {
  const GridView<T> g = abi_grid<T>(a.k);
  dispatch_grid_gradient<T>(g, abi_transform(a.k), a.origins, a.first_row, a.leaves, a.k.mode, a.out_jacobian);
}

void grid_gradient_entry(const void* args) {
  const GridGradientArgs& a = *(const GridGradientArgs*)args;
  if (a.k.value_kind == KIND_F32) grid_gradient_typed<float>(a);
  else grid_gradient_typed<double>(a);
}

// Coverage (coverage.h) runs in the same compilation as sampling: its index mapping then rounds alike to the
// last bit (a wider target contracts the transform's products into FMAs).
struct CoverageArgs {
  KernelAbi k;  // tables, masks, transform, mode and points_world are read
  const double* points;
  i64 n;
  bool* out;
};

void stencil_inside_entry(const void* args) {
  const CoverageArgs& a = *(const CoverageArgs*)args;
  const GridView<float> g = abi_grid<float>(a.k);
  int lo, taps;
  stencil_taps(a.k.mode, lo, taps);
#pragma omp parallel
  {
    const PointTransform xf = abi_transform(a.k);  // each thread's own copy
    LeafCache cache;
#pragma omp for schedule(dynamic, 4096)
    for (i64 i = 0; i < a.n; ++i) a.out[i] = stencil_inside_point(g, xf, a.points + 3 * i, a.k.mode, lo, taps, cache);
  }
}

// Routing of n points of type P (float or double): each point's partition (route.h), then a stable
// counting sort by partition - threads take contiguous blocks, so the order within a group is the
// input order.  Fills order (n), sorted (n, 3) and bounds (partitions + 2: group 0 is ROUTE_BACKGROUND).
template <class P>
void route_sorted(const RouteSpec& r, const PointTransform& xf, const P* src, i64 n, int32_t* bucket,
                  int64_t* order, P* sorted, int64_t* bounds, int max_threads) {
  const int buckets = r.partitions + 1;
  std::vector<i64> counts((size_t)max_threads * buckets, 0);
#pragma omp parallel num_threads(max_threads)
  {
#ifdef _OPENMP
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
#else
    const int t = 0, nt = 1;
#endif
    const i64 begin = n * t / nt, end = n * (t + 1) / nt;
    i64* mine = counts.data() + (size_t)t * buckets;
    for (i64 i = begin; i < end; ++i) {
      const double p[3] = {(double)src[3 * i], (double)src[3 * i + 1], (double)src[3 * i + 2]};
      const int b = route_point(r, xf, p) + 1;
      bucket[i] = b;
      ++mine[b];
    }
#pragma omp barrier
#pragma omp single
    {
      i64 running = 0;
      for (int b = 0; b < buckets; ++b) {
        bounds[b] = running;
        for (int u = 0; u < nt; ++u) {
          const i64 c = counts[(size_t)u * buckets + b];
          counts[(size_t)u * buckets + b] = running;
          running += c;
        }
      }
      bounds[buckets] = running;
    }
    for (i64 i = begin; i < end; ++i) {
      const i64 at = mine[bucket[i]]++;
      order[at] = i;
      sorted[3 * at] = src[3 * i];
      sorted[3 * at + 1] = src[3 * i + 1];
      sorted[3 * at + 2] = src[3 * i + 2];
    }
  }
}

// Routing runs in the same compilation as sampling, as coverage does: a point's base cell then comes out
// alike to the last bit, and floor is one instruction on the wider targets.
struct RouteArgs {
  RouteSpec r;
  double xform[12];
  bool points_world;
  bool points_double;
  const void* points;
  i64 n;
  int32_t* bucket;
  int64_t* order;
  void* sorted;  // (n, 3) of the points' type
  int64_t* bounds;
  int threads;
};

void route_entry(const void* args) {
  const RouteArgs& a = *(const RouteArgs*)args;
  const PointTransform xf = make_point_transform(a.xform, a.points_world, 0);
  if (a.points_double)
    route_sorted(a.r, xf, (const double*)a.points, a.n, a.bucket, a.order, (double*)a.sorted, a.bounds, a.threads);
  else
    route_sorted(a.r, xf, (const float*)a.points, a.n, a.bucket, a.order, (float*)a.sorted, a.bounds, a.threads);
}

// Particle trajectories (advect.h) of n particles, OpenMP over particles: each integrates all of its steps
// in one go, so its leaf cache follows it.
struct AdvectArgs {
  KernelAbi k;  // the grid, its transform (world points, world Jacobians) and the mode
  AdvectSpec s;
  double* x;  // (n, 3) start positions, left at the last valid position
  i64 n;
  double* position;  // (n, S, 3)
  double* velocity;  // (n, S, 3) or null
  double* jacobian;  // (n, S, 3, 3) or null
  double* F;         // (n, 3, 3) or null
  signed char* status;
  i64* last_step;
  int* evaluations;
};

template <class T>
void run_advect(const AdvectArgs& a) {
  const GridView<T> g = abi_grid<T>(a.k);
  const i64 S = a.s.slots;
#pragma omp parallel
  {
    const PointTransform xf = abi_transform(a.k);  // each thread's own copy
    LeafCache cache;
#pragma omp for schedule(dynamic, 64)
    for (i64 i = 0; i < a.n; ++i) {
      ParticleOut out{a.position + i * S * 3, a.velocity ? a.velocity + i * S * 3 : nullptr,
                      a.jacobian ? a.jacobian + i * S * 9 : nullptr, a.F ? a.F + i * 9 : nullptr,
                      a.status + i, a.last_step + i, a.evaluations + i};
      advect_particle<T>(g, xf, a.k.mode, a.s, a.x + 3 * i, out, cache);
    }
  }
}

void advect_entry(const void* args) {
  const AdvectArgs& a = *(const AdvectArgs*)args;
  if (a.k.value_kind == KIND_F32) run_advect<float>(a);
  else run_advect<double>(a);
}

const VdbflowCpuKernels KERNELS = {&sample_entry, &hessian_entry, &grid_gradient_entry, &stencil_inside_entry,
                                   &route_entry, &advect_entry};

}  // namespace

#ifdef VDBFLOW_KERNEL_VARIANT
// ---- a wider target's compilation: its entry table, and nothing else -------------------------------
#define VDBFLOW_PASTE_(a, b) a##b
#define VDBFLOW_PASTE(a, b) VDBFLOW_PASTE_(a, b)
extern "C" const VdbflowCpuKernels* VDBFLOW_PASTE(vdbflow_cpu_kernels_, VDBFLOW_KERNEL_VARIANT)() { return &KERNELS; }
#else
// ---- the module: argument checks, target choice, bindings -----------------------------------------

// The targets compiled besides this one (CMakeLists.txt: VDBFLOW_CPU_VARIANTS), widest last.
#ifdef VDBFLOW_VARIANT_x86_64_v2
extern "C" const VdbflowCpuKernels* vdbflow_cpu_kernels_x86_64_v2();
#endif
#ifdef VDBFLOW_VARIANT_x86_64_v3
extern "C" const VdbflowCpuKernels* vdbflow_cpu_kernels_x86_64_v3();
#endif
#ifdef VDBFLOW_VARIANT_x86_64_v4
extern "C" const VdbflowCpuKernels* vdbflow_cpu_kernels_x86_64_v4();
#endif

namespace nb = nanobind;

namespace {

struct CpuTarget {
  const char* name;   // x86-64-v3, ...
  const char* flags;  // what the kernels were compiled with, besides -O3 -fno-math-errno
  const VdbflowCpuKernels* kernels;
  bool supported;     // by this CPU (and its operating system)
};

// The target this compilation was made for: the compiler's default (the portable baseline), or the
// build machine's CPU when VDBFLOW_NATIVE is on.
#if defined(VDBFLOW_NATIVE)
#define VDBFLOW_BASELINE_NAME "native"
#define VDBFLOW_BASELINE_FLAGS "-march=native"
#elif defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && \
    defined(__AVX512VL__)
#define VDBFLOW_BASELINE_NAME "x86-64-v4"
#elif defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#define VDBFLOW_BASELINE_NAME "x86-64-v3"
#elif defined(__x86_64__) && defined(__SSE4_2__) && defined(__POPCNT__)
#define VDBFLOW_BASELINE_NAME "x86-64-v2"
#elif defined(__x86_64__)
#define VDBFLOW_BASELINE_NAME "x86-64"
#elif defined(__aarch64__)
#define VDBFLOW_BASELINE_NAME "aarch64"
#else
#define VDBFLOW_BASELINE_NAME "generic"
#endif
#ifndef VDBFLOW_BASELINE_FLAGS
#define VDBFLOW_BASELINE_FLAGS ""  // the compiler's default target
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
bool cpu_has(const char* level) {
  __builtin_cpu_init();
  const std::string l = level;
  // the ISA levels of the x86-64 psABI: every feature of the level (and the OS saving its registers)
  return l == "x86-64-v2"   ? __builtin_cpu_supports("x86-64-v2")
         : l == "x86-64-v3" ? __builtin_cpu_supports("x86-64-v3")
         : l == "x86-64-v4" ? __builtin_cpu_supports("x86-64-v4")
                            : false;
}
#elif defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
bool cpu_has(const char* level) {
  __builtin_cpu_init();
  const std::string l = level;
  // the ISA levels of the x86-64 psABI, by their defining features (every CPU with these has the rest:
  // LZCNT, MOVBE, F16C for v3)
  const bool v2 = __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("popcnt") &&
                  __builtin_cpu_supports("ssse3");
  const bool v3 = v2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                  __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
  const bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  return l == "x86-64-v2" ? v2 : l == "x86-64-v3" ? v3 : l == "x86-64-v4" ? v4 : false;
}
#else
bool cpu_has(const char*) { return false; }
#endif

std::vector<CpuTarget> cpu_targets() {
  std::vector<CpuTarget> t{{VDBFLOW_BASELINE_NAME, VDBFLOW_BASELINE_FLAGS, &KERNELS, true}};
#ifdef VDBFLOW_VARIANT_x86_64_v2
  t.push_back({"x86-64-v2", "-march=x86-64-v2", vdbflow_cpu_kernels_x86_64_v2(), cpu_has("x86-64-v2")});
#endif
#ifdef VDBFLOW_VARIANT_x86_64_v3
  t.push_back({"x86-64-v3", "-march=x86-64-v3", vdbflow_cpu_kernels_x86_64_v3(), cpu_has("x86-64-v3")});
#endif
#ifdef VDBFLOW_VARIANT_x86_64_v4
  t.push_back({"x86-64-v4", "-march=x86-64-v4", vdbflow_cpu_kernels_x86_64_v4(), cpu_has("x86-64-v4")});
#endif
  return t;
}

// The kernels in use, chosen at import.
const VdbflowCpuKernels* active = &KERNELS;

using AnyArray = nb::ndarray<nb::c_contig, nb::device::cpu>;          // written
using InArray = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;   // read only
using IntTable = nb::ndarray<const int32_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

u32 table_capacity(size_t n) {
  u32 cap = 8;
  while (cap < 2 * n) cap <<= 1;  // load factor <= 0.5
  return cap;
}

// Builds an open-addressing table of (x, y, z, slot).  Returns (table, index of the first repeated
// key or -1).
nb::tuple build_table(nb::ndarray<const int32_t, nb::ndim<2>, nb::c_contig, nb::device::cpu> keys,
                      nb::ndarray<const int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> slots) {
  const size_t n = keys.shape(0);
  if (keys.shape(1) != 3 || slots.shape(0) != n) throw std::invalid_argument("keys (n, 3) and slots (n,)");
  const u32 cap = table_capacity(n);
  int32_t* data = new int32_t[(size_t)cap * 4];
  for (size_t e = 0; e < (size_t)cap; ++e) {
    data[4 * e] = data[4 * e + 1] = data[4 * e + 2] = 0;
    data[4 * e + 3] = SLOT_EMPTY;
  }
  const u32 mask = cap - 1;
  int64_t repeated = -1;
  const int32_t* k = keys.data();
  for (size_t r = 0; r < n && repeated < 0; ++r) {
    const int x = k[3 * r], y = k[3 * r + 1], z = k[3 * r + 2];
    u32 i = hash_coord(x, y, z) & mask;
    while (true) {
      int32_t* e = data + 4 * (size_t)i;
      if (e[3] == SLOT_EMPTY) {
        e[0] = x;
        e[1] = y;
        e[2] = z;
        e[3] = slots.data()[r];
        break;
      }
      if (e[0] == x && e[1] == y && e[2] == z) {
        repeated = (int64_t)r;
        break;
      }
      i = (i + 1) & mask;
    }
  }
  nb::capsule owner(data, [](void* p) noexcept { delete[] (int32_t*)p; });
  auto table = nb::ndarray<nb::numpy, int32_t, nb::ndim<2>>(data, {(size_t)cap, 4}, owner);
  return nb::make_tuple(table, repeated);
}

HashTable as_table(const IntTable& t) {
  if (t.shape(0) == 0) return HashTable{nullptr, 0};
  if (t.shape(1) != 4 || (t.shape(0) & (t.shape(0) - 1)) != 0)
    throw std::invalid_argument("hash table must be (capacity, 4) with a power-of-two capacity");
  return HashTable{t.data(), (u32)(t.shape(0) - 1)};
}

// Slot of each key in a table (SLOT_NOT_FOUND = -1 when absent).
nb::ndarray<nb::numpy, int32_t, nb::ndim<1>> table_lookup(
    IntTable table, nb::ndarray<const int32_t, nb::ndim<2>, nb::c_contig, nb::device::cpu> keys) {
  const HashTable t = as_table(table);
  const size_t n = keys.shape(0);
  int32_t* out = new int32_t[n > 0 ? n : 1];
  const int32_t* k = keys.data();
  for (size_t r = 0; r < n; ++r) out[r] = table_find(t, k[3 * r], k[3 * r + 1], k[3 * r + 2]);
  nb::capsule owner(out, [](void* p) noexcept { delete[] (int32_t*)p; });
  return nb::ndarray<nb::numpy, int32_t, nb::ndim<1>>(out, {n}, owner);
}

template <class T, class Array>
bool is(const Array& arr) {
  return arr.dtype() == nb::dtype<T>();
}

// The record of one call (abi.h), from the bytes Python built (vdbflow.core.kernel.KernelGrid).
// Python checked the arrays the pointers point into when it built the record, once per volume;
// here the record's own fields are checked again, cheaply, before any kernel reads through them.
KernelAbi read_abi(const nb::bytes& record) {
  if (record.size() != sizeof(KernelAbi))
    throw std::invalid_argument("expected a kernel record of " + std::to_string(sizeof(KernelAbi)) + " bytes, got " +
                                std::to_string(record.size()));
  KernelAbi a;
  std::memcpy(&a, record.c_str(), sizeof(KernelAbi));
  if (a.components < 1 || a.components > MAX_COMPONENTS)
    throw std::invalid_argument("components must be in [1, " + std::to_string(MAX_COMPONENTS) + "]");
  if (a.value_kind < KIND_F32 || a.value_kind > KIND_U32) throw std::invalid_argument("unknown value kind");
  if (a.mode < MODE_CLOSEST || a.mode > SCHEME_LAST) throw std::invalid_argument("unknown sampling mode");
  if (a.index_layout != 0 && a.index_layout != 1) throw std::invalid_argument("index_layout must be 0 or 1");
  if (a.value_rows < 0 || a.tile_rows < 0) throw std::invalid_argument("row counts must be >= 0");
  if (a.values == nullptr || a.background == nullptr || (a.tile_rows > 0 && a.tile_values == nullptr))
    throw std::invalid_argument("the kernel record lacks its value arrays");
  for (int l = 0; l < LEVEL_COUNT; ++l)
    if (a.tables[l] == nullptr ? a.table_masks[l] != 0 : ((a.table_masks[l] + 1ull) & a.table_masks[l]) != 0)
      throw std::invalid_argument("hash table masks must be capacity - 1 with a power-of-two capacity");
  return a;
}

template <class Array>
bool is_kind(const Array& arr, int kind) {
  return kind == KIND_F32 ? is<float>(arr) : kind == KIND_F64 ? is<double>(arr) : kind == KIND_I32 ? is<int32_t>(arr)
         : kind == KIND_I64 ? is<int64_t>(arr) : is<uint32_t>(arr);
}

// Of the value kind's accumulation type (float32, or float64 for float64 data).
template <class Array>
bool is_real_of(const Array& arr, int kind) {
  return kind == KIND_F64 ? is<double>(arr) : is<float>(arr);
}

SampleArgs call_args(const KernelAbi& k, const InArray& points) {
  if (!(is<float>(points) || is<double>(points)) || points.ndim() != 2 || points.shape(1) != 3)
    throw std::invalid_argument("points must be (N, 3) float32 or float64");
  SampleArgs a;
  a.k = k;
  a.points = points.data();
  a.points_double = is<double>(points);
  a.n = (i64)points.shape(0);
  a.out_values = nullptr;
  a.out_jacobian = nullptr;
  a.order = ORDER_COHERENT;
  return a;
}

void sample(nb::bytes record, InArray points, AnyArray out_values, std::optional<AnyArray> out_jacobian, int order) {
  SampleArgs a = call_args(read_abi(record), points);
  const int C = a.k.components, kind = a.k.value_kind;
  if (!is_kind(out_values, kind)) throw std::invalid_argument("values and output must share one dtype");
  a.out_values = out_values.data();
  a.out_jacobian = out_jacobian ? out_jacobian->data() : nullptr;
  if (order < ORDER_AUTO || order > ORDER_SCATTERED) throw std::invalid_argument("order must be 0, 1 or 2");
  a.order = order;
  if (out_values.size() != (size_t)a.n * C) throw std::invalid_argument("out_values must hold N * C entries");
  if (a.out_jacobian && out_jacobian->size() != (size_t)a.n * C * 3)
    throw std::invalid_argument("out_jacobian must hold N * C * 3 entries");
  if (kind == KIND_F32 || kind == KIND_F64) {
    if (a.out_jacobian && !is_real_of(*out_jacobian, kind))
      throw std::invalid_argument(kind == KIND_F32 ? "jacobian must be float32" : "jacobian must be float64");
  } else if (a.k.mode != MODE_CLOSEST || a.out_jacobian) {
    throw std::invalid_argument("integer data supports closest values only");
  }
  nb::gil_scoped_release release;
  active->sample(&a);
}

void sample_hessian(nb::bytes record, InArray points, AnyArray out_values, std::optional<AnyArray> out_jacobian,
                    AnyArray out_hessian) {
  SampleArgs a = call_args(read_abi(record), points);
  const int C = a.k.components, kind = a.k.value_kind;
  if (!has_hessian(a.k.mode)) throw std::invalid_argument("this mode has no second derivative");
  if (kind != KIND_F32 && kind != KIND_F64) throw std::invalid_argument("Hessians need float32 or float64 data");
  if (!is_kind(out_values, kind)) throw std::invalid_argument("values and output must share one dtype");
  if (out_values.size() != (size_t)a.n * C) throw std::invalid_argument("out_values must hold N * C entries");
  if (out_jacobian && out_jacobian->size() != (size_t)a.n * C * 3)
    throw std::invalid_argument("out_jacobian must hold N * C * 3 entries");
  if (out_hessian.size() != (size_t)a.n * C * 9) throw std::invalid_argument("out_hessian must hold N * C * 9 entries");
  if (!is_real_of(out_hessian, kind)) throw std::invalid_argument("the Hessian buffer must have the Jacobian dtype");
  if (out_jacobian && !is_real_of(*out_jacobian, kind)) throw std::invalid_argument("the Jacobian buffer has the wrong dtype");
  a.out_values = out_values.data();
  a.out_jacobian = out_jacobian ? out_jacobian->data() : nullptr;
  a.out_hessian = out_hessian.data();
  nb::gil_scoped_release release;
  active->hessian(&a);
}

// Reverse mode: accumulator (value_rows + tile_rows + 1, C) float64 receives the corner shares
// (voxel rows, then tile rows, then the background); adj_points (N, 3) the point adjoints.  The
// record must describe contiguous values (leaf_values_at is not read).
void sample_vjp(nb::bytes record, InArray points, InArray adj_values, std::optional<InArray> adj_jacobian,
                nb::ndarray<double, nb::ndim<2>, nb::c_contig, nb::device::cpu> accumulator, AnyArray adj_points) {
  SampleArgs a = call_args(read_abi(record), points);
  const int C = a.k.components, kind = a.k.value_kind;
  if (a.k.mode > MODE_LINEAR) throw std::invalid_argument("reverse mode supports closest and linear");
  if (kind != KIND_F32 && kind != KIND_F64) throw std::invalid_argument("reverse mode needs float32 or float64 data");
  if (!is_real_of(adj_values, kind) || adj_values.size() != (size_t)a.n * C)
    throw std::invalid_argument("adj_values must be (N, C) of the data's float type");
  if (adj_jacobian && (!is_real_of(*adj_jacobian, kind) || adj_jacobian->size() != (size_t)a.n * C * 3))
    throw std::invalid_argument("adj_jacobian must be (N, C, 3) of the data's float type");
  if (!is_real_of(adj_points, kind) || adj_points.size() != (size_t)a.n * 3)
    throw std::invalid_argument("adj_points must be (N, 3) of the data's float type");
  if (accumulator.shape(0) != (size_t)(a.k.value_rows + a.k.tile_rows + 1) || accumulator.shape(1) != (size_t)C)
    throw std::invalid_argument("accumulator must be (value rows + tile rows + 1, C)");
  a.adjoint = true;
  a.adj_values = adj_values.data();
  a.adj_jacobian = adj_jacobian ? adj_jacobian->data() : nullptr;
  a.accumulator = accumulator.data();
  a.adj_points = adj_points.data();
  nb::gil_scoped_release release;
  active->sample(&a);
}

// Node Jacobians of every active voxel with the record's scheme (its mode: fd2 .. fd8), rows in
// OnIndex order; the record's jacobian_world picks the Jacobian's axes.
void grid_gradient(nb::bytes record, nb::ndarray<const int32_t, nb::ndim<2>, nb::c_contig, nb::device::cpu> leaf_origins,
                   nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> first_row,
                   AnyArray out_jacobian) {
  GridGradientArgs a;
  a.k = read_abi(record);
  if (!is_node_fd(a.k.mode)) throw std::invalid_argument("grid gradients take fd2, fd4, fd6 or fd8");
  if (a.k.value_kind != KIND_F32 && a.k.value_kind != KIND_F64)
    throw std::invalid_argument("grid gradients need float32 or float64 values");
  const i64 leaves = (i64)leaf_origins.shape(0);
  if (leaf_origins.shape(1) != 3 || (i64)first_row.shape(0) != leaves)
    throw std::invalid_argument("leaf origins (L, 3) and first rows (L,) must agree");
  if (!is_real_of(out_jacobian, a.k.value_kind)) throw std::invalid_argument("the Jacobian must have the values' float dtype");
  a.origins = leaf_origins.data();
  a.first_row = (const i64*)first_row.data();
  a.leaves = leaves;
  a.out_jacobian = out_jacobian.data();
  nb::gil_scoped_release release;
  active->grid_gradient(&a);
}

// advect.h: integrates particles x (N, 3) float64 in place with the tableau (a (s, s), b (s,)) and step h over
// the steps of save_slot (n + 1,); fills the NaN-filled outputs and status, last_step and evaluations (N,).
// F (N, 3, 3) holds each particle's starting flow-map gradient; validate_end = false leaves x_n unchecked.
using F64Out = nb::ndarray<double, nb::c_contig, nb::device::cpu>;
void advect(nb::bytes record, nb::ndarray<double, nb::ndim<2>, nb::c_contig, nb::device::cpu> x,
            nb::ndarray<const double, nb::ndim<2>, nb::c_contig, nb::device::cpu> a_coef,
            nb::ndarray<const double, nb::ndim<1>, nb::c_contig, nb::device::cpu> b_coef, double h,
            nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> save_slot, F64Out position,
            std::optional<F64Out> velocity, std::optional<F64Out> jacobian, std::optional<F64Out> F,
            nb::ndarray<int8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> status,
            nb::ndarray<int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> last_step,
            nb::ndarray<int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> evaluations, bool validate_end) {
  AdvectArgs a;
  a.k = read_abi(record);
  if (a.k.value_kind != KIND_F32 && a.k.value_kind != KIND_F64)
    throw std::invalid_argument("particles need float32 or float64 velocity");
  if (a.k.components != 3) throw std::invalid_argument("particles need a vec3 velocity");
  if (a.k.mode < MODE_CLOSEST || a.k.mode > SCHEME_LAST) throw std::invalid_argument("unknown sampling mode");
  if (!a.k.points_world || !a.k.jacobian_world) throw std::invalid_argument("particles move in world space");
  const i64 n = (i64)x.shape(0);
  const int stages = (int)b_coef.shape(0);
  if (x.shape(1) != 3) throw std::invalid_argument("x must be (N, 3)");
  if (stages < 1 || stages > MAX_STAGES || a_coef.shape(0) != (size_t)stages || a_coef.shape(1) != (size_t)stages)
    throw std::invalid_argument("the tableau must be a (s, s) and b (s,), 1 <= s <= 4");
  if (save_slot.shape(0) < 1) throw std::invalid_argument("save_slot must hold n + 1 entries");
  const i64 steps = (i64)save_slot.shape(0) - 1;
  const i64 S = position.ndim() == 3 ? (i64)position.shape(1) : -1;
  if (S < 1 || (i64)position.shape(0) != n || position.shape(2) != 3) throw std::invalid_argument("position must be (N, S, 3)");
  for (i64 k = 0; k <= steps; ++k)
    if (save_slot(k) < -1 || save_slot(k) >= S) throw std::invalid_argument("save slots must lie in [-1, S)");
  if (velocity && velocity->size() != (size_t)(n * S * 3)) throw std::invalid_argument("velocity must be (N, S, 3)");
  if (jacobian && jacobian->size() != (size_t)(n * S * 9)) throw std::invalid_argument("jacobian must be (N, S, 3, 3)");
  if (F && F->size() != (size_t)(n * 9)) throw std::invalid_argument("F must be (N, 3, 3)");
  if ((i64)status.shape(0) != n || (i64)last_step.shape(0) != n || (i64)evaluations.shape(0) != n)
    throw std::invalid_argument("status, last_step and evaluations must be (N,)");
  a.s.stages = stages;
  for (int i = 0; i < MAX_STAGES; ++i) {
    a.s.b[i] = i < stages ? b_coef(i) : 0.0;
    for (int j = 0; j < MAX_STAGES; ++j) a.s.a[i][j] = (i < stages && j < i) ? a_coef(i, j) : 0.0;
  }
  a.s.h = h;
  a.s.steps = steps;
  a.s.save_slot = (const i64*)save_slot.data();
  a.s.slots = S;
  stencil_taps(a.k.mode, a.s.lo, a.s.taps);
  a.s.want_velocity = velocity.has_value();
  a.s.want_jacobian = jacobian.has_value();
  a.s.variational = F.has_value();
  a.s.validate_end = validate_end;
  a.x = x.data();
  a.n = n;
  a.position = position.data();
  a.velocity = velocity ? velocity->data() : nullptr;
  a.jacobian = jacobian ? jacobian->data() : nullptr;
  a.F = F ? F->data() : nullptr;
  a.status = (signed char*)status.data();
  a.last_step = (i64*)last_step.data();
  a.evaluations = evaluations.data();
  nb::gil_scoped_release release;
  active->advect(&a);
}

// The grid of a topology alone (coverage reads tables and masks, never values).
GridView<float> topology_view(const std::vector<IntTable>& tables, const nb::ndarray<const uint64_t, nb::ndim<2>,
                              nb::c_contig, nb::device::cpu>& masks) {
  if (tables.size() != LEVEL_COUNT) throw std::invalid_argument("expected 3 hash tables");
  if (masks.shape(1) != 8) throw std::invalid_argument("masks must be (L, 8)");
  HashTable t[LEVEL_COUNT];
  for (int l = 0; l < LEVEL_COUNT; ++l) t[l] = as_table(tables[l]);
  return make_grid_view<float>(t, (const u64*)masks.data(), nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1, 0);
}

// coverage.h: (N,) bool, whether each point's `mode` stencil reads only defined voxels.
nb::ndarray<nb::numpy, bool, nb::ndim<1>> stencil_inside(
    std::vector<IntTable> tables, nb::ndarray<const uint64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu> masks,
    nb::ndarray<const double, nb::ndim<2>, nb::c_contig, nb::device::cpu> points,
    nb::ndarray<const double, nb::shape<TRANSFORM_PARAMETERS>, nb::c_contig, nb::device::cpu> xform, bool points_world,
    int mode) {
  const GridView<float> g = topology_view(tables, masks);
  if (points.shape(1) != 3) throw std::invalid_argument("points must be (N, 3) float64");
  if (mode < MODE_CLOSEST || mode > SCHEME_LAST) throw std::invalid_argument("unknown sampling mode");
  CoverageArgs a;
  std::memset(&a.k, 0, sizeof(KernelAbi));
  for (int l = 0; l < LEVEL_COUNT; ++l) {
    a.k.tables[l] = g.tables[l].entries;
    a.k.table_masks[l] = g.tables[l].mask;
  }
  a.k.masks = g.masks;
  a.k.components = 1;
  for (int e = 0; e < TRANSFORM_PARAMETERS; ++e) a.k.xform[e] = xform.data()[e];
  a.k.mode = mode;
  a.k.points_world = points_world ? 1 : 0;
  a.n = (i64)points.shape(0);
  a.points = points.data();
  bool* out = new bool[a.n > 0 ? a.n : 1];
  a.out = out;
  {
    nb::gil_scoped_release release;
    active->stencil_inside(&a);
  }
  nb::capsule owner(out, [](void* q) noexcept { delete[] (bool*)q; });
  return nb::ndarray<nb::numpy, bool, nb::ndim<1>>(out, {(size_t)a.n}, owner);
}

// coverage.h: (M,) bool, whether each voxel (M, 3) is active in a leaf or inside a tile.
nb::ndarray<nb::numpy, bool, nb::ndim<1>> defined_voxels(
    std::vector<IntTable> tables, nb::ndarray<const uint64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu> masks,
    nb::ndarray<const int64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu> ijk) {
  const GridView<float> g = topology_view(tables, masks);
  if (ijk.shape(1) != 3) throw std::invalid_argument("ijk must be (M, 3) int64");
  const size_t n = ijk.shape(0);
  bool* out = new bool[n > 0 ? n : 1];
  const int64_t* v = ijk.data();
  LeafCache cache;
  for (size_t i = 0; i < n; ++i) out[i] = voxel_defined(g, v[3 * i], v[3 * i + 1], v[3 * i + 2], cache);
  nb::capsule owner(out, [](void* q) noexcept { delete[] (bool*)q; });
  return nb::ndarray<nb::numpy, bool, nb::ndim<1>>(out, {n}, owner);
}

// grid.h's tile slot code of each tile index (encode_tile).
nb::ndarray<nb::numpy, int32_t, nb::ndim<1>> encode_tiles(
    nb::ndarray<const int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> tiles) {
  const size_t n = tiles.shape(0);
  int32_t* out = new int32_t[n > 0 ? n : 1];
  for (size_t i = 0; i < n; ++i) {
    if (tiles.data()[i] < 0) throw std::invalid_argument("tile indices must be >= 0");
    out[i] = encode_tile(tiles.data()[i]);
  }
  nb::capsule owner(out, [](void* q) noexcept { delete[] (int32_t*)q; });
  return nb::ndarray<nb::numpy, int32_t, nb::ndim<1>>(out, {n}, owner);
}

// grid.h's in-leaf offset (voxel_offset: the bit of the active mask) of each voxel (N, 3).
nb::ndarray<nb::numpy, int64_t, nb::ndim<1>> voxel_offsets(
    nb::ndarray<const int64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu> ijk) {
  if (ijk.shape(1) != 3) throw std::invalid_argument("ijk must be (N, 3) int64");
  const size_t n = ijk.shape(0);
  int64_t* out = new int64_t[n > 0 ? n : 1];
  const int64_t* v = ijk.data();
  for (size_t i = 0; i < n; ++i) out[i] = voxel_offset((int)v[3 * i], (int)v[3 * i + 1], (int)v[3 * i + 2]);
  nb::capsule owner(out, [](void* q) noexcept { delete[] (int64_t*)q; });
  return nb::ndarray<nb::numpy, int64_t, nb::ndim<1>>(out, {n}, owner);
}

// KernelAbi's fields for Python's record dtype: (name, NumPy format, byte offset, element count).
static_assert(std::is_standard_layout<KernelAbi>::value, "KernelAbi must be plain data");
#define VDBFLOW_ABI_FIELD(name, fmt, elem) \
  nb::make_tuple(#name, fmt, offsetof(KernelAbi, name), sizeof(((KernelAbi*)nullptr)->name) / sizeof(elem))
nb::tuple abi_fields() {
  return nb::make_tuple(
      VDBFLOW_ABI_FIELD(tables, "u8", u64), VDBFLOW_ABI_FIELD(table_masks, "u4", u32),
      VDBFLOW_ABI_FIELD(components, "i4", int), VDBFLOW_ABI_FIELD(masks, "u8", u64),
      VDBFLOW_ABI_FIELD(prefix, "u8", u64), VDBFLOW_ABI_FIELD(leaf_offset, "u8", u64),
      VDBFLOW_ABI_FIELD(leaf_values_at, "u8", u64), VDBFLOW_ABI_FIELD(values, "u8", u64),
      VDBFLOW_ABI_FIELD(tile_values, "u8", u64), VDBFLOW_ABI_FIELD(background, "u8", u64),
      VDBFLOW_ABI_FIELD(value_rows, "i8", i64), VDBFLOW_ABI_FIELD(tile_rows, "i8", i64),
      VDBFLOW_ABI_FIELD(index_layout, "i4", int), VDBFLOW_ABI_FIELD(value_kind, "i4", int),
      VDBFLOW_ABI_FIELD(xform, "f8", double), VDBFLOW_ABI_FIELD(mode, "i4", int),
      VDBFLOW_ABI_FIELD(points_world, "i4", int), VDBFLOW_ABI_FIELD(jacobian_world, "i4", int),
      VDBFLOW_ABI_FIELD(hessian_world, "i4", int));
}
#undef VDBFLOW_ABI_FIELD


void set_num_threads(int threads) {
#ifdef _OPENMP
  if (threads < 1) throw std::invalid_argument("threads must be >= 1");
  omp_set_num_threads(threads);
#endif
}

int get_max_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// Large output buffers, 2 MiB aligned and advised for transparent huge pages as NumPy advises its own
// large arrays: a fresh 100 MB output then costs about 50 page faults instead of 25,000 (the kernel
// faults 4 KiB pages otherwise; measured on routing 4M points, most of the call's time outside the
// kernels).  Released with std::free.
void* large_alloc(size_t bytes) {
  constexpr size_t HUGE_PAGE = size_t(1) << 21;
  void* p;
  if (bytes < HUGE_PAGE) {
    p = std::malloc(bytes ? bytes : 1);
  } else {
    const size_t rounded = (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    p = std::aligned_alloc(HUGE_PAGE, rounded);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (p != nullptr) madvise(p, rounded, MADV_HUGEPAGE);
#endif
  }
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

// Routing: each point's partition (route.h), then a stable counting sort by partition.  Returns the
// permutation (input index of each sorted point), the P + 2 bucket bounds (bucket 0: background-only
// points, bucket p + 1: partition p) and the points in sorted order (same dtype as given).
nb::tuple route_points(InArray points, nb::ndarray<const double, nb::shape<12>, nb::c_contig, nb::device::cpu> xform,
                       bool points_world, nb::ndarray<const int64_t, nb::shape<3>, nb::c_contig, nb::device::cpu> origin,
                       int shift, nb::ndarray<const uint64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> boundaries,
                       IntTable near_blocks) {
  if (!(is<float>(points) || is<double>(points)) || points.ndim() != 2 || points.shape(1) != 3)
    throw std::invalid_argument("points must be (N, 3) float32 or float64");
  if (shift < 0 || shift > 63) throw std::invalid_argument("Morton shift must be in [0, 63]");
  RouteSpec r;
  for (int a = 0; a < 3; ++a) r.origin[a] = origin.data()[a];
  r.shift = shift;
  r.boundaries = (const u64*)boundaries.data();
  r.partitions = (int)boundaries.shape(0) + 1;
  r.near_blocks = as_table(near_blocks);
  const i64 n = (i64)points.shape(0);
  const int buckets = r.partitions + 1;
  const bool dbl = is<double>(points);
  const size_t item = dbl ? 8 : 4;
  std::unique_ptr<void, decltype(&std::free)> order_owned(large_alloc(sizeof(int64_t) * (size_t)n), &std::free);
  std::unique_ptr<void, decltype(&std::free)> sorted_owned(large_alloc(3 * item * (size_t)n), &std::free);
  std::unique_ptr<void, decltype(&std::free)> bucket(large_alloc(sizeof(int32_t) * (size_t)n), &std::free);  // all written
  int64_t* bounds = new int64_t[buckets + 1];
  int64_t* order = (int64_t*)order_owned.release();
  char* sorted = (char*)sorted_owned.release();
  RouteArgs a;
  a.r = r;
  std::memcpy(a.xform, xform.data(), sizeof(a.xform));
  a.points_world = points_world;
  a.points_double = dbl;
  a.points = points.data();
  a.n = n;
  a.bucket = (int32_t*)bucket.get();
  a.order = order;
  a.sorted = sorted;
  a.bounds = bounds;
  a.threads = get_max_threads();
  {
    nb::gil_scoped_release release;
    active->route(&a);
  }
  nb::capsule own_order(order, [](void* q) noexcept { std::free(q); });
  nb::capsule own_bounds(bounds, [](void* q) noexcept { delete[] (int64_t*)q; });
  nb::capsule own_sorted(sorted, [](void* q) noexcept { std::free(q); });
  nb::object sorted_points;
  if (dbl)
    sorted_points = nb::cast(nb::ndarray<nb::numpy, double, nb::ndim<2>>((double*)sorted, {(size_t)n, 3}, own_sorted));
  else
    sorted_points = nb::cast(nb::ndarray<nb::numpy, float, nb::ndim<2>>((float*)sorted, {(size_t)n, 3}, own_sorted));
  return nb::make_tuple(nb::ndarray<nb::numpy, int64_t, nb::ndim<1>>(order, {(size_t)n}, own_order),
                        nb::ndarray<nb::numpy, int64_t, nb::ndim<1>>(bounds, {(size_t)buckets + 1}, own_bounds),
                        sorted_points);
}

// Morton codes (route.h) of leaf keys (n, 3) in a frame.
nb::ndarray<nb::numpy, uint64_t, nb::ndim<1>> morton_codes(
    nb::ndarray<const int64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu> keys,
    nb::ndarray<const int64_t, nb::shape<3>, nb::c_contig, nb::device::cpu> origin, int shift) {
  if (keys.shape(1) != 3) throw std::invalid_argument("keys must be (n, 3)");
  if (shift < 0 || shift > 63) throw std::invalid_argument("Morton shift must be in [0, 63]");
  const size_t n = keys.shape(0);
  u64* out = new u64[n > 0 ? n : 1];
  const i64* k = (const i64*)keys.data();
  const i64 o[3] = {origin.data()[0], origin.data()[1], origin.data()[2]};
  for (size_t i = 0; i < n; ++i) out[i] = morton_code(k + 3 * i, o, shift);
  nb::capsule owner(out, [](void* q) noexcept { delete[] (u64*)q; });
  return nb::ndarray<nb::numpy, uint64_t, nb::ndim<1>>((uint64_t*)out, {n}, owner);
}

// dst[index[r]] = src[r] for rows of `row_bytes` bytes (the assembly of routed results; any dtype).
void scatter_rows(AnyArray dst, InArray index, InArray src) {
  if (index.dtype() != nb::dtype<int64_t>() || index.ndim() != 1) throw std::invalid_argument("index must be (m,) int64");
  const i64 m = (i64)index.shape(0), n = dst.ndim() ? (i64)dst.shape(0) : 0;
  if (src.dtype() != dst.dtype() || src.ndim() != dst.ndim() || (src.ndim() && (i64)src.shape(0) != m))
    throw std::invalid_argument("src must be (m, ...) of dst's dtype");
  size_t row = dst.itemsize();
  for (size_t a = 1; a < dst.ndim(); ++a) {
    if (src.shape(a) != dst.shape(a)) throw std::invalid_argument("src and dst rows differ in shape");
    row *= dst.shape(a);
  }
  const int64_t* at = (const int64_t*)index.data();
  for (i64 r = 0; r < m; ++r)
    if (at[r] < 0 || at[r] >= n) throw std::out_of_range("scatter index " + std::to_string(at[r]) + " outside [0, " + std::to_string(n) + ")");
  char* d = (char*)dst.data();
  const char* s = (const char*)src.data();
  nb::gil_scoped_release release;
#pragma omp parallel for schedule(static, 16384)
  for (i64 r = 0; r < m; ++r) std::memcpy(d + at[r] * row, s + r * row, row);
}

// Voxel coordinates (n, 3) int32 of active voxels by global rank g (leaves in order, voxels by mask
// bit: OnIndex order), with leaf_end the running count of active voxels at the end of each leaf.
nb::ndarray<nb::numpy, int32_t, nb::ndim<2>> active_voxels_at(
    nb::ndarray<const int32_t, nb::ndim<2>, nb::c_contig, nb::device::cpu> origins,
    nb::ndarray<const uint64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu> masks,
    nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> leaf_end,
    nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> rank) {
  const i64 L = (i64)origins.shape(0), n = (i64)rank.shape(0);
  if (origins.shape(1) != 3 || masks.shape(0) != (size_t)L || masks.shape(1) != 8 || leaf_end.shape(0) != (size_t)L)
    throw std::invalid_argument("expected origins (L, 3), masks (L, 8) and leaf_end (L,)");
  const i64 total = L ? leaf_end.data()[L - 1] : 0;
  const int64_t* g = rank.data();
  for (i64 r = 0; r < n; ++r)
    if (g[r] < 0 || g[r] >= total)
      throw std::out_of_range("voxel rank " + std::to_string(g[r]) + " outside [0, " + std::to_string(total) + ")");
  int32_t* out = new int32_t[3 * (n > 0 ? n : 1)];
  const int64_t* end = leaf_end.data();
  const u64* m = (const u64*)masks.data();
  const int32_t* o = origins.data();
  {
    nb::gil_scoped_release release;
#pragma omp parallel for schedule(static, 4096)
    for (i64 r = 0; r < n; ++r) {
      const i64 leaf = std::upper_bound(end, end + L, (int64_t)g[r]) - end;
      i64 left = g[r] - (leaf ? end[leaf - 1] : 0);
      int w = 0;
      for (; w < 8; ++w) {
        const int c = popcount64(m[leaf * 8 + w]);
        if (left < c) break;
        left -= c;
      }
      u64 word = m[leaf * 8 + w];
      for (i64 k = 0; k < left; ++k) word &= word - 1;  // drop the lower set bits
      const int bit = w * 64 + __builtin_ctzll(word);
      out[3 * r] = o[3 * leaf] + (bit >> 6);
      out[3 * r + 1] = o[3 * leaf + 1] + ((bit >> 3) & 7);
      out[3 * r + 2] = o[3 * leaf + 2] + (bit & 7);
    }
  }
  nb::capsule owner(out, [](void* q) noexcept { delete[] (int32_t*)q; });
  return nb::ndarray<nb::numpy, int32_t, nb::ndim<2>>(out, {(size_t)n, 3}, owner);
}

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "vdbflow CPU kernels (compiled from kernels/)";
  // the widest target this CPU runs, unless VDBFLOW_CPU_TARGET names another one (or "baseline")
  const std::vector<CpuTarget> targets = cpu_targets();
  size_t chosen = 0;
  for (size_t i = 1; i < targets.size(); ++i)
    if (targets[i].supported) chosen = i;
  const char* asked = std::getenv("VDBFLOW_CPU_TARGET");
  if (asked && *asked && std::string(asked) != "auto") {
    const std::string want = std::string(asked) == "baseline" ? targets[0].name : asked;
    size_t found = targets.size();
    for (size_t i = 0; i < targets.size(); ++i)
      if (want == targets[i].name) found = i;
    std::string known = "baseline";
    for (const CpuTarget& t : targets) known += std::string(", ") + t.name;
    int warned = 0;
    if (found == targets.size())
      warned = PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "VDBFLOW_CPU_TARGET=%s is not among the compiled targets "
                                "(%s); using %s", asked, known.c_str(), targets[chosen].name);
    else if (!targets[found].supported)
      warned = PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "VDBFLOW_CPU_TARGET=%s: this CPU does not run it; using %s",
                                asked, targets[chosen].name);
    else
      chosen = found;
    if (warned < 0) throw nb::python_error();  // warnings turned into errors
  }
  active = targets[chosen].kernels;
  m.attr("CPU_TARGET") = targets[chosen].name;
  m.attr("CPU_TARGET_FLAGS") = targets[chosen].flags;
  nb::list compiled, runnable;
  for (const CpuTarget& t : targets) {
    compiled.append(t.name);
    if (t.supported) runnable.append(t.name);
  }
  m.attr("CPU_TARGETS") = nb::tuple(compiled);
  m.attr("CPU_TARGETS_SUPPORTED") = nb::tuple(runnable);
  m.def("build_table", &build_table, nb::arg("keys"), nb::arg("slots"));
  m.def("table_lookup", &table_lookup, nb::arg("table"), nb::arg("keys"));
  // sampling: a kernel record (abi.h, built by vdbflow.core.kernel) and the call's arrays
  m.def("sample", &sample, nb::arg("record"), nb::arg("points"), nb::arg("out_values"),
        nb::arg("out_jacobian").none(), nb::arg("order") = (int)ORDER_AUTO);
  m.def("sample_hessian", &sample_hessian, nb::arg("record"), nb::arg("points"), nb::arg("out_values"),
        nb::arg("out_jacobian").none(), nb::arg("out_hessian"));
  m.def("sample_vjp", &sample_vjp, nb::arg("record"), nb::arg("points"), nb::arg("adj_values"),
        nb::arg("adj_jacobian").none(), nb::arg("accumulator"), nb::arg("adj_points"));
  m.def("advect", &advect, nb::arg("record"), nb::arg("x"), nb::arg("a"), nb::arg("b"), nb::arg("h"),
        nb::arg("save_slot"), nb::arg("position"), nb::arg("velocity").none(), nb::arg("jacobian").none(),
        nb::arg("F").none(), nb::arg("status"), nb::arg("last_step"), nb::arg("evaluations"),
        nb::arg("validate_end") = true,
        "Particle trajectories through a steady vec3 volume, explicit Runge-Kutta (advect.h).");
  m.def("grid_gradient", &grid_gradient, nb::arg("record"), nb::arg("leaf_origins"), nb::arg("first_row"),
        nb::arg("out_jacobian"));
  m.def("stencil_inside", &stencil_inside, nb::arg("tables"), nb::arg("masks"), nb::arg("points"), nb::arg("xform"),
        nb::arg("points_world"), nb::arg("mode"), "Whether each point's stencil reads only defined voxels (coverage.h).");
  m.def("defined_voxels", &defined_voxels, nb::arg("tables"), nb::arg("masks"), nb::arg("ijk"),
        "Whether each voxel is active in a leaf or inside a tile (coverage.h).");
  m.def("encode_tiles", &encode_tiles, nb::arg("tiles"), "Table slot codes of tile indices (grid.h encode_tile).");
  m.def("voxel_offsets", &voxel_offsets, nb::arg("ijk"), "In-leaf offsets of voxels (grid.h voxel_offset).");
  // facts of the kernels, read by vdbflow.core.kernel
  m.attr("LEAF_DIM") = LEAF_DIM;
  m.attr("LEAF_VOXELS") = LEAF_VOXELS;
  m.attr("LEVEL_SHIFTS") = nb::make_tuple(level_shift(0), level_shift(1), level_shift(2));
  m.attr("TILE_SIZES") = nb::make_tuple(level_size(0), level_size(1), level_size(2));
  static_assert(LEVEL_COUNT == 3, "LEVEL_SHIFTS and TILE_SIZES list three levels");
  m.attr("TILE_BASE") = TILE_BASE;
  m.attr("SLOT_NOT_FOUND") = SLOT_NOT_FOUND;
  nb::list transform_names;
  for (const char* name : TRANSFORM_PARAMETER_NAMES) transform_names.append(name);
  m.attr("TRANSFORM_PARAMETERS") = nb::tuple(transform_names);
  m.attr("ABI_SIZE") = sizeof(KernelAbi);
  m.attr("ABI_FIELDS") = abi_fields();
  nb::dict kinds;
  kinds["float32"] = (int)KIND_F32;
  kinds["float64"] = (int)KIND_F64;
  kinds["int32"] = (int)KIND_I32;
  kinds["int64"] = (int)KIND_I64;
  kinds["uint32"] = (int)KIND_U32;
  m.attr("VALUE_KINDS") = kinds;
  m.def("route_points", &route_points, nb::arg("points"), nb::arg("xform"), nb::arg("points_world"), nb::arg("origin"),
        nb::arg("shift"), nb::arg("boundaries"), nb::arg("near_blocks"),
        "Partition of each point and a stable counting sort: (order, bounds (P + 2), sorted points).");
  m.def("scatter_rows", &scatter_rows, nb::arg("dst"), nb::arg("index"), nb::arg("src"));
  m.def("active_voxels_at", &active_voxels_at, nb::arg("origins"), nb::arg("masks"), nb::arg("leaf_end"),
        nb::arg("rank"));
  m.def("morton_codes", &morton_codes, nb::arg("keys"), nb::arg("origin"), nb::arg("shift"));
  m.attr("MORTON_BITS") = MORTON_BITS;
  m.attr("ROUTE_BACKGROUND") = ROUTE_BACKGROUND;
  m.attr("ROUTE_BLOCK_SHIFT") = ROUTE_BLOCK_SHIFT;
  m.attr("ROUTE_MIXED_BLOCK") = ROUTE_MIXED_BLOCK;
  m.def("set_num_threads", &set_num_threads, nb::arg("threads"), "Threads of the CPU kernels (OpenMP).");
  m.def("get_max_threads", &get_max_threads, "Threads the CPU kernels use.");
  m.attr("ORDER_AUTO") = (int)ORDER_AUTO;
  m.attr("ORDER_COHERENT") = (int)ORDER_COHERENT;
  m.attr("ORDER_SCATTERED") = (int)ORDER_SCATTERED;
  m.attr("MODE_CLOSEST") = (int)MODE_CLOSEST;
  m.attr("MODE_LINEAR") = (int)MODE_LINEAR;
  m.attr("MAX_COMPONENTS") = MAX_COMPONENTS;
  m.attr("SCHEME_LAST") = (int)SCHEME_LAST;
  nb::dict modes, reach;
  for (int mode = MODE_CLOSEST; mode <= SCHEME_LAST; ++mode) {
    modes[MODE_NAMES[mode]] = mode;
    reach[MODE_NAMES[mode]] = stencil_reach(mode);
  }
  m.attr("MODES") = modes;            // name -> id: vdbflow.ops.sampling.MODES
  m.attr("STENCIL_REACH") = reach;    // name -> voxels on the positive side: vdbflow.ops.sampling.STENCIL_RADIUS
#ifdef _OPENMP
  m.attr("OPENMP") = true;
#else
  m.attr("OPENMP") = false;
#endif
}
#endif  // VDBFLOW_KERNEL_VARIANT
