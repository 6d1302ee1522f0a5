// operations.h - the table of the kernels' operations: one row per operation, read by every build.
//
// VDBFLOW_OPERATIONS(X) calls X(name, gpu_entry, value_types, gpu_components, cpu_signature) once per
// operation:
//   name            the operation, as the Python backends name it (vdbflow/devices: cpu.name, cuda.name,
//                   devices.run("name", ...));
//   gpu_entry       its entry point in sample.cu: a template over the value type (and the component
//                   count) when value_types is not OPERATION_UNTYPED, else an extern "C" function;
//   value_types     the value types it is instantiated for: OPERATION_ANY_VALUE (float, double, int,
//                   long long, unsigned int), OPERATION_FLOAT_VALUE (float, double) or OPERATION_UNTYPED;
//   gpu_components  the component counts the GPU entry is compiled for with a fixed count (0-terminated;
//                   NO_COMPONENT_PARAMETER: the template has no count); any other count runs with NC = 0.
//                   The CPU compiles every operation for 1, 3 and 4 (launch.h with_components): it has no
//                   registers to save;
//   cpu_signature   the parameter list of its entry in a CPU target's table (cpu_kernels.h): records and
//                   specs travel as const void*, the same plain data in every compilation.
//
// Built from this table: the CPU target's entry table (cpu_kernels.h VdbflowCpuKernels and KERNELS, each
// row's <name>_entry), the module's _core.OPERATIONS (cpu_module.cpp), and from that the CUDA backend's
// name expressions (vdbflow/devices/cuda.py TEMPLATES), the GPU emulation's entry table and the NVRTC
// test's list; tests/test_devices.py checks that both backends define each row.
#pragma once

#define OPERATION_ANY_VALUE 0
#define OPERATION_FLOAT_VALUE 1
#define OPERATION_UNTYPED 2
#define OPERATION_HOST 3  // no entry of its own in sample.cu: the CUDA backend composes it of other entries

namespace vdbflow {
constexpr int COMPONENTS_1_3_4[] = {1, 3, 4, 0};
constexpr int COMPONENTS_1_3[] = {1, 3, 0};
constexpr const int* NO_COMPONENT_PARAMETER = nullptr;
}  // namespace vdbflow

typedef long long vdbflow_op_i64;

