// operations.h - the table of the kernels' operations: one row per operation, the one place its entries'
// parameters are written, read by every build and by the Python backends.
//
// Each row is a macro VDBFLOW_OP_<name>(X), listed in VDBFLOW_OPERATIONS(X), which calls
// X(name, gpu_entry, value_types, gpu_components, cpu_parameters, gpu_parameters) once per operation:
//   name            the operation, as the Python backends name it (vdbflow/devices: cpu.name, cuda.name,
//                   devices.run("name", ...));
//   gpu_entry       its entry point on the GPU: a template over the value type (and the component count) when
//                   value_types is not OPERATION_UNTYPED, else an extern "C" function; empty for OPERATION_HOST;
//   value_types     the value types it is instantiated for: OPERATION_ANY_VALUE (float, double, int,
//                   long long, unsigned int), OPERATION_FLOAT_VALUE (float, double), OPERATION_UNTYPED, or
//                   OPERATION_HOST (no GPU entry: the CUDA backend runs it on the host);
//   gpu_components  the component counts the GPU entry is compiled for with a fixed count (0-terminated;
//                   NO_COMPONENT_PARAMETER: the template has no count); any other count runs with NC = 0.
//                   The CPU compiles every operation for 1, 3 and 4 (launch.h with_components): it has no
//                   registers to save;
//   cpu_parameters  the typed, named parameters of its entry in a CPU target's table (cpu_kernels.h): records
//                   and specs travel as const void*, the same plain data in every compilation;
//   gpu_parameters  the typed, named parameters of its GPU entry, T the value type and Real<T> its accumulation
//                   type (RealOf<T>; derive's template is over that type, R): the CUDA backend's launch argument list is built from these names and types
//                   (vdbflow/devices/cuda_launch.py; int: int32, i64: int64, unsigned: uint32, double: float64, a
//                   pointer: a device array or null).
// VDBFLOW_GPU_STEPS(X) lists, in the same shape, the GPU entries that are a step of an operation on the GPU
// rather than an operation of their own (no CPU entry, no backend function).
//
// An operation's entries are defined in its math header, after its loop, with the row's parameters:
//   VDBFLOW_CPU_ENTRY(name) { ... }   host compilations: `static void <name>_entry(<cpu_parameters>)`, which
//                                     picks the call's template instance (launch.h with_instance, ...) and runs
//                                     the loop (an OpenMP loop);
//   template <class T, int NC>        device compilations (VDB_DEVICE_COMPILE: sample.cu under NVRTC, nvcc or the
//   __global__ void VDB_BOUNDS_FILL   emulation): `<gpu_entry>(<gpu_parameters>)`, one launch of the same loop (a
//   VDBFLOW_GPU_ENTRY(name) { ... }   grid-stride loop); extern "C" for an untyped entry.
// So a new operation is its math header and its row here (+ its Python interface and tests): nothing else spells
// its parameters.
//
// Built from this table: the CPU target's entry table (cpu_kernels.h VdbflowCpuKernels and KERNELS), the module's
// binding of each row that takes no spec (cpu_module.cpp bind_row) and its _core.OPERATIONS and _core.GPU_STEPS
// (cpu_facts.h), and from those vdbflow.core.kernel.OPERATIONS: the interface's list of operations, the CPU
// backend's argument lists, the CUDA backend's name expressions and launch argument lists, the GPU emulation's
// entry table and the NVRTC test's list; tests/test_devices.py checks that both backends define each row and that
// each row's entries are defined once.
#pragma once

#define OPERATION_ANY_VALUE 0
#define OPERATION_FLOAT_VALUE 1
#define OPERATION_UNTYPED 2
#define OPERATION_HOST 3  // no GPU entry of its own: the CUDA backend runs it on the host

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

// values (N, C) and Jacobians (N, C, 3) or null at points (N, 3) float or double (points_double) (schemes.h)
#define VDBFLOW_OP_sample(X)                                                                                         \
  X(sample, sample_kernel, OPERATION_ANY_VALUE, COMPONENTS_1_3_4,                                                    \
    (vdbflow_op_record k, const void* points, bool points_double, vdbflow_op_i64 n, void* out_values,                \
     void* out_jacobian, int order),                                                                                 \
    (VDBFLOW_GPU_POINTS, T* out_values, Real<T>* out_jacobian))

