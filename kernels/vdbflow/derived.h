// vdbflow/derived.h - flow quantities of a velocity gradient, computed from the Jacobian a kernel holds
// in registers, and the fused sampling entry that writes only the outputs a request asks for.
//
// The quantities of a 3 x 3 Jacobian J[c][a] = du_c/dx_a (row major, J[3c + a]) and the velocity u:
//   divergence                 (J00 + J11) + J22
//   vorticity (3)              w = (J21 - J12, J02 - J20, J10 - J01)
//   vorticity_magnitude        sqrt((w0^2 + w1^2) + w2^2)
//   q_criterion                -(J00^2 + J11^2 + J22^2 + 2 J01 J10 + 2 J02 J20 + 2 J12 J21) / 2,
//                              summed term by term in that order
//   lambda2                    the middle eigenvalue of S^2 + W^2 (S, W: the symmetric and skew parts)
//   swirling_strength          |Im| of J's complex eigenvalue pair, 0 where all three are real
//   helicity                   (u0 w0 + u1 w1) + u2 w2
//   strain_rate_magnitude      sqrt(2 S:S), the |S| of Smagorinsky models
//   r_invariant                R = -det(A) of the traceless part A = J - tr(J) I / 3 (R = -tr(A^3) / 3; with
//                              q_criterion, the Q-R plane of the velocity gradient's invariants)
// The first five and the last two are evaluated in the Jacobian's type R (float for float data) with
// every product rounded before it is added (mul_rn: never contracted into an FMA), in the order
// vdbflow.analysis.flow evaluates them with NumPy, so the two give the same bits.  lambda2 and
// swirling_strength are evaluated in double (Jacobi rotations of the symmetric matrix; Cardano's cubic in its
// cancellation-free form) and rounded to R once, as is r_invariant (the determinant by cofactors of the first
// row, in double).
#pragma once
#include "schemes.h"
#ifndef VDB_DEVICE_COMPILE
#include <vector>
#endif

namespace vdbflow {

enum DerivedQuantity {
  DERIVED_DIVERGENCE = 0,
  DERIVED_VORTICITY = 1,
  DERIVED_VORTICITY_MAGNITUDE = 2,
  DERIVED_Q_CRITERION = 3,
  DERIVED_LAMBDA2 = 4,
  DERIVED_SWIRLING_STRENGTH = 5,
  DERIVED_HELICITY = 6,
  DERIVED_STRAIN_RATE_MAGNITUDE = 7,
  DERIVED_R_INVARIANT = 8,
  DERIVED_COUNT = 9
};

// Entries of each quantity at a point: 3 for the vorticity vector, 1 otherwise.
VDB_HD constexpr int derived_width(int q) { return q == DERIVED_VORTICITY ? 3 : 1; }
#ifndef VDB_DEVICE_COMPILE
constexpr const char* DERIVED_NAMES[DERIVED_COUNT] = {
    "divergence", "vorticity", "vorticity_magnitude", "q_criterion",
    "lambda2",    "swirling_strength", "helicity", "strain_rate_magnitude", "r_invariant"};
#endif

// a * b rounded to R before any use: the compiler cannot fuse it into an FMA with the addition that
// follows (an empty asm statement hides the product's origin on the host; the _rn intrinsics on the device).
template <class R>
VDB_HD VDB_INLINE R mul_rn(R a, R b) {
#ifdef VDB_DEVICE_COMPILE
  if constexpr (sizeof(R) == 4)
    return __fmul_rn(a, b);
  else
    return __dmul_rn(a, b);
#else
  R p = a * b;
#if defined(__GNUC__) && defined(__x86_64__)
  __asm__("" : "+x"(p));
#elif defined(__GNUC__) && defined(__aarch64__)
  __asm__("" : "+w"(p));
#endif
  return p;
#endif
}

// The middle eigenvalue of the symmetric 3 x 3 matrix a (row major), in double: cyclic Jacobi rotations
// (backward stable, so within a few eps |a| also where eigenvalues nearly coincide, where the closed form
// through the invariants loses up to half the digits); converged in at most 6 sweeps for double.
VDB_HD double middle_eigenvalue(const double a_in[9]) {
  double a[3][3];
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) a[r][c] = a_in[3 * r + c];
  for (int sweep = 0; sweep < 8; ++sweep) {
    const double off = fabs(a[0][1]) + fabs(a[0][2]) + fabs(a[1][2]);
    const double diag = fabs(a[0][0]) + fabs(a[1][1]) + fabs(a[2][2]);
    if (!(off > 1e-18 * diag) || off == 0.0) break;  // also NaN: then the diagonal carries it out
    for (int p = 0; p < 2; ++p)
      for (int q = p + 1; q < 3; ++q) {
        const double apq = a[p][q];
        if (apq == 0.0) continue;
        const double theta = (a[q][q] - a[p][p]) / (2.0 * apq);
        const double t = fabs(theta) > 1e150 ? 0.5 / theta
                                              : (theta >= 0.0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1.0));
        const double c = 1.0 / sqrt(t * t + 1.0), s = t * c;
        a[p][p] -= t * apq;
        a[q][q] += t * apq;
        a[p][q] = a[q][p] = 0.0;
        const int r = 3 - p - q;  // the third index
        const double g = a[r][p], h = a[r][q];
        a[r][p] = a[p][r] = c * g - s * h;
        a[r][q] = a[q][r] = s * g + c * h;
      }
  }
  const double x = a[0][0], y = a[1][1], z = a[2][2];
  if (!(x == x && y == y && z == z)) return x + y + z;  // NaN in, NaN out
  return fmax(fmin(x, y), fmin(fmax(x, y), z));  // the median
}

