// vdbflow/route.h - which partition answers a point, walked the same way on host and device.
//
// Leaves are ordered along a Morton curve of their keys (origin >> 3) and cut into P ranges; a point
// goes to the partition owning the leaf slot of its base cell (floor of its index coordinate, the
// same mapping sample.h uses, so routing and sampling agree to the last bit).  A point based in a
// block far from every leaf and tile reads the background wherever it is sampled: it is routed to
// ROUTE_BACKGROUND and answered without any partition.
#pragma once
#include "launch.h"
#include "sample.h"

namespace vdbflow {

constexpr int MORTON_BITS = 21;      // per axis: 63 bits in all
constexpr int ROUTE_BACKGROUND = -1;  // partition code of background-only points

// Bits of v (< 2^21) spread to every third bit.
VDB_HD u64 spread_bits21(u64 v) {
  v &= 0x1FFFFFull;
  v = (v | (v << 32)) & 0x1F00000000FFFFull;
  v = (v | (v << 16)) & 0x1F0000FF0000FFull;
  v = (v | (v << 8)) & 0x100F00F00F00F00Full;
  v = (v | (v << 4)) & 0x10C30C30C30C30C3ull;
  v = (v | (v << 2)) & 0x1249249249249249ull;
  return v;
}

// Morton code of leaf key k relative to `origin`, coarsened by `shift` bits; keys outside the frame
// clamp to its ends.
VDB_HD u64 morton_code(const i64 k[3], const i64 origin[3], int shift) {
  u64 code = 0;
  for (int a = 0; a < 3; ++a) {
    i64 rel = (k[a] - origin[a]) >> shift;
    rel = rel < 0 ? 0 : (rel > ((1ll << MORTON_BITS) - 1) ? ((1ll << MORTON_BITS) - 1) : rel);
    code |= spread_bits21((u64)rel) << (2 - a);
  }
  return code;
}

// Background shortcut granularity: blocks of 16^3 leaf keys (128^3 voxels, NanoVDB's lower nodes).
// A block is "near data" when some stencil based in it can touch a leaf or a tile; a point based in
// any other block reads only background.  One lookup per point, and the table of near blocks is tiny
// (about leaves / 4096 entries), so every routing task can carry it.
constexpr int ROUTE_BLOCK_SHIFT = 4;

// A near-data block's table value: the partition that owns every leaf slot of the block (Morton codes
// are monotone in each coordinate, so the block's lowest and highest keys bound all of its codes), or
// ROUTE_MIXED_BLOCK when partitions meet inside it and each point needs its own code.
constexpr int ROUTE_MIXED_BLOCK = -2;

// Everything routing reads: the Morton frame, the first code of partitions 1 .. P-1, and optionally
// the table of near-data blocks (keys: leaf key >> ROUTE_BLOCK_SHIFT; values: the block's partition
// or ROUTE_MIXED_BLOCK) for the background shortcut.
struct RouteSpec {
  i64 origin[3];
  int shift;
  const u64* boundaries;  // (P - 1,) ascending
  int partitions;         // P
  HashTable near_blocks;  // entries == nullptr: no shortcut
  Period period;          // periodic axes: a point goes where its wrapped base cell is
};

// The spec of one routing call (the CPU entry and the GPU entry of route build it alike).
VDB_HD RouteSpec make_route_spec(const i64 origin[3], int shift, const u64* boundaries, int partitions,
                                 HashTable near_blocks, const i64* period = nullptr) {
  RouteSpec r;
  r.period = make_period(period);
  for (int a = 0; a < 3; ++a) r.origin[a] = origin[a];
  r.shift = shift;
  r.boundaries = boundaries;
  r.partitions = partitions;
  r.near_blocks = near_blocks;
  return r;
}

// Partition of a Morton code: the number of boundaries <= code (numpy's searchsorted, side='right').
// Branch-free (a conditional move per halving): random points would mispredict every step.
VDB_HD int partition_of_code(const RouteSpec& r, u64 code) {
  int n = r.partitions - 1;
  if (n == 0) return 0;
  const u64* base = r.boundaries;
  while (n > 1) {
    const int half = n >> 1;
    base = (base[half] <= code) ? base + half : base;
    n -= half;
  }
  return (int)(base - r.boundaries) + (*base <= code ? 1 : 0);
}

// Base leaf key of a point (index-space u); false for non-finite points and points outside the int32
// index range (any partition answers those alike: NaN or background).
VDB_HD bool base_leaf_key(const PointTransform& xf, const Period& q, const double p[3], i64 key[3]) {
  double u[3];
  to_index_space(xf, p, u);
  bool ok = finite3(u);
  for (int a = 0; a < 3; ++a) {
    const i64 b = ok ? base_index(q, a, floor(u[a])) : 0;
    ok = ok && b >= INDEX_MIN && b <= INDEX_MAX;
    key[a] = b >> 3;
  }
  return ok;
}

// Partition of one point, or ROUTE_BACKGROUND.  Points without a valid base leaf go to partition 0.
VDB_HD int route_point(const RouteSpec& r, const PointTransform& xf, const double p[3]) {
  i64 k[3];
  if (!base_leaf_key(xf, r.period, p, k)) return 0;
  if (r.near_blocks.entries != nullptr) {
    const int block = table_find(r.near_blocks, (int)(k[0] >> ROUTE_BLOCK_SHIFT), (int)(k[1] >> ROUTE_BLOCK_SHIFT),
                                 (int)(k[2] >> ROUTE_BLOCK_SHIFT));
    if (block == SLOT_NOT_FOUND) return ROUTE_BACKGROUND;
    if (block >= 0) return block;  // the whole block lies in one partition
  }
  return partition_of_code(r, morton_code(k, r.origin, r.shift));
}

// Entry: the partition of each of n points (ROUTE_BACKGROUND for background-only points) into part (n,).
template <class P>
VDB_ENTRY void route_partitions(const RouteSpec& r, const PointTransform& xf, const P* pts, i64 n, int* part) {
  for_each<16384, STATIC>(n, [&](i64 i) {
    double p[3];
    load_point(pts, i, p);
    part[i] = route_point(r, xf, p);
  });
}

#ifndef VDB_DEVICE_COMPILE
// Host entry: the partitions of n points, then a stable counting sort by partition (launch.h) over
// `threads` threads: fills bucket (n), order (n: the input index of each sorted point), sorted (n, 3)
// and bounds (partitions + 2: group 0 is ROUTE_BACKGROUND, group p + 1 partition p).
template <class P>
void route_sorted(const RouteSpec& r, const PointTransform& xf, const P* src, i64 n, int threads, int* bucket,
                  i64* order, P* sorted, i64* bounds) {
  auto bucket_of = [&](i64 i) {
    double p[3];
    load_point(src, i, p);
    return route_point(r, xf, p) + 1;
  };
  auto place = [&](i64 i, i64 at) {
    order[at] = i;
    for (int e = 0; e < 3; ++e) sorted[3 * at + e] = src[3 * i + e];
  };
  counting_sort(n, r.partitions + 1, threads, bucket, bounds, bucket_of, place);
}
#endif

// ---- the entry of route (operations.h) -------------------------------------------------------------------------
#ifdef VDB_DEVICE_COMPILE
// The partition of each point (ROUTE_BACKGROUND for background-only points); the stable grouping by partition
// follows on the device with CuPy (a stable argsort of the codes).
extern "C" __global__ void VDB_BOUNDS_FILL VDBFLOW_GPU_ENTRY(route) {
  const RouteSpec r =
      make_route_spec(origin, shift, boundaries, partitions, HashTable{near_table, near_mask}, period);
  route_partitions(r, make_point_transform(xform, points_world, 0), points, n, out_partition);
}
#else
VDBFLOW_CPU_ENTRY(route) {
  const PointTransform xf = make_point_transform(xform, points_world, 0);
  with_point_type(points_double, [&](auto p) {
    typedef type_of<decltype(p)> P;
    route_sorted(*(const RouteSpec*)r, xf, (const P*)points, n, threads, bucket, order, (P*)sorted, bounds);
  });
}
#endif

}  // namespace vdbflow
