// cpu_kernels.h - the kernel section of the CPU extension: its entry points, compiled once per CPU target.
//
// Included by cpu_module.cpp only (its entries are internal to it), and so compiled for the portable baseline and again for each wider target
// (CMakeLists.txt: VDBFLOW_CPU_VARIANTS), each time with the namespace vdbflow renamed so that no template
// of the headers is shared between targets.  Each entry picks the template instance of a call (launch.h
// with_instance, with_float_type, ...) and runs the shared loop of vdbflow/*.h (sample_points,
// hessian_points, adjoint_points, ...: the same functions sample.cu launches on the GPU) - OpenMP loops
// here (launch.h for_each_point).  Coverage and routing run in the same compilation as sampling: a point's
// index coordinates, its base cell and the stencil it reads then come out alike to the last bit (a wider
// target contracts the transform's products into FMAs).
#pragma once
#include <type_traits>

#include "vdbflow/adjoint.h"
#include "vdbflow/advect.h"
#include "vdbflow/derived.h"
#include "vdbflow/hessian.h"
#include "vdbflow/route.h"

// The entry points of one compilation of the kernel section.  A record (KernelAbi), routing's RouteSpec
// and the particles' AdvectSpec travel as `const void*`: the same plain data in every compilation, a
// type of each compilation's own namespace.
struct VdbflowCpuKernels {
  typedef long long i64;
  // values (N, C) and Jacobians (N, C, 3) or null of points (N, 3) float or double (points_double)
  void (*sample)(const void* k, const void* points, bool points_double, i64 n, void* out_v, void* out_j, int order);
  // fused: values (N, 3) and Jacobians (N, 3, 3) where not null, and the derived quantities whose buffers
  // derived[q] are not null (derived.h), of a vec3 float grid
  void (*sample_derived)(const void* k, const void* points, bool points_double, i64 n, void* out_v, void* out_j,
                         void* const* derived, int order);
  // the derived quantities of Jacobians (N, 3, 3) and velocities (N, 3) or null, float or double (is_double)
  void (*derive)(const void* jacobian, const void* velocity, bool is_double, i64 n, void* const* derived);
  // and Hessians (N, C, 3, 3)
  void (*hessian)(const void* k, const void* points, bool points_double, i64 n, void* out_v, void* out_j,
                  void* out_h);
  // the reverse mode: corner shares into accumulator, point adjoints into adj_p
  void (*vjp)(const void* k, const void* points, bool points_double, i64 n, const void* adj_v, const void* adj_j,
              double* accumulator, void* adj_p);
  // node Jacobians of every active voxel, leaf by leaf
  void (*grid_gradient)(const void* k, const int* origins, const i64* first_row, i64 leaves, void* out);
  // coverage: whether each point's stencil reads only defined voxels
  void (*stencil_inside)(const void* k, const double* points, i64 n, bool* out);
  // the partition of each point and a stable sort by partition
  void (*route)(const void* r, const double* xform, bool points_world, const void* points, bool points_double, i64 n,
                int threads, int* bucket, i64* order, void* sorted, i64* bounds);
  // voxels of active-voxel ranks (the rank-select of random points: popcounts, and pdep where the target has it)
  void (*active_voxels)(const int* origins, const void* masks, const i64* leaf_end, i64 leaves, const i64* rank, i64 n,
                        int* ijk);
  // particle trajectories through a steady vec3 volume
  void (*advect)(const void* k, const void* s, double* x, i64 n, double* position, double* velocity,
                 double* jacobian, double* F, signed char* status, i64* last_step, int* evaluations);
  // the same through a window of a series' steps (k: an array of records, ss: the SeriesSpec)
  void (*advect_series)(const void* k, const void* s, const void* ss, double* x, i64 n, double* position,
                        double* velocity, double* jacobian, double* F, signed char* status, i64* last_step,
                        i64* evaluations);
};

