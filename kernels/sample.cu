// sample.cu - CUDA entry points of the kernels, compiled at run time with NVRTC, loaded by CuPy and checked ahead
// of time with nvcc in the test suite.  Each entry point is one launch of the shared loop of a header
// (vdbflow/*.h: sample_points, hessian_points, ...), the same function the CPU extension runs
// (cpu_kernels.h); launch.h makes it a grid-stride loop here, an OpenMP loop there.
//
// Each process compiles only the entries it calls, one NVRTC program per name expression, into a cache on
// disk (vdbflow/devices/cuda_build.py); the same source runs on the CPU under an emulation of CUDA
// (emulate/cuda_host.h, VDBFLOW_CUDA_EMULATE=1) so that the suite runs the device code without a GPU.
//
// Templates over the value type T and the component count NC (0: C at run time) are instantiated on
// demand: the CUDA backend (vdbflow/devices/cuda.py) lists the instances it calls as CuPy name
// expressions ("vdbflow::sample_kernel<float, 3>") and NVRTC compiles those.  Entry points that read a
// grid take the call's KernelAbi record (abi.h: grid, transform, mode and spaces) by pointer to a device
// copy, then the call's arrays.  Points are float64 (N, 3); outputs are values (N, C) of the value type
// and, where a Jacobian pointer is not null, Jacobians (N, C, 3) of the accumulation type (float, or
// double for double data).
#include "vdbflow/adjoint.h"
#include "vdbflow/advect.h"
#include "vdbflow/derived.h"
#include "vdbflow/hessian.h"
#include "vdbflow/reduce.h"
#include "vdbflow/route.h"

// Every entry is launched with VDB_THREADS_PER_BLOCK threads a block (the backend passes its block size as
// -DVDB_THREADS_PER_BLOCK=...).  Two launch bounds (docs/gpu.md "Occupancy"):
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

