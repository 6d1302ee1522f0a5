// operations.h - the table of the kernels' operations: one row per operation, the one place its entries'
// parameters are declared, read by every build and by the Python backends.
//
// VDBFLOW_OPERATIONS(X) calls X(name, gpu_entry, value_types, gpu_components, cpu_parameters, gpu_parameters)
// once per operation:
//   name            the operation, as the Python backends name it (vdbflow/devices: cpu.name, cuda.name,
//                   devices.run("name", ...));
//   gpu_entry       its entry point in sample.cu: a template over the value type (and the component
//                   count) when value_types is not OPERATION_UNTYPED, else an extern "C" function;
//   value_types     the value types it is instantiated for: OPERATION_ANY_VALUE (float, double, int,
//                   long long, unsigned int), OPERATION_FLOAT_VALUE (float, double), OPERATION_UNTYPED, or
//                   OPERATION_HOST (no entry in sample.cu: the CUDA backend runs it on the host);
//   gpu_components  the component counts the GPU entry is compiled for with a fixed count (0-terminated;
//                   NO_COMPONENT_PARAMETER: the template has no count); any other count runs with NC = 0.
//                   The CPU compiles every operation for 1, 3 and 4 (launch.h with_components): it has no
//                   registers to save;
//   cpu_parameters  the typed, named parameters of its entry in a CPU target's table (cpu_kernels.h): records
//                   and specs travel as const void*, the same plain data in every compilation;
//   gpu_parameters  the typed, named parameters of its entry in sample.cu, T the value type and R its
//                   accumulation type (RealOf<T>): the CUDA backend's launch argument list is built from
//                   these names and types (vdbflow/devices/cuda_launch.py; int: int32, i64: int64,
//                   unsigned: uint32, double: float64, a pointer: a device array or null), and
//                   tests/test_devices.py holds them to sample.cu's definitions.
// VDBFLOW_GPU_STEPS(X) lists, in the same shape, the entries of sample.cu that are a step of an operation
// on the GPU rather than an operation of their own (no CPU entry, no backend function).
//
// Built from this table: the CPU target's entry table (cpu_kernels.h VdbflowCpuKernels and KERNELS, each
// row's <name>_entry), the module's binding of each row that takes no spec (cpu_module.cpp bind_row) and its
// _core.OPERATIONS and _core.GPU_STEPS (cpu_facts.h), and from those vdbflow.core.kernel.OPERATIONS: the
// interface's list of operations, the CPU backend's argument lists, the CUDA backend's name expressions and
// launch argument lists, the GPU emulation's entry table and the NVRTC test's list; tests/test_devices.py
// checks that both backends define each row.
#pragma once

#define OPERATION_ANY_VALUE 0
#define OPERATION_FLOAT_VALUE 1
#define OPERATION_UNTYPED 2
#define OPERATION_HOST 3  // no entry of its own in sample.cu: the CUDA backend runs it on the host

namespace vdbflow {
constexpr int COMPONENTS_1_3_4[] = {1, 3, 4, 0};
constexpr int COMPONENTS_1_3[] = {1, 3, 0};
constexpr const int* NO_COMPONENT_PARAMETER = nullptr;
}  // namespace vdbflow

typedef long long vdbflow_op_i64;
// a call's record (abi.h KernelAbi): Python passes its bytes, which the module checks (read_abi) before a kernel
// reads them; a distinct type, so that a row's parameters say which pointer is a record
typedef const struct vdbflow_op_record_bytes* vdbflow_op_record;
// a spec (ReduceSpec, AdvectSpec, SeriesSpec, RouteSpec) whose offsets and counts only the operation's own
// binding can check against its arrays: a row that takes one has a hand-written binding (cpu_module.cpp)
typedef const struct vdbflow_op_spec_bytes* vdbflow_op_spec;

// the GPU parameters every entry that samples a grid starts with: the call's record (abi.h) and points (N, 3)
#define VDBFLOW_GPU_POINTS const KernelAbi* abi, const double* points, i64 n

// the particle entries' common GPU parameters: the tableau, the steps' output slots, the particles and outputs
#define VDBFLOW_GPU_PARTICLES                                                                                   \
  const double* a_coef, const double* b_coef, int stages, double h, const i64* save_slot, i64 steps, i64 slots, \
      double* x, i64 n, double* position, double* velocity, double* jacobian, double* F, signed char* status,   \
      i64* last_step

