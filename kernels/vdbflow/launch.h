// vdbflow/launch.h - how an entry point runs over its points, on host and device, and which template
// instance of the kernels runs them.
//
// Each entry point of the kernels is one loop, written once in its header (sample_points, hessian_points,
// adjoint_points, stencil_inside_points, advect_points, grid_gradient_leaves, ...: VDB_ENTRY functions)
// and launched by its CPU entry and its GPU entry alike (operations.h VDBFLOW_CPU_ENTRY, VDBFLOW_GPU_ENTRY):
//
//   for_each_point<CHUNK, S>(n, xf, body)  calls body(i, xf, cache) for every i in [0, n), each thread
//       with its own copy of the call's transform (or, given the record k instead of xf, its own transform
//       made from k) and its own leaf cache;
//         host    an OpenMP loop over chunks of CHUNK points, handed out dynamically (S = DYNAMIC) or
//                 statically (S = STATIC: the same threads take the same chunks whatever the timing),
//                 each thread with its own copy of the body, on threads_for(n, CHUNK) threads: one for
//                 every 2 chunks, so a call of fewer on the calling thread alone;
//         device  (nvcc, NVRTC) a grid-stride loop over the launch's threads (CHUNK and S are ignored);
//   for_each<CHUNK, S>(n, body)  the same loop without transform and cache: body(i).
//
// Host only:
//   for_each_batch    the scattered variant of a point loop: body(first, count, xf, cache) locates a
//                     batch's stencils and asks for their value lines (prefetch_corners) before evaluating
//                     them, so that the cache misses of a whole batch overlap, and writes results with
//                     stream_store (non-temporal stores: the output stream does not evict the volume's
//                     values from the last-level cache);
//   scattered_points  the choice between the two variants: the caller's PointOrder, or measured
//                     (leaf_coherence);
//   counting_sort     the stable counting sort of routing;
//   with_value_type, with_float_type, with_point_type, with_components, with_instance: the dispatch from a
//                     record's run-time facts to a template instance: f(TypeTag<T>()) for the ValueKind's T
//                     (every kind, or float32 / float64 only), f(TypeTag<P>()) for float or double points,
//                     f(Fixed<NC>()) with NC = C for C in 1, 3, 4 (loops unrolled at compile time) or NC = 0
//                     (C read at run time);
//   large_alloc, max_threads, set_threads, threads_for: the entries' output buffers and thread counts.
//
// Entries without a grid record close the file: scatter_rows_points, active_voxels_points.
#pragma once
#include "abi.h"
#include "operations.h"

#ifndef VDB_DEVICE_COMPILE
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__SSE2__) && defined(__x86_64__)
#include <immintrin.h>
#define VDBFLOW_HAVE_STREAM_STORE 1
#endif
#endif

namespace vdbflow {

enum Schedule { DYNAMIC = 0, STATIC = 1 };

// How the points of a call lie in space: measured (auto), or given by the caller.  The host's sampling
// loop follows it (coherent: one point at a time, scattered: a batch at a time); the device ignores it.
enum PointOrder { ORDER_AUTO = 0, ORDER_COHERENT = 1, ORDER_SCATTERED = 2 };

// Point i of (n, 3) points of type P, as the kernels read it.
template <class P>
VDB_HD void load_point(const P* pts, i64 i, double p[3]) {
  p[0] = (double)pts[3 * i];
  p[1] = (double)pts[3 * i + 1];
  p[2] = (double)pts[3 * i + 2];
}

#ifdef VDB_DEVICE_COMPILE
#define VDB_ENTRY __device__ __forceinline__  // an entry's loop: called by one __global__ entry

// Every GPU entry is launched with VDB_THREADS_PER_BLOCK threads a block (the backend passes its block size as
// -DVDB_THREADS_PER_BLOCK=...), under one of two launch bounds (docs/gpu.md "Occupancy"):
//  - VDB_BOUNDS_FILL (two blocks an SM at least: at most 128 registers a thread at 256 threads a block) for
//    the sampling, derived, reverse-mode, gradient-field and extern "C" entries, so that a multiprocessor
//    holds 16 warps of them at least (one block, 8 warps, was 12.5 % occupancy and too few warps to hide
//    memory latency); ptxas fits them in 128 registers at the price of some spill (sm_90, NVRTC 12.9:
//    0-1,000 bytes; docs/gpu.md "Occupancy" has the table and what is left to measure on a card);
//  - VDB_BOUNDS (one block an SM at least) for the Hessian, statistics and particle entries, which hold a
//    whole stencil's second derivatives, a block's partials or a Runge-Kutta step in registers: held to
//    128 they spill hundreds of bytes (hessian_kernel<float, 3>: 540 B; the particle entries kilobytes).
// tests/test_nvrtc.py (sm_90, every entry) and tests/test_cuda_occupancy.py (sm_80, sm_100) hold the first kind
// to two blocks a multiprocessor.
#ifndef VDB_THREADS_PER_BLOCK
#define VDB_THREADS_PER_BLOCK 256
#endif
#define VDB_BOUNDS __launch_bounds__(VDB_THREADS_PER_BLOCK, 1)
#define VDB_BOUNDS_FILL __launch_bounds__(VDB_THREADS_PER_BLOCK, 2)

template <int CHUNK, int S = DYNAMIC, class Body>
__device__ __forceinline__ void for_each_point(i64 n, const PointTransform& shared, Body body) {
  const PointTransform xf = shared;
  LeafCache cache;
  const i64 stride = (i64)blockDim.x * gridDim.x;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) body(i, xf, cache);
}