// fused: values, Jacobians and the derived quantities whose buffers derived[q] are not null (derived.h)
#define VDBFLOW_OP_sample_derived(X)                                                                                 \
  X(sample_derived, sample_derived_kernel, OPERATION_FLOAT_VALUE, NO_COMPONENT_PARAMETER,                            \
    (vdbflow_op_record k, const void* points, bool points_double, vdbflow_op_i64 n, void* out_values,                \
     void* out_jacobian, void* const* derived, int order),                                                           \
    (VDBFLOW_GPU_POINTS, T* out_values, Real<T>* out_jacobian, Real<T>* const* derived))

// the derived quantities of Jacobians (N, 3, 3) and velocities (N, 3) or null (derived.h)
#define VDBFLOW_OP_derive(X)                                                                                         \
  X(derive, derive_kernel, OPERATION_FLOAT_VALUE, NO_COMPONENT_PARAMETER,                                            \
    (const void* jacobian, const void* velocity, bool jacobian_double, vdbflow_op_i64 n, void* const* derived),      \
    (const R* jacobian, const R* velocity, i64 n, R* const* derived))

// values, Jacobians (or null) and Hessians (N, C, 3, 3) (hessian.h)
#define VDBFLOW_OP_sample_hessian(X)                                                                                 \
  X(sample_hessian, hessian_kernel, OPERATION_FLOAT_VALUE, COMPONENTS_1_3,                                           \
    (vdbflow_op_record k, const void* points, bool points_double, vdbflow_op_i64 n, void* out_values,                \
     void* out_jacobian, void* out_hessian),                                                                         \
    (VDBFLOW_GPU_POINTS, T* out_values, Real<T>* out_jacobian, Real<T>* out_hessian))

// the reverse mode (adjoint.h): corner shares into accumulator, point adjoints into adj_points
#define VDBFLOW_OP_sample_vjp(X)                                                                                     \
  X(sample_vjp, vjp_kernel, OPERATION_FLOAT_VALUE, COMPONENTS_1_3_4,                                                 \
    (vdbflow_op_record k, const void* points, bool points_double, vdbflow_op_i64 n, const void* adj_values,          \
     const void* adj_jacobian, double* accumulator, void* adj_points),                                               \
    (VDBFLOW_GPU_POINTS, const Real<T>* adj_values, const Real<T>* adj_jacobian, double* accumulator,                \
     Real<T>* adj_points))

// node Jacobians of every active voxel (schemes.h fd2 .. fd8)
#define VDBFLOW_OP_grid_gradient(X)                                                                                  \
  X(grid_gradient, grid_gradient_kernel, OPERATION_FLOAT_VALUE, COMPONENTS_1_3_4,                                    \
    (vdbflow_op_record k, const int* origins, const vdbflow_op_i64* first_row, vdbflow_op_i64 leaves, void* out),    \
    (const KernelAbi* abi, const int* origins, const i64* leaf_end, i64 leaves, i64 rows, Real<T>* out_jacobian))

// particle trajectories through a steady vec3 volume (advect.h)
#define VDBFLOW_OP_advect(X)                                                                                         \
  X(advect, advect_kernel, OPERATION_FLOAT_VALUE, NO_COMPONENT_PARAMETER,                                            \
    (vdbflow_op_record k, vdbflow_op_spec s, double* x, vdbflow_op_i64 n, double* position, double* velocity,        \
     double* jacobian, double* F, signed char* status, vdbflow_op_i64* last_step, int* evaluations),                 \
    (const KernelAbi* abi, VDBFLOW_GPU_PARTICLES, int* evaluations, int validate_end))