#define VDBFLOW_OPERATIONS(X)                                                                                        \
  /* values (N, C) and Jacobians (N, C, 3) or null at points (N, 3) float or double (points_double) */               \
  X(sample, "sample_kernel", OPERATION_ANY_VALUE, COMPONENTS_1_3_4,                                                  \
    (const void* k, const void* points, bool points_double, vdbflow_op_i64 n, void* out_v, void* out_j, int order))  \
  /* fused: values, Jacobians and the derived quantities whose buffers derived[q] are not null (derived.h) */       \
  X(sample_derived, "sample_derived_kernel", OPERATION_FLOAT_VALUE, NO_COMPONENT_PARAMETER,                          \
    (const void* k, const void* points, bool points_double, vdbflow_op_i64 n, void* out_v, void* out_j,              \
     void* const* derived, int order))                                                                               \
  /* the derived quantities of Jacobians (N, 3, 3) and velocities (N, 3) or null */                                 \
  X(derive, "derive_kernel", OPERATION_FLOAT_VALUE, NO_COMPONENT_PARAMETER,                                          \
    (const void* jacobian, const void* velocity, bool is_double, vdbflow_op_i64 n, void* const* derived))           \
  /* values, Jacobians (or null) and Hessians (N, C, 3, 3) (hessian.h) */                                           \
  X(sample_hessian, "hessian_kernel", OPERATION_FLOAT_VALUE, COMPONENTS_1_3,                                         \
    (const void* k, const void* points, bool points_double, vdbflow_op_i64 n, void* out_v, void* out_j,              \
     void* out_h))                                                                                                   \
  /* the reverse mode (adjoint.h): corner shares into accumulator, point adjoints into adj_p */                     \
  X(sample_vjp, "vjp_kernel", OPERATION_FLOAT_VALUE, COMPONENTS_1_3_4,                                               \
    (const void* k, const void* points, bool points_double, vdbflow_op_i64 n, const void* adj_v, const void* adj_j,  \
     double* accumulator, void* adj_p))                                                                              \
  /* node Jacobians of every active voxel (schemes.h fd2 .. fd8) */                                                 \
  X(grid_gradient, "grid_gradient_kernel", OPERATION_FLOAT_VALUE, COMPONENTS_1_3_4,                                  \
    (const void* k, const int* origins, const vdbflow_op_i64* first_row, vdbflow_op_i64 leaves, void* out))          \
  /* particle trajectories through a steady vec3 volume (advect.h) */                                               \
  X(advect, "advect_kernel", OPERATION_FLOAT_VALUE, NO_COMPONENT_PARAMETER,                                          \
    (const void* k, const void* s, double* x, vdbflow_op_i64 n, double* position, double* velocity,                  \
     double* jacobian, double* F, signed char* status, vdbflow_op_i64* last_step, int* evaluations))                 \
  /* the same through a window of a series' steps (k: an array of records, ss: the SeriesSpec) */                   \
  X(advect_series, "advect_series_kernel", OPERATION_FLOAT_VALUE, NO_COMPONENT_PARAMETER,                            \
    (const void* k, const void* s, const void* ss, double* x, vdbflow_op_i64 n, double* position, double* velocity,  \
     double* jacobian, double* F, signed char* status, vdbflow_op_i64* last_step, vdbflow_op_i64* evaluations))      \
  /* the partition of each point and a stable sort by partition (route.h) */                                        \
  X(route, "vdbflow_route_partition", OPERATION_UNTYPED, NO_COMPONENT_PARAMETER,                                     \
    (const void* r, const double* xform, bool points_world, const void* points, bool points_double,                  \
     vdbflow_op_i64 n, int threads, int* bucket, vdbflow_op_i64* order, void* sorted, vdbflow_op_i64* bounds))       \
  /* coverage: whether each point's stencil reads only defined voxels (coverage.h) */                               \
  X(stencil_inside, "vdbflow_stencil_inside", OPERATION_UNTYPED, NO_COMPONENT_PARAMETER,                             \
    (const void* k, const double* points, vdbflow_op_i64 n, bool* out))                                              \
  /* coverage: whether each voxel (M, 3) int64 is active in a leaf or inside a tile (coverage.h) */                 \
  X(defined_voxels, "vdbflow_defined_voxels", OPERATION_UNTYPED, NO_COMPONENT_PARAMETER,                             \
    (const void* k, const vdbflow_op_i64* ijk, vdbflow_op_i64 n, bool* out))                                         \
  /* dst[index[r]] = src[r] for m rows of row bytes (the assembly of routed results) */                             \
  X(scatter_rows, "vdbflow_scatter_rows", OPERATION_UNTYPED, NO_COMPONENT_PARAMETER,                                 \
    (char* dst, const vdbflow_op_i64* index, const char* src, vdbflow_op_i64 m, vdbflow_op_i64 row))                 \
  /* voxels of active-voxel ranks (the rank-select of random points: popcounts, pdep where the target has it) */    \
  X(active_voxels_at, "vdbflow_active_voxels_at", OPERATION_UNTYPED, NO_COMPONENT_PARAMETER,                         \
    (const int* origins, const void* masks, const vdbflow_op_i64* leaf_end, vdbflow_op_i64 leaves,                   \
     const vdbflow_op_i64* rank, vdbflow_op_i64 n, int* ijk))                                                        \
  /* statistics in the sampling pass (reduce.h): histograms, moments, binned means into ints and reals */          \
  X(sample_reduce, "reduce_kernel", OPERATION_FLOAT_VALUE, COMPONENTS_1_3,                                           \
    (const void* k, const void* points, bool points_double, vdbflow_op_i64 n, const void* spec, const double* edges, \
     vdbflow_op_i64 n_ints, vdbflow_op_i64 n_reals, vdbflow_op_i64* ints, double* reals, int order))                 \
  /* the same statistics of given features (n, channels) float or double (reduce.h) */                             \
  X(reduce_features, "", OPERATION_HOST, NO_COMPONENT_PARAMETER,                                                     \
    (const void* spec, const double* edges, const void* features, bool is_double, vdbflow_op_i64 n,                  \
     vdbflow_op_i64 n_ints, vdbflow_op_i64 n_reals, vdbflow_op_i64* ints, double* reals))                            \
  /* one reduction's partial merged into another, as the kernels merge blocks (reduce.h); on the GPU the             \
     blocks' partials of a sample_reduce call, merged in block order */                                              \
  X(merge_partials, "vdbflow_reduce_merge", OPERATION_UNTYPED, NO_COMPONENT_PARAMETER,                               \
    (const void* spec, vdbflow_op_i64 n_ints, vdbflow_op_i64* ints, double* reals, const vdbflow_op_i64* ints_b,     \
     const double* reals_b))