template <int CHUNK, int S = DYNAMIC, class Body>
__device__ __forceinline__ void for_each_point(i64 n, const KernelAbi& k, Body body) {
  for_each_point<CHUNK, S>(n, abi_transform(k), body);
}

template <int CHUNK, int S = DYNAMIC, class Body>
__device__ __forceinline__ void for_each(i64 n, Body body) {
  const i64 stride = (i64)blockDim.x * gridDim.x;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) body(i);
}

#else  // host
// an entry's loop, called by the CPU extension's kernel section: internal to it, as are the entry's
// lambdas and the instances made with them (which the compiler then inlines as functions called once)
#define VDB_ENTRY static inline

// Threads of the host loops (OpenMP's; 1 without OpenMP).
inline int max_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// The threads of a host loop over n items handed out `grain` at a time: one for every GRAINS_PER_THREAD
// grains, so a call of fewer runs on the calling thread alone, without a team (the regions below take
// `if (threads > 1)`).  A thread without work still costs the region's start and its closing barrier
// (~10 ms a call on a busy 2-core machine: 66 particles cost as much as 10,000), and two threads lost
// to one at 1.2 grains (10,000 points of sampling: 1.5-2.8x slower) and won at 3.7 (30,000 points of
// lag4: 0.90x) there (benchmarks/bench_small_calls.py, docs/design.md).  Which thread computes a point
// never changes its result: every loop here writes per point, and the reductions (adjoint.h,
// counting_sort) are ordered independently of the thread count.
constexpr i64 GRAINS_PER_THREAD = 2;
inline int threads_for(i64 n, i64 grain) {
  const i64 grains = grain > 1 ? (n + grain - 1) / grain : n;
  const i64 wanted = grains / GRAINS_PER_THREAD;
  const int most = max_threads();
  return wanted <= 1 ? 1 : wanted < (i64)most ? (int)wanted : most;
}

// The loop of each thread: its own copy of the body (so that what it captures by value stays in the
// thread's registers), iterations handed out in chunks of CHUNK, dynamically or statically.
#define VDBFLOW_POINT_LOOP(call)                                  \
  Body local = body;                                              \
  if constexpr (S == STATIC) {                                    \
    _Pragma("omp for schedule(static, CHUNK)")                    \
    for (i64 i = 0; i < n; ++i) call;                             \
  } else {                                                        \
    _Pragma("omp for schedule(dynamic, CHUNK)")                   \
    for (i64 i = 0; i < n; ++i) call;                             \
  }

template <int CHUNK, int S = DYNAMIC, class Body>
inline void for_each_point(i64 n, const PointTransform& shared, Body body) {
  [[maybe_unused]] const int threads = threads_for(n, CHUNK);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const PointTransform xf = shared;  // each thread's own copy
    LeafCache cache;
    VDBFLOW_POINT_LOOP(local(i, xf, cache))
  }
}

// The same, each thread making the call's transform from the record k.
template <int CHUNK, int S = DYNAMIC, class Body>
inline void for_each_point(i64 n, const KernelAbi& k, Body body) {
  [[maybe_unused]] const int threads = threads_for(n, CHUNK);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const PointTransform xf = abi_transform(k);  // each thread's own
    LeafCache cache;
    VDBFLOW_POINT_LOOP(local(i, xf, cache))
  }
}

