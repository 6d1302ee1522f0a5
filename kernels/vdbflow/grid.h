// vdbflow/grid.h - the sparse tree as the kernels see it, walked the same way on host and device.
//
// A volume is a set of 8^3 leaves (found through an open-addressing hash keyed by ijk >> 3),
// constant tiles of 8^3, 128^3 and 4096^3 voxels (hash tables keyed by ijk >> 3, >> 7, >> 12) and a
// background.  Values live either per leaf (512 per leaf, all voxels) or per active voxel (the
// NanoVDB OnIndex layout: index = first index of the leaf + popcount of the mask below the voxel).
// The host builds the tables (fill_table, through the CPU extension); both sides only read them.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__) || defined(VDBFLOW_CUDA_EMULATE)
// the device branch: nvcc, NVRTC, or the host emulation of CUDA (emulate/cuda_host.h)
#define VDB_HD __host__ __device__ __forceinline__
#define VDB_INLINE
#define VDB_DEVICE_COMPILE 1
#else
#define VDB_HD inline
#define VDB_INLINE __attribute__((always_inline))  // inlined wherever it is called (device: every VDB_HD)
#include <cmath>
#include <cstring>
#if defined(__BMI2__) && defined(__x86_64__)
#include <immintrin.h>  // _pdep_u64 (select_bit64)
#endif
#endif