namespace {

using namespace vdbflow;

void sample_entry(const void* abi, const void* points, bool dbl, i64 n, void* out_v, void* out_j, int order) {
  const KernelAbi& k = *(const KernelAbi*)abi;
  with_instance<false>(k.value_kind, k.components, dbl, [&](auto t, auto nc, auto p) {
    typedef type_of<decltype(t)> T;
    typedef type_of<decltype(p)> P;
    typedef typename RealOf<T>::type R;
    sample_points<T, decltype(nc)::value, P>(k, (const P*)points, n, (T*)out_v, (R*)out_j, order);
  });
}

void sample_derived_entry(const void* abi, const void* points, bool dbl, i64 n, void* out_v, void* out_j,
                          void* const* derived, int order) {
  const KernelAbi& k = *(const KernelAbi*)abi;
  with_float_type(k.value_kind, [&](auto t) {
    typedef type_of<decltype(t)> T;
    typedef typename RealOf<T>::type R;
    with_point_type(dbl, [&](auto p) {
      typedef type_of<decltype(p)> P;
      sample_derived_points<T, 3, P>(k, (const P*)points, n, (T*)out_v, (R*)out_j, (R* const*)derived, order);
    });
  });
}

void derive_entry(const void* jacobian, const void* velocity, bool dbl, i64 n, void* const* derived) {
  if (dbl)
    derive_points<double>((const double*)jacobian, (const double*)velocity, n, (double* const*)derived);
  else
    derive_points<float>((const float*)jacobian, (const float*)velocity, n, (float* const*)derived);
}

void hessian_entry(const void* abi, const void* points, bool dbl, i64 n, void* out_v, void* out_j, void* out_h) {
  const KernelAbi& k = *(const KernelAbi*)abi;
  with_instance<true>(k.value_kind, k.components, dbl, [&](auto t, auto nc, auto p) {
    typedef type_of<decltype(t)> T;
    typedef type_of<decltype(p)> P;
    typedef typename RealOf<T>::type R;
    hessian_points<T, decltype(nc)::value, P>(k, (const P*)points, n, (T*)out_v, (R*)out_j, (R*)out_h);
  });
}

void vjp_entry(const void* abi, const void* points, bool dbl, i64 n, const void* adj_v, const void* adj_j,
               double* accumulator, void* adj_p) {
  const KernelAbi& k = *(const KernelAbi*)abi;
  with_instance<true>(k.value_kind, k.components, dbl, [&](auto t, auto nc, auto p) {
    typedef type_of<decltype(t)> T;
    typedef type_of<decltype(p)> P;
    typedef typename RealOf<T>::type R;
    adjoint_points<T, decltype(nc)::value, P>(k, (const P*)points, n, (const R*)adj_v, (const R*)adj_j, accumulator,
                                              (R*)adj_p);
  });
}

void grid_gradient_entry(const void* abi, const int* origins, const i64* first_row, i64 leaves, void* out) {
  const KernelAbi& k = *(const KernelAbi*)abi;
  with_float_type(k.value_kind, [&](auto t) {
    typedef type_of<decltype(t)> T;
    with_components(k.components, [&](auto nc) {
      grid_gradient_leaves<T, decltype(nc)::value>(k, origins, first_row, leaves, (typename RealOf<T>::type*)out);
    });
  });
}

void stencil_inside_entry(const void* abi, const double* points, i64 n, bool* out) {
  stencil_inside_points(*(const KernelAbi*)abi, points, n, out);
}

void route_entry(const void* r, const double* xform, bool world, const void* points, bool dbl, i64 n, int threads,
                 int* bucket, i64* order, void* sorted, i64* bounds) {
  const PointTransform xf = make_point_transform(xform, world, 0);
  with_point_type(dbl, [&](auto p) {
    typedef type_of<decltype(p)> P;
    route_sorted(*(const RouteSpec*)r, xf, (const P*)points, n, threads, bucket, order, (P*)sorted, bounds);
  });
}

void advect_entry(const void* abi, const void* s, double* x, i64 n, double* position, double* velocity,
                  double* jacobian, double* F, signed char* status, i64* last_step, int* evaluations) {
  const KernelAbi& k = *(const KernelAbi*)abi;
  with_float_type(k.value_kind, [&](auto t) {
    advect_points<type_of<decltype(t)>>(k, *(const AdvectSpec*)s, x, n, position, velocity, jacobian, F, status,
                                        last_step, evaluations);
  });
}

void advect_series_entry(const void* abis, const void* s, const void* ss, double* x, i64 n, double* position,
                         double* velocity, double* jacobian, double* F, signed char* status, i64* last_step,
                         i64* evaluations) {
  const KernelAbi* k = (const KernelAbi*)abis;
  with_float_type(k[0].value_kind, [&](auto t) {
    advect_series_points<type_of<decltype(t)>>(k, *(const AdvectSpec*)s, *(const SeriesSpec*)ss, x, n, position,
                                               velocity, jacobian, F, status, last_step, evaluations);
  });
}

void active_voxels_entry(const int* origins, const void* masks, const i64* leaf_end, i64 leaves, const i64* rank,
                         i64 n, int* ijk) {
  active_voxels_points(origins, (const u64*)masks, (const i64*)leaf_end, leaves, (const i64*)rank, n, ijk);
}

const VdbflowCpuKernels KERNELS = {&sample_entry,  &sample_derived_entry, &derive_entry,
                                   &hessian_entry, &vjp_entry,            &grid_gradient_entry,
                                   &stencil_inside_entry, &route_entry,   &active_voxels_entry,
                                   &advect_entry,  &advect_series_entry};

}  // namespace