template <int CHUNK, int S = DYNAMIC, class Body>
inline void for_each(i64 n, Body body) {
  [[maybe_unused]] const int threads = threads_for(n, CHUNK);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    VDBFLOW_POINT_LOOP(local(i))
  }
}
#undef VDBFLOW_POINT_LOOP

// Output buffers of host entries, large ones 2 MiB aligned and advised for transparent huge pages as
// NumPy advises its own large arrays: a fresh 100 MB output then costs about 50 page faults instead of
// 25,000 (the kernel faults 4 KiB pages otherwise; measured on routing 4M points, most of the call's
// time outside the kernels).  Released with std::free.
inline void* large_alloc(size_t bytes) {
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

#ifdef _OPENMP
constexpr bool HOST_OPENMP = true;
#else
constexpr bool HOST_OPENMP = false;
#endif

inline void set_threads(int threads) {
#ifdef _OPENMP
  omp_set_num_threads(threads);
#else
  (void)threads;
#endif
}

// ---- the scattered variant -------------------------------------------------------------------------

constexpr i64 BATCH = 16;  // points located before the first of them is evaluated

template <class Body>
inline void for_each_batch(i64 n, const PointTransform& shared, Body body) {
  const i64 batches = (n + BATCH - 1) / BATCH;
  [[maybe_unused]] const int threads = threads_for(batches, 512);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const PointTransform xf = shared;  // each thread's own copy
    LeafCache cache;
    Body local = body;
#pragma omp for schedule(dynamic, 512)
    for (i64 b = 0; b < batches; ++b) {
      const i64 first = b * BATCH;
      local(first, (n - first) < BATCH ? (n - first) : BATCH, xf, cache);
    }
#ifdef VDBFLOW_HAVE_STREAM_STORE
    _mm_sfence();
#endif
  }
}

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

// Memory hint for scattered points: ask for the lines holding a located cell's corner values (pairs
// along z are adjacent in memory; a pair may straddle a line).
template <class T>
inline void prefetch_corners(const Cell<T>& cell, int C) {
  if (cell.kind == CELL_NAN) return;
  const int corners = cell.kind == CELL_LINEAR ? 8 : 1;
  for (int o = 0; o < corners; o += 2) {
    __builtin_prefetch(cell.corner[o]);
    __builtin_prefetch(cell.corner[o] + 2 * C - 1);
  }
}

constexpr i64 SCATTERED_MIN_POINTS = 16384;  // below this the volume's hot part stays in cache anyway
constexpr double COHERENT_FRACTION = 0.5;    // neighbour pairs sharing a leaf, above which points are coherent

// Fraction of sampled neighbour pairs (i, i + 1) whose base cells share a leaf: high for points sorted
// in space or walking along lines and planes, near zero for scattered points.
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

// Whether n points of a closest or linear call take the scattered variant (wider stencils never do).
template <class P>
bool scattered_points(int order, int mode, const P* pts, const PointTransform& xf, i64 n) {
  return mode <= MODE_LINEAR && (order == ORDER_SCATTERED || (order == ORDER_AUTO && n >= SCATTERED_MIN_POINTS &&
                                                              leaf_coherence(pts, xf, n) < COHERENT_FRACTION));
}

// ---- a stable counting sort --------------------------------------------------------------------------

// Sorts items 0 .. n-1 by bucket_of(i) in [0, buckets), stably: `threads` threads take contiguous blocks,
// count, and place their items in input order.  bucket (n) receives each item's bucket, bounds
// (buckets + 1) each bucket's first position and the total; place(i, at) puts item i at position `at`.
template <class BucketOf, class Place>
void counting_sort(i64 n, int buckets, int threads, int* bucket, i64* bounds, BucketOf bucket_of, Place place) {
  constexpr i64 SORT_GRAIN = 16384;  // items a thread takes at least (the grain of the routing loop)
  const int wanted = threads_for(n, SORT_GRAIN);
  threads = threads < wanted ? threads : wanted;
  std::vector<i64> counts((size_t)threads * buckets, 0);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
#ifdef _OPENMP
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
#else
    const int t = 0, nt = 1;
#endif
    const i64 begin = n * t / nt, end = n * (t + 1) / nt;
    i64* mine = counts.data() + (size_t)t * buckets;
    for (i64 i = begin; i < end; ++i) {
      const int b = bucket_of(i);
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
    for (i64 i = begin; i < end; ++i) place(i, mine[bucket[i]]++);
  }
}

