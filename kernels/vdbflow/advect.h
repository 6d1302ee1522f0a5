// vdbflow/advect.h - one particle's trajectory through a steady vec3 velocity volume, explicit Runge-Kutta.
//
// Each stage point y is checked as vdbflow.temporal.particles checks it in Python: finite, then its
// stencil inside the defined voxels (coverage.h), then sampled (schemes.h, world points, world
// Jacobian) with finite values (and a finite Jacobian where one is asked for).  The first failure
// stops the particle with its status.  Stage points and steps are combined in NumPy's order of
// rounding - every product rounded before it is added, sums started from +0.0 - so that a trajectory
// is the same, bit for bit, as the stage-by-stage Python integration (and so as the distributed one).
// The flow-map gradient F (variational equation dF/dt = J F) is optional and is not held to that.
#pragma once
#include "coverage.h"
#include "launch.h"
#include "schemes.h"

namespace vdbflow {

enum ParticleStatus { PARTICLE_ACTIVE = 0, PARTICLE_LEFT_DATA = 1, PARTICLE_NON_FINITE = 2 };

constexpr int MAX_STAGES = 4;

// An explicit Runge-Kutta method and the run's step plan.
struct AdvectSpec {
  int stages;                       // s <= MAX_STAGES
  double a[MAX_STAGES][MAX_STAGES]; // stage coefficients (lower triangle; 0 entries are skipped)
  double b[MAX_STAGES];             // weights (0 entries are skipped)
  double h;                         // the step, signed
  i64 steps;                        // n: positions x_0 .. x_n
  const i64* save_slot;             // (n + 1,) slot of step k in the outputs, or -1
  i64 slots;                        // S
  int lo, taps;                     // the mode's stencil taps (coverage.h stencil_taps)
  int want_velocity, want_jacobian; // outputs at the saved positions
  int variational;                  // integrate F
  int validate_end;                 // 0: stop at x_n without checking or sampling it (a step of many)
};

// The spec of one call: the tableau a (stages x stages, row-major: its lower triangle is read) and b
// (stages,), the step h, the step plan save_slot (steps + 1,) into `slots` output slots, the taps of
// `mode`, and which outputs are asked for.
VDB_HD AdvectSpec make_advect_spec(int mode, const double* a, const double* b, int stages, double h,
                                   const i64* save_slot, i64 steps, i64 slots, bool velocity, bool jacobian,
                                   bool variational, bool validate_end) {
  AdvectSpec s;
  s.stages = stages;
  for (int i = 0; i < MAX_STAGES; ++i) {
    s.b[i] = i < stages ? b[i] : 0.0;
    for (int j = 0; j < MAX_STAGES; ++j) s.a[i][j] = (i < stages && j < i) ? a[i * stages + j] : 0.0;
  }
  s.h = h;
  s.steps = steps;
  s.save_slot = save_slot;
  s.slots = slots;
  stencil_taps(mode, s.lo, s.taps);
  s.want_velocity = velocity;
  s.want_jacobian = jacobian;
  s.variational = variational;
  s.validate_end = validate_end;
  return s;
}

// Where one particle's results go (null pointers for outputs not asked for).
struct ParticleOut {
  double* position;   // (S, 3), NaN-filled by the caller
  double* velocity;   // (S, 3) or null
  double* jacobian;   // (S, 3, 3) or null
  double* F;          // (3, 3) or null: the flow-map gradient at x_0 on entry (the identity at t0), on exit at x
                      // (the end, or for a stopped particle the start of the step it stopped in)
  signed char* status;
  i64* last_step;     // the last step k whose position is valid (-1: none)
  int* evaluations;   // stage points sampled
};

// a * b rounded to double before anything is added to it (no fused multiply-add), as NumPy rounds.
VDB_HD double product(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#elif defined(__GNUC__) && defined(__x86_64__)
  double p = a * b;
  __asm__("" : "+x"(p));  // p leaves the multiply rounded: the compiler cannot fuse it into an add
  return p;
#elif defined(__GNUC__) && defined(__aarch64__)
  double p = a * b;
  __asm__("" : "+w"(p));
  return p;
#else
  volatile double p = a * b;
  return p;
#endif
}

// Whether the 8 voxels of a linear cell inside one leaf (Cell::leaf, Cell::offset) are all active.
template <class T>
VDB_HD bool cell_active(const GridView<T>& g, const Cell<T>& cell) {
  const int o = cell.offset;  // x * 64 + y * 8 + z with x, y, z & 7 < 7: pairs (z, z + 1) share a mask word
  const u64* m = g.masks + (i64)cell.leaf * 8;
  const u64 pair = 3ull;
  const int r00 = o, r01 = o + 8, r10 = o + 64, r11 = o + 72;
  return ((m[r00 >> 6] >> (r00 & 63)) & pair) == pair && ((m[r01 >> 6] >> (r01 & 63)) & pair) == pair &&
         ((m[r10 >> 6] >> (r10 & 63)) & pair) == pair && ((m[r11 >> 6] >> (r11 & 63)) & pair) == pair;
}

// The velocity (and, for jacobian, the world Jacobian) at y, or the status that stops the particle.
template <class T>
VDB_HD int evaluate_stage(const GridView<T>& g, const PointTransform& xf, int mode, int lo, int taps,
                          const double y[3], bool jacobian, double u[3], double J[9], int& evaluations,
                          LeafCache& cache) {
  typedef typename RealOf<T>::type R;
  if (!finite3(y)) return PARTICLE_NON_FINITE;
  T v[3];
  R j[9];
  if (mode == MODE_LINEAR) {  // most stage points: the cell the sampler reads answers for the stencil
    Cell<T> cell;
    locate_cell<T, 3>(g, xf, y, mode, cell, cache);
    const bool inside = cell.kind == CELL_LINEAR && cell.leaf >= 0 ? cell_active(g, cell)
                                                                   : stencil_inside_point(g, xf, y, mode, lo, taps, cache);
    if (!inside) return PARTICLE_LEFT_DATA;
    evaluate_cell<T, 3>(g, xf, cell, jacobian, v, jacobian ? j : nullptr);
  } else {
    if (!stencil_inside_point(g, xf, y, mode, lo, taps, cache)) return PARTICLE_LEFT_DATA;
    sample_point<T, 3>(g, xf, y, mode, jacobian, v, jacobian ? j : nullptr, cache);
  }
  ++evaluations;
  bool ok = true;
  for (int c = 0; c < 3; ++c) {
    u[c] = (double)v[c];
    ok = ok && isfinite(u[c]);
  }
  if (jacobian)
    for (int e = 0; e < 9; ++e) {
      J[e] = (double)j[e];
      ok = ok && isfinite(J[e]);
    }
  return ok ? PARTICLE_ACTIVE : PARTICLE_NON_FINITE;
}

// C = A B for row-major 3 x 3 matrices.
VDB_HD void matmul3(const double A[9], const double B[9], double C[9]) {
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) C[3 * r + c] = A[3 * r] * B[c] + A[3 * r + 1] * B[3 + c] + A[3 * r + 2] * B[6 + c];
}