namespace vdbflow {

template <class T, int NC>
__global__ void VDB_BOUNDS_FILL sample_kernel(const KernelAbi* abi, const double* points, i64 n, T* out_values,
                              typename RealOf<T>::type* out_jacobian) {
  sample_points<T, NC>(*abi, points, n, out_values, out_jacobian);
}

// Fused (derived.h): values and Jacobians of a vec3 grid where their pointers are not null, and each derived
// quantity q whose pointer derived[q] (a device array of DERIVED_COUNT pointers) is not null.
template <class T>
__global__ void VDB_BOUNDS_FILL sample_derived_kernel(const KernelAbi* abi, const double* points, i64 n, T* out_values,
                                      typename RealOf<T>::type* out_jacobian, typename RealOf<T>::type* const* derived) {
  sample_derived_points<T, 3>(*abi, points, n, out_values, out_jacobian, derived);
}

// Derived quantities of Jacobians (n, 3, 3) and velocities (n, 3) or null (derived.h).
template <class R>
__global__ void VDB_BOUNDS_FILL derive_kernel(const R* jacobian, const R* velocity, i64 n, R* const* derived) {
  derive_points<R>(jacobian, velocity, n, derived);
}

// Values, Jacobians and Hessians (N, C, 3, 3) of float data (hessian.h); out_jacobian may be null.
template <class T, int NC>
__global__ void VDB_BOUNDS hessian_kernel(const KernelAbi* abi, const double* points, i64 n, T* out_values,
                               typename RealOf<T>::type* out_jacobian, typename RealOf<T>::type* out_hessian) {
  hessian_points<T, NC>(*abi, points, n, out_values, out_jacobian, out_hessian);
}

// Statistics in the sampling pass (reduce.h reduce_block_points), the first of two launches a call of n
// points: one block of threads per REDUCE_BLOCK points (its features to `features`, counts through shared
// memory into ints, its moment and per-bin partials to block_moments, dense and mark); vdbflow_reduce_merge
// then merges the partials in block order.  The CPU's accumulation in the CPU's order (counts equal; floats
// to rounding where compilers fuse multiply-adds differently); its threads synchronize
// (cuda_build.BLOCK_SYNCHRONIZED).
template <class T, int NC>
__global__ void VDB_BOUNDS reduce_kernel(const KernelAbi* abi, const double* points, i64 n, const ReduceSpec* spec,
                                         const double* edges, i64 n_ints, i64 n_reals, unsigned long long* ints,
                                         typename RealOf<T>::type* features, double* block_moments, double* dense,
                                         unsigned char* mark) {
  reduce_block_points<T, NC>(*abi, points, n, *spec, edges, n_ints, n_reals, ints, features, block_moments, dense,
                             mark);
}

// Reverse mode (adjoint.h): corner shares are added to a float64 accumulator with atomicAdd, so on the
// GPU the order of the additions (and so the last bits of the sums) may change from run to run.
template <class T, int NC>
__global__ void VDB_BOUNDS_FILL vjp_kernel(const KernelAbi* abi, const double* points, i64 n,
                           const typename RealOf<T>::type* adj_values, const typename RealOf<T>::type* adj_jacobian,
                           double* accumulator, typename RealOf<T>::type* adj_points) {
  adjoint_points<T, NC>(*abi, points, n, adj_values, adj_jacobian, accumulator, adj_points);
}

// Gradient field (schemes.h): the fd2 .. fd8 Jacobians (rows, C, 3) of the record's scheme at every active
// voxel, one thread per voxel, rows in OnIndex order; leaf_end (L,) is the running count of active voxels
// at the end of each leaf, origins (L, 3) int32 the leaves' origins.
template <class T, int NC>
__global__ void VDB_BOUNDS_FILL grid_gradient_kernel(const KernelAbi* abi, const int* origins, const i64* leaf_end, i64 leaves,
                                     i64 rows, typename RealOf<T>::type* out_jacobian) {
  grid_gradient_voxels<T, NC>(*abi, origins, leaf_end, leaves, rows, out_jacobian);
}

// Particle trajectories through a steady vec3 volume (advect.h), one thread per particle: x (n, 3) float64
// is moved in place; a (stages, stages) and b (stages,) are the tableau (device arrays), save_slot (steps + 1,)
// the output slot of each step or -1; position (n, slots, 3), velocity (n, slots, 3), jacobian
// (n, slots, 3, 3) and F (n, 3, 3) are NaN-filled by the caller (null when not asked for).
template <class T>
__global__ void VDB_BOUNDS advect_kernel(const KernelAbi* abi, const double* a_coef, const double* b_coef, int stages, double h,
                              const i64* save_slot, i64 steps, i64 slots, double* x, i64 n, double* position,
                              double* velocity, double* jacobian, double* F, signed char* status, i64* last_step,
                              int* evaluations, int validate_end) {
  const AdvectSpec s = make_advect_spec(abi->mode, a_coef, b_coef, stages, h, save_slot, steps, slots,
                                        velocity != nullptr, jacobian != nullptr, F != nullptr, validate_end != 0);
  advect_points<T>(*abi, s, x, n, position, velocity, jacobian, F, status, last_step, evaluations);
}

// The same through a window of a series' steps (advect.h advect_series_points): abis (grids,) device records
// of the window's grids, topology (grids,) the first grid sharing each one's topology, stage_grid
// (steps + 1, stages, 4) and stage_coef (steps + 1, stages, 8) the stages' grids and time coefficients;
// particles whose status is not active are left alone, evaluations (int64) are added to.
template <class T>
__global__ void VDB_BOUNDS advect_series_kernel(const KernelAbi* abis, int grids, const int* topology, int time_kind,
                                     const int* stage_grid, const double* stage_coef, i64 first_step,
                                     const double* a_coef, const double* b_coef, int stages, double h,
                                     const i64* save_slot, i64 steps, i64 slots, double* x, i64 n, double* position,
                                     double* velocity, double* jacobian, double* F, signed char* status,
                                     i64* last_step, i64* evaluations, int validate_end) {
  const AdvectSpec s = make_advect_spec(abis[0].mode, a_coef, b_coef, stages, h, save_slot, steps, slots,
                                        velocity != nullptr, jacobian != nullptr, F != nullptr, validate_end != 0);
  SeriesSpec ss;
  ss.time_kind = time_kind;
  ss.grids = grids;
  for (int q = 0; q < MAX_SERIES_GRIDS; ++q) ss.topology[q] = q < grids ? topology[q] : 0;
  ss.stage_grid = stage_grid;
  ss.stage_coef = stage_coef;
  ss.first_step = first_step;
  advect_series_points<T>(abis, s, ss, x, n, position, velocity, jacobian, F, status, last_step, evaluations);
}

}  // namespace vdbflow

