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
#include "vdbflow/operations.h"
#include "vdbflow/reduce.h"
#include "vdbflow/route.h"

// The entry points of one compilation of the kernel section: one function pointer per row of the table of
// operations (vdbflow/operations.h), with the row's CPU parameters.  A record (KernelAbi) travels as a
// vdbflow_op_record, a spec (ReduceSpec, RouteSpec, AdvectSpec, ...) as a vdbflow_op_spec: the same plain data in
// every compilation, a type of each compilation's own namespace.
struct VdbflowCpuKernels {
#define VDBFLOW_CPU_ENTRY_POINTER(name, gpu_entry, value_types, gpu_components, cpu_parameters, gpu_parameters) \
  void(*name) cpu_parameters;
  VDBFLOW_OPERATIONS(VDBFLOW_CPU_ENTRY_POINTER)
#undef VDBFLOW_CPU_ENTRY_POINTER
};

namespace {

using namespace vdbflow;

void sample_entry(vdbflow_op_record abi, const void* points, bool dbl, i64 n, void* out_v, void* out_j, int order) {
  const KernelAbi& k = *(const KernelAbi*)abi;
  with_instance<false>(k.value_kind, k.components, dbl, [&](auto t, auto nc, auto p) {
    typedef type_of<decltype(t)> T;
    typedef type_of<decltype(p)> P;
    typedef typename RealOf<T>::type R;
    sample_points<T, decltype(nc)::value, P>(k, (const P*)points, n, (T*)out_v, (R*)out_j, order);
  });
}

void sample_derived_entry(vdbflow_op_record abi, const void* points, bool dbl, i64 n, void* out_v, void* out_j,
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

void sample_hessian_entry(vdbflow_op_record abi, const void* points, bool dbl, i64 n, void* out_v, void* out_j, void* out_h) {
  const KernelAbi& k = *(const KernelAbi*)abi;
  with_instance<true>(k.value_kind, k.components, dbl, [&](auto t, auto nc, auto p) {
    typedef type_of<decltype(t)> T;
    typedef type_of<decltype(p)> P;
    typedef typename RealOf<T>::type R;
    hessian_points<T, decltype(nc)::value, P>(k, (const P*)points, n, (T*)out_v, (R*)out_j, (R*)out_h);
  });
}

void sample_vjp_entry(vdbflow_op_record abi, const void* points, bool dbl, i64 n, const void* adj_v, const void* adj_j,
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

void grid_gradient_entry(vdbflow_op_record abi, const int* origins, const i64* first_row, i64 leaves, void* out) {
  const KernelAbi& k = *(const KernelAbi*)abi;
  with_float_type(k.value_kind, [&](auto t) {
    typedef type_of<decltype(t)> T;
    with_components(k.components, [&](auto nc) {
      grid_gradient_leaves<T, decltype(nc)::value>(k, origins, first_row, leaves, (typename RealOf<T>::type*)out);
    });
  });
}

void stencil_inside_entry(vdbflow_op_record abi, const double* points, i64 n, bool* out) {
  stencil_inside_points(*(const KernelAbi*)abi, points, n, out);
}

void route_entry(vdbflow_op_spec r, const double* xform, bool world, const void* points, bool dbl, i64 n, int threads,
                 int* bucket, i64* order, void* sorted, i64* bounds) {
  const PointTransform xf = make_point_transform(xform, world, 0);
  with_point_type(dbl, [&](auto p) {
    typedef type_of<decltype(p)> P;
    route_sorted(*(const RouteSpec*)r, xf, (const P*)points, n, threads, bucket, order, (P*)sorted, bounds);
  });
}

void advect_entry(vdbflow_op_record abi, vdbflow_op_spec s, double* x, i64 n, double* position, double* velocity,
                  double* jacobian, double* F, signed char* status, i64* last_step, int* evaluations) {
  const KernelAbi& k = *(const KernelAbi*)abi;
  with_float_type(k.value_kind, [&](auto t) {
    advect_points<type_of<decltype(t)>>(k, *(const AdvectSpec*)s, x, n, position, velocity, jacobian, F, status,
                                        last_step, evaluations);
  });
}

void advect_series_entry(const void* abis, vdbflow_op_spec s, vdbflow_op_spec ss, double* x, i64 n, double* position,
                         double* velocity, double* jacobian, double* F, signed char* status, i64* last_step,
                         i64* evaluations) {
  const KernelAbi* k = (const KernelAbi*)abis;
  with_float_type(k[0].value_kind, [&](auto t) {
    advect_series_points<type_of<decltype(t)>>(k, *(const AdvectSpec*)s, *(const SeriesSpec*)ss, x, n, position,
                                               velocity, jacobian, F, status, last_step, evaluations);
  });
}

void active_voxels_at_entry(const int* origins, const unsigned long long* masks, const i64* leaf_end, i64 leaves, const i64* rank,
                         i64 n, int* ijk) {
  active_voxels_points(origins, (const u64*)masks, (const i64*)leaf_end, leaves, (const i64*)rank, n, ijk);
}

void defined_voxels_entry(vdbflow_op_record abi, const i64* ijk, i64 n, bool* out) {
  defined_voxels_points(*(const KernelAbi*)abi, ijk, n, out);
}

void scatter_rows_entry(void* dst, const i64* index, const void* src, i64 m, i64 row) {
  scatter_rows_points((char*)dst, index, (const char*)src, m, row);
}

void sample_reduce_entry(vdbflow_op_record abi, const void* points, bool dbl, i64 n, vdbflow_op_spec spec, const double* edges,
                         i64 n_ints, i64 n_reals, i64* ints, double* reals, int order) {
  const KernelAbi& k = *(const KernelAbi*)abi;
  with_instance<true>(k.value_kind, k.components, dbl, [&](auto t, auto nc, auto p) {
    typedef type_of<decltype(t)> T;
    typedef type_of<decltype(p)> P;
    sample_reduce_points<T, decltype(nc)::value, P>(k, (const P*)points, n, *(const ReduceSpec*)spec, edges, n_ints,
                                                    n_reals, ints, reals, order);
  });
}

void reduce_features_entry(vdbflow_op_spec spec, const double* edges, const void* features, bool dbl, i64 n, i64 n_ints,
                           i64 n_reals, i64* ints, double* reals) {
  const ReduceSpec& s = *(const ReduceSpec*)spec;
  if (dbl)
    reduce_feature_rows<double>(s, edges, (const double*)features, n, n_ints, n_reals, ints, reals);
  else
    reduce_feature_rows<float>(s, edges, (const float*)features, n, n_ints, n_reals, ints, reals);
}

void merge_partials_entry(vdbflow_op_spec spec, i64 n_ints, i64* ints, double* reals, const i64* ints_b,
                          const double* reals_b) {
  merge_partial_into(*(const ReduceSpec*)spec, n_ints, ints, reals, ints_b, reals_b);
}

#define VDBFLOW_CPU_ENTRY(name, gpu_entry, value_types, gpu_components, cpu_parameters, gpu_parameters) &name##_entry,
const VdbflowCpuKernels KERNELS = {VDBFLOW_OPERATIONS(VDBFLOW_CPU_ENTRY)};
#undef VDBFLOW_CPU_ENTRY

}  // namespace