// Integrates one particle from x (updated in place) over steps 0 .. n of s (see the file comment), each
// stage point checked and sampled by eval(step, stage, y, jacobian, u, J, evaluations), which returns the
// stage's status.  last_step is the last step whose position was checked valid; with validate_end = 0 and
// status active, x holds x_n unchecked.
template <class Eval>
VDB_HD void advect_particle_with(const AdvectSpec& s, double x[3], const ParticleOut& out, Eval& eval) {
  double k[MAX_STAGES][3], kF[MAX_STAGES][9], F[9], J[9];
  const bool var = s.variational != 0;
  for (int e = 0; e < 9; ++e) F[e] = var ? out.F[e] : 0.0;
  int status = PARTICLE_ACTIVE, evaluations = 0;
  i64 last = -1;
  for (i64 step = 0; step <= s.steps; ++step) {
    if (step == s.steps && !s.validate_end) break;  // x_n is the next call's first position
    const i64 slot = s.save_slot[step];
    const bool saved = slot >= 0;
    status = eval(step, 0, x, var || (saved && s.want_jacobian), k[0], J, evaluations);
    if (status != PARTICLE_ACTIVE) break;
    last = step;
    if (saved) {
      for (int a = 0; a < 3; ++a) out.position[3 * slot + a] = x[a];
      if (out.velocity)
        for (int a = 0; a < 3; ++a) out.velocity[3 * slot + a] = k[0][a];
      if (out.jacobian)
        for (int e = 0; e < 9; ++e) out.jacobian[9 * slot + e] = J[e];
    }
    if (step == s.steps) break;
    if (var) matmul3(J, F, kF[0]);
    for (int st = 1; st < s.stages && status == PARTICLE_ACTIVE; ++st) {
      double y[3];
      for (int a = 0; a < 3; ++a) {
        double sum = 0.0;
        for (int j = 0; j < st; ++j)
          if (s.a[st][j] != 0.0) sum = sum + product(s.a[st][j], k[j][a]);
        y[a] = x[a] + product(s.h, sum);
      }
      status = eval(step, st, y, var, k[st], J, evaluations);
      if (status == PARTICLE_ACTIVE && var) {
        double Fs[9];
        for (int e = 0; e < 9; ++e) {
          double sum = 0.0;
          for (int j = 0; j < st; ++j)
            if (s.a[st][j] != 0.0) sum += s.a[st][j] * kF[j][e];
          Fs[e] = F[e] + s.h * sum;
        }
        matmul3(J, Fs, kF[st]);
      }
    }
    if (status != PARTICLE_ACTIVE) break;
    for (int a = 0; a < 3; ++a) {
      double sum = 0.0;
      for (int j = 0; j < s.stages; ++j)
        if (s.b[j] != 0.0) sum = sum + product(s.b[j], k[j][a]);
      x[a] = x[a] + product(s.h, sum);
    }
    if (var)
      for (int e = 0; e < 9; ++e) {
        double sum = 0.0;
        for (int j = 0; j < s.stages; ++j)
          if (s.b[j] != 0.0) sum += s.b[j] * kF[j][e];
        F[e] = F[e] + s.h * sum;
      }
  }
  *out.status = (signed char)status;
  *out.last_step = last;
  *out.evaluations = evaluations;
  if (out.F)
    for (int e = 0; e < 9; ++e) out.F[e] = F[e];  // a stopped particle's too: its step may resume elsewhere
}