// |Im| of the complex eigenvalue pair of the 3 x 3 matrix J (row major), 0 where all eigenvalues are real.
template <class R>
VDB_HD double swirling(const R* Jr) {
  double J[9];
  for (int e = 0; e < 9; ++e) J[e] = (double)Jr[e];
  // characteristic polynomial l^3 + a l^2 + b l + c
  const double a = -(J[0] + J[4] + J[8]);
  const double b = (J[0] * J[4] - J[1] * J[3]) + (J[0] * J[8] - J[2] * J[6]) + (J[4] * J[8] - J[5] * J[7]);
  const double det = J[0] * (J[4] * J[8] - J[5] * J[7]) - J[1] * (J[3] * J[8] - J[5] * J[6]) +
                     J[2] * (J[3] * J[7] - J[4] * J[6]);
  const double c = -det;
  // depressed cubic t^3 + p t + q (l = t - a/3)
  const double p = b - a * a / 3.0;
  const double q = (2.0 * a * a * a - 9.0 * a * b) / 27.0 + c;
  const double disc = 0.25 * q * q + p * p * p / 27.0;
  if (!(disc > 0.0)) return disc == disc ? 0.0 : disc;  // three real roots (or NaN through)
  const double s = -0.5 * q;
  const double c1 = cbrt(s + (s < 0.0 ? -sqrt(disc) : sqrt(disc)));  // no cancellation
  const double c2 = c1 != 0.0 ? -p / (3.0 * c1) : 0.0;              // c1 c2 = -p / 3
  return 0.8660254037844386 * fabs(c1 - c2);
}