// Routing (route.h): the partition of each point (ROUTE_BACKGROUND for background-only points).
// The stable grouping by partition follows on the device with CuPy (a stable argsort of the codes).
extern "C" __global__ void VDB_BOUNDS_FILL vdbflow_route_partition(const double* points, vdbflow::i64 n, const double* xform,
                                                   int points_world, const vdbflow::i64* origin, int shift,
                                                   const vdbflow::u64* boundaries, int partitions,
                                                   const int* near_table, unsigned near_mask,
                                                   const vdbflow::i64* period, int* out_partition) {
  using namespace vdbflow;
  const RouteSpec r =
      make_route_spec(origin, shift, boundaries, partitions, HashTable{near_table, near_mask}, period);
  route_partitions(r, make_point_transform(xform, points_world, 0), points, n, out_partition);
}

// Coverage (coverage.h): out (N,) whether each point's stencil of the record's mode reads only defined
// voxels; the record's tables, masks, transform and points_world are read, never its values.
extern "C" __global__ void VDB_BOUNDS_FILL vdbflow_stencil_inside(const vdbflow::KernelAbi* abi, const double* points,
                                                  vdbflow::i64 n, bool* out) {
  vdbflow::stencil_inside_points(*abi, points, n, out);
}

// Coverage (coverage.h): out (M,) whether each voxel ijk (M, 3) int64 is active in a leaf or inside a tile.
extern "C" __global__ void VDB_BOUNDS_FILL vdbflow_defined_voxels(const vdbflow::KernelAbi* abi, const vdbflow::i64* ijk,
                                                  vdbflow::i64 n, bool* out) {
  vdbflow::defined_voxels_points(*abi, ijk, n, out);
}

// dst[index[r]] = src[r] for m rows of row_bytes bytes (launch.h; indices checked by the caller).
extern "C" __global__ void VDB_BOUNDS_FILL vdbflow_scatter_rows(char* dst, const vdbflow::i64* index, const char* src, vdbflow::i64 m,
                                                vdbflow::i64 row_bytes) {
  vdbflow::scatter_rows_points(dst, index, src, m, row_bytes);
}

// Voxels ijk (n, 3) int32 of the active voxels of ranks rank (n,) in OnIndex order (grid.h active_voxel_at;
// ranks checked by the caller); leaf_end (L,) the running count of active voxels at the end of each leaf.
extern "C" __global__ void VDB_BOUNDS_FILL vdbflow_active_voxels_at(const int* origins, const vdbflow::u64* masks,
                                                    const vdbflow::i64* leaf_end, vdbflow::i64 leaves,
                                                    const vdbflow::i64* rank, vdbflow::i64 n, int* ijk) {
  vdbflow::active_voxels_points(origins, masks, leaf_end, leaves, rank, n, ijk);
}

// The blocks' partials of a reduce_kernel launch (blocks of them) merged in block order into reals (reduce.h
// merge_block_partials; grid-stride over moments + n_reals), dense and mark left zero.
extern "C" __global__ void VDB_BOUNDS_FILL vdbflow_reduce_merge(const vdbflow::ReduceSpec* spec, vdbflow::i64 blocks,
                                                vdbflow::i64 n_reals, double* reals, const double* block_moments,
                                                double* dense, unsigned char* mark) {
  vdbflow::merge_block_partials(*spec, blocks, n_reals, reals, block_moments, dense, mark);
}