// the same through a window of a series' steps (k: an array of records, ss: the SeriesSpec) (advect.h)
#define VDBFLOW_OP_advect_series(X)                                                                                  \
  X(advect_series, advect_series_kernel, OPERATION_FLOAT_VALUE, NO_COMPONENT_PARAMETER,                              \
    (const void* k, vdbflow_op_spec s, vdbflow_op_spec ss, double* x, vdbflow_op_i64 n, double* position,            \
     double* velocity, double* jacobian, double* F, signed char* status, vdbflow_op_i64* last_step,                  \
     vdbflow_op_i64* evaluations),                                                                                   \
    (const KernelAbi* abis, int grids, const int* topology, int time_kind, const int* stage_grid,                    \
     const double* stage_coef, i64 first_step, VDBFLOW_GPU_PARTICLES, i64* evaluations, int validate_end))

// the partition of each point and, on the CPU, a stable sort by partition (route.h)
#define VDBFLOW_OP_route(X)                                                                                          \
  X(route, vdbflow_route_partition, OPERATION_UNTYPED, NO_COMPONENT_PARAMETER,                                       \
    (vdbflow_op_spec r, const double* xform, bool points_world, const void* points, bool points_double,              \
     vdbflow_op_i64 n, int threads, int* bucket, vdbflow_op_i64* order, void* sorted, vdbflow_op_i64* bounds),       \
    (const double* points, i64 n, const double* xform, int points_world, const i64* origin, int shift,               \
     const u64* boundaries, int partitions, const int* near_table, unsigned near_mask, const i64* period,            \
     int* out_partition))

// coverage: whether each point's stencil reads only defined voxels (coverage.h)
#define VDBFLOW_OP_stencil_inside(X)                                                                                 \
  X(stencil_inside, vdbflow_stencil_inside, OPERATION_UNTYPED, NO_COMPONENT_PARAMETER,                               \
    (vdbflow_op_record k, const double* points, vdbflow_op_i64 n, bool* out),                                        \
    (VDBFLOW_GPU_POINTS, bool* out))

// coverage: whether each voxel (M, 3) int64 is active in a leaf or inside a tile (coverage.h)
#define VDBFLOW_OP_defined_voxels(X)                                                                                 \
  X(defined_voxels, vdbflow_defined_voxels, OPERATION_UNTYPED, NO_COMPONENT_PARAMETER,                               \
    (vdbflow_op_record k, const vdbflow_op_i64* ijk, vdbflow_op_i64 n, bool* out),                                   \
    (const KernelAbi* abi, const i64* ijk, i64 n, bool* out))

// dst[index[r]] = src[r] for m rows of row bytes (the assembly of routed results) (launch.h)
#define VDBFLOW_OP_scatter_rows(X)                                                                                   \
  X(scatter_rows, vdbflow_scatter_rows, OPERATION_UNTYPED, NO_COMPONENT_PARAMETER,                                   \
    (void* dst, const vdbflow_op_i64* index, const void* src, vdbflow_op_i64 m, vdbflow_op_i64 row),                 \
    (char* dst, const i64* index, const char* src, i64 m, i64 row_bytes))

// voxels of active-voxel ranks (the rank-select of random points: popcounts, pdep where the target has it) (launch.h)
#define VDBFLOW_OP_active_voxels_at(X)                                                                               \
  X(active_voxels_at, vdbflow_active_voxels_at, OPERATION_UNTYPED, NO_COMPONENT_PARAMETER,                           \
    (const int* origins, const unsigned long long* masks, const vdbflow_op_i64* leaf_end, vdbflow_op_i64 leaves,     \
     const vdbflow_op_i64* rank, vdbflow_op_i64 n, int* ijk),                                                        \
    (const int* origins, const u64* masks, const i64* leaf_end, i64 leaves, const i64* rank, i64 n, int* ijk))

// statistics in the sampling pass (reduce.h): histograms, moments, binned means into ints and reals; on the GPU a
// block's partials a REDUCE_BLOCK of points, merged by the step reduce_merge_blocks
#define VDBFLOW_OP_sample_reduce(X)                                                                                  \
  X(sample_reduce, reduce_kernel, OPERATION_FLOAT_VALUE, COMPONENTS_1_3,                                             \
    (vdbflow_op_record k, const void* points, bool points_double, vdbflow_op_i64 n, vdbflow_op_spec spec,            \
     const double* edges, vdbflow_op_i64 n_ints, vdbflow_op_i64 n_reals, vdbflow_op_i64* ints, double* reals,        \
     int order),                                                                                                     \
    (VDBFLOW_GPU_POINTS, const ReduceSpec* spec, const double* edges, i64 n_ints, i64 n_reals,                       \
     unsigned long long* ints, Real<T>* features, double* block_moments, double* dense, unsigned char* mark))