// The asked quantities of one point from its Jacobian J (9, R) and velocity u (3), written at row i of
// out[q] (null: not asked).
template <class R>
VDB_HD VDB_INLINE void derive_point(const R* J, const R* u, R* const* out, i64 i) {
  const R w0 = J[7] - J[5], w1 = J[2] - J[6], w2 = J[3] - J[1];
  if (R* o = out[DERIVED_DIVERGENCE]) o[i] = (J[0] + J[4]) + J[8];
  if (R* o = out[DERIVED_VORTICITY]) {
    o[3 * i] = w0;
    o[3 * i + 1] = w1;
    o[3 * i + 2] = w2;
  }
  if (R* o = out[DERIVED_VORTICITY_MAGNITUDE]) {
    R t = mul_rn(w0, w0) + mul_rn(w1, w1);
    t = t + mul_rn(w2, w2);
    o[i] = sqrt(t);
  }
  if (R* o = out[DERIVED_Q_CRITERION]) {
    R q = mul_rn(J[0], J[0]);
    q = q + mul_rn(J[4], J[4]);
    q = q + mul_rn(J[8], J[8]);
    const R t01 = mul_rn(J[1], J[3]), t02 = mul_rn(J[2], J[6]), t12 = mul_rn(J[5], J[7]);
    q = q + t01;
    q = q + t01;
    q = q + t02;
    q = q + t02;
    q = q + t12;
    q = q + t12;
    o[i] = q * (R)(-0.5);
  }
  if (R* o = out[DERIVED_LAMBDA2]) {
    double Jd[9], A[9];
    for (int e = 0; e < 9; ++e) Jd[e] = (double)J[e];
    // S^2 + W^2 = (J J + J^T J^T) / 2
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c) {
        double s = 0.0;
        for (int m = 0; m < 3; ++m) s += Jd[3 * r + m] * Jd[3 * m + c] + Jd[3 * m + r] * Jd[3 * c + m];
        A[3 * r + c] = 0.5 * s;
      }
    A[3] = A[1] = 0.5 * (A[1] + A[3]);  // exactly symmetric
    A[6] = A[2] = 0.5 * (A[2] + A[6]);
    A[7] = A[5] = 0.5 * (A[5] + A[7]);
    o[i] = (R)middle_eigenvalue(A);
  }
  if (R* o = out[DERIVED_SWIRLING_STRENGTH]) o[i] = (R)swirling(J);
  if (R* o = out[DERIVED_HELICITY]) {
    R h = mul_rn(u[0], w0) + mul_rn(u[1], w1);
    o[i] = h + mul_rn(u[2], w2);
  }
  if (R* o = out[DERIVED_STRAIN_RATE_MAGNITUDE]) {
    const R s01 = (J[1] + J[3]) * (R)0.5, s02 = (J[2] + J[6]) * (R)0.5, s12 = (J[5] + J[7]) * (R)0.5;
    R d = mul_rn(J[0], J[0]) + mul_rn(J[4], J[4]);
    d = d + mul_rn(J[8], J[8]);
    R off = mul_rn(s01, s01) + mul_rn(s02, s02);
    off = off + mul_rn(s12, s12);
    const R t = d + (off + off);  // S:S
    o[i] = sqrt(t + t);
  }
  if (R* o = out[DERIVED_R_INVARIANT]) {
    double A[9];
    for (int e = 0; e < 9; ++e) A[e] = (double)J[e];
    const double third = (A[0] + A[4] + A[8]) / 3.0;
    A[0] -= third;
    A[4] -= third;
    A[8] -= third;
    const double det = A[0] * (A[4] * A[8] - A[5] * A[7]) - A[1] * (A[3] * A[8] - A[5] * A[6]) +
                       A[2] * (A[3] * A[7] - A[4] * A[6]);
    o[i] = (R)(-det);
  }
}

#ifndef VDB_DEVICE_COMPILE
constexpr i64 DERIVE_BLOCK = 1024;  // points sampled (simd.h) before their quantities are derived: in L1/L2

