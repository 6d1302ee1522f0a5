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
  double* F;          // (3, 3) or null: the flow-map gradient at x_0 on entry (the identity at t0), at the end on exit
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

// Integrates one particle from x (updated in place) over steps 0 .. n of s (see the file comment).
// last_step is the last step whose position was checked valid; with validate_end = 0 and status
// active, x holds x_n unchecked.
template <class T>
VDB_HD void advect_particle(const GridView<T>& g, const PointTransform& xf, int mode, const AdvectSpec& s,
                            double x[3], const ParticleOut& out, LeafCache& cache) {
  double k[MAX_STAGES][3], kF[MAX_STAGES][9], F[9], J[9];
  const bool var = s.variational != 0;
  for (int e = 0; e < 9; ++e) F[e] = var ? out.F[e] : 0.0;
  int status = PARTICLE_ACTIVE, evaluations = 0;
  i64 last = -1;
  for (i64 step = 0; step <= s.steps; ++step) {
    if (step == s.steps && !s.validate_end) break;  // x_n is the next call's first position
    const i64 slot = s.save_slot[step];
    const bool saved = slot >= 0;
    status = evaluate_stage(g, xf, mode, s.lo, s.taps, x, var || (saved && s.want_jacobian), k[0], J, evaluations,
                            cache);
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
      status = evaluate_stage(g, xf, mode, s.lo, s.taps, y, var, k[st], J, evaluations, cache);
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
    for (int e = 0; e < 9; ++e) out.F[e] = status == PARTICLE_ACTIVE ? F[e] : (double)nan("");
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

}  // namespace vdbflow