// ---- dispatch: run-time facts to template instances --------------------------------------------------

template <class T>
struct TypeTag {
  typedef T type;
};
template <int N>
struct Fixed {
  static constexpr int value = N;
};
template <class Tag>
using type_of = typename Tag::type;

// Every value kind of abi.h.
template <class F>
inline void with_value_type(int kind, F&& f) {
  switch (kind) {
    case KIND_F32: f(TypeTag<float>()); break;
    case KIND_F64: f(TypeTag<double>()); break;
    case KIND_I32: f(TypeTag<int32_t>()); break;
    case KIND_I64: f(TypeTag<int64_t>()); break;
    case KIND_U32: f(TypeTag<uint32_t>()); break;
  }
}

// Float data only (the caller checked the kind): float32, else float64.
template <class F>
inline void with_float_type(int kind, F&& f) {
  if (kind == KIND_F32)
    f(TypeTag<float>());
  else
    f(TypeTag<double>());
}

template <class F>
inline void with_point_type(bool points_double, F&& f) {
  if (points_double)
    f(TypeTag<double>());
  else
    f(TypeTag<float>());
}

// The component counts compiled with a fixed NC: 1, 3, 4; any other C runs with NC = 0.
template <class F>
inline void with_components(int C, F&& f) {
  switch (C) {
    case 1: f(Fixed<1>()); break;
    case 3: f(Fixed<3>()); break;
    case 4: f(Fixed<4>()); break;
    default: f(Fixed<0>()); break;
  }
}

// f(TypeTag<T>(), Fixed<NC>(), TypeTag<P>()): the instance of a call's value kind (every kind, or with
// FloatOnly float32 / float64 only), component count C and point type.
template <bool FloatOnly, class F>
inline void with_instance(int kind, int C, bool points_double, F&& f) {
  auto typed = [&](auto t) {
    with_point_type(points_double, [&](auto p) { with_components(C, [&](auto nc) { f(t, nc, p); }); });
  };
  if constexpr (FloatOnly)
    with_float_type(kind, typed);
  else
    with_value_type(kind, typed);
}

#endif  // host

// ---- entries without a grid record: scatter_rows and active_voxels_at (operations.h) ------------------------

// dst[index[r]] = src[r] for m rows of `row` bytes (the assembly of routed results; indices checked).
VDB_ENTRY void scatter_rows_points(char* dst, const i64* index, const char* src, i64 m, i64 row) {
#ifdef VDB_DEVICE_COMPILE
  for_each<1>(m * row, [&](i64 e) { dst[index[e / row] * row + e % row] = src[e]; });
#else
  for_each<16384, STATIC>(m, [&](i64 r) { std::memcpy(dst + index[r] * row, src + r * row, (size_t)row); });
#endif
}

// Voxels ijk (n, 3) of the active voxels of ranks rank (n,) (grid.h active_voxel_at; ranks checked).
VDB_ENTRY void active_voxels_points(const int* origins, const u64* masks, const i64* leaf_end, i64 leaves,
                                    const i64* rank, i64 n, int* ijk) {
  for_each<4096, STATIC>(n, [&](i64 r) { active_voxel_at(origins, masks, leaf_end, leaves, rank[r], ijk + 3 * r); });
}

#ifdef VDB_DEVICE_COMPILE
// one thread a byte of the rows
extern "C" __global__ void VDB_BOUNDS_FILL VDBFLOW_GPU_ENTRY(scatter_rows) {
  scatter_rows_points(dst, index, src, m, row_bytes);
}

// Voxels ijk (n, 3) int32 of the active voxels of ranks rank (n,) in OnIndex order; leaf_end (L,) the running
// count of active voxels at the end of each leaf.
extern "C" __global__ void VDB_BOUNDS_FILL VDBFLOW_GPU_ENTRY(active_voxels_at) {
  active_voxels_points(origins, masks, leaf_end, leaves, rank, n, ijk);
}
#else
VDBFLOW_CPU_ENTRY(scatter_rows) { scatter_rows_points((char*)dst, index, (const char*)src, m, row); }

VDBFLOW_CPU_ENTRY(active_voxels_at) {
  active_voxels_points(origins, masks, leaf_end, leaves, rank, n, ijk);
}
#endif

}  // namespace vdbflow
