// vdbflow/adjoint.h - reverse mode of sample_point: adjoints to voxel data, tiles, background and
// points, host+device.  Semantics of Warp >= 1.18's adjoint of volume_sample_grad_index:
//   corner o of the cell receives  W_o a + G . dW_o   (a: value adjoint (C), G: Jacobian adjoint (C x 3))
//   the point receives             sum_o (v_o . a) dW_o + (v_o^T G) H_o   (H_o: Hessian of W_o)
//   closest sends a to the rounded voxel only.
// A corner's share goes to whatever it read: a voxel, a tile, or the background.
#pragma once
#include "launch.h"
#include "sample.h"

namespace vdbflow {

// Rows of the adjoint accumulator: voxel-data rows [0, value_rows), tile rows next, background last.
struct AdjointRows {
  i64 value_rows;
  i64 tile_rows;
};

template <class T>
VDB_HD i64 corner_row(const GridView<T>& g, const AdjointRows& rows, const T* ptr) {
  const i64 C = g.components;
  if (ptr == g.background) return rows.value_rows + rows.tile_rows;
  if (rows.tile_rows > 0 && ptr >= g.tile_values && ptr < g.tile_values + rows.tile_rows * C)
    return rows.value_rows + (ptr - g.tile_values) / C;
  return (ptr - g.values) / C;  // contiguous rows (the host hands over leaf_values_at == null)
}

// Reverse mode of one point.  adj_value: C entries; adj_jacobian: C x 3 in the forward call's
// Jacobian space (xf.jacobian_world), or null.  sink(o, row, c, x) receives corner o's share x of
// component c for accumulator row `row`; adj_point (3) is written in the points' space.
template <class T, int NC, class Sink>
VDB_HD void adjoint_point(const GridView<T>& g, const AdjointRows& rows, const PointTransform& xf,
                          const double p[3], int mode, const typename RealOf<T>::type* adj_value,
                          const typename RealOf<T>::type* adj_jacobian, Sink& sink,
                          typename RealOf<T>::type* adj_point, LeafCache& cache) {
  typedef typename RealOf<T>::type R;
  const int C = NC > 0 ? NC : g.components;
  Cell<T> cell;
  locate_cell<T, NC>(g, xf, p, mode, cell, cache);
  adj_point[0] = adj_point[1] = adj_point[2] = (R)0;
  if (cell.kind == CELL_NAN) {
    adj_point[0] = adj_point[1] = adj_point[2] = (R)nan("");
    return;
  }
  if (cell.kind == CELL_CLOSEST) {
    const i64 row = corner_row(g, rows, cell.corner[0]);
    for (int c = 0; c < C; ++c) sink(0, row, c, adj_value[c]);
    return;
  }
#ifdef VDB_DEVICE_COMPILE
  // Jacobian adjoint in index space: J_world = J_index M^-1, so G_index = G_world M^-T.  A run-time count
  // computes a component's row of G where it is read (the same numbers): 64 rows were 0.8-1.5 KB of frame.
  auto g_row = [&](int c, int b) {
    R x = (R)0;
    if (adj_jacobian != nullptr) {
      if (xf.jacobian_world)
        for (int a = 0; a < 3; ++a) x += adj_jacobian[3 * c + a] * (R)xf.inv[3 * b + a];
      else
        x = adj_jacobian[3 * c + b];
    }
    return x;
  };
  Jacobian<R, (NC > 0 ? NC : 1)> G;
  if constexpr (NC > 0)
    for (int c = 0; c < C; ++c)
      for (int b = 0; b < 3; ++b) G.rows[c][b] = g_row(c, b);
  const R fx = cell.f[0], fy = cell.f[1], fz = cell.f[2];
  const R wx[2] = {(R)1 - fx, fx}, wy[2] = {(R)1 - fy, fy}, wz[2] = {(R)1 - fz, fz};
  R u0 = (R)0, u1 = (R)0, u2 = (R)0;
  for (int o = 0; o < 8; ++o) {
    const int ox = o >> 2, oy = (o >> 1) & 1, oz = o & 1;
    const R sx = ox ? (R)1 : (R)-1, sy = oy ? (R)1 : (R)-1, sz = oz ? (R)1 : (R)-1;
    const R w = wx[ox] * wy[oy] * wz[oz];
    const R gx = sx * wy[oy] * wz[oz], gy = sy * wx[ox] * wz[oz], gz = sz * wx[ox] * wy[oy];
    const R hxy = sx * sy * wz[oz], hxz = sx * sz * wy[oy], hyz = sy * sz * wx[ox];
    const T* v = cell.corner[o];
    const i64 row = corner_row(g, rows, v);
    R dot_a = (R)0, vg0 = (R)0, vg1 = (R)0, vg2 = (R)0;
    for (int c = 0; c < C; ++c) {
      const R vc = (R)load(v, c);
      const R g0 = NC > 0 ? G.rows[c][0] : g_row(c, 0), g1 = NC > 0 ? G.rows[c][1] : g_row(c, 1),
              g2 = NC > 0 ? G.rows[c][2] : g_row(c, 2);
      sink(o, row, c, w * adj_value[c] + g0 * gx + g1 * gy + g2 * gz);
      dot_a += vc * adj_value[c];
      vg0 += vc * g0;
      vg1 += vc * g1;
      vg2 += vc * g2;
    }
    u0 += dot_a * gx + vg1 * hxy + vg2 * hxz;
    u1 += dot_a * gy + vg0 * hxy + vg2 * hyz;
    u2 += dot_a * gz + vg0 * hxz + vg1 * hyz;
  }
#else
  // Jacobian adjoint in index space: J_world = J_index M^-1, so G_index = G_world M^-T.
  constexpr int CMAX = NC > 0 ? NC : MAX_COMPONENTS;
  Jacobian<R, CMAX> G;
  for (int c = 0; c < C; ++c)
    for (int b = 0; b < 3; ++b) {
      R x = (R)0;
      if (adj_jacobian != nullptr) {
        if (xf.jacobian_world)
          for (int a = 0; a < 3; ++a) x += adj_jacobian[3 * c + a] * (R)xf.inv[3 * b + a];
        else
          x = adj_jacobian[3 * c + b];
      }
      G.rows[c][b] = x;
    }
  const R fx = cell.f[0], fy = cell.f[1], fz = cell.f[2];
  const R wx[2] = {(R)1 - fx, fx}, wy[2] = {(R)1 - fy, fy}, wz[2] = {(R)1 - fz, fz};
  R u0 = (R)0, u1 = (R)0, u2 = (R)0;
  for (int o = 0; o < 8; ++o) {
    const int ox = o >> 2, oy = (o >> 1) & 1, oz = o & 1;
    const R sx = ox ? (R)1 : (R)-1, sy = oy ? (R)1 : (R)-1, sz = oz ? (R)1 : (R)-1;
    const R w = wx[ox] * wy[oy] * wz[oz];
    const R gx = sx * wy[oy] * wz[oz], gy = sy * wx[ox] * wz[oz], gz = sz * wx[ox] * wy[oy];
    const R hxy = sx * sy * wz[oz], hxz = sx * sz * wy[oy], hyz = sy * sz * wx[ox];
    const T* v = cell.corner[o];
    const i64 row = corner_row(g, rows, v);
    R dot_a = (R)0, vg0 = (R)0, vg1 = (R)0, vg2 = (R)0;
    for (int c = 0; c < C; ++c) {
      const R vc = (R)load(v, c);
      sink(o, row, c, w * adj_value[c] + G.rows[c][0] * gx + G.rows[c][1] * gy + G.rows[c][2] * gz);
      dot_a += vc * adj_value[c];
      vg0 += vc * G.rows[c][0];
      vg1 += vc * G.rows[c][1];
      vg2 += vc * G.rows[c][2];
    }
    u0 += dot_a * gx + vg1 * hxy + vg2 * hxz;
    u1 += dot_a * gy + vg0 * hxy + vg2 * hyz;
    u2 += dot_a * gz + vg0 * hxz + vg1 * hyz;
  }
#endif
  if (!xf.points_world) {
    adj_point[0] = u0;
    adj_point[1] = u1;
    adj_point[2] = u2;
    return;
  }
  // u = M^-1 (x - t): x_bar = M^-T u_bar
  for (int j = 0; j < 3; ++j)
    adj_point[j] = (R)(xf.inv[j] * u0 + xf.inv[3 + j] * u1 + xf.inv[6 + j] * u2);
}

// Entry: the reverse mode of n points.  adj_v (N, C), adj_j (N, C, 3) or null; the corner shares go to
// accumulator (k.value_rows + k.tile_rows + 1, C) float64, the point adjoints to adj_p (N, 3).  The record's
// values are read as contiguous rows (leaf_values_at is ignored).
#ifdef VDB_DEVICE_COMPILE
// On the GPU the shares are added with atomicAdd, so the order of the additions (and so the last bits of
// the sums) may change from run to run.
struct AtomicSink {
  double* accumulator;
  int components;
  __device__ void operator()(int, i64 row, int c, double x) const { atomicAdd(accumulator + row * components + c, x); }
};

template <class T, int NC, class P>
VDB_ENTRY void adjoint_points(const KernelAbi& k, const P* pts, i64 n, const typename RealOf<T>::type* adj_v,
                              const typename RealOf<T>::type* adj_j, double* accumulator,
                              typename RealOf<T>::type* adj_p) {
  const GridView<T> g = abi_grid<T>(k, true);
  const int C = k.components, mode = k.mode;
  const AdjointRows rows{k.value_rows, k.tile_rows};
  AtomicSink sink{accumulator, C};
  auto body = [&](i64 i, const PointTransform& xf, LeafCache& cache) {
    double p[3];
    load_point(pts, i, p);
    adjoint_point<T, NC>(g, rows, xf, p, mode, adj_v + i * C, adj_j ? adj_j + i * 3 * C : nullptr, sink,
                         adj_p + 3 * i, cache);
  };
  for_each_point<1>(n, k, body);
}
#else
// On the CPU, deterministic: the corner shares of a chunk of points are computed in parallel into a
// buffer, then added to the accumulator in point order, corner order - the same sums in the same order
// whatever the thread count.
constexpr i64 ADJOINT_CHUNK = 1 << 14;  // points per chunk

template <class T, int NC, class P>
VDB_ENTRY void adjoint_points(const KernelAbi& k, const P* pts, i64 n, const typename RealOf<T>::type* adj_v,
                              const typename RealOf<T>::type* adj_j, double* accumulator,
                              typename RealOf<T>::type* adj_p) {
  typedef typename RealOf<T>::type R;
  const GridView<T> g = abi_grid<T>(k, true);
  const int C = k.components, mode = k.mode;
  const AdjointRows rows{k.value_rows, k.tile_rows};
  const i64 chunk = n < ADJOINT_CHUNK ? n : ADJOINT_CHUNK;
  std::vector<i64> row((size_t)chunk * 8);
  std::vector<double> share((size_t)chunk * 8 * C);
  for (i64 first = 0; first < n; first += chunk) {
    const i64 count = (n - first) < chunk ? (n - first) : chunk;
    auto body = [&](i64 q, const PointTransform& xf, LeafCache& cache) {
      const i64 i = first + q;
      double p[3];
      load_point(pts, i, p);
      for (int o = 0; o < 8; ++o) row[(size_t)(q * 8 + o)] = -1;
      auto sink = [&](int o, i64 r, int c, R x) {
        row[(size_t)(q * 8 + o)] = r;
        share[(size_t)((q * 8 + o) * C + c)] = (double)x;
      };
      adjoint_point<T, NC>(g, rows, xf, p, mode, adj_v + i * C, adj_j ? adj_j + i * 3 * C : nullptr, sink,
                           adj_p + 3 * i, cache);
    };
    for_each_point<256, STATIC>(count, k, body);
    for (i64 e = 0; e < count * 8; ++e) {
      const i64 r = row[(size_t)e];
      if (r < 0) continue;
      double* dst = accumulator + r * C;
      const double* src = share.data() + e * C;
      for (int c = 0; c < C; ++c) dst[c] += src[c];
    }
  }
}
#endif

// ---- the entry of sample_vjp (operations.h) -------------------------------------------------------------------
#ifdef VDB_DEVICE_COMPILE
// Corner shares are added to a float64 accumulator with atomicAdd, so on the GPU the order of the additions (and
// so the last bits of the sums) may change from run to run.
template <class T, int NC>
__global__ void VDB_BOUNDS_FILL VDBFLOW_GPU_ENTRY(sample_vjp) {
  adjoint_points<T, NC>(*abi, points, n, adj_values, adj_jacobian, accumulator, adj_points);
}
#else
VDBFLOW_CPU_ENTRY(sample_vjp) {
  const KernelAbi& a = *(const KernelAbi*)k;
  with_instance<true>(a.value_kind, a.components, points_double, [&](auto t, auto nc, auto p) {
    typedef type_of<decltype(t)> T;
    typedef type_of<decltype(p)> P;
    adjoint_points<T, decltype(nc)::value, P>(a, (const P*)points, n, (const Real<T>*)adj_values,
                                              (const Real<T>*)adj_jacobian, accumulator, (Real<T>*)adj_points);
  });
}
#endif

}  // namespace vdbflow
