// sample.cu - CUDA entry points of the sampling kernels, compiled at run time by CuPy (NVRTC)
// and checked ahead of time with nvcc in the test suite.  The math is in vdbflow/sample.h,
// shared with the CPU build (cpu_module.cpp).
//
// One entry point per (value type, component count); component count 0 means "C at run time".
// Points are float64 (N, 3); outputs are values (N, C) of the value type and, when out_jacobian is
// not null, Jacobians (N, C, 3) of the accumulation type (float, or double for double data).
#include "vdbflow/adjoint.h"
#include "vdbflow/hessian.h"
#include "vdbflow/route.h"
#include "vdbflow/sample.h"
#include "vdbflow/schemes.h"

namespace vdbflow {

template <class T, int NC>
__device__ void sample_entry(const int* table0, unsigned mask0, const int* table1, unsigned mask1,
                             const int* table2, unsigned mask2, const u64* masks, const u16* prefix,
                             const i64* leaf_offset, const i64* leaf_values_at, const T* values,
                             const T* tile_values, const T* background, int components, int index_layout,
                             const double* points, i64 n, const double* xform, int points_world,
                             int jacobian_world, int mode, T* out_values,
                             typename RealOf<T>::type* out_jacobian) {
  const HashTable tables[LEVEL_COUNT] = {{table0, mask0}, {table1, mask1}, {table2, mask2}};
  const GridView<T> g = make_grid_view(tables, masks, prefix, leaf_offset, leaf_values_at, values, tile_values,
                                       background, components, index_layout);
  const PointTransform xf = make_point_transform(xform, points_world, jacobian_world);
  const bool want_jacobian = out_jacobian != nullptr;
  LeafCache cache;
  const i64 stride = (i64)blockDim.x * gridDim.x;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double p[3] = {points[3 * i], points[3 * i + 1], points[3 * i + 2]};
    sample_point<T, NC>(g, xf, p, mode, want_jacobian, out_values + i * components,
                        want_jacobian ? out_jacobian + i * 3 * components : nullptr, cache);
  }
}

// Values, Jacobians and Hessians (N, C, 3, 3) of float data (hessian.h); out_jacobian may be null.
template <class T, int NC>
__device__ void hessian_entry(const int* table0, unsigned mask0, const int* table1, unsigned mask1,
                              const int* table2, unsigned mask2, const u64* masks, const u16* prefix,
                              const i64* leaf_offset, const i64* leaf_values_at, const T* values,
                              const T* tile_values, const T* background, int components, int index_layout,
                              const double* points, i64 n, const double* xform, int points_world,
                              int jacobian_world, int hessian_world, int mode, T* out_values,
                              typename RealOf<T>::type* out_jacobian, typename RealOf<T>::type* out_hessian) {
  const HashTable tables[LEVEL_COUNT] = {{table0, mask0}, {table1, mask1}, {table2, mask2}};
  const GridView<T> g = make_grid_view(tables, masks, prefix, leaf_offset, leaf_values_at, values, tile_values,
                                       background, components, index_layout);
  const PointTransform xf = make_point_transform(xform, points_world, jacobian_world);
  LeafCache cache;
  const i64 stride = (i64)blockDim.x * gridDim.x;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double p[3] = {points[3 * i], points[3 * i + 1], points[3 * i + 2]};
    sample_point_hessian<T, NC>(g, xf, p, mode, hessian_world != 0, out_values + i * components,
                                out_jacobian ? out_jacobian + i * 3 * components : nullptr,
                                out_hessian + i * 9 * components, cache);
  }
}

// Reverse mode: corner shares are added to a float64 accumulator with atomicAdd, so on the GPU the
// order of the additions (and so the last bits of the sums) may change from run to run.
struct AtomicSink {
  double* accumulator;
  int components;
  __device__ void operator()(int, i64 row, int c, double x) const {
    atomicAdd(accumulator + row * components + c, x);
  }
};