// Integrates one particle through a steady volume (every stage reads g).
template <class T>
VDB_HD void advect_particle(const GridView<T>& g, const PointTransform& xf, int mode, const AdvectSpec& s,
                            double x[3], const ParticleOut& out, LeafCache& cache) {
  auto eval = [&](i64, int, const double y[3], bool jacobian, double u[3], double J[9], int& evaluations) {
    return evaluate_stage(g, xf, mode, s.lo, s.taps, y, jacobian, u, J, evaluations, cache);
  };
  advect_particle_with(s, x, out, eval);
}

// Entry: n particles x (n, 3), each integrating all of its steps in one go (so that its leaf cache follows
// it); position (n, S, 3), velocity (n, S, 3), jacobian (n, S, 3, 3) and F (n, 3, 3) NaN-filled by the
// caller (null when not asked for), status, last_step and evaluations (n,).
template <class T>
VDB_ENTRY void advect_points(const KernelAbi& k, const AdvectSpec& s, double* x, i64 n, double* position,
                             double* velocity, double* jacobian, double* F, signed char* status, i64* last_step,
                             int* evaluations) {
  const GridView<T> g = abi_grid<T>(k);
  const i64 S = s.slots;
  const int mode = k.mode;
  auto body = [&](i64 i, const PointTransform& xf, LeafCache& cache) {
    const ParticleOut out{position + i * S * 3, velocity ? velocity + i * S * 3 : nullptr,
                          jacobian ? jacobian + i * S * 9 : nullptr, F ? F + i * 9 : nullptr,
                          status + i, last_step + i, evaluations + i};
    advect_particle<T>(g, xf, mode, s, x + 3 * i, out, cache);
  };
  for_each_point<64>(n, k, body);
}

