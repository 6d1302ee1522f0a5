// vdbflow/schemes.h - higher-order sampling schemes as separable tensor-product stencils, host+device.
//
// Along each axis a scheme gives value weights v[k] and derivative weights d[k] on the offsets
// lo .. lo+n-1 from the base cell b = floor(u) (f = u - b); the value is sum v_x v_y v_z V and
// J[c][a] uses d on axis a and v on the others.  Missing voxels read tiles / background as usual.
//   lag4/6/8      Lagrange interpolation through 4/6/8 nodes per axis
//   fd2/fd4/fd6   centred 2nd/4th/6th-order differences at the nodes, interpolated linearly; value linear
//   fd4lag4       4th-order differences at the nodes, interpolated with lag4; value lag4
//   catmull_rom   cubic Catmull-Rom spline (C1 value, continuous Jacobian), interpolating
//   bspline3      uniform cubic B-spline (C2 value, C1 Jacobian), approximating
#pragma once
#include "sample.h"

namespace vdbflow {

enum HigherScheme {
  SCHEME_LAG4 = 2, SCHEME_LAG6 = 3, SCHEME_LAG8 = 4, SCHEME_FD4 = 5, SCHEME_FD6 = 6,
  SCHEME_FD4LAG4 = 7, SCHEME_CATMULL_ROM = 8, SCHEME_BSPLINE3 = 9, SCHEME_FD2 = 10
};
constexpr int MAX_TAPS = 8;

struct AxisWeights {
  int lo, n;
  double v[MAX_TAPS], d[MAX_TAPS];
};

// Lagrange basis through nodes lo .. lo+n-1 at f: values and derivatives.
VDB_HD void lagrange(int n, int lo, double f, double* v, double* d) {
  for (int k = 0; k < n; ++k) {
    const double xk = lo + k;
    double num = 1.0, den = 1.0;
    for (int m = 0; m < n; ++m)
      if (m != k) {
        num *= f - (lo + m);
        den *= xk - (lo + m);
      }
    v[k] = num / den;
    double deriv = 0.0;
    for (int j = 0; j < n; ++j) {
      if (j == k) continue;
      double prod = 1.0;
      for (int m = 0; m < n; ++m)
        if (m != k && m != j) prod *= f - (lo + m);
      deriv += prod;
    }
    d[k] = deriv / den;
  }
}

// Weights of interpolating node derivatives D(j) = sum_m c[m] V(j + m) (m = -r .. r) with node
// weights w[j] on nodes jlo .. jlo+nj-1: derivative weights on offsets jlo-r .. jlo+nj-1+r.
VDB_HD void node_derivative(const double* w, int jlo, int nj, const double* c, int r, AxisWeights& out) {
  out.lo = jlo - r;
  out.n = nj + 2 * r;
  for (int k = 0; k < out.n; ++k) out.d[k] = 0.0;
  for (int j = 0; j < nj; ++j)
    for (int m = -r; m <= r; ++m) out.d[j + m + r] += w[j] * c[m + r];
}

// Centred-difference weights on offsets m = -r .. r of orders 2, 4, 6 (r = 1, 2, 3).
VDB_HD double fd_weight(int r, int m) {
  const int s = m < 0 ? -1 : 1, k = m < 0 ? -m : m;
  if (k == 0) return 0.0;
  if (r == 1) return s * 0.5;
  if (r == 2) return s * (k == 1 ? 8.0 / 12 : -1.0 / 12);
  return s * (k == 1 ? 45.0 / 60 : (k == 2 ? -9.0 / 60 : 1.0 / 60));
}

VDB_HD bool is_node_fd(int scheme) { return scheme == SCHEME_FD2 || scheme == SCHEME_FD4 || scheme == SCHEME_FD6; }
VDB_HD int fd_radius(int scheme) { return scheme == SCHEME_FD2 ? 1 : (scheme == SCHEME_FD4 ? 2 : 3); }

VDB_HD void axis_weights(int scheme, double f, AxisWeights& a) {
  for (int k = 0; k < MAX_TAPS; ++k) a.v[k] = a.d[k] = 0.0;
  if (scheme == SCHEME_LAG4 || scheme == SCHEME_LAG6 || scheme == SCHEME_LAG8) {
    const int n = scheme == SCHEME_LAG4 ? 4 : (scheme == SCHEME_LAG6 ? 6 : 8);
    a.n = n;
    a.lo = 1 - n / 2;
    lagrange(n, a.lo, f, a.v, a.d);
    return;
  }
  if (scheme == SCHEME_CATMULL_ROM || scheme == SCHEME_BSPLINE3) {
    const double f2 = f * f, f3 = f2 * f;
    a.lo = -1;
    a.n = 4;
    if (scheme == SCHEME_CATMULL_ROM) {
      const double v[4] = {0.5 * (-f3 + 2 * f2 - f), 0.5 * (3 * f3 - 5 * f2 + 2), 0.5 * (-3 * f3 + 4 * f2 + f),
                           0.5 * (f3 - f2)};
      const double d[4] = {0.5 * (-3 * f2 + 4 * f - 1), 0.5 * (9 * f2 - 10 * f), 0.5 * (-9 * f2 + 8 * f + 1),
                           0.5 * (3 * f2 - 2 * f)};
      for (int k = 0; k < 4; ++k) { a.v[k] = v[k]; a.d[k] = d[k]; }
    } else {
      const double g = 1 - f;
      const double v[4] = {g * g * g / 6, (3 * f3 - 6 * f2 + 4) / 6, (-3 * f3 + 3 * f2 + 3 * f + 1) / 6, f3 / 6};
      const double d[4] = {-0.5 * g * g, (9 * f2 - 12 * f) / 6, (-9 * f2 + 6 * f + 3) / 6, 0.5 * f2};
      for (int k = 0; k < 4; ++k) { a.v[k] = v[k]; a.d[k] = d[k]; }
    }
    return;
  }
  // node-derivative schemes
  double c2[3], c4[5], c6[7];
  for (int m = -1; m <= 1; ++m) c2[m + 1] = fd_weight(1, m);
  for (int m = -2; m <= 2; ++m) c4[m + 2] = fd_weight(2, m);
  for (int m = -3; m <= 3; ++m) c6[m + 3] = fd_weight(3, m);
  if (is_node_fd(scheme)) {
    const double w[2] = {1.0 - f, f};
    const int r = fd_radius(scheme);
    node_derivative(w, 0, 2, scheme == SCHEME_FD2 ? c2 : (scheme == SCHEME_FD4 ? c4 : c6), r, a);
    a.v[r] = 1.0 - f;  // linear value on offsets 0, 1
    a.v[r + 1] = f;
    return;
  }
  // fd4lag4: FD4 node derivatives through lag4 node weights; lag4 value
  double w[4], dw[4];
  lagrange(4, -1, f, w, dw);
  node_derivative(w, -1, 4, c4, 2, a);
  for (int k = 0; k < 4; ++k) a.v[k + 2] = w[k];
}

// fd2/fd4/fd6 at a grid node (what gradient fields ask for): the value is the voxel's, the Jacobian
// the centred differences along each axis - 1 + 6r reads instead of the (2r + 2)^3 stencil.  The
// sums run in the order of the general stencil loop below, which at a node adds only zeros
// besides these terms, so both give the same numbers.
template <class T, int NC>
VDB_HD void gradient_at_node(const GridView<T>& g, const PointTransform& xf, const double u[3], int scheme,
                             bool want_jacobian, T* value, typename RealOf<T>::type* jacobian, LeafCache& cache) {
  const int C = NC > 0 ? NC : g.components;
  const i64 b[3] = {clamp_far(u[0]), clamp_far(u[1]), clamp_far(u[2])};
  const T* v0 = read_voxel(g, b[0], b[1], b[2], cache);
  for (int c = 0; c < C; ++c) value[c] = load(v0, c);
  if (!want_jacobian) return;
  constexpr int CMAX = NC > 0 ? NC : MAX_COMPONENTS;
  double J[CMAX][3];
  for (int c = 0; c < C; ++c) J[c][0] = J[c][1] = J[c][2] = 0.0;
  const int r = fd_radius(scheme);
  for (int a = 0; a < 3; ++a)
    for (int m = -r; m <= r; ++m) {
      if (m == 0) continue;
      const double w = fd_weight(r, m);
      const T* v = read_voxel(g, b[0] + (a == 0 ? m : 0), b[1] + (a == 1 ? m : 0), b[2] + (a == 2 ? m : 0), cache);
      for (int c = 0; c < C; ++c) J[c][a] += w * (double)load(v, c);
    }
  write_jacobian(xf, C, (const double(*)[3])J, jacobian);
}

// Values and Jacobian of one point with a higher-order scheme (accumulated in double).
template <class T, int NC>
VDB_HD void sample_point_scheme(const GridView<T>& g, const PointTransform& xf, const double p[3], int scheme,
                                bool want_jacobian, T* value, typename RealOf<T>::type* jacobian,
                                LeafCache& cache) {
  const int C = NC > 0 ? NC : g.components;
  double u[3];
  to_index_space(xf, p, u);
  if (!finite3(u)) {
    write_nan(C, want_jacobian, value, jacobian);
    return;
  }
  if (is_node_fd(scheme) && u[0] == floor(u[0]) && u[1] == floor(u[1]) && u[2] == floor(u[2])) {
    gradient_at_node<T, NC>(g, xf, u, scheme, want_jacobian, value, jacobian, cache);
    return;
  }
  AxisWeights w[3];
  i64 b[3];
  for (int a = 0; a < 3; ++a) {
    const double fl = floor(u[a]);
    b[a] = clamp_far(fl);
    axis_weights(scheme, u[a] - fl, w[a]);
  }
  constexpr int CMAX = NC > 0 ? NC : MAX_COMPONENTS;
  double acc[CMAX], J[CMAX][3];
  for (int c = 0; c < C; ++c) acc[c] = J[c][0] = J[c][1] = J[c][2] = 0.0;
  for (int i = 0; i < w[0].n; ++i)
    for (int j = 0; j < w[1].n; ++j)
      for (int k = 0; k < w[2].n; ++k) {
        const double vx = w[0].v[i], vy = w[1].v[j], vz = w[2].v[k];
        const double dx = w[0].d[i], dy = w[1].d[j], dz = w[2].d[k];
        const double wv = vx * vy * vz, wx = dx * vy * vz, wy = vx * dy * vz, wz = vx * vy * dz;
        if (wv == 0.0 && wx == 0.0 && wy == 0.0 && wz == 0.0) continue;
        const T* v = read_voxel(g, b[0] + w[0].lo + i, b[1] + w[1].lo + j, b[2] + w[2].lo + k, cache);
        for (int c = 0; c < C; ++c) {
          const double vc = (double)load(v, c);
          acc[c] += wv * vc;
          J[c][0] += wx * vc;
          J[c][1] += wy * vc;
          J[c][2] += wz * vc;
        }
      }
  for (int c = 0; c < C; ++c) value[c] = (T)acc[c];
  if (want_jacobian) write_jacobian(xf, C, (const double(*)[3])J, jacobian);
}

// Values and Jacobian of one point, any mode: closest, linear or a higher-order scheme.
template <class T, int NC>
VDB_HD void sample_point(const GridView<T>& g, const PointTransform& xf, const double p[3], int mode,
                         bool want_jacobian, T* value, typename RealOf<T>::type* jacobian, LeafCache& cache) {
  if (mode <= MODE_LINEAR)
    sample_point_trilinear<T, NC>(g, xf, p, mode, want_jacobian, value, jacobian, cache);
  else
    sample_point_scheme<T, NC>(g, xf, p, mode, want_jacobian, value, jacobian, cache);
}

}  // namespace vdbflow