template <class T, int NC>
__device__ void vjp_entry(const int* table0, unsigned mask0, const int* table1, unsigned mask1,
                          const int* table2, unsigned mask2, const u64* masks, const u16* prefix,
                          const i64* leaf_offset, const T* values, const T* tile_values,
                          const T* background, int components, int index_layout, i64 value_rows,
                          i64 tile_rows, const double* points, i64 n, const double* xform,
                          int points_world, int jacobian_world, int mode,
                          const typename RealOf<T>::type* adj_values,
                          const typename RealOf<T>::type* adj_jacobian, double* accumulator,
                          typename RealOf<T>::type* adj_points) {
  const HashTable tables[LEVEL_COUNT] = {{table0, mask0}, {table1, mask1}, {table2, mask2}};
  // reverse mode runs on contiguous values (leaf_values_at = null)
  const GridView<T> g = make_grid_view(tables, masks, prefix, leaf_offset, (const i64*)nullptr, values,
                                       tile_values, background, components, index_layout);
  const PointTransform xf = make_point_transform(xform, points_world, jacobian_world);
  const AdjointRows rows{value_rows, tile_rows};
  AtomicSink sink{accumulator, components};
  LeafCache cache;
  const i64 stride = (i64)blockDim.x * gridDim.x;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double p[3] = {points[3 * i], points[3 * i + 1], points[3 * i + 2]};
    adjoint_point<T, NC>(g, rows, xf, p, mode, adj_values + i * components,
                         adj_jacobian ? adj_jacobian + i * 3 * components : nullptr, sink,
                         adj_points + 3 * i, cache);
  }
}

}  // namespace vdbflow

#define VDBFLOW_VJP_ENTRY(NAME, T, NC)                                                                  \
  extern "C" __global__ void NAME(                                                                      \
      const int* table0, unsigned mask0, const int* table1, unsigned mask1, const int* table2,          \
      unsigned mask2, const vdbflow::u64* masks, const vdbflow::u16* prefix,                             \
      const vdbflow::i64* leaf_offset, const T* values, const T* tile_values, const T* background,       \
      int components, int index_layout, vdbflow::i64 value_rows, vdbflow::i64 tile_rows,                 \
      const double* points, vdbflow::i64 n, const double* xform, int points_world, int jacobian_world,   \
      int mode, const T* adj_values, const T* adj_jacobian, double* accumulator, T* adj_points) {        \
    vdbflow::vjp_entry<T, NC>(table0, mask0, table1, mask1, table2, mask2, masks, prefix, leaf_offset,    \
                              values, tile_values, background, components, index_layout, value_rows,     \
                              tile_rows, points, n, xform, points_world, jacobian_world, mode,           \
                              adj_values, adj_jacobian, accumulator, adj_points);                        \
  }

VDBFLOW_VJP_ENTRY(vdbflow_vjp_f32_c1, float, 1)
VDBFLOW_VJP_ENTRY(vdbflow_vjp_f32_c3, float, 3)
VDBFLOW_VJP_ENTRY(vdbflow_vjp_f32_c4, float, 4)
VDBFLOW_VJP_ENTRY(vdbflow_vjp_f32_cn, float, 0)
VDBFLOW_VJP_ENTRY(vdbflow_vjp_f64_c1, double, 1)
VDBFLOW_VJP_ENTRY(vdbflow_vjp_f64_c3, double, 3)
VDBFLOW_VJP_ENTRY(vdbflow_vjp_f64_c4, double, 4)
VDBFLOW_VJP_ENTRY(vdbflow_vjp_f64_cn, double, 0)

#define VDBFLOW_SAMPLE_ENTRY(NAME, T, NC)                                                               \
  extern "C" __global__ void NAME(                                                                      \
      const int* table0, unsigned mask0, const int* table1, unsigned mask1, const int* table2,          \
      unsigned mask2, const vdbflow::u64* masks, const vdbflow::u16* prefix,                             \
      const vdbflow::i64* leaf_offset, const vdbflow::i64* leaf_values_at, const T* values,             \
      const T* tile_values, const T* background,                                                         \
      int components, int index_layout, const double* points, vdbflow::i64 n, const double* xform,       \
      int points_world, int jacobian_world, int mode, T* out_values,                                     \
      vdbflow::RealOf<T>::type* out_jacobian) {                                                          \
    vdbflow::sample_entry<T, NC>(table0, mask0, table1, mask1, table2, mask2, masks, prefix,             \
                                 leaf_offset, leaf_values_at, values, tile_values, background, components, \
                                 index_layout, points, n, xform, points_world, jacobian_world, mode,     \
                                 out_values, out_jacobian);                                              \
  }

