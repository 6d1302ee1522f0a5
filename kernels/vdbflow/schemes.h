// vdbflow/schemes.h - higher-order sampling schemes as separable tensor-product stencils, host+device.
//
// Along each axis a scheme gives value weights v[k] and derivative weights d[k] on the offsets
// lo .. lo+n-1 from the base cell b = floor(u) (f = u - b); the value is sum v_x v_y v_z V and
// J[c][a] uses d on axis a and v on the others.  Missing voxels read tiles / background as usual.
//   lag4/6/8      Lagrange interpolation through 4/6/8 nodes per axis
//   fd2/4/6/8     centred 2nd/4th/6th/8th-order differences at the nodes, interpolated linearly; value linear
//   fd4lag4       4th-order differences at the nodes, interpolated with lag4; value lag4
//   catmull_rom   cubic Catmull-Rom spline (C1 value, continuous Jacobian), interpolating; JHTDB's M1Q4
//   bspline3      uniform cubic B-spline (C2 value, C1 Jacobian), approximating
//   m2q8          quintic Hermite spline through 8 nodes (C2 value, JHTDB's M2Q8): on the cell [0, 1] the
//                 polynomial of degree 5 whose value, first and second derivative at nodes 0 and 1 are
//                 the node value and the 6th-order centred differences there (radius 3); with degree 3,
//                 first derivatives and radius 1 the same construction is Catmull-Rom (M1Q4)
// Second derivatives (hessian.h) use the s weights of the separable schemes; the node-difference
// schemes have their own node Hessians there.
#pragma once
#include "launch.h"
#include "sample.h"
#include "simd.h"

