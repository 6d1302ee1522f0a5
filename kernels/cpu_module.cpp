// cpu_module.cpp - the CPU build of the kernels: the nanobind bindings.
//
// The kernels, their point loops and their entries live in vdbflow/*.h, shared verbatim with the CUDA build
// (sample.cu).  This file binds each operation of the table (vdbflow/operations.h), most of them made from the
// row's parameters (bind_row), checks each call's record (abi.h) and spec, and hands the call to the kernel
// section (cpu_kernels.h) of the CPU target in use; what the arrays must hold is checked in Python, once for
// both backends (vdbflow/devices/checks.py).  cpu_targets.h picks
// that target, cpu_facts.h exports the kernels' facts and table of operations, cpu_reduce_spec.h checks a
// reduction's spec.
//
// CPU targets (CMakeLists.txt): the module is compiled for the compiler's portable default target, and
// the kernel section is compiled again, once per wider target such as x86-64-v3 (AVX2 + FMA), with
// VDBFLOW_KERNEL_VARIANT set.  Such a compilation holds the kernel section only, with the namespace
// vdbflow renamed (vdbflow_<variant>) so that no template of the headers is shared between targets, and
// exports a table of its entry points.  The module picks the widest table the CPU runs at import
// (VDBFLOW_CPU_TARGET overrides it); _core.CPU_TARGET says which.
#ifndef VDBFLOW_KERNEL_VARIANT
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>
#endif

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "cpu_kernels.h"
#ifndef VDBFLOW_KERNEL_VARIANT
#include "cpu_facts.h"
#include "cpu_reduce_spec.h"
#include "cpu_targets.h"
#endif

using namespace vdbflow;

#ifdef VDBFLOW_KERNEL_VARIANT
// ---- a wider target's compilation: its entry table, and nothing else -------------------------------
#define VDBFLOW_PASTE_(a, b) a##b
#define VDBFLOW_PASTE(a, b) VDBFLOW_PASTE_(a, b)
extern "C" const VdbflowCpuKernels* VDBFLOW_PASTE(vdbflow_cpu_kernels_, VDBFLOW_KERNEL_VARIANT)() { return &KERNELS; }
#else
// ---- the module: argument checks and bindings -----------------------------------------------------

namespace nb = nanobind;

