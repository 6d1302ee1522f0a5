// vdbflow/hessian.h - second derivatives at points, host+device.
//
// Separable schemes (linear, lag4/6/8, catmull_rom, bspline3, m2q8): the Hessian of the interpolant,
// H[a][a] from the s weights of axis a, H[a][b] from the d weights of axes a and b (trilinear
// `linear` has mixed terms only: its s weights are 0).
// Node-difference schemes (fd2/4/6/8, fd4lag4): a Hessian at each grid node - the second-difference
// stencil of order 2r along each axis for the diagonal, and for the mixed terms the same weights
// along the diagonals of the (a, b) plane,
//     H[a][b] = sum_{m=1..r} c_m / 4 * (V(+m,+m) - V(+m,-m) - V(-m,+m) + V(-m,-m)),
// (c_m the axis weights: JHTDB's FD4 and FD6 mixed sets for r = 2, 3) - interpolated between nodes the
// way the scheme's gradient is: linearly (fd2/4/6/8) or with lag4 (fd4lag4).
// Values and Jacobians come from sample_point, so they equal sample_grad's bit for bit.
#pragma once
#include "schemes.h"

namespace vdbflow {

// Upper-triangle order of the 6 distinct entries e: xx, yy, zz, xy, xz, yz (axes pair_a(e), pair_b(e)).
VDB_HD int pair_a(int e) { return e < 3 ? e : (e == 5 ? 1 : 0); }
VDB_HD int pair_b(int e) { return e < 3 ? e : (e == 3 ? 1 : 2); }

VDB_HD bool has_hessian(int mode) { return mode >= MODE_LINEAR && mode <= SCHEME_LAST; }
VDB_HD bool is_separable(int mode) {
  return mode == MODE_LINEAR || mode == SCHEME_LAG4 || mode == SCHEME_LAG6 || mode == SCHEME_LAG8 ||
         mode == SCHEME_CATMULL_ROM || mode == SCHEME_BSPLINE3 || mode == SCHEME_M2Q8;
}

// Adds w * (index-space Hessian of the node (i, j, k), 6 entries per component) to H.
template <class T, int NC>
VDB_HD void add_node_hessian(const GridView<T>& g, i64 i, i64 j, i64 k, int r, double w, double (*H)[6],
                             LeafCache& cache) {
  const int C = NC > 0 ? NC : g.components;
  const i64 node[3] = {i, j, k};
  for (int a = 0; a < 3; ++a)
    for (int m = -r; m <= r; ++m) {
      const double c = w * fd2_weight(r, m);
      const T* v = read_voxel(g, node[0] + (a == 0 ? m : 0), node[1] + (a == 1 ? m : 0), node[2] + (a == 2 ? m : 0),
                              cache);
      for (int q = 0; q < C; ++q) H[q][a] += c * (double)load(v, q);
    }
  for (int e = 3; e < 6; ++e) {
    const int a = pair_a(e), b = pair_b(e);
    for (int m = 1; m <= r; ++m) {
      const double c = w * 0.25 * fd2_weight(r, m);
      for (int corner = 0; corner < 4; ++corner) {
        const int sa = (corner & 2) ? -m : m, sb = (corner & 1) ? -m : m;
        const double sign = (sa > 0) == (sb > 0) ? 1.0 : -1.0;
        i64 p[3] = {node[0], node[1], node[2]};
        p[a] += sa;
        p[b] += sb;
        const T* v = read_voxel(g, p[0], p[1], p[2], cache);
        for (int q = 0; q < C; ++q) H[q][e] += sign * c * (double)load(v, q);
      }
    }
  }
}

// Stores H (6 entries per component, index space) as full symmetric 3 x 3 blocks, mapped to world
// axes (M^-T H M^-1) when `world`.
template <class R>
VDB_HD void write_hessian(const PointTransform& xf, bool world, int C, const double (*H)[6], R* out) {
  for (int c = 0; c < C; ++c) {
    double full[3][3];
    for (int e = 0; e < 6; ++e) {
      full[pair_a(e)][pair_b(e)] = H[c][e];
      full[pair_b(e)][pair_a(e)] = H[c][e];
    }
    for (int a = 0; a < 3; ++a)
      for (int b = a; b < 3; ++b) {
        double x = full[a][b];
        if (world) {
          x = 0.0;  // sum_rs inv[r][a] H[r][s] inv[s][b], where inv[r][a] = d index_r / d world_a
          for (int r = 0; r < 3; ++r)
            for (int s = 0; s < 3; ++s) x += xf.inv[3 * r + a] * full[r][s] * xf.inv[3 * s + b];
        }
        out[9 * c + 3 * a + b] = (R)x;
        out[9 * c + 3 * b + a] = (R)x;
      }
  }
}

#ifdef VDB_DEVICE_COMPILE
// The GPU's pass over a separable scheme's stencil (not linear, whose values are trilinear): values and Jacobian
// as sample_point_scheme sums them and H as sample_point_hessian does, from one set of weights (its frame holds
// 3 SeparableWeights, 600 B, where sample_point_scheme's and the Hessian's held 504 + 600 B).  Each sum skips the
// taps its own weights skip and adds in the same order, so each equals its two-pass value.
template <class T, int NC>
VDB_HD void separable_values_and_hessian(const GridView<T>& g, const PointTransform& xf, const i64 b[3],
                                         const double f[3], int mode, T* value, typename RealOf<T>::type* jacobian,
                                         double (*H)[6], LeafCache& cache) {
  const int C = NC > 0 ? NC : g.components;
  SeparableWeights w[3];
  for (int a = 0; a < 3; ++a) axis_weights(mode, f[a], w[a], true);
  constexpr int CMAX = NC > 0 ? NC : MAX_COMPONENTS;
  double acc[CMAX], J[CMAX][3];
  for (int c = 0; c < C; ++c) acc[c] = J[c][0] = J[c][1] = J[c][2] = 0.0;
  for (int i = 0; i < w[0].n; ++i)
    for (int j = 0; j < w[1].n; ++j)
      for (int k = 0; k < w[2].n; ++k) {
        const double vx = w[0].v[i], vy = w[1].v[j], vz = w[2].v[k];
        const double dx = w[0].d[i], dy = w[1].d[j], dz = w[2].d[k];
        const double wv = vx * vy * vz, wx = dx * vy * vz, wy = vx * dy * vz, wz = vx * vy * dz;
        const double h[6] = {w[0].s[i] * vy * vz, vx * w[1].s[j] * vz, vx * vy * w[2].s[k],
                             dx * dy * vz, dx * vy * dz, vx * dy * dz};
        const bool first = !(wv == 0.0 && wx == 0.0 && wy == 0.0 && wz == 0.0);
        const bool second = !(h[0] == 0.0 && h[1] == 0.0 && h[2] == 0.0 && h[3] == 0.0 && h[4] == 0.0 && h[5] == 0.0);
        if (!first && !second) continue;
        const T* v = read_voxel(g, b[0] + w[0].lo + i, b[1] + w[1].lo + j, b[2] + w[2].lo + k, cache);
        for (int c = 0; c < C; ++c) {
          const double vc = (double)load(v, c);
          if (first) {
            acc[c] += wv * vc;
            J[c][0] += wx * vc;
            J[c][1] += wy * vc;
            J[c][2] += wz * vc;
          }
          if (second)
            for (int e = 0; e < 6; ++e) H[c][e] += h[e] * vc;
        }
      }
  for (int c = 0; c < C; ++c) value[c] = (T)acc[c];
  if (jacobian) write_jacobian(xf, C, (const double(*)[3])J, jacobian);
}
#endif

// Value, Jacobian (as sample_point) and Hessian (C x 3 x 3, symmetric) of one point.  On the GPU a separable
// scheme other than linear sums all three in one pass (separable_values_and_hessian).
template <class T, int NC>
VDB_HD void sample_point_hessian(const GridView<T>& g, const PointTransform& xf, const double p[3], int mode,
                                 bool hessian_world, T* value, typename RealOf<T>::type* jacobian,
                                 typename RealOf<T>::type* hessian, LeafCache& cache) {
  typedef typename RealOf<T>::type R;
  const int C = NC > 0 ? NC : g.components;
#ifdef VDB_DEVICE_COMPILE
  const bool one_pass = mode != MODE_LINEAR && is_separable(mode);
  if (!one_pass) sample_point<T, NC>(g, xf, p, mode, jacobian != nullptr, value, jacobian, cache);
#else
  sample_point<T, NC>(g, xf, p, mode, jacobian != nullptr, value, jacobian, cache);
#endif
  double u[3];
  to_index_space(xf, p, u);
  if (!finite3(u)) {
    const R not_a_number = (R)nan("");
#ifdef VDB_DEVICE_COMPILE
    if (one_pass) write_nan(C, jacobian != nullptr, value, jacobian);
#endif
    for (int e = 0; e < 9 * C; ++e) hessian[e] = not_a_number;
    return;
  }
  constexpr int CMAX = NC > 0 ? NC : MAX_COMPONENTS;
  double H[CMAX][6];
  for (int c = 0; c < C; ++c)
    for (int e = 0; e < 6; ++e) H[c][e] = 0.0;
  i64 b[3];
  double f[3];
  for (int a = 0; a < 3; ++a) {
    const double fl = floor(u[a]);
    b[a] = base_index(g.period, a, fl);
    f[a] = u[a] - fl;
  }
#ifdef VDB_DEVICE_COMPILE
  if (one_pass) {
    separable_values_and_hessian<T, NC>(g, xf, b, f, mode, value, jacobian, H, cache);
  } else
#endif
  if (is_separable(mode)) {
    SeparableWeights w[3];
    for (int a = 0; a < 3; ++a) axis_weights(mode, f[a], w[a], true);
    for (int i = 0; i < w[0].n; ++i)
      for (int j = 0; j < w[1].n; ++j)
        for (int k = 0; k < w[2].n; ++k) {
          const double vx = w[0].v[i], vy = w[1].v[j], vz = w[2].v[k];
          const double dx = w[0].d[i], dy = w[1].d[j], dz = w[2].d[k];
          const double h[6] = {w[0].s[i] * vy * vz, vx * w[1].s[j] * vz, vx * vy * w[2].s[k],
                               dx * dy * vz, dx * vy * dz, vx * dy * dz};
          if (h[0] == 0.0 && h[1] == 0.0 && h[2] == 0.0 && h[3] == 0.0 && h[4] == 0.0 && h[5] == 0.0) continue;
          const T* v = read_voxel(g, b[0] + w[0].lo + i, b[1] + w[1].lo + j, b[2] + w[2].lo + k, cache);
          for (int c = 0; c < C; ++c) {
            const double vc = (double)load(v, c);
            for (int e = 0; e < 6; ++e) H[c][e] += h[e] * vc;
          }
        }
  } else {
    // node Hessians, interpolated: linearly (fd2/4/6/8) or with lag4 (fd4lag4)
    const int r = mode == SCHEME_FD4LAG4 ? 2 : fd_radius(mode);
    int lo, n;
    double w[3][4];
    if (mode == SCHEME_FD4LAG4) {
      lo = -1;
      n = 4;
      double unused[4];
      for (int a = 0; a < 3; ++a) lagrange(4, -1, f[a], w[a], unused);
    } else {
      lo = 0;
      n = 2;
      for (int a = 0; a < 3; ++a) {
        w[a][0] = 1.0 - f[a];
        w[a][1] = f[a];
      }
    }
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j)
        for (int k = 0; k < n; ++k) {
          const double wn = w[0][i] * w[1][j] * w[2][k];
          if (wn == 0.0) continue;
          add_node_hessian<T, NC>(g, b[0] + lo + i, b[1] + lo + j, b[2] + lo + k, r, wn, H, cache);
        }
  }
  write_hessian(xf, hessian_world, C, (const double(*)[6])H, hessian);
}

