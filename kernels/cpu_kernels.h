// cpu_kernels.h - the kernel section of the CPU extension: its table of entry points, compiled once per CPU target.
//
// Included by cpu_module.cpp only, and so compiled for the portable baseline and again for each wider target
// (CMakeLists.txt: VDBFLOW_CPU_VARIANTS), each time with the namespace vdbflow renamed so that no template of the
// headers is shared between targets.  Each entry, <name>_entry, is defined in its operation's math header with its
// row's parameters (vdbflow/operations.h VDBFLOW_CPU_ENTRY): it picks the template instance of a call (launch.h
// with_instance, with_float_type, ...) and runs the shared loop (sample_points, hessian_points, adjoint_points, ...:
// the same functions the GPU entries launch) - OpenMP loops here (launch.h for_each_point).  Coverage and routing
// run in the same compilation as sampling: a point's index coordinates, its base cell and the stencil it reads then
// come out alike to the last bit (a wider target contracts the transform's products into FMAs).
#pragma once
#include "vdbflow/adjoint.h"
#include "vdbflow/advect.h"
#include "vdbflow/derived.h"
#include "vdbflow/hessian.h"
#include "vdbflow/operations.h"
#include "vdbflow/reduce.h"
#include "vdbflow/route.h"

// The entry points of one compilation of the kernel section: one function pointer per row of the table of
// operations (vdbflow/operations.h), with the row's CPU parameters.  A record (KernelAbi) travels as a
// vdbflow_op_record, a spec (ReduceSpec, RouteSpec, AdvectSpec, ...) as a vdbflow_op_spec: the same plain data in
// every compilation, a type of each compilation's own namespace.
struct VdbflowCpuKernels {
#define VDBFLOW_CPU_ENTRY_POINTER(name, gpu_entry, value_types, gpu_components, cpu_parameters, gpu_parameters) \
  void(*name) cpu_parameters;
  VDBFLOW_OPERATIONS(VDBFLOW_CPU_ENTRY_POINTER)
#undef VDBFLOW_CPU_ENTRY_POINTER
};

namespace {

using namespace vdbflow;

#define VDBFLOW_CPU_ENTRY_ADDRESS(name, gpu_entry, value_types, gpu_components, cpu_parameters, gpu_parameters) \
  &name##_entry<>,
const VdbflowCpuKernels KERNELS = {VDBFLOW_OPERATIONS(VDBFLOW_CPU_ENTRY_ADDRESS)};
#undef VDBFLOW_CPU_ENTRY_ADDRESS

}  // namespace

