// vdbflow/sample.h - the sampling math: closest and trilinear values and Jacobians at a point.
//
// Semantics are those of warp.volume_sample_grad (Warp >= 1.18):
//   closest: ijk = round half away from zero (u); value v_ijk; Jacobian 0.
//   linear:  b = floor(u), f = u - b; value sum_o W_o v_o; Jacobian J[c][a] = sum_o v_o[c] dW_o/du_a.
// Points may be in world space (mapped by the inverse transform) and the Jacobian may be returned
// in world space (J_index . M^-1).  Float data is accumulated in float, double data in double;
// the base cell is computed in double so that |u| ~ 1e6 keeps full precision.
#pragma once
#include "grid.h"

namespace vdbflow {

enum SampleMode { MODE_CLOSEST = 0, MODE_LINEAR = 1 };

// Accumulation type: double for double data, float otherwise (integer data is closest-only).
template <class T> struct RealOf { typedef float type; };
template <> struct RealOf<double> { typedef double type; };
template <class T> using Real = typename RealOf<T>::type;
// Value types with a NaN (the float types); integers read 0 where a float would read NaN.
template <class T> struct HasNaN { static constexpr bool value = false; };
template <> struct HasNaN<float> { static constexpr bool value = true; };
template <> struct HasNaN<double> { static constexpr bool value = true; };

// Jacobian buffers are C x 3 (component rows, axis columns); the layout is fixed here.
// Components handled by the run-time-C path (NC == 0).
constexpr int MAX_COMPONENTS = 64;

// Component c of g alone: a grid read as one component (NC = 1) whose voxels keep g's stride.  The GPU's
// Hessian and statistics entries for a run-time count go through the components one at a time this way, so
// their frames hold no MAX_COMPONENTS-sized arrays (each component's sums run in the same order).
template <class T>
VDB_HD GridView<T> component_view(GridView<T> g, int c) {
  if (g.values) g.values += c;
  if (g.tile_values) g.tile_values += c;
  if (g.background) g.background += c;
  return g;
}
// The stride of g's voxels (locate_cell's in-leaf reads): g's C on the GPU, where a component view reads fewer
// (NC = 1), the compile-time count on the host (which reads no component view).
template <int NC, class T>
VDB_HD i64 voxel_stride(const GridView<T>& g) {
#ifdef VDB_DEVICE_COMPILE
  return g.components;
#else
  return NC > 0 ? NC : g.components;
#endif
}

template <class R, int C>
struct Jacobian {
  static_assert(C >= 1, "a Jacobian has at least one component row");
  R rows[C][3];
};
static_assert(sizeof(Jacobian<float, 4>) == sizeof(float) * 4 * 3, "Jacobian<float,4> must be C x 3");
static_assert(sizeof(Jacobian<double, 3>) == sizeof(double) * 3 * 3, "Jacobian<double,3> must be C x 3");

// index = inv * (world - translation); J_world = J_index * inv.
struct PointTransform {
  double inv[9];          // world -> index linear part, row major
  double translation[3];  // index -> world translation
  int points_world;       // points are world coordinates
  int jacobian_world;     // Jacobian columns are world axes
};

// From 12 doubles: the world-to-index linear part (row major), then the index-to-world translation.
constexpr int TRANSFORM_PARAMETERS = 12;
#ifndef VDB_DEVICE_COMPILE
// The parameters by name, in order (Python's Transform.kernel_parameters is built from these):
// w2i_RC is row R, column C of the world-to-index matrix; i2w_tA the index-to-world translation.
constexpr const char* TRANSFORM_PARAMETER_NAMES[TRANSFORM_PARAMETERS] = {
    "w2i_00", "w2i_01", "w2i_02", "w2i_10", "w2i_11", "w2i_12", "w2i_20", "w2i_21", "w2i_22",
    "i2w_t0", "i2w_t1", "i2w_t2"};
#endif
VDB_HD PointTransform make_point_transform(const double* params, int points_world, int jacobian_world) {
  PointTransform xf;
  for (int e = 0; e < 9; ++e) xf.inv[e] = params[e];
  for (int e = 0; e < 3; ++e) xf.translation[e] = params[9 + e];
  xf.points_world = points_world;
  xf.jacobian_world = jacobian_world;
  return xf;
}

VDB_HD bool finite3(const double u[3]) {
  return isfinite(u[0]) && isfinite(u[1]) && isfinite(u[2]);
}

VDB_HD void to_index_space(const PointTransform& xf, const double p[3], double u[3]) {
  if (!xf.points_world) {
    u[0] = p[0];
    u[1] = p[1];
    u[2] = p[2];
    return;
  }
  const double d0 = p[0] - xf.translation[0], d1 = p[1] - xf.translation[1], d2 = p[2] - xf.translation[2];
  for (int r = 0; r < 3; ++r) u[r] = xf.inv[3 * r] * d0 + xf.inv[3 * r + 1] * d1 + xf.inv[3 * r + 2] * d2;
}

// NaN values and Jacobian for a non-finite point.  Integer data has no NaN: its points are checked
// to map to finite index coordinates upstream; should one get here anyway it reads 0, never a NaN cast
// to an integer (undefined behaviour).
template <class T, class R>
VDB_HD void write_nan(int C, bool want_jacobian, T* value, R* jacobian) {
  const R not_a_number = (R)nan("");
  for (int c = 0; c < C; ++c) {
    if constexpr (HasNaN<T>::value) value[c] = (T)not_a_number;
    else value[c] = (T)0;
  }
  if (want_jacobian)
    for (int e = 0; e < 3 * C; ++e) jacobian[e] = not_a_number;
}

// Stores an index-space Jacobian J[c][a] (C x 3), mapped to world axes (J M^-1) when asked.  (The
// *_inline forms here are the same functions, always inlined on the host too: the scattered point loop
// inlines its phases as the loop of one function did before launch.h, so it compiles - and rounds - alike.)
template <class R, class A>
VDB_HD VDB_INLINE void write_jacobian_inline(const PointTransform& xf, int C, const A (*J)[3], R* jacobian) {
  for (int c = 0; c < C; ++c)
    for (int a = 0; a < 3; ++a)
      jacobian[3 * c + a] = (R)(xf.jacobian_world ? J[c][0] * xf.inv[a] + J[c][1] * xf.inv[3 + a] + J[c][2] * xf.inv[6 + a]
                                                  : J[c][a]);
}
template <class R, class A>
VDB_HD void write_jacobian(const PointTransform& xf, int C, const A (*J)[3], R* jacobian) {
  write_jacobian_inline(xf, C, J, jacobian);
}

// Beyond this magnitude a coordinate is outside every int32 index and reads background.
constexpr double FAR_COORDINATE = 4.0e9;

VDB_HD i64 clamp_far(double b) {
  return b > FAR_COORDINATE ? (i64)FAR_COORDINATE : (b < -FAR_COORDINATE ? -(i64)FAR_COORDINATE : (i64)b);
}

// The base voxel index along axis a of b, the floor or rounding of an index coordinate (a whole number):
// clamp_far(b) without periods; on a periodic axis b wrapped into its period exactly, so that a point k
// periods away has the same base voxel and, being u + k P, the same fraction: in integers for |b| < 4e15,
// beyond through fmod, which is exact in IEEE arithmetic (b mod P and lo mod P are whole numbers below P).
// The far and non-finite coordinates' branch, out of line on the host: the point loops that inline
// periodic_base_index keep the code shape (and so the compiler's contractions, test_simd.py) they had
// before the branch existed; it runs only for points beyond 4e15 voxels.
#ifdef VDB_DEVICE_COMPILE
#define VDB_FAR_PATH VDB_HD
#else
#define VDB_FAR_PATH inline __attribute__((noinline, cold))
#endif
VDB_FAR_PATH i64 periodic_far_index(const Period& q, int a, double b) {
  const i64 P = q.size(a);
  if (P > 0 && b - b == 0.0) {  // finite and far (b a whole number): its residue, exact
    const double r = fmod(b, (double)P) - fmod((double)q.lo(a), (double)P);
    return wrap_index(q, a, q.lo(a) + (i64)r);
  }
  return wrap_index(q, a, clamp_far(b));
}
VDB_HD i64 periodic_base_index(const Period& q, int a, double b) {
  if (q.size(a) > 0 && b > -4.0e15 && b < 4.0e15) return wrap_index(q, a, (i64)b);
  return periodic_far_index(q, a, b);
}
VDB_HD i64 base_index(const Period& q, int a, double b) {
  return q.any() ? periodic_base_index(q, a, b) : clamp_far(b);
}

// Beyond this magnitude (2^52) every double is a whole number, and u + 0.5 rounds to even.
constexpr double WHOLE_COORDINATE = 4503599627370496.0;

// The voxel `closest` reads along axis a at coordinate u: u rounded half away from zero (Warp's rule), but on
// a periodic axis half up, floor(u + 0.5), so that every image u + k P of a point rounds to the same voxel
// (u itself where it is a whole number beyond 2^52, whose u + 0.5 would round to even).
VDB_HD i64 closest_index(const Period& q, int a, double u) {
  if (!q.any()) return clamp_far(round(u));
  if (q.size(a) <= 0) return periodic_base_index(q, a, round(u));
  return periodic_base_index(q, a, fabs(u) < WHOLE_COORDINATE ? floor(u + 0.5) : u);
}

// Whether the cell of base voxel (bi, bj, bk) (wrapped: base_index) crosses the end of a period, where
// its upper corner wraps to the period's first voxel.
VDB_HD bool cell_crosses_period(const Period& q, i64 bi, i64 bj, i64 bk) {
  return (q.size(0) > 0 && bi == q.lo(0) + q.size(0) - 1) || (q.size(1) > 0 && bj == q.lo(1) + q.size(1) - 1) ||
         (q.size(2) > 0 && bk == q.lo(2) + q.size(2) - 1);
}
VDB_HD bool crosses_period(const Period& q, i64 bi, i64 bj, i64 bk) {
  return q.any() && cell_crosses_period(q, bi, bj, bk);
}

// Where a point's stencil lives: the corner value pointers and the fractional position.
// kind: CELL_NAN (non-finite point), CELL_CLOSEST (corner[0] is the voxel), CELL_LINEAR (8 corners).
enum CellKind { CELL_NAN = 0, CELL_CLOSEST = 1, CELL_LINEAR = 2 };

template <class T>
struct Cell {
  const T* corner[8];  // corner o = (ox, oy, oz) in Warp's order: o = ox << 2 | oy << 1 | oz
  typename RealOf<T>::type f[3];
  int kind;
  int leaf, offset;  // CELL_LINEAR: the leaf slot and base voxel offset when all 8 corners are in one leaf, else -1
};

// How locate_cell_inline reads the grid: grid.h's leaf_slot and read_voxel, and no shortcut for a stencil
// across leaves (simd.h's SimdReads inlines both and has one: the host's vector path locates cells with the
// same code).
struct GridReads {
  template <class T>
  VDB_HD static int slot(const GridView<T>& g, int x, int y, int z, LeafCache& cache) {
    return leaf_slot(g, x, y, z, cache);
  }
  template <class T>
  VDB_HD static const T* voxel(const GridView<T>& g, i64 i, i64 j, i64 k, LeafCache& cache) {
    return read_voxel(g, i, j, k, cache);
  }
  template <class T>
  VDB_HD static bool across_leaves(const GridView<T>&, i64, i64, i64, int, const T**, LeafCache&) {
    return false;
  }
};

// Phase 1 of sampling: map the point to index space and find its stencil's values.
template <class T, int NC, class Reads = GridReads>
VDB_HD VDB_INLINE void locate_cell_inline(const GridView<T>& g, const PointTransform& xf, const double p[3],
                                          int mode, Cell<T>& cell, LeafCache& cache) {
  typedef typename RealOf<T>::type R;
  const int C = NC > 0 ? NC : g.components;
  double u[3];
  to_index_space(xf, p, u);
  if (!finite3(u)) {  // NaN results for float data; integer data never gets here (checked upstream)
    cell.kind = CELL_NAN;
    return;
  }
  if (mode == MODE_CLOSEST) {
    cell.kind = CELL_CLOSEST;
    cell.corner[0] = Reads::voxel(g, closest_index(g.period, 0, u[0]), closest_index(g.period, 1, u[1]),
                                   closest_index(g.period, 2, u[2]), cache);
    return;
  }
  cell.kind = CELL_LINEAR;
  cell.leaf = -1;
  const double b0 = floor(u[0]), b1 = floor(u[1]), b2 = floor(u[2]);
  cell.f[0] = (R)(u[0] - b0);
  cell.f[1] = (R)(u[1] - b1);
  cell.f[2] = (R)(u[2] - b2);
  const i64 bi = base_index(g.period, 0, b0), bj = base_index(g.period, 1, b1), bk = base_index(g.period, 2, b2);
  const T** corner = cell.corner;
  if ((bi & 7) != 7 && (bj & 7) != 7 && (bk & 7) != 7 && in_index_range(bi, bj, bk) &&
      !crosses_period(g.period, bi, bj, bk)) {
    const int x = (int)bi, y = (int)bj, z = (int)bk;
    const int slot = Reads::slot(g, x, y, z, cache);
    if (slot >= 0) {  // the whole stencil is inside one leaf
      const int base = voxel_offset(x, y, z);
      cell.leaf = slot;
      cell.offset = base;
      if (!g.index_layout) {
        const i64 sz = voxel_stride<NC>(g), sx = 64 * sz, sy = 8 * sz;
        const T* p0 = g.values + leaf_values_base(g, slot) + base * sz;
        corner[0] = p0;           corner[1] = p0 + sz;
        corner[2] = p0 + sy;      corner[3] = p0 + sy + sz;
        corner[4] = p0 + sx;      corner[5] = p0 + sx + sz;
        corner[6] = p0 + sx + sy; corner[7] = p0 + sx + sy + sz;
      } else {
        for (int o = 0; o < 8; ++o)
          corner[o] = leaf_value(g, slot, base + ((o >> 2) << 6) + (((o >> 1) & 1) << 3) + (o & 1));
      }
      return;
    }
  }
  if (Reads::across_leaves(g, bi, bj, bk, C, corner, cache)) return;
  for (int o = 0; o < 8; ++o)
    corner[o] = Reads::voxel(g, bi + (o >> 2), bj + ((o >> 1) & 1), bk + (o & 1), cache);
}

template <class T, int NC>
VDB_HD void locate_cell(const GridView<T>& g, const PointTransform& xf, const double p[3], int mode,
                        Cell<T>& cell, LeafCache& cache) {
  locate_cell_inline<T, NC>(g, xf, p, mode, cell, cache);
}

// Phase 2 of sampling: C values (type T) and, for want_jacobian, C x 3 Jacobian entries (type R).
template <class T, int NC>
VDB_HD VDB_INLINE void evaluate_cell_inline(const GridView<T>& g, const PointTransform& xf, const Cell<T>& cell,
                                            bool want_jacobian, T* value, typename RealOf<T>::type* jacobian) {
  typedef typename RealOf<T>::type R;
  const int C = NC > 0 ? NC : g.components;
  if (cell.kind != CELL_LINEAR) {
    if (cell.kind == CELL_NAN) {
      write_nan(C, want_jacobian, value, jacobian);
    } else {
      for (int c = 0; c < C; ++c) value[c] = load(cell.corner[0], c);
      if (want_jacobian)
        for (int e = 0; e < 3 * C; ++e) jacobian[e] = (R)0;
    }
    return;
  }
  const T* const* corner = cell.corner;
  const R fx = cell.f[0], fy = cell.f[1], fz = cell.f[2];

  // Trilinear value and gradient by successive linear interpolation along z, y, x.  This is the
  // same polynomial as sum_o W_o v_o and sum_o v_o (x) dW_o (docs/design.md), evaluated in fewer flops.
  constexpr int CMAX = NC > 0 ? NC : MAX_COMPONENTS;
  R acc[CMAX];
  Jacobian<R, CMAX> J;
  static_assert(sizeof(J) == sizeof(R) * CMAX * 3, "the Jacobian accumulator must be C x 3");
  for (int c = 0; c < C; ++c) {
    const R v000 = (R)load(corner[0], c), v001 = (R)load(corner[1], c), v010 = (R)load(corner[2], c), v011 = (R)load(corner[3], c);
    const R v100 = (R)load(corner[4], c), v101 = (R)load(corner[5], c), v110 = (R)load(corner[6], c), v111 = (R)load(corner[7], c);
    // along z
    const R d00 = v001 - v000, d01 = v011 - v010, d10 = v101 - v100, d11 = v111 - v110;
    const R c00 = v000 + fz * d00, c01 = v010 + fz * d01, c10 = v100 + fz * d10, c11 = v110 + fz * d11;
    // along y
    const R e0 = c01 - c00, e1 = c11 - c10;
    const R b0v = c00 + fy * e0, b1v = c10 + fy * e1;
    const R z0 = d00 + fy * (d01 - d00), z1 = d10 + fy * (d11 - d10);
    // along x
    const R dx = b1v - b0v;
    acc[c] = b0v + fx * dx;
    J.rows[c][0] = dx;
    J.rows[c][1] = e0 + fx * (e1 - e0);
    J.rows[c][2] = z0 + fx * (z1 - z0);
  }
  for (int c = 0; c < C; ++c) value[c] = (T)acc[c];
  if (want_jacobian) write_jacobian_inline(xf, C, (const R(*)[3])J.rows, jacobian);
}

template <class T, int NC>
VDB_HD void evaluate_cell(const GridView<T>& g, const PointTransform& xf, const Cell<T>& cell, bool want_jacobian,
                          T* value, typename RealOf<T>::type* jacobian) {
  evaluate_cell_inline<T, NC>(g, xf, cell, want_jacobian, value, jacobian);
}

// Values and Jacobian of one point with closest or linear (locate, then evaluate).
template <class T, int NC>
VDB_HD void sample_point_trilinear(const GridView<T>& g, const PointTransform& xf, const double p[3], int mode,
                                   bool want_jacobian, T* value, typename RealOf<T>::type* jacobian,
                                   LeafCache& cache) {
  Cell<T> cell;
  locate_cell<T, NC>(g, xf, p, mode, cell, cache);
  evaluate_cell<T, NC>(g, xf, cell, want_jacobian, value, jacobian);
}

}  // namespace vdbflow