VDBFLOW_SAMPLE_ENTRY(vdbflow_sample_f32_c1, float, 1)
VDBFLOW_SAMPLE_ENTRY(vdbflow_sample_f32_c3, float, 3)
VDBFLOW_SAMPLE_ENTRY(vdbflow_sample_f32_c4, float, 4)
VDBFLOW_SAMPLE_ENTRY(vdbflow_sample_f32_cn, float, 0)
VDBFLOW_SAMPLE_ENTRY(vdbflow_sample_f64_c1, double, 1)
VDBFLOW_SAMPLE_ENTRY(vdbflow_sample_f64_c3, double, 3)
VDBFLOW_SAMPLE_ENTRY(vdbflow_sample_f64_c4, double, 4)
VDBFLOW_SAMPLE_ENTRY(vdbflow_sample_f64_cn, double, 0)
VDBFLOW_SAMPLE_ENTRY(vdbflow_sample_i32_cn, int, 0)
VDBFLOW_SAMPLE_ENTRY(vdbflow_sample_i64_cn, long long, 0)
VDBFLOW_SAMPLE_ENTRY(vdbflow_sample_u32_cn, unsigned int, 0)

#define VDBFLOW_HESSIAN_ENTRY(NAME, T, NC)                                                              \
  extern "C" __global__ void NAME(                                                                      \
      const int* table0, unsigned mask0, const int* table1, unsigned mask1, const int* table2,          \
      unsigned mask2, const vdbflow::u64* masks, const vdbflow::u16* prefix,                             \
      const vdbflow::i64* leaf_offset, const vdbflow::i64* leaf_values_at, const T* values,             \
      const T* tile_values, const T* background, int components, int index_layout, const double* points, \
      vdbflow::i64 n, const double* xform, int points_world, int jacobian_world, int hessian_world,      \
      int mode, T* out_values, T* out_jacobian, T* out_hessian) {                                        \
    vdbflow::hessian_entry<T, NC>(table0, mask0, table1, mask1, table2, mask2, masks, prefix, leaf_offset, \
                                  leaf_values_at, values, tile_values, background, components,           \
                                  index_layout, points, n, xform, points_world, jacobian_world,          \
                                  hessian_world, mode, out_values, out_jacobian, out_hessian);           \
  }

VDBFLOW_HESSIAN_ENTRY(vdbflow_hessian_f32_c1, float, 1)
VDBFLOW_HESSIAN_ENTRY(vdbflow_hessian_f32_c3, float, 3)
VDBFLOW_HESSIAN_ENTRY(vdbflow_hessian_f32_cn, float, 0)
VDBFLOW_HESSIAN_ENTRY(vdbflow_hessian_f64_c1, double, 1)
VDBFLOW_HESSIAN_ENTRY(vdbflow_hessian_f64_c3, double, 3)
VDBFLOW_HESSIAN_ENTRY(vdbflow_hessian_f64_cn, double, 0)

// Routing (route.h): the partition of each point (ROUTE_BACKGROUND for background-only points).
// The stable grouping by partition follows on the device with CuPy (a stable argsort of the codes).
extern "C" __global__ void vdbflow_route_partition(const double* points, vdbflow::i64 n, const double* xform,
                                                   int points_world, const vdbflow::i64* origin, int shift,
                                                   const vdbflow::u64* boundaries, int partitions,
                                                   const int* near_table, unsigned near_mask, int* out_partition) {
  vdbflow::RouteSpec r;
  for (int a = 0; a < 3; ++a) r.origin[a] = origin[a];
  r.shift = shift;
  r.boundaries = boundaries;
  r.partitions = partitions;
  r.near_blocks = vdbflow::HashTable{near_table, near_mask};
  const vdbflow::PointTransform xf = vdbflow::make_point_transform(xform, points_world, 0);
  const vdbflow::i64 stride = (vdbflow::i64)blockDim.x * gridDim.x;
  for (vdbflow::i64 i = (vdbflow::i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double p[3] = {points[3 * i], points[3 * i + 1], points[3 * i + 2]};
    out_partition[i] = vdbflow::route_point(r, xf, p);
  }
}