namespace vdbflow {

enum HigherScheme {
  SCHEME_LAG4 = 2, SCHEME_LAG6 = 3, SCHEME_LAG8 = 4, SCHEME_FD4 = 5, SCHEME_FD6 = 6,
  SCHEME_FD4LAG4 = 7, SCHEME_CATMULL_ROM = 8, SCHEME_BSPLINE3 = 9, SCHEME_FD2 = 10, SCHEME_FD8 = 11,
  SCHEME_M2Q8 = 12
};
constexpr int SCHEME_LAST = SCHEME_M2Q8;
constexpr int MAX_TAPS = 10;  // fd8: 2 nodes + 2 x 4

// Along one axis: taps lo .. lo+n-1 (at most TAPS) with value weights v, first-derivative weights d and, when
// SECOND (and asked), second-derivative weights s.  The weights are indexed at run time (a scheme's n), so on the
// GPU they live in local memory: there each use holds only what it reads (AxisWeights: 248 B; ValueWeights, values
// and Jacobians: 168 B; SeparableWeights, the Hessians of the separable schemes, whose stencils have 8 taps at
// most: 200 B).
template <int TAPS, bool SECOND>
struct AxisWeightsOf {
  static constexpr int taps = TAPS;
  static constexpr bool second = SECOND;
  int lo, n;
  double v[TAPS], d[TAPS], s[SECOND ? TAPS : 1];
};
using AxisWeights = AxisWeightsOf<MAX_TAPS, true>;
#ifdef VDB_DEVICE_COMPILE
using ValueWeights = AxisWeightsOf<MAX_TAPS, false>;
constexpr int MAX_SEPARABLE_TAPS = 8;  // lag8, m2q8
using SeparableWeights = AxisWeightsOf<MAX_SEPARABLE_TAPS, true>;
#else
// the host keeps one kind (what the compiler makes of the weights' code, and so its contractions, stay as they were)
using ValueWeights = AxisWeights;
using SeparableWeights = AxisWeights;
#endif

// Second derivative at f of the Lagrange basis polynomial k through nodes lo .. lo+n-1.
VDB_HD double lagrange_second(int n, int lo, int k, double f) {
  double den = 1.0;
  for (int m = 0; m < n; ++m)
    if (m != k) den *= (double)(k - m);
  double sum = 0.0;
  for (int j = 0; j < n; ++j) {
    if (j == k) continue;
    for (int l = 0; l < n; ++l) {
      if (l == k || l == j) continue;
      double prod = 1.0;
      for (int m = 0; m < n; ++m)
        if (m != k && m != j && m != l) prod *= f - (lo + m);
      sum += prod;
    }
  }
  return sum / den;
}

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

// Centred first-difference weights on offsets m = -r .. r, of order 2r (r = 1 .. 4).
VDB_HD double fd_weight(int r, int m) {
  const int s = m < 0 ? -1 : 1, k = m < 0 ? -m : m;
  if (k == 0) return 0.0;
  if (r == 1) return s * 0.5;
  if (r == 2) return s * (k == 1 ? 8.0 / 12 : -1.0 / 12);
  if (r == 3) return s * (k == 1 ? 45.0 / 60 : (k == 2 ? -9.0 / 60 : 1.0 / 60));
  return s * (k == 1 ? 4.0 / 5 : (k == 2 ? -1.0 / 5 : (k == 3 ? 4.0 / 105 : -1.0 / 280)));
}

// Weights of interpolating node derivatives D(j) = sum_m c[m] V(j + m) (m = -r .. r) with node
// weights w[j] on nodes jlo .. jlo+nj-1: derivative weights on offsets jlo-r .. jlo+nj-1+r.
template <class W>
VDB_HD void node_derivative(const double* w, int jlo, int nj, const double* c, int r, W& out) {
  out.lo = jlo - r;
  out.n = nj + 2 * r;
  for (int k = 0; k < out.n; ++k) out.d[k] = 0.0;
  for (int j = 0; j < nj; ++j)
    for (int m = -r; m <= r; ++m) out.d[j + m + r] += w[j] * c[m + r];
}

// Centred second-difference weights on offsets m = -r .. r, of order 2r (r = 1 .. 4): the Laplacian
// stencil of each axis (JHTDB's FD4/FD6 sets for r = 2, 3; the standard eighth-order set for r = 4).
VDB_HD double fd2_weight(int r, int m) {
  const int k = m < 0 ? -m : m;
  if (r == 1) return k == 0 ? -2.0 : 1.0;
  if (r == 2) return k == 0 ? -5.0 / 2 : (k == 1 ? 4.0 / 3 : -1.0 / 12);
  if (r == 3) return k == 0 ? -49.0 / 18 : (k == 1 ? 3.0 / 2 : (k == 2 ? -3.0 / 20 : 1.0 / 90));
  return k == 0 ? -205.0 / 72 : (k == 1 ? 8.0 / 5 : (k == 2 ? -1.0 / 5 : (k == 3 ? 8.0 / 315 : -1.0 / 560)));
}

VDB_HD bool is_node_fd(int scheme) {
  return scheme == SCHEME_FD2 || scheme == SCHEME_FD4 || scheme == SCHEME_FD6 || scheme == SCHEME_FD8;
}
VDB_HD int fd_radius(int scheme) {
  return scheme == SCHEME_FD2 ? 1 : (scheme == SCHEME_FD4 ? 2 : (scheme == SCHEME_FD6 ? 3 : 4));
}

// m2q8 along one axis at f in [0, 1): quintic Hermite basis times the node value / derivative
// weights, on the taps -3 .. 4.  `order` 0, 1, 2: values, first or second derivatives in f.
VDB_HD void m2q8_weights(double f, int order, double* w) {
  const double f2 = f * f, f3 = f2 * f, f4 = f3 * f, f5 = f4 * f;
  // Hermite basis: h[0] value at 0, h[1] slope at 0, h[2] curvature at 0, h[3] curvature at 1,
  // h[4] slope at 1, h[5] value at 1; and their first and second derivatives.
  double h[6];
  if (order == 0) {
    h[0] = 1 - 10 * f3 + 15 * f4 - 6 * f5;
    h[1] = f - 6 * f3 + 8 * f4 - 3 * f5;
    h[2] = 0.5 * (f2 - 3 * f3 + 3 * f4 - f5);
    h[3] = 0.5 * (f3 - 2 * f4 + f5);
    h[4] = -4 * f3 + 7 * f4 - 3 * f5;
    h[5] = 10 * f3 - 15 * f4 + 6 * f5;
  } else if (order == 1) {
    h[0] = -30 * f2 + 60 * f3 - 30 * f4;
    h[1] = 1 - 18 * f2 + 32 * f3 - 15 * f4;
    h[2] = 0.5 * (2 * f - 9 * f2 + 12 * f3 - 5 * f4);
    h[3] = 0.5 * (3 * f2 - 8 * f3 + 5 * f4);
    h[4] = -12 * f2 + 28 * f3 - 15 * f4;
    h[5] = 30 * f2 - 60 * f3 + 30 * f4;
  } else {
    h[0] = -60 * f + 180 * f2 - 120 * f3;
    h[1] = -36 * f + 96 * f2 - 60 * f3;
    h[2] = 0.5 * (2 - 18 * f + 36 * f2 - 20 * f3);
    h[3] = 0.5 * (6 * f - 24 * f2 + 20 * f3);
    h[4] = -24 * f + 84 * f2 - 60 * f3;
    h[5] = 60 * f - 180 * f2 + 120 * f3;
  }
  for (int k = 0; k < 8; ++k) w[k] = 0.0;
  w[3] += h[0];  // tap 0
  w[4] += h[5];  // tap 1
  for (int m = -3; m <= 3; ++m) {
    w[3 + m] += h[1] * fd_weight(3, m) + h[2] * fd2_weight(3, m);  // derivatives at node 0
    w[4 + m] += h[4] * fd_weight(3, m) + h[3] * fd2_weight(3, m);  // derivatives at node 1
  }
}

#ifdef VDB_DEVICE_COMPILE
// w[0 .. 3] = w0 .. w3.
VDB_HD void set4(double* w, double w0, double w1, double w2, double w3) {
  w[0] = w0;
  w[1] = w1;
  w[2] = w2;
  w[3] = w3;
}
#endif

// The node-difference schemes' weights (fd2 .. fd8, fd4lag4) along one axis at f, into a zeroed W.
template <class W>
VDB_HD VDB_INLINE void node_scheme_weights(int scheme, double f, W& a) {
  double c[9], c4[5];
  for (int m = -2; m <= 2; ++m) c4[m + 2] = fd_weight(2, m);
  if (is_node_fd(scheme)) {
    const double w[2] = {1.0 - f, f};
    const int r = fd_radius(scheme);
    for (int m = -r; m <= r; ++m) c[m + r] = fd_weight(r, m);
    node_derivative(w, 0, 2, c, r, a);
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

// Weights of `scheme` along one axis at f = u - floor(u); second derivatives only when `second`
// (the separable schemes and linear; the node-difference schemes leave s at 0).
// W: AxisWeightsOf (a SeparableWeights gets no node-difference scheme: it has too few taps for their stencils).
template <class W>
VDB_HD void axis_weights(int scheme, double f, W& a, bool second = false) {
  for (int k = 0; k < W::taps; ++k) {
    a.v[k] = a.d[k] = 0.0;
    if constexpr (W::second) a.s[k] = 0.0;
  }
  if (scheme == MODE_LINEAR) {
    a.lo = 0;
    a.n = 2;
    a.v[0] = 1.0 - f;
    a.v[1] = f;
    a.d[0] = -1.0;
    a.d[1] = 1.0;
    return;
  }
  if (scheme == SCHEME_M2Q8) {
    a.lo = -3;
    a.n = 8;
    m2q8_weights(f, 0, a.v);
    m2q8_weights(f, 1, a.d);
    if constexpr (W::second)
      if (second) m2q8_weights(f, 2, a.s);
    return;
  }
  if (scheme == SCHEME_LAG4 || scheme == SCHEME_LAG6 || scheme == SCHEME_LAG8) {
    const int n = scheme == SCHEME_LAG4 ? 4 : (scheme == SCHEME_LAG6 ? 6 : 8);
    a.n = n;
    a.lo = 1 - n / 2;
    lagrange(n, a.lo, f, a.v, a.d);
    if constexpr (W::second)
      if (second)
        for (int k = 0; k < n; ++k) a.s[k] = lagrange_second(n, a.lo, k, f);
    return;
  }
  if (scheme == SCHEME_CATMULL_ROM || scheme == SCHEME_BSPLINE3) {
    const double f2 = f * f, f3 = f2 * f;
    a.lo = -1;
    a.n = 4;
#ifdef VDB_DEVICE_COMPILE
    // straight into the weights: the host's four-value temporaries were 192 B of local memory on the GPU
    if (scheme == SCHEME_CATMULL_ROM) {
      set4(a.v, 0.5 * (-f3 + 2 * f2 - f), 0.5 * (3 * f3 - 5 * f2 + 2), 0.5 * (-3 * f3 + 4 * f2 + f), 0.5 * (f3 - f2));
      set4(a.d, 0.5 * (-3 * f2 + 4 * f - 1), 0.5 * (9 * f2 - 10 * f), 0.5 * (-9 * f2 + 8 * f + 1),
           0.5 * (3 * f2 - 2 * f));
      if constexpr (W::second)
        if (second) set4(a.s, 0.5 * (-6 * f + 4), 0.5 * (18 * f - 10), 0.5 * (-18 * f + 8), 0.5 * (6 * f - 2));
    } else {
      const double g = 1 - f;
      set4(a.v, g * g * g / 6, (3 * f3 - 6 * f2 + 4) / 6, (-3 * f3 + 3 * f2 + 3 * f + 1) / 6, f3 / 6);
      set4(a.d, -0.5 * g * g, (9 * f2 - 12 * f) / 6, (-9 * f2 + 6 * f + 3) / 6, 0.5 * f2);
      if constexpr (W::second)
        if (second) set4(a.s, g, 3 * f - 2, -3 * f + 1, f);
    }
#else
    if (scheme == SCHEME_CATMULL_ROM) {
      const double v[4] = {0.5 * (-f3 + 2 * f2 - f), 0.5 * (3 * f3 - 5 * f2 + 2), 0.5 * (-3 * f3 + 4 * f2 + f),
                           0.5 * (f3 - f2)};
      const double d[4] = {0.5 * (-3 * f2 + 4 * f - 1), 0.5 * (9 * f2 - 10 * f), 0.5 * (-9 * f2 + 8 * f + 1),
                           0.5 * (3 * f2 - 2 * f)};
      const double s2[4] = {0.5 * (-6 * f + 4), 0.5 * (18 * f - 10), 0.5 * (-18 * f + 8), 0.5 * (6 * f - 2)};
      for (int k = 0; k < 4; ++k) { a.v[k] = v[k]; a.d[k] = d[k]; a.s[k] = second ? s2[k] : 0.0; }
    } else {
      const double g = 1 - f;
      const double v[4] = {g * g * g / 6, (3 * f3 - 6 * f2 + 4) / 6, (-3 * f3 + 3 * f2 + 3 * f + 1) / 6, f3 / 6};
      const double d[4] = {-0.5 * g * g, (9 * f2 - 12 * f) / 6, (-9 * f2 + 6 * f + 3) / 6, 0.5 * f2};
      const double s2[4] = {g, 3 * f - 2, -3 * f + 1, f};
      for (int k = 0; k < 4; ++k) { a.v[k] = v[k]; a.d[k] = d[k]; a.s[k] = second ? s2[k] : 0.0; }
    }
#endif
    return;
  }
  if constexpr (W::taps >= MAX_TAPS) {
    node_scheme_weights(scheme, f, a);
  } else {  // no node-difference stencil fits
    a.lo = 0;
    a.n = 0;
  }
}

#ifndef VDB_DEVICE_COMPILE
// The modes by name, in id order: Python's vdbflow.ops.sampling.MODES is read from here.
constexpr const char* MODE_NAMES[SCHEME_LAST + 1] = {"closest", "linear",  "lag4",        "lag6",     "lag8",
                                                     "fd4",     "fd6",     "fd4lag4",     "catmull_rom",
                                                     "bspline3", "fd2",    "fd8",         "m2q8"};

// Voxels a mode's stencil reaches on the positive side of the base cell floor(u) (the negative side
// reaches one less): the distributed halo a mode needs (vdbflow.ops.sampling.STENCIL_RADIUS).
inline int stencil_reach(int mode) {
  if (mode == MODE_CLOSEST) return 1;  // the rounded voxel: floor(u) or floor(u) + 1
  ValueWeights a;
  axis_weights(mode, 0.5, a);
  return a.lo + a.n - 1;
}
#endif

// fd2/fd4/fd6 at a grid node (what gradient fields ask for): the value is the voxel's, the Jacobian
// the centred differences along each axis - 1 + 6r reads instead of the (2r + 2)^3 stencil.  The
// sums run in the order of the general stencil loop below, which at a node adds only zeros
// besides these terms, so both give the same numbers.
template <class T, int NC>
VDB_HD void gradient_at_node(const GridView<T>& g, const PointTransform& xf, const double u[3], int scheme,
                             bool want_jacobian, T* value, typename RealOf<T>::type* jacobian, LeafCache& cache) {
  const int C = NC > 0 ? NC : g.components;
  const i64 b[3] = {base_index(g.period, 0, u[0]), base_index(g.period, 1, u[1]), base_index(g.period, 2, u[2])};
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
  ValueWeights w[3];
  i64 b[3];
  for (int a = 0; a < 3; ++a) {
    const double fl = floor(u[a]);
    b[a] = base_index(g.period, a, fl);
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

// Values and Jacobian of one point, any mode: closest, linear or a higher-order scheme.  On the GPU a run-time
// count (NC = 0) goes through the components one at a time, each read as a one-component grid (component_view:
// each component's sums in the same order), so no frame holds MAX_COMPONENTS' sums (sample_kernel<T, 0>: 3 KB).
template <class T, int NC>
VDB_HD void sample_point(const GridView<T>& g, const PointTransform& xf, const double p[3], int mode,
                         bool want_jacobian, T* value, typename RealOf<T>::type* jacobian, LeafCache& cache) {
#ifdef VDB_DEVICE_COMPILE
  if constexpr (NC == 0) {
    for (int c = 0; c < g.components; ++c)
      sample_point<T, 1>(component_view(g, c), xf, p, mode, want_jacobian, value + c,
                         want_jacobian ? jacobian + 3 * c : nullptr, cache);
    return;
  }
#endif
  if (mode <= MODE_LINEAR)
    sample_point_trilinear<T, NC>(g, xf, p, mode, want_jacobian, value, jacobian, cache);
  else
    sample_point_scheme<T, NC>(g, xf, p, mode, want_jacobian, value, jacobian, cache);
}

// ---- entries ----------------------------------------------------------------------------------------

// Values (N, C) and, when out_j is not null, Jacobians (N, C, 3) of n points.  On the host, `order`
// (launch.h PointOrder) picks the loop: coherent points one at a time, scattered closest / linear
// points a batch at a time (located, their value lines asked for, then evaluated; streaming stores).
template <class T, int NC, class P>
VDB_ENTRY void sample_points(const KernelAbi& k, const P* pts, i64 n, T* out_v, typename RealOf<T>::type* out_j,
                             int order = ORDER_COHERENT) {
  typedef typename RealOf<T>::type R;
  const GridView<T> g = abi_grid<T>(k);
  const PointTransform transform = abi_transform(k);
  const int mode = k.mode, C = k.components;
  const bool want_jacobian = out_j != nullptr;
#ifndef VDB_DEVICE_COMPILE
  if (sample_points_simd<T, NC>(g, transform, mode, pts, n, out_v, out_j, order)) return;  // simd.h
  if (scattered_points(order, mode, pts, transform, n)) {
    auto batch = [=, &g](i64 first, i64 count, const PointTransform& xf, LeafCache& cache) {
      T v[NC > 0 ? NC : MAX_COMPONENTS];
      R j[3 * (NC > 0 ? NC : MAX_COMPONENTS)];
      Cell<T> cells[BATCH];
      double p[3];
      for (i64 q = 0; q < count; ++q) {
        load_point(pts, first + q, p);
        locate_cell_inline<T, NC>(g, xf, p, mode, cells[q], cache);
        prefetch_corners(cells[q], C);
      }
      for (i64 q = 0; q < count; ++q) {
        const i64 i = first + q;
        evaluate_cell_inline<T, NC>(g, xf, cells[q], want_jacobian, v, want_jacobian ? j : nullptr);
        stream_store(out_v + i * C, v, C);
        if (want_jacobian) stream_store(out_j + i * 3 * C, j, 3 * C);
      }
    };
    return for_each_batch(n, transform, batch);
  }
#endif
  auto body = [=, &g](i64 i, const PointTransform& xf, LeafCache& cache) {
    double p[3];
    load_point(pts, i, p);
    sample_point<T, NC>(g, xf, p, mode, want_jacobian, out_v + i * C, want_jacobian ? out_j + i * 3 * C : nullptr,
                        cache);
  };
  for_each_point<8192>(n, transform, body);
}

// Gradient field: the Jacobians (rows, C, 3) of the record's fd2 .. fd8 scheme (its mode) at every active
// voxel, rows in OnIndex order (leaves in order, voxels by mask bit); the same per-node function as point
// sampling.  Leaf by leaf (first_row (L,): each leaf's first row), or on the device voxel by voxel (rows
// found by rank: grid.h active_voxel_at, leaf_end (L,) the running row count at each leaf's end).
template <class T, int NC>
VDB_HD void gradient_at_voxel(const GridView<T>& g, const PointTransform& xf, const int ijk[3], int scheme,
                              typename RealOf<T>::type* out, LeafCache& cache) {
#ifdef VDB_DEVICE_COMPILE
  if constexpr (NC == 0) {  // one component at a time, as sample_point (a frame of 64 x 3 doubles was 1.5 KB)
    for (int c = 0; c < g.components; ++c) gradient_at_voxel<T, 1>(component_view(g, c), xf, ijk, scheme, out + 3 * c, cache);
    return;
  }
#endif
  T value[NC > 0 ? NC : MAX_COMPONENTS];
  const double u[3] = {(double)ijk[0], (double)ijk[1], (double)ijk[2]};
  gradient_at_node<T, NC>(g, xf, u, scheme, true, value, out, cache);
}

template <class T, int NC>
VDB_ENTRY void grid_gradient_leaves(const KernelAbi& k, const int* origins, const i64* first_row, i64 leaves,
                                    typename RealOf<T>::type* out) {
  const GridView<T> g = abi_grid<T>(k);
  const PointTransform xf = abi_transform(k);  // shared: read in place by every thread
  const int C = NC > 0 ? NC : g.components, scheme = k.mode;
  auto leaf = [&](i64 l, const PointTransform&, LeafCache& cache) {
    i64 row = first_row[l];
    for (int w = 0; w < 8; ++w)
      for (u64 m = g.masks[l * 8 + w]; m; m &= m - 1) {
        const int bit = w * 64 + lowest_bit64(m);
        const int* o = origins + 3 * l;
        const int ijk[3] = {o[0] + (bit >> 6), o[1] + ((bit >> 3) & 7), o[2] + (bit & 7)};
        gradient_at_voxel<T, NC>(g, xf, ijk, scheme, out + row++ * 3 * C, cache);
      }
  };
  for_each_point<16>(leaves, xf, leaf);
}

template <class T, int NC>
VDB_ENTRY void grid_gradient_voxels(const KernelAbi& k, const int* origins, const i64* leaf_end, i64 leaves,
                                    i64 rows, typename RealOf<T>::type* out) {
  const GridView<T> g = abi_grid<T>(k);
  const int C = NC > 0 ? NC : g.components, scheme = k.mode;
  auto voxel = [&](i64 r, const PointTransform& xf, LeafCache& cache) {
    int ijk[3];
    active_voxel_at(origins, g.masks, leaf_end, leaves, r, ijk);
    gradient_at_voxel<T, NC>(g, xf, ijk, scheme, out + r * 3 * C, cache);
  };
  for_each_point<4096>(rows, k, voxel);
}

// ---- the entries of sample and grid_gradient (operations.h) -----------------------------------------------
#ifdef VDB_DEVICE_COMPILE
template <class T, int NC>
__global__ void VDB_BOUNDS_FILL VDBFLOW_GPU_ENTRY(sample) {
  sample_points<T, NC>(*abi, points, n, out_values, out_jacobian);
}

// Gradient field: the fd2 .. fd8 Jacobians (rows, C, 3) of the record's scheme at every active voxel, one thread
// per voxel, rows in OnIndex order; leaf_end (L,) is the running count of active voxels at the end of each leaf,
// origins (L, 3) int32 the leaves' origins.
template <class T, int NC>
__global__ void VDB_BOUNDS_FILL VDBFLOW_GPU_ENTRY(grid_gradient) {
  grid_gradient_voxels<T, NC>(*abi, origins, leaf_end, leaves, rows, out_jacobian);
}
#else
VDBFLOW_CPU_ENTRY(sample) {
  const KernelAbi& a = *(const KernelAbi*)k;
  with_instance<false>(a.value_kind, a.components, points_double, [&](auto t, auto nc, auto p) {
    typedef type_of<decltype(t)> T;
    typedef type_of<decltype(p)> P;
    sample_points<T, decltype(nc)::value, P>(a, (const P*)points, n, (T*)out_values, (Real<T>*)out_jacobian, order);
  });
}

VDBFLOW_CPU_ENTRY(grid_gradient) {
  const KernelAbi& a = *(const KernelAbi*)k;
  with_float_type(a.value_kind, [&](auto t) {
    typedef type_of<decltype(t)> T;
    with_components(a.components, [&](auto nc) {
      grid_gradient_leaves<T, decltype(nc)::value>(a, origins, first_row, leaves, (Real<T>*)out);
    });
  });
}
#endif

}  // namespace vdbflow