#define VDBFLOW_OPERATIONS(X)                                                                                        \
  /* values (N, C) and Jacobians (N, C, 3) or null at points (N, 3) float or double (points_double) */               \
  X(sample, "sample_kernel", OPERATION_ANY_VALUE, COMPONENTS_1_3_4,                                                  \
    (vdbflow_op_record k, const void* points, bool points_double, vdbflow_op_i64 n, void* out_values,                \
     void* out_jacobian, int order),                                                                                 \
    (VDBFLOW_GPU_POINTS, T* out_values, R* out_jacobian))                                                            \
  /* fused: values, Jacobians and the derived quantities whose buffers derived[q] are not null (derived.h) */        \
  X(sample_derived, "sample_derived_kernel", OPERATION_FLOAT_VALUE, NO_COMPONENT_PARAMETER,                          \
    (vdbflow_op_record k, const void* points, bool points_double, vdbflow_op_i64 n, void* out_values,                \
     void* out_jacobian, void* const* derived, int order),                                                           \
    (VDBFLOW_GPU_POINTS, T* out_values, R* out_jacobian, R* const* derived))                                         \
  /* the derived quantities of Jacobians (N, 3, 3) and velocities (N, 3) or null */                                  \
  X(derive, "derive_kernel", OPERATION_FLOAT_VALUE, NO_COMPONENT_PARAMETER,                                          \
    (const void* jacobian, const void* velocity, bool jacobian_double, vdbflow_op_i64 n, void* const* derived),      \
    (const R* jacobian, const R* velocity, i64 n, R* const* derived))                                                \
  /* values, Jacobians (or null) and Hessians (N, C, 3, 3) (hessian.h) */                                            \
  X(sample_hessian, "hessian_kernel", OPERATION_FLOAT_VALUE, COMPONENTS_1_3,                                         \
    (vdbflow_op_record k, const void* points, bool points_double, vdbflow_op_i64 n, void* out_values,                \
     void* out_jacobian, void* out_hessian),                                                                         \
    (VDBFLOW_GPU_POINTS, T* out_values, R* out_jacobian, R* out_hessian))                                            \
  /* the reverse mode (adjoint.h): corner shares into accumulator, point adjoints into adj_p */                      \
  X(sample_vjp, "vjp_kernel", OPERATION_FLOAT_VALUE, COMPONENTS_1_3_4,                                               \
    (vdbflow_op_record k, const void* points, bool points_double, vdbflow_op_i64 n, const void* adj_values,          \
     const void* adj_jacobian, double* accumulator, void* adj_points),                                               \
    (VDBFLOW_GPU_POINTS, const R* adj_values, const R* adj_jacobian, double* accumulator, R* adj_points))            \
  /* node Jacobians of every active voxel (schemes.h fd2 .. fd8) */                                                  \
  X(grid_gradient, "grid_gradient_kernel", OPERATION_FLOAT_VALUE, COMPONENTS_1_3_4,                                  \
    (vdbflow_op_record k, const int* origins, const vdbflow_op_i64* first_row, vdbflow_op_i64 leaves, void* out),    \
    (const KernelAbi* abi, const int* origins, const i64* leaf_end, i64 leaves, i64 rows, R* out_jacobian))          \
  /* particle trajectories through a steady vec3 volume (advect.h) */                                                \
  X(advect, "advect_kernel", OPERATION_FLOAT_VALUE, NO_COMPONENT_PARAMETER,                                          \
    (vdbflow_op_record k, vdbflow_op_spec s, double* x, vdbflow_op_i64 n, double* position, double* velocity,        \
     double* jacobian, double* F, signed char* status, vdbflow_op_i64* last_step, int* evaluations),                 \
    (const KernelAbi* abi, VDBFLOW_GPU_PARTICLES, int* evaluations, int validate_end))                               \
  /* the same through a window of a series' steps (k: an array of records, ss: the SeriesSpec) */                    \
  X(advect_series, "advect_series_kernel", OPERATION_FLOAT_VALUE, NO_COMPONENT_PARAMETER,                            \
    (const void* k, vdbflow_op_spec s, vdbflow_op_spec ss, double* x, vdbflow_op_i64 n, double* position,            \
     double* velocity, double* jacobian, double* F, signed char* status, vdbflow_op_i64* last_step,                  \
     vdbflow_op_i64* evaluations),                                                                                   \
    (const KernelAbi* abis, int grids, const int* topology, int time_kind, const int* stage_grid,                    \
     const double* stage_coef, i64 first_step, VDBFLOW_GPU_PARTICLES, i64* evaluations, int validate_end))           \
  /* the partition of each point and a stable sort by partition (route.h) */                                         \
  X(route, "vdbflow_route_partition", OPERATION_UNTYPED, NO_COMPONENT_PARAMETER,                                     \
    (vdbflow_op_spec r, const double* xform, bool points_world, const void* points, bool points_double,              \
     vdbflow_op_i64 n, int threads, int* bucket, vdbflow_op_i64* order, void* sorted, vdbflow_op_i64* bounds),       \
    (const double* points, i64 n, const double* xform, int points_world, const i64* origin, int shift,               \
     const u64* boundaries, int partitions, const int* near_table, unsigned near_mask, const i64* period,            \
     int* out_partition))                                                                                            \
  /* coverage: whether each point's stencil reads only defined voxels (coverage.h) */                                \
  X(stencil_inside, "vdbflow_stencil_inside", OPERATION_UNTYPED, NO_COMPONENT_PARAMETER,                             \
    (vdbflow_op_record k, const double* points, vdbflow_op_i64 n, bool* out), (VDBFLOW_GPU_POINTS, bool* out))       \
  /* coverage: whether each voxel (M, 3) int64 is active in a leaf or inside a tile (coverage.h) */                  \
  X(defined_voxels, "vdbflow_defined_voxels", OPERATION_UNTYPED, NO_COMPONENT_PARAMETER,                             \
    (vdbflow_op_record k, const vdbflow_op_i64* ijk, vdbflow_op_i64 n, bool* out),                                   \
    (const KernelAbi* abi, const i64* ijk, i64 n, bool* out))                                                        \
  /* dst[index[r]] = src[r] for m rows of row bytes (the assembly of routed results) */                              \
  X(scatter_rows, "vdbflow_scatter_rows", OPERATION_UNTYPED, NO_COMPONENT_PARAMETER,                                 \
    (void* dst, const vdbflow_op_i64* index, const void* src, vdbflow_op_i64 m, vdbflow_op_i64 row),                 \
    (char* dst, const i64* index, const char* src, i64 m, i64 row_bytes))                                            \
  /* voxels of active-voxel ranks (the rank-select of random points: popcounts, pdep where the target has it) */     \
  X(active_voxels_at, "vdbflow_active_voxels_at", OPERATION_UNTYPED, NO_COMPONENT_PARAMETER,                         \
    (const int* origins, const unsigned long long* masks, const vdbflow_op_i64* leaf_end, vdbflow_op_i64 leaves,     \
     const vdbflow_op_i64* rank, vdbflow_op_i64 n, int* ijk),                                                        \
    (const int* origins, const u64* masks, const i64* leaf_end, i64 leaves, const i64* rank, i64 n, int* ijk))       \
  /* statistics in the sampling pass (reduce.h): histograms, moments, binned means into ints and reals; on the       \
     GPU a block's partials a REDUCE_BLOCK of points, merged by the step reduce_merge_blocks */                      \
  X(sample_reduce, "reduce_kernel", OPERATION_FLOAT_VALUE, COMPONENTS_1_3,                                           \
    (vdbflow_op_record k, const void* points, bool points_double, vdbflow_op_i64 n, vdbflow_op_spec spec,            \
     const double* edges, vdbflow_op_i64 n_ints, vdbflow_op_i64 n_reals, vdbflow_op_i64* ints, double* reals,        \
     int order),                                                                                                     \
    (VDBFLOW_GPU_POINTS, const ReduceSpec* spec, const double* edges, i64 n_ints, i64 n_reals,                       \
     unsigned long long* ints, R* features, double* block_moments, double* dense, unsigned char* mark))              \
  /* the same statistics of given features (n, channels) float or double (reduce.h) */                               \
  X(reduce_features, "", OPERATION_HOST, NO_COMPONENT_PARAMETER,                                                     \
    (vdbflow_op_spec spec, const double* edges, const void* features, bool is_double, vdbflow_op_i64 n,              \
     vdbflow_op_i64 n_ints, vdbflow_op_i64 n_reals, vdbflow_op_i64* ints, double* reals),                            \
    ())                                                                                                              \
  /* one reduction's host partial merged into another, as the kernels merge blocks (reduce.h) */                     \
  X(merge_partials, "", OPERATION_HOST, NO_COMPONENT_PARAMETER,                                                      \
    (vdbflow_op_spec spec, vdbflow_op_i64 n_ints, vdbflow_op_i64* ints, double* reals, const vdbflow_op_i64* ints_b, \
     const double* reals_b),                                                                                         \
    ())

#define VDBFLOW_GPU_STEPS(X)                                                                                     \
  /* sample_reduce's second launch: the blocks' partials of a reduce_kernel launch merged in block order */      \
  X(reduce_merge_blocks, "vdbflow_reduce_merge", OPERATION_UNTYPED, NO_COMPONENT_PARAMETER, (),                  \
    (const ReduceSpec* spec, i64 blocks, i64 n_reals, double* reals, const double* block_moments, double* dense, \
     unsigned char* mark))