#ifdef VDB_DEVICE_COMPILE
// One point's sample_point_hessian out of line (for a run-time count, NC = 0: component c alone, of
// component_view(g, c)).  Inlined into the entry, ptxas keeps a larger frame (and spills in the loop over
// components).  It reads the grid and transform from the record k and the point from p (global memory): a
// GridView, transform and point passed by reference would be copied to the entry's frame (264 B).
template <class T, int NC, class P>
__device__ __attribute__((noinline)) void point_hessian(const KernelAbi& k, int c, const P* pts, i64 i, bool world,
                                                        T* value, typename RealOf<T>::type* jacobian,
                                                        typename RealOf<T>::type* hessian, LeafCache& cache) {
  const GridView<T> g = abi_grid<T>(k);
  const PointTransform xf = abi_transform(k);
  double p[3];
  load_point(pts, i, p);
  if constexpr (NC == 0)
    sample_point_hessian<T, 1>(component_view(g, c), xf, p, k.mode, world, value, jacobian, hessian, cache);
  else
    sample_point_hessian<T, NC>(g, xf, p, k.mode, world, value, jacobian, hessian, cache);
}
#endif

// Entry: values (N, C), Jacobians (N, C, 3) when out_j is not null, and Hessians (N, C, 3, 3) of n points.
// On the GPU a point is point_hessian's, out of line, and a run-time count (NC = 0) goes through the components
// one at a time (component_view): no frame of MAX_COMPONENTS' sums (6.9 KB); the CPU keeps one pass.
template <class T, int NC, class P>
VDB_ENTRY void hessian_points(const KernelAbi& k, const P* pts, i64 n, T* out_v, typename RealOf<T>::type* out_j,
                              typename RealOf<T>::type* out_h) {
  typedef typename RealOf<T>::type R;
  const GridView<T> g = abi_grid<T>(k);
  const int C = k.components, mode = k.mode;
  const bool world = k.hessian_world != 0;
  auto body = [&](i64 i, const PointTransform& xf, LeafCache& cache) {
    T* v = out_v + i * C;
    R* j = out_j ? out_j + i * 3 * C : nullptr;
    R* h = out_h + i * 9 * C;
#ifdef VDB_DEVICE_COMPILE
    (void)xf;
    (void)g;
    (void)mode;
    if constexpr (NC == 0) {
      for (int c = 0; c < C; ++c)
        point_hessian<T, 0>(k, c, pts, i, world, v + c, j ? j + 3 * c : nullptr, h + 9 * c, cache);
    } else {
      point_hessian<T, NC>(k, 0, pts, i, world, v, j, h, cache);
    }
#else
    double p[3];
    load_point(pts, i, p);
    sample_point_hessian<T, NC>(g, xf, p, mode, world, v, j, h, cache);
#endif
  };
  for_each_point<1024>(n, k, body);
}

// ---- the entry of sample_hessian (operations.h) ----------------------------------------------------------------
#ifdef VDB_DEVICE_COMPILE
// float data; out_jacobian may be null
template <class T, int NC>
__global__ void VDB_BOUNDS VDBFLOW_GPU_ENTRY(sample_hessian) {
  hessian_points<T, NC>(*abi, points, n, out_values, out_jacobian, out_hessian);
}
#else
VDBFLOW_CPU_ENTRY(sample_hessian) {
  const KernelAbi& a = *(const KernelAbi*)k;
  with_instance<true>(a.value_kind, a.components, points_double, [&](auto t, auto nc, auto p) {
    typedef type_of<decltype(t)> T;
    typedef type_of<decltype(p)> P;
    hessian_points<T, decltype(nc)::value, P>(a, (const P*)points, n, (T*)out_values, (Real<T>*)out_jacobian,
                                              (Real<T>*)out_hessian);
  });
}
#endif

}  // namespace vdbflow
