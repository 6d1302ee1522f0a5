// sample.cu - CUDA entry points of the sampling kernels, compiled at run time by CuPy (NVRTC)
// and checked ahead of time with nvcc in the test suite.  The math is in vdbflow/sample.h,
// shared with the CPU build (cpu_module.cpp).
//
// Each entry point is a template over the value type T and the component count NC (0: C at run
// time), instantiated on demand: the CUDA backend (vdbflow/devices/cuda.py) lists the instances it
// calls as CuPy name expressions ("vdbflow::sample_kernel<float, 3>") and NVRTC compiles those.
// Every entry point takes the call's KernelAbi record (abi.h: grid, transform, mode and spaces) by
// pointer to a device copy, then the call's arrays.  Points are float64 (N, 3); outputs are values
// (N, C) of the value type and, when out_jacobian is not null, Jacobians (N, C, 3) of the
// accumulation type (float, or double for double data).
#include "vdbflow/abi.h"
#include "vdbflow/adjoint.h"
#include "vdbflow/advect.h"
#include "vdbflow/hessian.h"
#include "vdbflow/route.h"
#include "vdbflow/sample.h"
#include "vdbflow/schemes.h"

namespace vdbflow {

template <class T, int NC>
__global__ void sample_kernel(const KernelAbi* abi, const double* points, i64 n, T* out_values,
                              typename RealOf<T>::type* out_jacobian) {
  const KernelAbi& a = *abi;
  const GridView<T> g = abi_grid<T>(a);
  const PointTransform xf = abi_transform(a);
  const int C = a.components, mode = a.mode;
  const bool want_jacobian = out_jacobian != nullptr;
  LeafCache cache;
  const i64 stride = (i64)blockDim.x * gridDim.x;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double p[3] = {points[3 * i], points[3 * i + 1], points[3 * i + 2]};
    sample_point<T, NC>(g, xf, p, mode, want_jacobian, out_values + i * C,
                        want_jacobian ? out_jacobian + i * 3 * C : nullptr, cache);
  }
}

// Values, Jacobians and Hessians (N, C, 3, 3) of float data (hessian.h); out_jacobian may be null.
template <class T, int NC>
__global__ void hessian_kernel(const KernelAbi* abi, const double* points, i64 n, T* out_values,
                               typename RealOf<T>::type* out_jacobian, typename RealOf<T>::type* out_hessian) {
  const KernelAbi& a = *abi;
  const GridView<T> g = abi_grid<T>(a);
  const PointTransform xf = abi_transform(a);
  const int C = a.components, mode = a.mode;
  const bool hessian_world = a.hessian_world != 0;
  LeafCache cache;
  const i64 stride = (i64)blockDim.x * gridDim.x;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double p[3] = {points[3 * i], points[3 * i + 1], points[3 * i + 2]};
    sample_point_hessian<T, NC>(g, xf, p, mode, hessian_world, out_values + i * C,
                                out_jacobian ? out_jacobian + i * 3 * C : nullptr, out_hessian + i * 9 * C, cache);
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
__global__ void vjp_kernel(const KernelAbi* abi, const double* points, i64 n,
                           const typename RealOf<T>::type* adj_values, const typename RealOf<T>::type* adj_jacobian,
                           double* accumulator, typename RealOf<T>::type* adj_points) {
  const KernelAbi& a = *abi;
  const GridView<T> g = abi_grid<T>(a, true);  // reverse mode runs on contiguous values
  const PointTransform xf = abi_transform(a);
  const int C = a.components, mode = a.mode;
  const AdjointRows rows{a.value_rows, a.tile_rows};
  AtomicSink sink{accumulator, C};
  LeafCache cache;
  const i64 stride = (i64)blockDim.x * gridDim.x;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double p[3] = {points[3 * i], points[3 * i + 1], points[3 * i + 2]};
    adjoint_point<T, NC>(g, rows, xf, p, mode, adj_values + i * C, adj_jacobian ? adj_jacobian + i * 3 * C : nullptr,
                         sink, adj_points + 3 * i, cache);
  }
}

// Particle trajectories through a steady vec3 volume (advect.h), one thread per particle: x (n, 3) float64
// is moved in place; a (stages, stages) and b (stages,) are the tableau (device arrays), save_slot (steps + 1,)
// the output slot of each step or -1; position (n, slots, 3), velocity (n, slots, 3), jacobian
// (n, slots, 3, 3) and F (n, 3, 3) are NaN-filled by the caller (null when not asked for).
template <class T>
__global__ void advect_kernel(const KernelAbi* abi, const double* a_coef, const double* b_coef, int stages, double h,
                              const i64* save_slot, i64 steps, i64 slots, double* x, i64 n, double* position,
                              double* velocity, double* jacobian, double* F, signed char* status, i64* last_step,
                              int* evaluations, int validate_end) {
  const KernelAbi& k = *abi;
  const GridView<T> g = abi_grid<T>(k);
  const PointTransform xf = abi_transform(k);
  AdvectSpec s;
  s.stages = stages;
  for (int i = 0; i < MAX_STAGES; ++i) {
    s.b[i] = i < stages ? b_coef[i] : 0.0;
    for (int j = 0; j < MAX_STAGES; ++j) s.a[i][j] = (i < stages && j < i) ? a_coef[i * stages + j] : 0.0;
  }
  s.h = h;
  s.steps = steps;
  s.save_slot = save_slot;
  s.slots = slots;
  stencil_taps(k.mode, s.lo, s.taps);
  s.want_velocity = velocity != nullptr;
  s.want_jacobian = jacobian != nullptr;
  s.variational = F != nullptr;
  s.validate_end = validate_end;
  LeafCache cache;
  const i64 stride = (i64)blockDim.x * gridDim.x;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    ParticleOut out{position + i * slots * 3, velocity ? velocity + i * slots * 3 : nullptr,
                    jacobian ? jacobian + i * slots * 9 : nullptr, F ? F + i * 9 : nullptr, status + i, last_step + i,
                    evaluations + i};
    advect_particle<T>(g, xf, k.mode, s, x + 3 * i, out, cache);
  }
}

}  // namespace vdbflow

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