// ---- Through a series of volumes, interpolated in time (vdbflow.temporal.series) --------------------
//
// A call integrates the steps of one window of a VolumeSeries: `grids` consecutive steps of the series
// (GridViews sharing one transform), each stage reading two of them (time="linear") or four (time="pchip",
// -1 where the series has no such step), with the stage's coefficients computed by Python from the stage
// time (vdbflow.temporal.series_kernels).  Steps that share a topology share one leaf cache, so the tree is
// walked once for all of them (the other grids find the leaf in the cache) and only the value arrays differ.
// The combination rounds as vdbflow.temporal.series / interpolation.py do in NumPy: same operations, same
// order, every product rounded before it is added.
constexpr int MAX_SERIES_GRIDS = 8;  // steps of one window
constexpr int SERIES_COEFS = 8;      // doubles of a stage's coefficients
enum TimeKind { TIME_LINEAR = 2, TIME_PCHIP = 4 };

struct SeriesSpec {
  int time_kind;                    // TIME_LINEAR or TIME_PCHIP: the grids a stage reads
  int grids;                        // G <= MAX_SERIES_GRIDS
  int topology[MAX_SERIES_GRIDS];   // the first grid of the window with grid g's topology
  const int* stage_grid;            // (steps + 1, stages, 4) the window's grid each stage reads, or -1
  const double* stage_coef;         // (steps + 1, stages, SERIES_COEFS): linear (1 - w, w); pchip (h0, h1, h2,
                                    // b00, b10 h1, b01, b11 h1, has_left + 2 has_right)
  i64 first_step;                   // the series step of the call's step 0 (last_step is reported in those)
};

// NumPy's sign(a) != sign(b): true where either is NaN.
VDB_HD bool sign_differs(double a, double b) {
  if (!(a == a) || !(b == b)) return true;
  return ((a > 0) - (a < 0)) != ((b > 0) - (b < 0));
}

// interpolation.py _pchip_interior: the slope and its coefficients on the two secants.
VDB_HD void pchip_interior(double h_prev, double h_next, double m_prev, double m_next, bool gradient, double& d,
                           double& c_prev, double& c_next) {
  const double w1 = product(2.0, h_next) + h_prev, w2 = h_next + product(2.0, h_prev);
  const bool flat = sign_differs(m_prev, m_next) || m_prev == 0 || m_next == 0;
  const double dd = (w1 + w2) / (w1 / m_prev + w2 / m_next);
  d = flat ? 0.0 : dd;
  if (!gradient) return;
  c_prev = flat ? 0.0 : product(dd, dd) * w1 / (product(w1 + w2, m_prev) * m_prev);
  c_next = flat ? 0.0 : product(dd, dd) * w2 / (product(w1 + w2, m_next) * m_next);
}

// interpolation.py _pchip_edge: the one-sided slope and its coefficients on m0 (next to the node) and m1.
VDB_HD void pchip_edge(double h0, double h1, double m0, double m1, bool gradient, double& d, double& c0, double& c1) {
  const double w = product(2.0, h0) + h1;
  const double dd = (product(w, m0) - product(h0, m1)) / (h0 + h1);
  const bool wrong = sign_differs(dd, m0);
  const bool big = sign_differs(m0, m1) && fabs(dd) > product(3.0, fabs(m0));
  d = wrong ? 0.0 : (big ? product(3.0, m0) : dd);
  if (!gradient) return;
  c0 = wrong ? 0.0 : (big ? 3.0 : w / (h0 + h1));
  c1 = (wrong || big) ? 0.0 : -h0 / (h0 + h1);
}

// interpolation.py pchip_combine for one component: the value from g (4,) (NaN where a step is missing), and
// with `gradient` the node slopes' coefficients on the secants d1, d2 (4,: slope, then on m0, m1, m2).
VDB_HD double pchip_value(const double* coef, const double g[4], bool gradient, double d1[4], double d2[4]) {
  const double h[3] = {coef[0], coef[1], coef[2]};
  const int flags = (int)coef[7];
  const bool has_l = flags & 1, has_r = (flags & 2) != 0;
  double m[3];
  for (int j = 0; j < 3; ++j) m[j] = (g[j + 1] - g[j]) / h[j];
  if (has_l) {
    pchip_interior(h[0], h[1], m[0], m[1], gradient, d1[0], d1[1], d1[2]);
    d1[3] = 0.0;
  } else if (has_r) {
    pchip_edge(h[1], h[2], m[1], m[2], gradient, d1[0], d1[2], d1[3]);
    d1[1] = 0.0;
  } else {
    d1[0] = m[1], d1[1] = 0.0, d1[2] = 1.0, d1[3] = 0.0;
  }
  if (has_r) {
    pchip_interior(h[1], h[2], m[1], m[2], gradient, d2[0], d2[2], d2[3]);
    d2[1] = 0.0;
  } else if (has_l) {
    pchip_edge(h[1], h[0], m[1], m[0], gradient, d2[0], d2[2], d2[1]);
    d2[3] = 0.0;
  } else {
    d2[0] = m[1], d2[1] = 0.0, d2[2] = 1.0, d2[3] = 0.0;
  }
  return product(coef[3], g[1]) + product(coef[4], d1[0]) + product(coef[5], g[2]) + product(coef[6], d2[0]);
}