// The host's fused pass through simd.h's vector loops: each thread samples a block of points into its
// output rows (or its own buffers where values or Jacobians are not asked), then derives the block's
// quantities from them while they are in cache; false where simd.h does not run (as sample_points).
template <class T, int NC, class P>
inline bool sample_derived_simd(const GridView<T>& g, const PointTransform& transform, int mode, const P* pts, i64 n,
                                T* out_v, typename RealOf<T>::type* out_j, typename RealOf<T>::type* const* outs,
                                int order) {
  typedef typename RealOf<T>::type R;
  if constexpr (!HasNaN<T>::value) {
    return false;
  } else {
    if (mode > MODE_LINEAR || !simd_enabled()) return false;
    constexpr int C = 3;
    const bool scattered = scattered_points(order, mode, pts, transform, n);
    const i64 blocks = (n + DERIVE_BLOCK - 1) / DERIVE_BLOCK;
    [[maybe_unused]] const int threads = threads_for(blocks, 8);
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
      const PointTransform xf = transform;  // each thread's own copy
      LeafCache cache;
      LineStream<T> ov;
      LineStream<R> oj;
      std::vector<T> own_v(out_v ? 0 : DERIVE_BLOCK * C);
      std::vector<R> own_j(out_j ? 0 : DERIVE_BLOCK * 3 * C);
#pragma omp for schedule(dynamic, 8)
      for (i64 b = 0; b < blocks; ++b) {
        const i64 first = b * DERIVE_BLOCK, last = first + DERIVE_BLOCK < n ? first + DERIVE_BLOCK : n;
        T* v = out_v ? out_v + first * C : own_v.data();
        R* j = out_j ? out_j + first * 3 * C : own_j.data();
        ov.begin(v, false);
        oj.begin(j, false);
        if (scattered)
          scattered_run_simd<T, NC, P>(g, xf, mode, pts, first, last, true, ov, oj, cache);
        else
          coherent_run_simd<T, NC, P>(g, xf, mode, pts, first, last, true, ov, oj, cache);
        ov.finish();
        oj.finish();
        for (i64 q = 0; q < last - first; ++q) {
          const R u[C] = {(R)v[C * q], (R)v[C * q + 1], (R)v[C * q + 2]};
          derive_point<R>(j + 3 * C * q, u, outs, first + q);
        }
      }
    }
    return true;
  }
}
#endif

template <bool B>
struct Streaming {
  static constexpr bool value = B;
};

// One point's outputs of the fused entry: values and Jacobians where their buffers are not null, then the
// derived quantities.  A functor marked host+device rather than a generic lambda: NVRTC compiles a generic
// lambda's call operator as a host function and refuses it ("host functions are not allowed in JIT mode").
// `Streaming<true>`: non-temporal stores (the host's scattered loop, which fences after its batches).
template <class T, class R>
struct DerivedEmitter {
  static constexpr int C = 3;
  T* out_v;
  R* out_j;
  R* outs[DERIVED_COUNT];

  template <bool S>
  VDB_HD VDB_INLINE void operator()(Streaming<S>, i64 i, const T* v, const R* j) const {
    R u[C];
    for (int c = 0; c < C; ++c) u[c] = (R)v[c];
#ifndef VDB_DEVICE_COMPILE
    if constexpr (S) {
      if (out_v) stream_store(out_v + i * C, v, C);
      if (out_j) stream_store(out_j + i * 3 * C, j, 3 * C);
    } else
#endif
    {
      if (out_v)
        for (int c = 0; c < C; ++c) out_v[i * C + c] = v[c];
      if (out_j)
        for (int e = 0; e < 3 * C; ++e) out_j[i * 3 * C + e] = j[e];
    }
    derive_point<R>(j, u, outs, i);
  }
};