// the same statistics of given features (n, channels) float or double (reduce.h)
#define VDBFLOW_OP_reduce_features(X)                                                                                \
  X(reduce_features, , OPERATION_HOST, NO_COMPONENT_PARAMETER,                                                       \
    (vdbflow_op_spec spec, const double* edges, const void* features, bool is_double, vdbflow_op_i64 n,              \
     vdbflow_op_i64 n_ints, vdbflow_op_i64 n_reals, vdbflow_op_i64* ints, double* reals),                            \
    ())

// one reduction's host partial merged into another, as the kernels merge blocks (reduce.h)
#define VDBFLOW_OP_merge_partials(X)                                                                                 \
  X(merge_partials, , OPERATION_HOST, NO_COMPONENT_PARAMETER,                                                        \
    (vdbflow_op_spec spec, vdbflow_op_i64 n_ints, vdbflow_op_i64* ints, double* reals, const vdbflow_op_i64* ints_b, \
     const double* reals_b),                                                                                         \
    ())

// sample_reduce's second launch: the blocks' partials of a reduce_kernel launch merged in block order (reduce.h)
#define VDBFLOW_OP_reduce_merge_blocks(X)                                                                            \
  X(reduce_merge_blocks, vdbflow_reduce_merge, OPERATION_UNTYPED, NO_COMPONENT_PARAMETER,                            \
    (),                                                                                                              \
    (const ReduceSpec* spec, i64 blocks, i64 n_reals, double* reals, const double* block_moments, double* dense,     \
     unsigned char* mark))

#define VDBFLOW_OPERATIONS(X)                                                                                        \
  VDBFLOW_OP_sample(X) VDBFLOW_OP_sample_derived(X) VDBFLOW_OP_derive(X) VDBFLOW_OP_sample_hessian(X)                \
  VDBFLOW_OP_sample_vjp(X) VDBFLOW_OP_grid_gradient(X) VDBFLOW_OP_advect(X) VDBFLOW_OP_advect_series(X)              \
  VDBFLOW_OP_route(X) VDBFLOW_OP_stencil_inside(X) VDBFLOW_OP_defined_voxels(X) VDBFLOW_OP_scatter_rows(X)           \
  VDBFLOW_OP_active_voxels_at(X) VDBFLOW_OP_sample_reduce(X) VDBFLOW_OP_reduce_features(X)                           \
  VDBFLOW_OP_merge_partials(X)

#define VDBFLOW_GPU_STEPS(X)                                                                                         \
  VDBFLOW_OP_reduce_merge_blocks(X)

// An operation's CPU entry, `<name>_entry<>(<cpu_parameters>)`, and its GPU entry's name and parameters (after its
// template head, __global__ and launch bounds), as its row declares them.  The CPU entry is a template so that it is
// instantiated where the CPU target's table takes its address (cpu_kernels.h), after every header, in the table's
// order: the compiler then inlines and contracts its loops as it did when the entries were written there.
#define VDBFLOW_CPU_HEAD_(name, gpu_entry, value_types, gpu_components, cpu_parameters, gpu_parameters) \
  template <int = 0>                                                                                    \
  static void name##_entry cpu_parameters
#define VDBFLOW_GPU_HEAD_(name, gpu_entry, value_types, gpu_components, cpu_parameters, gpu_parameters) \
  gpu_entry gpu_parameters
#define VDBFLOW_CPU_ENTRY(name) VDBFLOW_OP_##name(VDBFLOW_CPU_HEAD_)
#define VDBFLOW_GPU_ENTRY(name) VDBFLOW_OP_##name(VDBFLOW_GPU_HEAD_)
