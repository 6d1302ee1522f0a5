// vdbflow/route.h - which partition answers a point, walked the same way on host and device.
//
// Leaves are ordered along a Morton curve of their keys (origin >> 3) and cut into P ranges; a point
// goes to the partition owning the leaf slot of its base cell (floor of its index coordinate, the
// same mapping sample.h uses, so routing and sampling agree to the last bit).  With the volume's
// hash tables, a point whose whole stencil misses every leaf and tile reads the background wherever it
// is sampled: it is routed to ROUTE_BACKGROUND and answered without any partition.
#pragma once
#include "sample.h"

namespace vdbflow {

constexpr int MORTON_BITS = 21;      // per axis: 63 bits in all
constexpr int ROUTE_BACKGROUND = -1;  // partition code of background-only points
// shifts from leaf keys to the keys of the level-0, 1 and 2 tables (8^3, 128^3 and 4096^3 blocks)
VDB_HD int leaf_key_shift(int level) { return level_shift(level) - level_shift(0); }

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

// Everything routing reads: the Morton frame, the first code of partitions 1 .. P-1, and optionally
// the volume's tables with the stencil's leaf offsets for the background shortcut.
struct RouteSpec {
  i64 origin[3];
  int shift;
  const u64* boundaries;  // (P - 1,) ascending
  int partitions;         // P
  HashTable tables[LEVEL_COUNT];
  int background_shortcut;  // 0: never ROUTE_BACKGROUND
  int stencil_lo, stencil_hi;  // leaf offsets of a stencil relative to its base leaf
};

// Partition of a Morton code: the number of boundaries <= code (numpy's searchsorted, side='right').
VDB_HD int partition_of_code(const RouteSpec& r, u64 code) {
  int lo = 0, hi = r.partitions - 1;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (r.boundaries[mid] <= code) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// True when some leaf or tile lies within the stencil around base leaf key k.
VDB_HD bool stencil_touches_data(const RouteSpec& r, const i64 k[3]) {
  for (int dx = r.stencil_lo; dx <= r.stencil_hi; ++dx)
    for (int dy = r.stencil_lo; dy <= r.stencil_hi; ++dy)
      for (int dz = r.stencil_lo; dz <= r.stencil_hi; ++dz)
        for (int level = 0; level < LEVEL_COUNT; ++level) {
          const int s = leaf_key_shift(level);
          if (table_find(r.tables[level], (int)((k[0] + dx) >> s), (int)((k[1] + dy) >> s),
                         (int)((k[2] + dz) >> s)) != SLOT_NOT_FOUND)
            return true;
        }
  return false;
}

// Base leaf key of a point (index-space u); false for non-finite points and points outside the int32
// index range (any partition answers those alike: NaN or background).
VDB_HD bool base_leaf_key(const PointTransform& xf, const double p[3], i64 key[3]) {
  double u[3];
  to_index_space(xf, p, u);
  bool ok = finite3(u);
  for (int a = 0; a < 3; ++a) {
    const i64 b = ok ? clamp_far(floor(u[a])) : 0;
    ok = ok && b >= INDEX_MIN && b <= INDEX_MAX;
    key[a] = b >> 3;
  }
  return ok;
}

// Partition of one point, or ROUTE_BACKGROUND.  Points without a valid base leaf go to partition 0.
VDB_HD int route_point(const RouteSpec& r, const PointTransform& xf, const double p[3]) {
  i64 k[3];
  if (!base_leaf_key(xf, p, k)) return 0;
  if (r.background_shortcut && !stencil_touches_data(r, k)) return ROUTE_BACKGROUND;
  return partition_of_code(r, morton_code(k, r.origin, r.shift));
}

}  // namespace vdbflow
