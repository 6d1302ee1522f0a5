// vdbflow/abi.h - the one argument record every kernel entry point takes, on host and device.
//
// A KernelAbi describes a grid (the GridView's arrays and table masks, the value layout), its
// transform (the 12 doubles of make_point_transform) and the options of one call (mode, spaces).
// Python builds it once per volume and device as bytes (a NumPy record whose dtype is made from the
// offsets the CPU extension exports, _core.ABI_FIELDS), sets the options of each call, and hands
// the bytes to the CPU extension or a pointer to a device copy of them to the CUDA entry points.
// It is plain data: pointers are 64-bit on every side (host x86-64/aarch64, NVRTC, nvcc).
#pragma once
#include "sample.h"

namespace vdbflow {

static_assert(sizeof(void*) == 8, "the kernel ABI record holds 64-bit pointers");

// Value dtypes of a grid (values, tile values and background share one).
enum ValueKind { KIND_F32 = 0, KIND_F64 = 1, KIND_I32 = 2, KIND_I64 = 3, KIND_U32 = 4 };
#ifndef VDB_DEVICE_COMPILE
constexpr const char* VALUE_KIND_NAMES[KIND_U32 + 1] = {"float32", "float64", "int32", "int64", "uint32"};  // NumPy's
#endif

struct KernelAbi {
  // the grid (GridView, grid.h); null pointers where an array is empty or absent
  const int* tables[LEVEL_COUNT];   // (capacity, 4) open-addressing tables, level 0 .. 2
  u32 table_masks[LEVEL_COUNT];     // capacity - 1 of each table
  int components;                   // C
  const u64* masks;                 // (L, 8)
  const u16* prefix;                // (L, 8)
  const i64* leaf_offset;           // (L,)
  const i64* leaf_values_at;        // (L,) or null: contiguous per-leaf values
  const void* values;               // of value_kind
  const void* tile_values;          // (T, C)
  const void* background;           // (C,)
  i64 value_rows;                   // rows of C values in `values` (the reverse mode's accumulator rows)
  i64 tile_rows;                    // T
  int index_layout;                 // 0: per-leaf values, 1: per-active-voxel values
  int value_kind;                   // ValueKind
  // the transform: make_point_transform's parameters
  double xform[TRANSFORM_PARAMETERS];
  // the call
  int mode;            // MODE_CLOSEST, MODE_LINEAR or a HigherScheme
  int points_world;    // points are world coordinates
  int jacobian_world;  // Jacobian columns are world axes
  int hessian_world;   // Hessian axes are world axes
  // periodic axes (grid.h Period): the first index of each axis' period, then its size in voxels (0: none)
  i64 period[6];
};

// The record's grid as the kernels read it (values of type T).  `contiguous` ignores leaf_values_at
// (the reverse mode's rows follow the contiguous value array).
template <class T>
VDB_HD GridView<T> abi_grid(const KernelAbi& a, bool contiguous = false) {
  HashTable tables[LEVEL_COUNT];
  for (int l = 0; l < LEVEL_COUNT; ++l) tables[l] = HashTable{a.tables[l], a.table_masks[l]};
  GridView<T> g = make_grid_view(tables, a.masks, a.prefix, a.leaf_offset,
                                 contiguous ? (const i64*)nullptr : a.leaf_values_at, (const T*)a.values,
                                 (const T*)a.tile_values, (const T*)a.background, a.components, a.index_layout);
  g.period = make_period(a.period);
  return g;
}

VDB_HD PointTransform abi_transform(const KernelAbi& a) {
  return make_point_transform(a.xform, a.points_world, a.jacobian_world);
}

}  // namespace vdbflow