// The gradient entry of pchip_combine from the steps' entries G (4,) and the slopes' coefficients d1, d2.
VDB_HD double pchip_gradient(const double* coef, const double G[4], const double d1[4], const double d2[4]) {
  double gm[3];
  for (int j = 0; j < 3; ++j) {
    gm[j] = (G[j + 1] - G[j]) / coef[j];
    if (!isfinite(gm[j])) gm[j] = 0.0;  // secants to missing steps carry coefficient 0
  }
  double dd1 = 0.0, dd2 = 0.0;
  for (int j = 0; j < 3; ++j) dd1 = dd1 + product(d1[j + 1], gm[j]);
  for (int j = 0; j < 3; ++j) dd2 = dd2 + product(d2[j + 1], gm[j]);
  return product(coef[3], G[1]) + product(coef[5], G[2]) + product(coef[4], dd1) + product(coef[6], dd2);
}

// `from`, a linear cell inside one leaf of a grid with g's topology (the same leaf slots and masks), as
// locate_cell finds it in g: the same leaf, offset and fractions, g's values.
template <class T>
VDB_HD void rebase_cell(const GridView<T>& g, const Cell<T>& from, Cell<T>& cell) {
  cell = from;
  const int slot = from.leaf, base = from.offset;
  if (!g.index_layout) {
    const T* p0 = g.values + leaf_values_base(g, slot) + (i64)base * 3;
    for (int o = 0; o < 8; ++o) cell.corner[o] = p0 + (o >> 2) * 192 + ((o >> 1) & 1) * 24 + (o & 1) * 3;
  } else {
    for (int o = 0; o < 8; ++o)
      cell.corner[o] = leaf_value(g, slot, base + ((o >> 2) << 6) + (((o >> 1) & 1) << 3) + (o & 1));
  }
}

