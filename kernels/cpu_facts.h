// cpu_facts.h - the kernels' facts the extension exports to Python (read by vdbflow.core.kernel, the one place
// Python learns them): constants of the headers, the layouts of the KernelAbi record and the ReduceSpec, and
// the table of operations (operations.h).  Included by cpu_module.cpp only, in the module's compilation.
#pragma once
#include <nanobind/nanobind.h>

#include <cstddef>
#include <type_traits>

#include "cpu_kernels.h"

namespace nb = nanobind;

namespace {

using namespace vdbflow;

// The table of operations (operations.h) for the Python backends: name -> (GPU entry, value types: "any",
// "float", "untyped" or "host", the GPU's fixed component counts or None, the CPU entry's parameters, the GPU
// entry's parameters); steps: the GPU steps' table instead (VDBFLOW_GPU_STEPS).
#define VDBFLOW_TEXT_(...) #__VA_ARGS__
#define VDBFLOW_TEXT(...) VDBFLOW_TEXT_(__VA_ARGS__)  // its macros expanded first (VDBFLOW_GPU_POINTS, ...)
nb::dict operations(bool steps) {
  nb::dict out;
  const char* type_names[] = {"any", "float", "untyped", "host"};
  auto counts = [](const int* fixed) -> nb::object {
    if (!fixed) return nb::none();
    nb::list c;
    for (; *fixed; ++fixed) c.append(*fixed);
    return nb::tuple(c);
  };
#define VDBFLOW_OPERATION_ROW(name, gpu_entry, value_types, gpu_components, cpu_parameters, gpu_parameters) \
  out[#name] = nb::make_tuple(#gpu_entry, type_names[value_types], counts(gpu_components),                   \
                              VDBFLOW_TEXT(cpu_parameters), VDBFLOW_TEXT(gpu_parameters));
  if (steps) {
    VDBFLOW_GPU_STEPS(VDBFLOW_OPERATION_ROW)
  } else {
    VDBFLOW_OPERATIONS(VDBFLOW_OPERATION_ROW)
  }
#undef VDBFLOW_OPERATION_ROW
  return out;
}

// ReduceSpec's fields for Python's spec dtype (as abi_fields).
static_assert(std::is_standard_layout<ReduceSpec>::value, "ReduceSpec must be plain data");
// a plain-data record's field for Python's dtype: (name, NumPy format, byte offset, element count)
#define VDBFLOW_RECORD_FIELD(record, name, fmt, elem) \
  nb::make_tuple(#name, fmt, offsetof(record, name), sizeof(((record*)nullptr)->name) / sizeof(elem))
#define VDBFLOW_SPEC_FIELD(name, fmt, elem) VDBFLOW_RECORD_FIELD(ReduceSpec, name, fmt, elem)
nb::tuple reduce_spec_fields() {
  return nb::make_tuple(
      VDBFLOW_SPEC_FIELD(channels, "i4", int), VDBFLOW_SPEC_FIELD(source, "i4", int), VDBFLOW_SPEC_FIELD(index, "i4", int),
      VDBFLOW_SPEC_FIELD(histograms, "i4", int), VDBFLOW_SPEC_FIELD(hist_dims, "i4", int),
      VDBFLOW_SPEC_FIELD(hist_channel, "i4", int), VDBFLOW_SPEC_FIELD(hist_bins, "i4", int),
      VDBFLOW_SPEC_FIELD(hist_weight, "i4", int), VDBFLOW_SPEC_FIELD(hist_edges, "i8", i64),
      VDBFLOW_SPEC_FIELD(hist_counts, "i8", i64), VDBFLOW_SPEC_FIELD(hist_sums, "i8", i64),
      VDBFLOW_SPEC_FIELD(moments, "i4", int), VDBFLOW_SPEC_FIELD(moment_channel, "i4", int),
      VDBFLOW_SPEC_FIELD(moment_at, "i8", i64), VDBFLOW_SPEC_FIELD(conditionals, "i4", int),
      VDBFLOW_SPEC_FIELD(cond_given, "i4", int), VDBFLOW_SPEC_FIELD(cond_of, "i4", int),
      VDBFLOW_SPEC_FIELD(cond_bins, "i4", int), VDBFLOW_SPEC_FIELD(cond_edges, "i8", i64),
      VDBFLOW_SPEC_FIELD(cond_counts, "i8", i64), VDBFLOW_SPEC_FIELD(cond_stats, "i8", i64));
}
#undef VDBFLOW_SPEC_FIELD

// KernelAbi's fields for Python's record dtype: (name, NumPy format, byte offset, element count).
static_assert(std::is_standard_layout<KernelAbi>::value, "KernelAbi must be plain data");
#define VDBFLOW_ABI_FIELD(name, fmt, elem) VDBFLOW_RECORD_FIELD(KernelAbi, name, fmt, elem)
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
      VDBFLOW_ABI_FIELD(hessian_world, "i4", int),
      VDBFLOW_ABI_FIELD(period, "i8", i64));
}
#undef VDBFLOW_ABI_FIELD
#undef VDBFLOW_RECORD_FIELD

void add_kernel_facts(nb::module_& m) {
  nb::list derived_names, derived_widths;
  for (int q = 0; q < DERIVED_COUNT; ++q) {
    derived_names.append(DERIVED_NAMES[q]);
    derived_widths.append(derived_width(q));
  }
  m.attr("DERIVED") = nb::tuple(derived_names);         // vdbflow.core.kernel.DERIVED
  m.attr("DERIVED_WIDTHS") = nb::tuple(derived_widths);
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
  m.attr("OPERATIONS") = operations(false);  // vdbflow.core.kernel.OPERATIONS
  m.attr("GPU_STEPS") = operations(true);    // vdbflow.core.kernel.GPU_STEPS
  m.attr("REDUCE_SPEC_SIZE") = sizeof(ReduceSpec);
  m.attr("REDUCE_SPEC_FIELDS") = reduce_spec_fields();
  m.attr("REDUCE_BLOCK") = REDUCE_BLOCK;
  m.attr("MOMENT_FIELDS") = MOMENT_FIELDS;
  m.attr("REDUCE_LIMITS") = nb::make_tuple(REDUCE_MAX_CHANNELS, REDUCE_MAX_HISTOGRAMS, REDUCE_MAX_CONDITIONALS);
  m.attr("ABI_FIELDS") = abi_fields();
  nb::dict kinds;
  for (int kind = KIND_F32; kind <= KIND_U32; ++kind) kinds[VALUE_KIND_NAMES[kind]] = kind;
  m.attr("VALUE_KINDS") = kinds;
  m.attr("MORTON_BITS") = MORTON_BITS;
  m.attr("ROUTE_BACKGROUND") = ROUTE_BACKGROUND;
  m.attr("ROUTE_BLOCK_SHIFT") = ROUTE_BLOCK_SHIFT;
  m.attr("ROUTE_MIXED_BLOCK") = ROUTE_MIXED_BLOCK;
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
  m.attr("OPENMP") = HOST_OPENMP;
}

}  // namespace