namespace {

// The kernels in use, chosen at import.
const VdbflowCpuKernels* active = &KERNELS;

using AnyArray = nb::ndarray<nb::c_contig, nb::device::cpu>;         // written
using InArray = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;  // read only
template <class E, class... Shape>
using In = nb::ndarray<const E, Shape..., nb::c_contig, nb::device::cpu>;
template <class E, class... Shape>
using Out = nb::ndarray<E, Shape..., nb::c_contig, nb::device::cpu>;
using IntTable = In<int32_t, nb::ndim<2>>;
template <class E, size_t D = 1>
using NewArray = nb::ndarray<nb::numpy, E, nb::ndim<D>>;

template <class E>
E* alloc(size_t n) { return (E*)large_alloc(sizeof(E) * n); }
// A NumPy array owning `data` (from alloc).
template <class E, size_t D = 1>
NewArray<E, D> owned(E* data, std::initializer_list<size_t> shape) {
  nb::capsule owner(data, [](void* q) noexcept { std::free(q); });
  return NewArray<E, D>(data, shape, owner);
}
void check(bool ok, const char* message) { if (!ok) throw std::invalid_argument(message); }
template <class T, class Array>
bool is(const Array& arr) { return arr.dtype() == nb::dtype<T>(); }
template <class Array>
auto data_or_null(std::optional<Array>& a) -> decltype(a->data()) { return a ? a->data() : nullptr; }

// Builds an open-addressing table of (x, y, z, slot) (grid.h fill_table).  Returns (table, index of the
// first repeated key or -1).
nb::tuple build_table(In<int32_t, nb::ndim<2>> keys, In<int32_t, nb::ndim<1>> slots) {
  const size_t n = keys.shape(0);
  check(keys.shape(1) == 3 && slots.shape(0) == n, "keys (n, 3) and slots (n,)");
  const u32 cap = table_capacity(n);
  int32_t* data = alloc<int32_t>((size_t)cap * 4);
  const i64 repeated = fill_table(keys.data(), slots.data(), (i64)n, data, cap);
  return nb::make_tuple(owned<int32_t, 2>(data, {(size_t)cap, 4}), (int64_t)repeated);
}

HashTable as_table(const IntTable& t) {
  if (t.shape(0) == 0) return HashTable{nullptr, 0};
  check(t.shape(1) == 4 && (t.shape(0) & (t.shape(0) - 1)) == 0,
        "hash table must be (capacity, 4) with a power-of-two capacity");
  return HashTable{t.data(), (u32)(t.shape(0) - 1)};
}

// Slot of each key in a table (SLOT_NOT_FOUND = -1 when absent).
NewArray<int32_t> table_lookup(IntTable table, In<int32_t, nb::ndim<2>> keys) {
  const HashTable t = as_table(table);
  const size_t n = keys.shape(0);
  int32_t* out = alloc<int32_t>(n);
  const int32_t* k = keys.data();
  for (size_t r = 0; r < n; ++r) out[r] = table_find(t, k[3 * r], k[3 * r + 1], k[3 * r + 2]);
  return owned(out, {n});
}

// The record of one call (abi.h), from the bytes Python built (vdbflow.core.kernel.KernelRecord.call).
// Python checked the arrays the pointers point into when it built the record, once per volume; here the
// record's own fields are checked again, cheaply, before any kernel reads through them.
KernelAbi read_abi(const nb::bytes& record) {
  if (record.size() != sizeof(KernelAbi))
    throw std::invalid_argument("expected a kernel record of " + std::to_string(sizeof(KernelAbi)) + " bytes, got " +
                                std::to_string(record.size()));
  KernelAbi a;
  std::memcpy(&a, record.c_str(), sizeof(KernelAbi));
  if (a.components < 1 || a.components > MAX_COMPONENTS)
    throw std::invalid_argument("components must be in [1, " + std::to_string(MAX_COMPONENTS) + "]");
  check(a.value_kind >= KIND_F32 && a.value_kind <= KIND_U32, "unknown value kind");
  check(a.mode >= MODE_CLOSEST && a.mode <= SCHEME_LAST, "unknown sampling mode");
  check(a.index_layout == 0 || a.index_layout == 1, "index_layout must be 0 or 1");
  check(a.value_rows >= 0 && a.tile_rows >= 0, "row counts must be >= 0");
  check(a.values != nullptr && a.background != nullptr && (a.tile_rows == 0 || a.tile_values != nullptr),
        "the kernel record lacks its value arrays");
  for (int l = 0; l < LEVEL_COUNT; ++l)
    check(a.tables[l] == nullptr ? a.table_masks[l] == 0 : ((a.table_masks[l] + 1ull) & a.table_masks[l]) == 0,
          "hash table masks must be capacity - 1 with a power-of-two capacity");
  return a;
}

bool is_float_kind(int kind) { return kind == KIND_F32 || kind == KIND_F64; }

// N of points (N, 3) float32 or float64.
i64 point_count(const InArray& points) {
  check((is<float>(points) || is<double>(points)) && points.ndim() == 2 && points.shape(1) == 3,
        "points must be (N, 3) float32 or float64");
  return (i64)points.shape(0);
}

vdbflow_op_record record_of(const KernelAbi& k) { return (vdbflow_op_record)&k; }
template <class Spec>
vdbflow_op_spec spec_of(const Spec& s) { return (vdbflow_op_spec)&s; }

// ---- the bindings made from the table of operations (operations.h) ----------------------------------------
// A row whose CPU parameters are records, arrays and scalars gets its binding from them, with the row's
// parameter names: a vdbflow_op_record is the call's record bytes (read_abi checks them), a pointer an array
// of its element type (void: any dtype) or None (null), void* const* a list of derived.h's DERIVED_COUNT
// arrays or None, a scalar itself.  What the arrays' shapes and sizes must be is the operation's meaning:
// vdbflow/devices/checks.py checks it, once for both backends.  A row that takes a vdbflow_op_spec has a
// binding of its own (below): only it can check the spec against its arrays.
template <class C, class = void>
struct Arg {
  static constexpr bool bound = false;
};
template <class E>
using ArrayOf = std::conditional_t<std::is_void_v<E>, std::conditional_t<std::is_const_v<E>, InArray, AnyArray>,
                                   nb::ndarray<E, nb::c_contig, nb::device::cpu>>;
template <class C>  // a scalar, or an array of the pointer's element type (void: any dtype)
struct Arg<C, std::enable_if_t<std::is_arithmetic_v<std::remove_const_t<std::remove_pointer_t<C>>> ||
                               std::is_void_v<std::remove_pointer_t<C>>>> {
  static constexpr bool bound = true;
  using Py = std::conditional_t<std::is_pointer_v<C>, ArrayOf<std::remove_pointer_t<C>>, C>;
  C value;
  explicit Arg(const Py& a) {
    if constexpr (std::is_pointer_v<C>)
      value = (C)a.data();
    else
      value = a;
  }
  C get() const { return value; }
};
template <>
struct Arg<vdbflow_op_record> {
  static constexpr bool bound = true;
  using Py = nb::bytes;
  KernelAbi k;
  explicit Arg(const nb::bytes& record) : k(read_abi(record)) {}
  vdbflow_op_record get() const { return record_of(k); }
};
template <>
struct Arg<void* const*> {
  static constexpr bool bound = true;
  using Py = std::vector<std::optional<AnyArray>>;
  std::vector<void*> p;
  explicit Arg(const Py& arrays) {
    check(arrays.size() == (size_t)DERIVED_COUNT, "expected one buffer or None for each derived quantity");
    for (const std::optional<AnyArray>& a : arrays) p.push_back(a ? a->data() : nullptr);
  }
  void* const* get() const { return p.data(); }
};

template <auto Entry, class... P>
void call_row(typename Arg<P>::Py... args) {
  const std::tuple<Arg<P>...> held{Arg<P>(args)...};  // checked in order, before the kernel runs
  nb::gil_scoped_release release;
  std::apply([](const auto&... a) { (active->*Entry)(a.get()...); }, held);
}

template <auto Entry, class... P, size_t... I>
void def_row(nb::module_& m, const char* name, std::vector<std::string> names, std::index_sequence<I...>) {
  static std::vector<std::string> kept;  // nb::arg keeps the pointer
  kept = std::move(names);
  auto arg = [](auto* p, const std::string& n) {  // an array may be None (null)
    using C = std::remove_pointer_t<decltype(p)>;
    if constexpr (std::is_pointer_v<C> && !std::is_same_v<C, vdbflow_op_record> && !std::is_same_v<C, void* const*>)
      return nb::arg(n.c_str()).none();
    else
      return nb::arg(n.c_str());
  };
  m.def(name, &call_row<Entry, P...>, arg((P*)nullptr, kept[I])...);
}

// The binding of the row `name` (its CPU entry Entry, its parameter list `text`), if its parameters make one.
template <auto Entry, class... P>
void bind_row(nb::module_& m, const char* name, const char* text, void (*)(P...)) {
  if constexpr ((Arg<P>::bound && ...)) {
    std::vector<std::string> names;  // the last word of each parameter
    std::string word, last;
    for (const char c : std::string(text)) {
      if (std::isalnum((unsigned char)c) || c == '_') {
        word += c;
        continue;
      }
      if (!word.empty()) last = word, word.clear();
      if (c == ',' || c == ')') names.push_back(last);
    }
    check(names.size() == sizeof...(P), "an operation's parameter names do not match its entry");
    def_row<Entry, P...>(m, name, std::move(names), std::index_sequence_for<P...>());
  }
}

// advect.h: the arrays both particle bindings take, checked: particles x (N, 3) float64 integrated in place with
// the tableau (a (s, s), b (s,)) and step h over the steps of save_slot (m + 1,), the NaN-filled outputs, F
// (N, 3, 3) each particle's starting flow-map gradient, status, last_step and evaluations (N,) (evaluations'
// dtype is the binding's); validate_end = false leaves x_m unchecked.  Returns the run's AdvectSpec.
using F64Out = Out<double>;
template <class Evaluations>
AdvectSpec particle_spec(int mode, const Out<double, nb::ndim<2>>& x, const In<double, nb::ndim<2>>& a_coef,
                         const In<double, nb::ndim<1>>& b_coef, double h, const In<int64_t, nb::ndim<1>>& save_slot,
                         const F64Out& position, const std::optional<F64Out>& velocity,
                         const std::optional<F64Out>& jacobian, const std::optional<F64Out>& F,
                         const Out<int8_t, nb::ndim<1>>& status, const Out<int64_t, nb::ndim<1>>& last_step,
                         const Evaluations& evaluations, bool validate_end) {
  const i64 n = (i64)x.shape(0);
  const int stages = (int)b_coef.shape(0);
  check(x.shape(1) == 3, "x must be (N, 3)");
  check(stages >= 1 && stages <= MAX_STAGES && a_coef.shape(0) == (size_t)stages && a_coef.shape(1) == (size_t)stages,
        "the tableau must be a (s, s) and b (s,), 1 <= s <= 4");
  check(save_slot.shape(0) >= 1, "save_slot must hold n + 1 entries");
  const i64 steps = (i64)save_slot.shape(0) - 1;
  const i64 S = position.ndim() == 3 ? (i64)position.shape(1) : -1;
  check(S >= 1 && (i64)position.shape(0) == n && position.shape(2) == 3, "position must be (N, S, 3)");
  for (i64 s = 0; s <= steps; ++s) check(save_slot(s) >= -1 && save_slot(s) < S, "save slots must lie in [-1, S)");
  check(!velocity || velocity->size() == (size_t)(n * S * 3), "velocity must be (N, S, 3)");
  check(!jacobian || jacobian->size() == (size_t)(n * S * 9), "jacobian must be (N, S, 3, 3)");
  check(!F || F->size() == (size_t)(n * 9), "F must be (N, 3, 3)");
  check((i64)status.shape(0) == n && (i64)last_step.shape(0) == n && (i64)evaluations.shape(0) == n,
        "status, last_step and evaluations must be (N,)");
  return make_advect_spec(mode, a_coef.data(), b_coef.data(), stages, h, (const i64*)save_slot.data(), steps, S,
                          velocity.has_value(), jacobian.has_value(), F.has_value(), validate_end);
}

// A particle binding's record (one grid of a window): a vec3 float velocity, sampled in world space.
void check_particle_record(const KernelAbi& k) {
  check(is_float_kind(k.value_kind), "particles need float32 or float64 velocity");
  check(k.components == 3, "particles need a vec3 velocity");
  check(k.points_world && k.jacobian_world, "particles move in world space");
}

// Particles through a steady vec3 volume (advect.h advect_points), the arrays of particle_spec.
void advect(nb::bytes record, Out<double, nb::ndim<2>> x, In<double, nb::ndim<2>> a_coef,
            In<double, nb::ndim<1>> b_coef, double h, In<int64_t, nb::ndim<1>> save_slot, F64Out position,
            std::optional<F64Out> velocity, std::optional<F64Out> jacobian, std::optional<F64Out> F,
            Out<int8_t, nb::ndim<1>> status, Out<int64_t, nb::ndim<1>> last_step, Out<int32_t, nb::ndim<1>> evaluations,
            bool validate_end) {
  const KernelAbi k = read_abi(record);
  check_particle_record(k);
  const AdvectSpec s = particle_spec(k.mode, x, a_coef, b_coef, h, save_slot, position, velocity, jacobian, F, status,
                                     last_step, evaluations, validate_end);
  nb::gil_scoped_release release;
  active->advect(record_of(k), spec_of(s), x.data(), (i64)x.shape(0), position.data(), data_or_null(velocity), data_or_null(jacobian),
                 data_or_null(F), (signed char*)status.data(), (i64*)last_step.data(), evaluations.data());
}

// As advect, through a window of a series' steps (advect.h advect_series_points): records (G,) of the window's
// grids (one transform, value type and mode), topology (G,) the first grid sharing each grid's topology,
// stage_grid (m + 1, s, 4) int32 and stage_coef (m + 1, s, 8) the stages' grids and time coefficients (time_kind
// 2: linear, 4: pchip).  Particles whose status is not active are skipped; evaluations (int64) are added to;
// last_step is set, first_step + the local step, where a step is validated.
void advect_series(std::vector<nb::bytes> records, In<int32_t, nb::ndim<1>> topology, int time_kind,
                   In<int32_t, nb::ndim<3>> stage_grid, In<double, nb::ndim<3>> stage_coef, int64_t first_step,
                   Out<double, nb::ndim<2>> x, In<double, nb::ndim<2>> a_coef, In<double, nb::ndim<1>> b_coef,
                   double h, In<int64_t, nb::ndim<1>> save_slot, F64Out position, std::optional<F64Out> velocity,
                   std::optional<F64Out> jacobian, std::optional<F64Out> F, Out<int8_t, nb::ndim<1>> status,
                   Out<int64_t, nb::ndim<1>> last_step, Out<int64_t, nb::ndim<1>> evaluations, bool validate_end) {
  const int G = (int)records.size();
  check(G >= 1 && G <= MAX_SERIES_GRIDS, "a window holds 1 to 8 grids");
  std::vector<KernelAbi> k;
  for (const nb::bytes& r : records) k.push_back(read_abi(r));
  for (const KernelAbi& g : k) {
    check_particle_record(g);
    check(g.value_kind == k[0].value_kind, "a window's grids share one float type");
    check(g.mode == k[0].mode, "a window's grids share one mode");
    check(std::memcmp(g.xform, k[0].xform, sizeof(g.xform)) == 0, "a window's grids share one transform");
  }
  check(time_kind == TIME_LINEAR || time_kind == TIME_PCHIP, "time_kind must be 2 (linear) or 4 (pchip)");
  check((int)topology.shape(0) == G, "topology must be (G,)");
  SeriesSpec ss;
  ss.time_kind = time_kind;
  ss.grids = G;
  for (int q = 0; q < MAX_SERIES_GRIDS; ++q) ss.topology[q] = 0;
  for (int q = 0; q < G; ++q) {
    check(topology(q) >= 0 && topology(q) <= q, "topology entries must lie in [0, g]");
    ss.topology[q] = topology(q);
  }
  const AdvectSpec s = particle_spec(k[0].mode, x, a_coef, b_coef, h, save_slot, position, velocity, jacobian, F,
                                     status, last_step, evaluations, validate_end);
  check((i64)stage_grid.shape(0) == s.steps + 1 && (int)stage_grid.shape(1) == s.stages && stage_grid.shape(2) == 4,
        "stage_grid must be (m + 1, s, 4)");
  check((i64)stage_coef.shape(0) == s.steps + 1 && (int)stage_coef.shape(1) == s.stages &&
            stage_coef.shape(2) == SERIES_COEFS,
        "stage_coef must be (m + 1, s, 8)");
  for (size_t e = 0; e < stage_grid.size(); ++e)
    check(stage_grid.data()[e] >= -1 && stage_grid.data()[e] < G, "stage grids must lie in [-1, G)");
  ss.stage_grid = stage_grid.data();
  ss.stage_coef = stage_coef.data();
  ss.first_step = first_step;
  nb::gil_scoped_release release;
  active->advect_series(k.data(), spec_of(s), spec_of(ss), x.data(), (i64)x.shape(0), position.data(), data_or_null(velocity),
                        data_or_null(jacobian), data_or_null(F), (signed char*)status.data(), (i64*)last_step.data(),
                        (i64*)evaluations.data());
}

// grid.h's tile slot code of each tile index (encode_tile).
NewArray<int32_t> encode_tiles(In<int32_t, nb::ndim<1>> tiles) {
  const size_t n = tiles.shape(0);
  for (size_t i = 0; i < n; ++i) check(tiles.data()[i] >= 0, "tile indices must be >= 0");
  int32_t* out = alloc<int32_t>(n);
  for (size_t i = 0; i < n; ++i) out[i] = encode_tile(tiles.data()[i]);
  return owned(out, {n});
}

// grid.h's in-leaf offset (voxel_offset: the bit of the active mask) of each voxel (N, 3).
NewArray<int64_t> voxel_offsets(In<int64_t, nb::ndim<2>> ijk) {
  check(ijk.shape(1) == 3, "ijk must be (N, 3) int64");
  const size_t n = ijk.shape(0);
  int64_t* out = alloc<int64_t>(n);
  const int64_t* v = ijk.data();
  for (size_t i = 0; i < n; ++i) out[i] = voxel_offset((int)v[3 * i], (int)v[3 * i + 1], (int)v[3 * i + 2]);
  return owned(out, {n});
}

// ---- reductions (reduce.h) ---------------------------------------------------------------------------------

void sample_reduce(nb::bytes record, InArray points, nb::bytes spec, In<double, nb::ndim<1>> edges,
                   Out<int64_t, nb::ndim<1>> ints, Out<double, nb::ndim<1>> reals, int order) {
  const KernelAbi k = read_abi(record);
  const i64 n = point_count(points);
  check(is_float_kind(k.value_kind), "statistics need float32 or float64 data");
  check(order >= ORDER_AUTO && order <= ORDER_SCATTERED, "order must be 0, 1 or 2");
  const ReduceSpec s = read_spec(spec.c_str(), spec.size(), k.components, true, edges.shape(0), ints.shape(0), reals.shape(0), edges.data());
  nb::gil_scoped_release release;
  active->sample_reduce(record_of(k), points.data(), is<double>(points), n, spec_of(s), edges.data(), (i64)ints.shape(0),
                        (i64)reals.shape(0), (i64*)ints.data(), reals.data(), order);
}

void reduce_features(nb::bytes spec, InArray features, In<double, nb::ndim<1>> edges, Out<int64_t, nb::ndim<1>> ints,
                     Out<double, nb::ndim<1>> reals) {
  const bool dbl = is<double>(features);
  check((dbl || is<float>(features)) && features.ndim() == 2, "features must be (N, channels) float32 or float64");
  const ReduceSpec s = read_spec(spec.c_str(), spec.size(), 0, false, edges.shape(0), ints.shape(0), reals.shape(0), edges.data());
  check(features.shape(1) == (size_t)s.channels, "features must have one column per channel of the spec");
  nb::gil_scoped_release release;
  active->reduce_features(spec_of(s), edges.data(), features.data(), dbl, (i64)features.shape(0), (i64)ints.shape(0),
                          (i64)reals.shape(0), (i64*)ints.data(), reals.data());
}

// Partial b merged into partial a (in place), both laid out by the spec.
void merge_partials(nb::bytes spec, In<double, nb::ndim<1>> edges, Out<int64_t, nb::ndim<1>> ints,
                    Out<double, nb::ndim<1>> reals, In<int64_t, nb::ndim<1>> ints_b, In<double, nb::ndim<1>> reals_b) {
  const ReduceSpec s = read_spec(spec.c_str(), spec.size(), 0, false, edges.shape(0), ints.shape(0), reals.shape(0), edges.data());
  check(ints_b.shape(0) == ints.shape(0) && reals_b.shape(0) == reals.shape(0), "the partials must have one layout");
  nb::gil_scoped_release release;
  active->merge_partials(spec_of(s), (i64)ints.shape(0), (i64*)ints.data(), reals.data(), (const i64*)ints_b.data(),
                         reals_b.data());
}

void set_num_threads(int threads) {
  check(threads >= 1, "threads must be >= 1");
  set_threads(threads);
}
int get_max_threads() { return max_threads(); }

// Routing: each point's partition (route.h), then a stable counting sort by partition.  Returns the
// permutation (input index of each sorted point), the P + 2 bucket bounds (bucket 0: background-only
// points, bucket p + 1: partition p) and the points in sorted order (same dtype as given).
nb::tuple route_points(InArray points, In<double, nb::shape<12>> xform, bool points_world,
                       In<int64_t, nb::shape<3>> origin, int shift, In<uint64_t, nb::ndim<1>> boundaries,
                       IntTable near_blocks, In<int64_t, nb::shape<6>> period) {
  const i64 n = point_count(points);
  check(shift >= 0 && shift <= 63, "Morton shift must be in [0, 63]");
  const RouteSpec r = make_route_spec((const i64*)origin.data(), shift, (const u64*)boundaries.data(),
                                      (int)boundaries.shape(0) + 1, as_table(near_blocks), (const i64*)period.data());
  const int buckets = r.partitions + 1;
  const bool dbl = is<double>(points);
  typedef std::unique_ptr<void, decltype(&std::free)> Buffer;
  Buffer order(alloc<int64_t>(n), &std::free), bounds(alloc<int64_t>(buckets + 1), &std::free);
  Buffer sorted(alloc<char>(3 * (dbl ? 8 : 4) * (size_t)n), &std::free), bucket(alloc<int>(n), &std::free);
  {
    nb::gil_scoped_release release;
    active->route(spec_of(r), xform.data(), points_world, points.data(), dbl, n, get_max_threads(), (int*)bucket.get(),
                  (i64*)order.get(), sorted.get(), (i64*)bounds.get());
  }
  nb::object sorted_points = dbl ? nb::cast(owned<double, 2>((double*)sorted.release(), {(size_t)n, 3}))
                                 : nb::cast(owned<float, 2>((float*)sorted.release(), {(size_t)n, 3}));
  return nb::make_tuple(owned((int64_t*)order.release(), {(size_t)n}),
                        owned((int64_t*)bounds.release(), {(size_t)buckets + 1}), sorted_points);
}

// Morton codes (route.h) of leaf keys (n, 3) in a frame.
NewArray<uint64_t> morton_codes(In<int64_t, nb::ndim<2>> keys, In<int64_t, nb::shape<3>> origin, int shift) {
  check(keys.shape(1) == 3, "keys must be (n, 3)");
  check(shift >= 0 && shift <= 63, "Morton shift must be in [0, 63]");
  const size_t n = keys.shape(0);
  uint64_t* out = alloc<uint64_t>(n);
  const i64* k = (const i64*)keys.data();
  for (size_t i = 0; i < n; ++i) out[i] = morton_code(k + 3 * i, (const i64*)origin.data(), shift);
  return owned(out, {n});
}

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "vdbflow CPU kernels (compiled from kernels/)";
  const std::vector<CpuTarget> targets = cpu_targets();
  const size_t chosen = choose_target(targets);
  active = targets[chosen].kernels;
  m.attr("CPU_TARGET") = targets[chosen].name;
  m.attr("CPU_TARGET_FLAGS") = targets[chosen].flags;
  nb::list compiled, runnable;
  for (const CpuTarget& t : targets) {
    compiled.append(t.name);
    if (t.supported) runnable.append(t.name);
  }
  m.attr("CPU_TARGETS") = nb::tuple(compiled);
  m.attr("CPU_TARGETS_SUPPORTED") = nb::tuple(runnable);
  m.def("build_table", &build_table, nb::arg("keys"), nb::arg("slots"));
  add_kernel_facts(m);  // cpu_facts.h: constants, record layouts, the table of operations
  m.def("table_lookup", &table_lookup, nb::arg("table"), nb::arg("keys"));
  // the operations whose binding the table makes: a kernel record (abi.h, built by vdbflow.core.kernel) and
  // the call's arrays, as the row names them
#define VDBFLOW_BIND_ROW(name, gpu_entry, value_types, gpu_components, cpu_parameters, gpu_parameters) \
  bind_row<&VdbflowCpuKernels::name>(m, #name, VDBFLOW_TEXT(cpu_parameters), KERNELS.name);
  VDBFLOW_OPERATIONS(VDBFLOW_BIND_ROW)
#undef VDBFLOW_BIND_ROW
  m.def("advect", &advect, nb::arg("record"), nb::arg("x"), nb::arg("a"), nb::arg("b"), nb::arg("h"),
        nb::arg("save_slot"), nb::arg("position"), nb::arg("velocity").none(), nb::arg("jacobian").none(),
        nb::arg("F").none(), nb::arg("status"), nb::arg("last_step"), nb::arg("evaluations"),
        nb::arg("validate_end") = true,
        "Particle trajectories through a steady vec3 volume, explicit Runge-Kutta (advect.h).");
  m.def("advect_series", &advect_series, nb::arg("records"), nb::arg("topology"), nb::arg("time_kind"),
        nb::arg("stage_grid"), nb::arg("stage_coef"), nb::arg("first_step"), nb::arg("x"), nb::arg("a"), nb::arg("b"),
        nb::arg("h"), nb::arg("save_slot"), nb::arg("position"), nb::arg("velocity").none(),
        nb::arg("jacobian").none(), nb::arg("F").none(), nb::arg("status"), nb::arg("last_step"),
        nb::arg("evaluations"), nb::arg("validate_end") = true,
        "Particle trajectories through a window of a series' steps, interpolated in time (advect.h).");
  m.def("encode_tiles", &encode_tiles, nb::arg("tiles"), "Table slot codes of tile indices (grid.h encode_tile).");
  m.def("voxel_offsets", &voxel_offsets, nb::arg("ijk"), "In-leaf offsets of voxels (grid.h voxel_offset).");
  m.def("sample_reduce", &sample_reduce, nb::arg("record"), nb::arg("points"), nb::arg("spec"), nb::arg("edges"),
        nb::arg("ints"), nb::arg("reals"), nb::arg("order") = (int)ORDER_AUTO,
        "Histograms, moments and binned means of sampled quantities, added into ints and reals (reduce.h).");
  m.def("reduce_features", &reduce_features, nb::arg("spec"), nb::arg("features"), nb::arg("edges"), nb::arg("ints"),
        nb::arg("reals"), "The same statistics of given features (N, channels), added into ints and reals.");
  m.def("merge_partials", &merge_partials, nb::arg("spec"), nb::arg("edges"), nb::arg("ints"), nb::arg("reals"),
        nb::arg("ints_b"), nb::arg("reals_b"), "A reduction's partial merged into another, in place (reduce.h).");
  m.def("route_points", &route_points, nb::arg("points"), nb::arg("xform"), nb::arg("points_world"), nb::arg("origin"),
        nb::arg("shift"), nb::arg("boundaries"), nb::arg("near_blocks"), nb::arg("period"),
        "Partition of each point and a stable counting sort: (order, bounds (P + 2), sorted points).");
  m.def("morton_codes", &morton_codes, nb::arg("keys"), nb::arg("origin"), nb::arg("shift"));
  m.def("set_num_threads", &set_num_threads, nb::arg("threads"), "Threads of the CPU kernels (OpenMP).");
  m.def("get_max_threads", &get_max_threads, "Threads the CPU kernels use.");
}
#endif  // VDBFLOW_KERNEL_VARIANT