// The velocity (and Jacobian) of a series at y for one stage: the stencil checked in every grid the stage
// reads (once per topology), each grid sampled, the samples interpolated in time.  g[q] is grid q of the window
// (an array of GridViews, or on the GPU AbiGrids).
template <class T, class Grids>
VDB_HD int evaluate_series_stage(const Grids& g, const SeriesSpec& ss, const int* gi, const double* coef,
                                 const PointTransform& xf, int mode, int lo, int taps, const double y[3],
                                 bool jacobian, double u[3], double J[9], int& evaluations, LeafCache* caches) {
  typedef typename RealOf<T>::type R;
  if (!finite3(y)) return PARTICLE_NON_FINITE;
  const int K = ss.time_kind;
  // the stencil in every topology the stage reads, checked through the first of its grids (slot `first[q]`);
  // the linear mode keeps the cell located there for the grids that share its topology
  Cell<T> cell[4];
  int first[4];
  for (int q = 0; q < K; ++q) {
    first[q] = -1;
    if (gi[q] < 0) continue;
    const int top = ss.topology[gi[q]];
    for (int p = 0; p < q && first[q] < 0; ++p)
      if (gi[p] >= 0 && ss.topology[gi[p]] == top) first[q] = first[p];
    if (first[q] >= 0) continue;
    first[q] = q;
    const GridView<T>& gq = g[gi[q]];
    LeafCache& cache = caches[top];
    bool inside;
    if (mode == MODE_LINEAR) {
      locate_cell<T, 3>(gq, xf, y, mode, cell[q], cache);
      inside = cell[q].kind == CELL_LINEAR && cell[q].leaf >= 0
                   ? cell_active(gq, cell[q])
                   : stencil_inside_point(gq, xf, y, mode, lo, taps, cache);
    } else {
      inside = stencil_inside_point(gq, xf, y, mode, lo, taps, cache);
    }
    if (!inside) return PARTICLE_LEFT_DATA;
  }
  ++evaluations;
  const double nan_value = (double)nan("");
  double gv[4][3], gj[4][9];
  for (int q = 0; q < K; ++q) {
    if (gi[q] < 0) {
      for (int c = 0; c < 3; ++c) gv[q][c] = nan_value;
      for (int e = 0; e < 9; ++e) gj[q][e] = nan_value;
      continue;
    }
    const GridView<T>& gq = g[gi[q]];
    LeafCache& cache = caches[ss.topology[gi[q]]];
    T v[3];
    R j[9];
    if (mode == MODE_LINEAR) {
      const int p = first[q];
      if (p != q) {  // the cell of the same topology: one leaf, the same slot and offset (else walk again)
        if (cell[p].kind == CELL_LINEAR && cell[p].leaf >= 0)
          rebase_cell(gq, cell[p], cell[q]);
        else
          locate_cell<T, 3>(gq, xf, y, mode, cell[q], cache);
      }
      evaluate_cell<T, 3>(gq, xf, cell[q], jacobian, v, jacobian ? j : nullptr);
    } else {
      sample_point<T, 3>(gq, xf, y, mode, jacobian, v, jacobian ? j : nullptr, cache);
    }
    for (int c = 0; c < 3; ++c) gv[q][c] = (double)v[c];
    if (jacobian)
      for (int e = 0; e < 9; ++e) gj[q][e] = (double)j[e];
  }
  bool ok = true;
  if (K == TIME_LINEAR) {  // (1 - w) f_i + w f_{i+1}
    for (int c = 0; c < 3; ++c) u[c] = product(coef[0], gv[0][c]) + product(coef[1], gv[1][c]);
    if (jacobian)
      for (int e = 0; e < 9; ++e) J[e] = product(coef[0], gj[0][e]) + product(coef[1], gj[1][e]);
  } else {
    for (int c = 0; c < 3; ++c) {
      const double gc[4] = {gv[0][c], gv[1][c], gv[2][c], gv[3][c]};
      double d1[4], d2[4];
      u[c] = pchip_value(coef, gc, jacobian, d1, d2);
      if (jacobian)
        for (int a = 0; a < 3; ++a) {
          const int e = 3 * c + a;
          const double G[4] = {gj[0][e], gj[1][e], gj[2][e], gj[3][e]};
          J[e] = pchip_gradient(coef, G, d1, d2);
        }
    }
  }
  for (int c = 0; c < 3; ++c) ok = ok && isfinite(u[c]);
  if (jacobian)
    for (int e = 0; e < 9; ++e) ok = ok && isfinite(J[e]);
  return ok ? PARTICLE_ACTIVE : PARTICLE_NON_FINITE;
}

// Entry: the particles x (n, 3) of a series run through one window of steps (s: the tableau, the window's
// steps and save slots; ss: its grids and stage coefficients).  A particle whose status is not active on
// entry is left alone; the others continue from x (and F), add their evaluations (int64) and, where they
// validate a step, set last_step to its series step (ss.first_step + local step).
#ifdef VDB_DEVICE_COMPILE
// The window's grids as the GPU reads them: each made from its record when a stage reads it (an array of
// MAX_SERIES_GRIDS GridViews, indexed at run time, was 960 B of every thread's frame).
template <class T>
struct AbiGrids {
  const KernelAbi* k;
  VDB_HD GridView<T> operator[](int q) const { return abi_grid<T>(k[q]); }
};
#endif

