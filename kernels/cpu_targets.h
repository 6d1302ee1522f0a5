// cpu_targets.h - the CPU targets of the extension (CMakeLists.txt: VDBFLOW_CPU_VARIANTS) and the choice of the
// one in use at import: the widest this CPU runs, unless VDBFLOW_CPU_TARGET names another.  Included by
// cpu_module.cpp only, in the module's compilation (not the wider targets' kernel sections).
#pragma once
#include <nanobind/nanobind.h>

#include <string>
#include <vector>

#include "cpu_kernels.h"

namespace nb = nanobind;

// The targets compiled besides this one (CMakeLists.txt: VDBFLOW_CPU_VARIANTS), widest last.
#ifdef VDBFLOW_VARIANT_x86_64_v2
extern "C" const VdbflowCpuKernels* vdbflow_cpu_kernels_x86_64_v2();
#endif
#ifdef VDBFLOW_VARIANT_x86_64_v3
extern "C" const VdbflowCpuKernels* vdbflow_cpu_kernels_x86_64_v3();
#endif
#ifdef VDBFLOW_VARIANT_x86_64_v4
extern "C" const VdbflowCpuKernels* vdbflow_cpu_kernels_x86_64_v4();
#endif

namespace {

struct CpuTarget {
  const char* name;   // x86-64-v3, ...
  const char* flags;  // what the kernels were compiled with, besides -O3 -fno-math-errno
  const VdbflowCpuKernels* kernels;
  bool supported;     // by this CPU (and its operating system)
};

// The target this compilation was made for: the compiler's default (the portable baseline), or the
// build machine's CPU when VDBFLOW_NATIVE is on.
#if defined(VDBFLOW_NATIVE)
#define VDBFLOW_BASELINE_NAME "native"
#define VDBFLOW_BASELINE_FLAGS "-march=native"
#elif defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && \
    defined(__AVX512VL__)
#define VDBFLOW_BASELINE_NAME "x86-64-v4"
#elif defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#define VDBFLOW_BASELINE_NAME "x86-64-v3"
#elif defined(__x86_64__) && defined(__SSE4_2__) && defined(__POPCNT__)
#define VDBFLOW_BASELINE_NAME "x86-64-v2"
#elif defined(__x86_64__)
#define VDBFLOW_BASELINE_NAME "x86-64"
#elif defined(__aarch64__)
#define VDBFLOW_BASELINE_NAME "aarch64"
#else
#define VDBFLOW_BASELINE_NAME "generic"
#endif
#ifndef VDBFLOW_BASELINE_FLAGS
#define VDBFLOW_BASELINE_FLAGS ""  // the compiler's default target
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
bool cpu_has(const char* level) {
  __builtin_cpu_init();
  const std::string l = level;
  // the ISA levels of the x86-64 psABI: every feature of the level (and the OS saving its registers)
  return l == "x86-64-v2"   ? __builtin_cpu_supports("x86-64-v2")
         : l == "x86-64-v3" ? __builtin_cpu_supports("x86-64-v3")
         : l == "x86-64-v4" ? __builtin_cpu_supports("x86-64-v4")
                            : false;
}
#elif defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
bool cpu_has(const char* level) {
  __builtin_cpu_init();
  const std::string l = level;
  // the ISA levels of the x86-64 psABI, by their defining features (every CPU with these has the rest:
  // LZCNT, MOVBE, F16C for v3)
  const bool v2 = __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("popcnt") &&
                  __builtin_cpu_supports("ssse3");
  const bool v3 = v2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                  __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
  const bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  return l == "x86-64-v2" ? v2 : l == "x86-64-v3" ? v3 : l == "x86-64-v4" ? v4 : false;
}
#else
bool cpu_has(const char*) { return false; }
#endif

std::vector<CpuTarget> cpu_targets() {
  std::vector<CpuTarget> t{{VDBFLOW_BASELINE_NAME, VDBFLOW_BASELINE_FLAGS, &KERNELS, true}};
#ifdef VDBFLOW_VARIANT_x86_64_v2
  t.push_back({"x86-64-v2", "-march=x86-64-v2", vdbflow_cpu_kernels_x86_64_v2(), cpu_has("x86-64-v2")});
#endif
#ifdef VDBFLOW_VARIANT_x86_64_v3
  t.push_back({"x86-64-v3", "-march=x86-64-v3", vdbflow_cpu_kernels_x86_64_v3(), cpu_has("x86-64-v3")});
#endif
#ifdef VDBFLOW_VARIANT_x86_64_v4
  t.push_back({"x86-64-v4", "-march=x86-64-v4", vdbflow_cpu_kernels_x86_64_v4(), cpu_has("x86-64-v4")});
#endif
  return t;
}

// The widest target this CPU runs, unless VDBFLOW_CPU_TARGET names another one (or "baseline").
size_t choose_target(const std::vector<CpuTarget>& targets) {
  size_t chosen = 0;
  for (size_t i = 1; i < targets.size(); ++i)
    if (targets[i].supported) chosen = i;
  const char* asked = std::getenv("VDBFLOW_CPU_TARGET");
  if (!asked || !*asked || std::string(asked) == "auto") return chosen;
  const std::string want = std::string(asked) == "baseline" ? targets[0].name : asked;
  size_t found = targets.size();
  for (size_t i = 0; i < targets.size(); ++i)
    if (want == targets[i].name) found = i;
  std::string known = "baseline";
  for (const CpuTarget& t : targets) known += std::string(", ") + t.name;
  int warned = 0;
  if (found == targets.size())
    warned = PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "VDBFLOW_CPU_TARGET=%s is not among the compiled targets "
                              "(%s); using %s", asked, known.c_str(), targets[chosen].name);
  else if (!targets[found].supported)
    warned = PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "VDBFLOW_CPU_TARGET=%s: this CPU does not run it; using %s",
                              asked, targets[chosen].name);
  else
    chosen = found;
  if (warned < 0) throw nb::python_error();  // warnings turned into errors
  return chosen;
}

}  // namespace