// Fused sampling of a vec3 float grid: values (n, 3) and Jacobians (n, 3, 3) where their buffers are not
// null, and each quantity q whose buffer derived[q] is not null (n * derived_width(q) entries of R), all
// from the Jacobian of the record's spaces as sample_points writes it (the same bits).
template <class T, int NC, class P = double>
VDB_ENTRY void sample_derived_points(const KernelAbi& k, const P* pts, i64 n, T* out_v, typename RealOf<T>::type* out_j,
                                     typename RealOf<T>::type* const* derived, int order = ORDER_COHERENT) {
  typedef typename RealOf<T>::type R;
  const GridView<T> g = abi_grid<T>(k);
  const PointTransform transform = abi_transform(k);
  const int mode = k.mode;
  constexpr int C = 3;
  R* outs[DERIVED_COUNT];
  for (int q = 0; q < DERIVED_COUNT; ++q) outs[q] = derived[q];
#ifndef VDB_DEVICE_COMPILE
  if (sample_derived_simd<T, NC, P>(g, transform, mode, pts, n, out_v, out_j, outs, order)) return;  // simd.h
#endif
  DerivedEmitter<T, R> emit;
  emit.out_v = out_v;
  emit.out_j = out_j;
  for (int q = 0; q < DERIVED_COUNT; ++q) emit.outs[q] = outs[q];
#ifndef VDB_DEVICE_COMPILE
  if (scattered_points(order, mode, pts, transform, n)) {
    auto batch = [=, &g](i64 first, i64 count, const PointTransform& xf, LeafCache& cache) {
      T v[C];
      R j[3 * C];
      Cell<T> cells[BATCH];
      double p[3];
      for (i64 q = 0; q < count; ++q) {
        load_point(pts, first + q, p);
        locate_cell_inline<T, NC>(g, xf, p, mode, cells[q], cache);
        prefetch_corners(cells[q], C);
      }
      for (i64 q = 0; q < count; ++q) {
        evaluate_cell_inline<T, NC>(g, xf, cells[q], true, v, j);
        emit(Streaming<true>(), first + q, v, j);
      }
    };
    return for_each_batch(n, transform, batch);
  }
#endif
  auto body = [=, &g](i64 i, const PointTransform& xf, LeafCache& cache) {
    double p[3];
    T v[C];
    R j[3 * C];
    load_point(pts, i, p);
    sample_point<T, NC>(g, xf, p, mode, true, v, j, cache);
    emit(Streaming<false>(), i, v, j);
  };
  for_each_point<8192>(n, transform, body);
}

// The asked quantities of n points from their Jacobians J (n, 3, 3) and velocities u (n, 3, or null when
// helicity is not asked): the same derive_point as the fused entry (series and Hessian requests).
template <class R>
VDB_ENTRY void derive_points(const R* J, const R* u, i64 n, R* const* derived) {
  R* outs[DERIVED_COUNT];
  for (int q = 0; q < DERIVED_COUNT; ++q) outs[q] = derived[q];
  const R zero[3] = {(R)0, (R)0, (R)0};
  for_each<4096, STATIC>(n, [=](i64 i) { derive_point<R>(J + 9 * i, u ? u + 3 * i : zero, outs, i); });
}

// ---- the entries of sample_derived and derive (operations.h) ----------------------------------------------------
#ifdef VDB_DEVICE_COMPILE
// Fused: values and Jacobians of a vec3 grid where their pointers are not null, and each derived quantity q whose
// pointer derived[q] (a device array of DERIVED_COUNT pointers) is not null.
template <class T>
__global__ void VDB_BOUNDS_FILL VDBFLOW_GPU_ENTRY(sample_derived) {
  sample_derived_points<T, 3>(*abi, points, n, out_values, out_jacobian, derived);
}

template <class R>
__global__ void VDB_BOUNDS_FILL VDBFLOW_GPU_ENTRY(derive) {
  derive_points<R>(jacobian, velocity, n, derived);
}
#else
VDBFLOW_CPU_ENTRY(sample_derived) {
  const KernelAbi& a = *(const KernelAbi*)k;
  with_float_type(a.value_kind, [&](auto t) {
    typedef type_of<decltype(t)> T;
    with_point_type(points_double, [&](auto p) {
      typedef type_of<decltype(p)> P;
      sample_derived_points<T, 3, P>(a, (const P*)points, n, (T*)out_values, (Real<T>*)out_jacobian,
                                     (Real<T>* const*)derived, order);
    });
  });
}

VDBFLOW_CPU_ENTRY(derive) {
  if (jacobian_double)
    derive_points<double>((const double*)jacobian, (const double*)velocity, n, (double* const*)derived);
  else
    derive_points<float>((const float*)jacobian, (const float*)velocity, n, (float* const*)derived);
}
#endif

}  // namespace vdbflow