template <class T>
VDB_ENTRY void advect_series_points(const KernelAbi* k, const AdvectSpec& s, const SeriesSpec& ss, double* x, i64 n,
                                    double* position, double* velocity, double* jacobian, double* F,
                                    signed char* status, i64* last_step, i64* evaluations) {
#ifdef VDB_DEVICE_COMPILE
  const AbiGrids<T> g{k};
#else
  GridView<T> g[MAX_SERIES_GRIDS];
  for (int q = 0; q < ss.grids; ++q) g[q] = abi_grid<T>(k[q]);
#endif
  const i64 S = s.slots;
  const int mode = k[0].mode;
  const int stages = s.stages;
  auto body = [&](i64 i, const PointTransform& xf, LeafCache& cache) {
    if (status[i] != PARTICLE_ACTIVE) return;
    LeafCache caches[MAX_SERIES_GRIDS];
    caches[0] = cache;
    signed char st = PARTICLE_ACTIVE;
    i64 last = -1;
    int count = 0;
    const ParticleOut out{position + i * S * 3, velocity ? velocity + i * S * 3 : nullptr,
                          jacobian ? jacobian + i * S * 9 : nullptr, F ? F + i * 9 : nullptr, &st, &last, &count};
    auto eval = [&](i64 step, int stage, const double y[3], bool jac, double u[3], double J[9], int& evals) {
      const i64 e = step * stages + stage;
      return evaluate_series_stage<T>(g, ss, ss.stage_grid + 4 * e, ss.stage_coef + SERIES_COEFS * e, xf, mode, s.lo,
                                      s.taps, y, jac, u, J, evals, caches);
    };
    advect_particle_with(s, x + 3 * i, out, eval);
    cache = caches[0];
    status[i] = st;
    if (last >= 0) last_step[i] = ss.first_step + last;
    evaluations[i] += count;
  };
  for_each_point<64>(n, k[0], body);
}

// ---- the entries of advect and advect_series (operations.h) -----------------------------------------------------
#ifdef VDB_DEVICE_COMPILE
// One thread per particle: x (n, 3) float64 is moved in place; a (stages, stages) and b (stages,) are the tableau
// (device arrays), save_slot (steps + 1,) the output slot of each step or -1; position (n, slots, 3), velocity
// (n, slots, 3), jacobian (n, slots, 3, 3) and F (n, 3, 3) are NaN-filled by the caller (null when not asked for).
template <class T>
__global__ void VDB_BOUNDS VDBFLOW_GPU_ENTRY(advect) {
  const AdvectSpec s = make_advect_spec(abi->mode, a_coef, b_coef, stages, h, save_slot, steps, slots,
                                        velocity != nullptr, jacobian != nullptr, F != nullptr, validate_end != 0);
  advect_points<T>(*abi, s, x, n, position, velocity, jacobian, F, status, last_step, evaluations);
}

// abis (grids,) device records of the window's grids, topology (grids,) the first grid sharing each one's topology,
// stage_grid (steps + 1, stages, 4) and stage_coef (steps + 1, stages, 8) the stages' grids and time coefficients;
// particles whose status is not active are left alone, evaluations (int64) are added to.
template <class T>
__global__ void VDB_BOUNDS VDBFLOW_GPU_ENTRY(advect_series) {
  const AdvectSpec s = make_advect_spec(abis[0].mode, a_coef, b_coef, stages, h, save_slot, steps, slots,
                                        velocity != nullptr, jacobian != nullptr, F != nullptr, validate_end != 0);
  SeriesSpec ss;
  ss.time_kind = time_kind;
  ss.grids = grids;
  for (int q = 0; q < MAX_SERIES_GRIDS; ++q) ss.topology[q] = q < grids ? topology[q] : 0;
  ss.stage_grid = stage_grid;
  ss.stage_coef = stage_coef;
  ss.first_step = first_step;
  advect_series_points<T>(abis, s, ss, x, n, position, velocity, jacobian, F, status, last_step, evaluations);
}
#else
VDBFLOW_CPU_ENTRY(advect) {
  const KernelAbi& a = *(const KernelAbi*)k;
  with_float_type(a.value_kind, [&](auto t) {
    advect_points<type_of<decltype(t)>>(a, *(const AdvectSpec*)s, x, n, position, velocity, jacobian, F, status,
                                        last_step, evaluations);
  });
}

VDBFLOW_CPU_ENTRY(advect_series) {
  const KernelAbi* a = (const KernelAbi*)k;
  with_float_type(a[0].value_kind, [&](auto t) {
    advect_series_points<type_of<decltype(t)>>(a, *(const AdvectSpec*)s, *(const SeriesSpec*)ss, x, n, position,
                                               velocity, jacobian, F, status, last_step, evaluations);
  });
}
#endif

}  // namespace vdbflow