namespace vdbflow {

#ifndef VDB_DEVICE_COMPILE
using std::floor;
using std::isfinite;
using std::nan;
using std::round;
#endif

// One value component p[c].  Host values may sit at any byte of a memory-mapped .nvdb file (an
// uncompressed grid starts at byte 193 + its name's length), so the host reads through memcpy, which
// compiles to one plain load that tolerates misalignment; device buffers are always aligned copies.
template <class T>
VDB_HD T load(const T* p, int c) {
#ifdef VDB_DEVICE_COMPILE
  return p[c];
#else
  T v;
  std::memcpy(&v, p + c, sizeof(T));
  return v;
#endif
}

typedef long long i64;
typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;

// Leaves: LEAF_DIM^3 voxels (Python reads these facts from the CPU extension: vdbflow.core.kernel).
constexpr int LEAF_DIM = 8;
constexpr int LEAF_VOXELS = LEAF_DIM * LEAF_DIM * LEAF_DIM;

// Slot codes stored in a table entry: >= 0 is a leaf slot, TILE_BASE - t is tile t.
constexpr int SLOT_EMPTY = -2147483647 - 1;  // INT_MIN: unused table entry
constexpr int SLOT_NOT_FOUND = -1;           // lookup miss (never stored)
constexpr int TILE_BASE = -2;
VDB_HD int encode_tile(int tile) { return TILE_BASE - tile; }
VDB_HD int decode_tile(int slot) { return TILE_BASE - slot; }
VDB_HD bool is_tile_slot(int slot) { return slot <= -2 && slot != SLOT_EMPTY; }

// Leaf / tile levels: the shift from voxel coordinates to the table key.
constexpr int LEVEL_COUNT = 3;
VDB_HD int level_shift(int level) { return level == 0 ? 3 : (level == 1 ? 7 : 12); }
// Edge in voxels of a tile of each level (8, 128, 4096).
VDB_HD int level_size(int level) { return 1 << level_shift(level); }

VDB_HD u32 hash_coord(int x, int y, int z) {
  u32 h = (u32)x * 0x8da6b343u ^ (u32)y * 0xd8163841u ^ (u32)z * 0xcb1ab31fu;
  h ^= h >> 16;
  h *= 0x7feb352du;
  h ^= h >> 15;
  h *= 0x846ca68bu;
  h ^= h >> 16;
  return h;
}

// An open-addressing table: capacity = mask + 1 (a power of two), entries are (x, y, z, slot).
// entries == nullptr means an empty table.
struct HashTable {
  const int* entries;
  u32 mask;
};

VDB_HD int table_find(const HashTable& t, int x, int y, int z) {
  if (t.entries == nullptr) return SLOT_NOT_FOUND;
  u32 i = hash_coord(x, y, z) & t.mask;
  for (u32 probe = 0; probe <= t.mask; ++probe) {
    const int* e = t.entries + 4 * (u64)i;
    if (e[3] == SLOT_EMPTY) return SLOT_NOT_FOUND;
    if (e[0] == x && e[1] == y && e[2] == z) return e[3];
    i = (i + 1) & t.mask;
  }
  return SLOT_NOT_FOUND;
}

VDB_HD int popcount64(u64 v) {
#if defined(VDB_DEVICE_COMPILE) && (defined(__CUDA_ARCH__) || defined(__CUDACC_RTC__))
  return __popcll(v);
#else
  return __builtin_popcountll(v);
#endif
}

// Periods of index space: along axis a with size(a) > 0, voxel i reads voxel lo(a) + (i - lo(a)) mod
// size(a) (whole voxels, integer arithmetic: points any number of periods away read the same voxels).
// size(a) == 0: the axis does not wrap.  The numbers stay where the caller keeps them (the kernel record's
// `period`: lo[3] then size[3]); a grid view holds one pointer, null when no axis wraps, so that views of
// volumes without periods keep their registers (the GPU's particle kernel has none to spare).
struct Period {
  const i64* lo_size;
  VDB_HD bool any() const { return lo_size != nullptr; }
  VDB_HD i64 lo(int a) const { return lo_size[a]; }
  VDB_HD i64 size(int a) const { return lo_size != nullptr ? lo_size[3 + a] : 0; }
};

VDB_HD Period make_period(const i64* lo_size) {  // lo_size: lo[3] then size[3], or null (no period)
  Period q;
  q.lo_size = lo_size != nullptr && (lo_size[3] > 0 || lo_size[4] > 0 || lo_size[5] > 0) ? lo_size : nullptr;
  return q;
}

// Voxel index i (|i - lo| < 2^53) along axis a, wrapped into [lo, lo + size) when the axis is periodic.  One
// unsigned comparison for indices already inside (a stencil around a wrapped base cell); otherwise the
// quotient in double, corrected by one period either way, never a 64-bit division (a subroutine call on
// GPUs, whose registers the particle kernel cannot spare).
VDB_HD i64 wrap_index(const Period& q, int a, i64 i) {
  const i64 P = q.size(a);
  if (P <= 0) return i;
  const i64 lo = q.lo(a), d = i - lo;
  if ((u64)d < (u64)P) return i;
  i64 r = d - P * (i64)floor((double)d / (double)P);
  r += r < 0 ? P : 0;
  r -= r >= P ? P : 0;
  return lo + r;
}

// A voxel (i, j, k) wrapped on every periodic axis of q.
VDB_HD void wrap_voxel(const Period& q, i64& i, i64& j, i64& k) {
  i = wrap_index(q, 0, i);
  j = wrap_index(q, 1, j);
  k = wrap_index(q, 2, k);
}

// Everything a kernel needs to read values of type T (C components per voxel).
template <class T>
struct GridView {
  HashTable tables[LEVEL_COUNT];  // level 0: leaves and 8^3 tiles; 1: 128^3 tiles; 2: 4096^3 tiles
  const u64* masks;               // [leaf][8] active bits, bit (x&7)<<6 | (y&7)<<3 | (z&7)
  const u16* prefix;              // [leaf][8] active voxels in the words before each word
  const i64* leaf_offset;         // [leaf] index of the leaf's first active voxel (index layout)
  const T* values;                // per-leaf: [leaf*512 + offset][C]; index layout: [index][C]
  const i64* leaf_values_at;      // per-leaf layout, optional: element offset of each leaf's 512 values
                                  // (null: leaf * 512 * C) - lets values stay inside a mapped file
  const T* tile_values;           // [tile][C]
  const T* background;            // [C]
  int components;                 // C
  int index_layout;               // 0: per-leaf values, 1: per-active-voxel values
  Period period;                  // periodic axes (none unless set after make_grid_view)
};

template <class T>
VDB_HD GridView<T> make_grid_view(const HashTable tables[LEVEL_COUNT], const u64* masks, const u16* prefix,
                                  const i64* leaf_offset, const i64* leaf_values_at, const T* values,
                                  const T* tile_values, const T* background, int components, int index_layout) {
  GridView<T> g;
  for (int l = 0; l < LEVEL_COUNT; ++l) g.tables[l] = tables[l];
  g.masks = masks;
  g.prefix = prefix;
  g.leaf_offset = leaf_offset;
  g.leaf_values_at = leaf_values_at;
  g.values = values;
  g.tile_values = tile_values;
  g.background = background;
  g.components = components;
  g.index_layout = index_layout;
  g.period = make_period(nullptr);
  return g;
}

// A small per-thread cache of level-0 lookups, direct-mapped by the low bit of each leaf coordinate,
// so the up to 8 leaves around one cell never evict each other.  One entry on the GPU (registers
// are scarce there), eight on the CPU.
#if defined(VDB_DEVICE_COMPILE)
constexpr int LEAF_CACHE_WAYS = 1;
#else
constexpr int LEAF_CACHE_WAYS = 8;
#endif

struct LeafCache {
  int x[LEAF_CACHE_WAYS], y[LEAF_CACHE_WAYS], z[LEAF_CACHE_WAYS], slot[LEAF_CACHE_WAYS];
  VDB_HD LeafCache() {
    for (int w = 0; w < LEAF_CACHE_WAYS; ++w) {
      // an impossible key (leaf coordinates are within [-2^28, 2^28))
      x[w] = y[w] = z[w] = 2147483647;
      slot[w] = SLOT_NOT_FOUND;
    }
  }
  VDB_HD static int way(int lx, int ly, int lz) {
    return LEAF_CACHE_WAYS == 1 ? 0 : ((lx & 1) | ((ly & 1) << 1) | ((lz & 1) << 2)) & (LEAF_CACHE_WAYS - 1);
  }
};

constexpr i64 INDEX_MIN = -2147483647LL - 1;
constexpr i64 INDEX_MAX = 2147483647LL;

VDB_HD bool in_index_range(i64 i, i64 j, i64 k) {
  return i >= INDEX_MIN && i <= INDEX_MAX && j >= INDEX_MIN && j <= INDEX_MAX && k >= INDEX_MIN &&
         k <= INDEX_MAX;
}

VDB_HD int voxel_offset(int x, int y, int z) { return ((x & 7) << 6) | ((y & 7) << 3) | (z & 7); }

// Level-0 slot (leaf, tile code or SLOT_NOT_FOUND) of the leaf holding voxel (x, y, z).
template <class T>
VDB_HD int leaf_slot(const GridView<T>& g, int x, int y, int z, LeafCache& cache) {
  const int lx = x >> 3, ly = y >> 3, lz = z >> 3;
  const int w = LeafCache::way(lx, ly, lz);
  if (!(cache.x[w] == lx && cache.y[w] == ly && cache.z[w] == lz)) {
    cache.x[w] = lx;
    cache.y[w] = ly;
    cache.z[w] = lz;
    cache.slot[w] = table_find(g.tables[0], lx, ly, lz);
  }
  return cache.slot[w];
}

// Element offset of the first of a per-leaf layout leaf's 512 values.
template <class T>
VDB_HD i64 leaf_values_base(const GridView<T>& g, int slot) {
  return g.leaf_values_at != nullptr ? g.leaf_values_at[slot] : (i64)slot * 512 * g.components;
}

// Values of voxel `offset` inside leaf `slot` (background for inactive voxels of the index layout).
template <class T>
VDB_HD const T* leaf_value(const GridView<T>& g, int slot, int offset) {
  const i64 C = g.components;
  if (!g.index_layout) return g.values + leaf_values_base(g, slot) + (i64)offset * C;
  const int word = offset >> 6, bit = offset & 63;
  const u64 m = g.masks[(i64)slot * 8 + word];
  if (!((m >> bit) & 1ull)) return g.background;
  const i64 index = g.leaf_offset[slot] + g.prefix[(i64)slot * 8 + word] +
                    popcount64(m & ((1ull << bit) - 1ull));
  return g.values + index * C;
}

// Values at a location without a leaf: the tile that covers it, else the background.
template <class T>
VDB_HD const T* tile_or_background(const GridView<T>& g, int slot0, int x, int y, int z) {
  if (is_tile_slot(slot0)) return g.tile_values + (i64)decode_tile(slot0) * g.components;
  for (int level = 1; level < LEVEL_COUNT; ++level) {
    const int s = level_shift(level);
    const int slot = table_find(g.tables[level], x >> s, y >> s, z >> s);
    if (is_tile_slot(slot)) return g.tile_values + (i64)decode_tile(slot) * g.components;
  }
  return g.background;
}

// ---- building tables, and voxels by rank ------------------------------------------------------------

// Capacity of a table of n keys: a power of two, the load factor at most 0.5.
VDB_HD u32 table_capacity(u64 n) {
  u32 cap = 8;
  while (cap < 2 * n) cap <<= 1;
  return cap;
}

// Fills `entries` (capacity x 4, capacity a power of two) with keys (n, 3) and their slots, each at the
// first free entry of table_find's probe sequence.  Returns the index of the first repeated key (the
// table then holds the keys before it), or -1.
VDB_HD i64 fill_table(const int* keys, const int* slots, i64 n, int* entries, u32 capacity) {
  for (u64 e = 0; e < capacity; ++e) {
    entries[4 * e] = entries[4 * e + 1] = entries[4 * e + 2] = 0;
    entries[4 * e + 3] = SLOT_EMPTY;
  }
  const u32 mask = capacity - 1;
  for (i64 r = 0; r < n; ++r) {
    const int x = keys[3 * r], y = keys[3 * r + 1], z = keys[3 * r + 2];
    for (u32 i = hash_coord(x, y, z) & mask;; i = (i + 1) & mask) {
      int* e = entries + 4 * (u64)i;
      if (e[3] == SLOT_EMPTY) {
        e[0] = x;
        e[1] = y;
        e[2] = z;
        e[3] = slots[r];
        break;
      }
      if (e[0] == x && e[1] == y && e[2] == z) return r;
    }
  }
  return -1;
}

// Index of the lowest set bit of v != 0.
VDB_HD int lowest_bit64(u64 v) {
#if defined(VDB_DEVICE_COMPILE) && (defined(__CUDA_ARCH__) || defined(__CUDACC_RTC__))
  return __ffsll((long long)v) - 1;
#else
  return __builtin_ctzll(v);
#endif
}

// Position of the set bit of rank k (0: the lowest) of word, which has more than k set bits.
VDB_HD int select_bit64(u64 word, int k) {
#if defined(VDB_DEVICE_COMPILE)
  const unsigned lo = (unsigned)word, hi = (unsigned)(word >> 32);
  const int c = __popc(lo);
  return k < c ? (int)__fns(lo, 0, k + 1) : 32 + (int)__fns(hi, 0, k + 1 - c);
#elif defined(__BMI2__) && defined(__x86_64__)
  return lowest_bit64(_pdep_u64(u64(1) << k, word));
#else
  int pos = 0;  // narrow by halves: 32, 16, ..., 1 bits
  for (int width = 32; width >= 1; width >>= 1) {
    const u64 low = word & ((u64(1) << width) - 1);
    const int c = popcount64(low);
    if (k >= c) {
      k -= c;
      word >>= width;
      pos += width;
    }
  }
  return pos;
#endif
}

// Voxel ijk of the active voxel of rank r in OnIndex order (leaves in order, voxels by mask bit), given
// the leaves' origins (L, 3), masks (L, 8) and leaf_end (L,), the running count of active voxels at the
// end of each leaf; 0 <= r < leaf_end[L - 1].
VDB_HD void active_voxel_at(const int* origins, const u64* masks, const i64* leaf_end, i64 leaves, i64 r,
                            int ijk[3]) {
  // the first leaf whose end lies past r (std::upper_bound), without branches: the answer lies in
  // [leaf, leaf + count] throughout
  i64 leaf = 0;
  for (i64 count = leaves; count > 1;) {
    const i64 half = count >> 1;
    leaf = leaf_end[leaf + half - 1] <= r ? leaf + half : leaf;
    count -= half;
  }
  leaf += leaf_end[leaf] <= r;
  i64 left = r - (leaf ? leaf_end[leaf - 1] : 0);
  int w = 0;
  for (; w < 8; ++w) {
    const int c = popcount64(masks[leaf * 8 + w]);
    if (left < c) break;
    left -= c;
  }
  const int bit = w * 64 + select_bit64(masks[leaf * 8 + w], (int)left);
  ijk[0] = origins[3 * leaf] + (bit >> 6);
  ijk[1] = origins[3 * leaf + 1] + ((bit >> 3) & 7);
  ijk[2] = origins[3 * leaf + 2] + (bit & 7);
}

// Pointer to the C values read at voxel (i, j, k) (wrapped on periodic axes): voxel, tile or background.
template <class T>
VDB_HD const T* read_voxel(const GridView<T>& g, i64 i, i64 j, i64 k, LeafCache& cache) {
  if (g.period.any()) wrap_voxel(g.period, i, j, k);
  if (!in_index_range(i, j, k)) return g.background;
  const int x = (int)i, y = (int)j, z = (int)k;
  const int slot = leaf_slot(g, x, y, z, cache);
  if (slot >= 0) return leaf_value(g, slot, voxel_offset(x, y, z));
  return tile_or_background(g, slot, x, y, z);
}

}  // namespace vdbflow
