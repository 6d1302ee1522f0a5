// vdbflow/coverage.h - which voxels hold data, and which points have their whole stencil on them.
//
// A voxel is defined when it is an active voxel of a leaf or lies inside a tile of any level; every
// other voxel reads the background.  A point's stencil is inside when every voxel its mode reads is
// defined: the voxel that closest rounds to (half away from zero, as locate_cell), or the taps
// lo .. lo+n-1 of the mode's axis weights along each axis from the base cell floor(u) (as
// sample_point_scheme; the full tensor product of taps, whatever the weights at this point).  The
// point is mapped to index space with the sampler's own transform.
#pragma once
#include "launch.h"
#include "schemes.h"

namespace vdbflow {

// Active voxel of a leaf, or inside a tile of any level (wrapped on periodic axes: a periodic axis has
// no edge).
template <class T>
VDB_HD bool voxel_defined(const GridView<T>& g, i64 i, i64 j, i64 k, LeafCache& cache) {
  if (g.period.any()) wrap_voxel(g.period, i, j, k);
  if (!in_index_range(i, j, k)) return false;
  const int x = (int)i, y = (int)j, z = (int)k;
  const int slot = leaf_slot(g, x, y, z, cache);
  if (slot >= 0) {
    const int offset = voxel_offset(x, y, z);
    return (g.masks[(i64)slot * 8 + (offset >> 6)] >> (offset & 63)) & 1ull;
  }
  if (is_tile_slot(slot)) return true;
  for (int level = 1; level < LEVEL_COUNT; ++level) {
    const int s = level_shift(level);
    if (is_tile_slot(table_find(g.tables[level], x >> s, y >> s, z >> s))) return true;
  }
  return false;
}

// Whether voxels (x, y, z0 .. z0 + n - 1) are all defined, a leaf-aligned run at a time: in a leaf the
// run is a range of bits of one mask word; any other 8^3 block is defined or not as a whole (a tile
// of any level covers whole blocks), so its first voxel answers for the run.
template <class T>
VDB_HD bool row_defined(const GridView<T>& g, i64 x, i64 y, i64 z0, int n, LeafCache& cache) {
  const i64 end = z0 + n;
  if (g.period.any()) {  // the run may wrap: voxel by voxel
    for (i64 z = z0; z < end; ++z)
      if (!voxel_defined(g, x, y, z, cache)) return false;
    return true;
  }
  for (i64 z = z0; z < end;) {
    const i64 block_end = (z & ~(i64)(LEAF_DIM - 1)) + LEAF_DIM;
    const i64 run_end = end < block_end ? end : block_end;
    // int32 limits are block boundaries: a block is wholly inside the index range or wholly outside
    if (!in_index_range(x, y, z)) return false;
    const int slot = leaf_slot(g, (int)x, (int)y, (int)z, cache);
    if (slot >= 0) {
      const int first = voxel_offset((int)x, (int)y, (int)z);
      const int count = (int)(run_end - z);
      const u64 want = (count == 64 ? ~0ull : ((1ull << count) - 1ull)) << (first & 63);
      if ((g.masks[(i64)slot * 8 + (first >> 6)] & want) != want) return false;
    } else if (!voxel_defined(g, x, y, z, cache)) {
      return false;
    }
    z = run_end;
  }
  return true;
}

// The taps a mode reads along each axis, as offsets lo .. lo + n - 1 from the base cell.
VDB_HD void stencil_taps(int mode, int& lo, int& n) {
  if (mode == MODE_CLOSEST) {
    lo = 0;
    n = 1;
    return;
  }
  ValueWeights a;
  axis_weights(mode, 0.5, a);
  lo = a.lo;
  n = a.n;
}

// Whether every voxel the stencil of `mode` (taps lo .. lo + n - 1: stencil_taps) reads at point p is
// defined; false for non-finite points.
template <class T>
VDB_HD bool stencil_inside_point(const GridView<T>& g, const PointTransform& xf, const double p[3], int mode,
                                 int lo, int n, LeafCache& cache) {
  double u[3];
  to_index_space(xf, p, u);
  if (!finite3(u)) return false;
  i64 b[3];
  for (int a = 0; a < 3; ++a)
    b[a] = mode == MODE_CLOSEST ? closest_index(g.period, a, u[a]) : base_index(g.period, a, floor(u[a]));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if (!row_defined(g, b[0] + lo + i, b[1] + lo + j, b[2] + lo, n, cache)) return false;
  return true;
}

// Entries: (N,) whether each point's stencil of the record's mode reads only defined voxels, and (M,)
// whether each voxel ijk (M, 3) is defined.  The record's tables, masks, transform, mode and
// points_world are read, never its values.
VDB_ENTRY void stencil_inside_points(const KernelAbi& k, const double* pts, i64 n, bool* out) {
  const GridView<float> g = abi_grid<float>(k);
  const int mode = k.mode;
  int lo, taps;
  stencil_taps(mode, lo, taps);
  auto body = [&](i64 i, const PointTransform& xf, LeafCache& cache) {
    out[i] = stencil_inside_point(g, xf, pts + 3 * i, mode, lo, taps, cache);
  };
  for_each_point<4096>(n, k, body);
}

VDB_ENTRY void defined_voxels_points(const KernelAbi& k, const i64* ijk, i64 n, bool* out) {
  const GridView<float> g = abi_grid<float>(k);
  auto body = [&](i64 i, const PointTransform&, LeafCache& cache) {
    out[i] = voxel_defined(g, ijk[3 * i], ijk[3 * i + 1], ijk[3 * i + 2], cache);
  };
  for_each_point<4096>(n, k, body);
}

// ---- the entries of stencil_inside and defined_voxels (operations.h) -----------------------------------------
#ifdef VDB_DEVICE_COMPILE
// out (N,) whether each point's stencil of the record's mode reads only defined voxels; the record's tables, masks,
// transform and points_world are read, never its values.
extern "C" __global__ void VDB_BOUNDS_FILL VDBFLOW_GPU_ENTRY(stencil_inside) {
  stencil_inside_points(*abi, points, n, out);
}

// out (M,) whether each voxel ijk (M, 3) int64 is active in a leaf or inside a tile.
extern "C" __global__ void VDB_BOUNDS_FILL VDBFLOW_GPU_ENTRY(defined_voxels) {
  defined_voxels_points(*abi, ijk, n, out);
}
#else
VDBFLOW_CPU_ENTRY(stencil_inside) { stencil_inside_points(*(const KernelAbi*)k, points, n, out); }

VDBFLOW_CPU_ENTRY(defined_voxels) { defined_voxels_points(*(const KernelAbi*)k, ijk, n, out); }
#endif

}  // namespace vdbflow
