// sample.cu - the CUDA entry points of the kernels, compiled at run time with NVRTC, loaded by CuPy and checked
// ahead of time with nvcc in the test suite.  Each entry is defined in its operation's math header (vdbflow/*.h),
// after the loop it launches once, with its row's parameters (vdbflow/operations.h VDBFLOW_GPU_ENTRY): the same
// loop the CPU extension runs (cpu_kernels.h), a grid-stride loop here (launch.h), an OpenMP loop there.  The
// launch bounds of each entry (VDB_BOUNDS, VDB_BOUNDS_FILL) are explained in launch.h.
//
// Each process compiles only the entries it calls, one NVRTC program per name expression, into a cache on
// disk (vdbflow/devices/cuda_build.py); the same source runs on the CPU under an emulation of CUDA
// (emulate/cuda_host.h, VDBFLOW_CUDA_EMULATE=1) so that the suite runs the device code without a GPU.
//
// Templates over the value type T and the component count NC (0: C at run time) are instantiated on
// demand: the CUDA backend (vdbflow/devices/cuda.py) lists the instances it calls as CuPy name
// expressions ("vdbflow::sample_kernel<float, 3>") and NVRTC compiles those; the untyped entries are extern "C"
// functions of namespace vdbflow.  Entry points that read a grid take the call's KernelAbi record (abi.h: grid,
// transform, mode and spaces) by pointer to a device copy, then the call's arrays.  Points are float64 (N, 3);
// outputs are values (N, C) of the value type and, where a Jacobian pointer is not null, Jacobians (N, C, 3) of
// the accumulation type Real<T> (float, or double for double data).
#include "vdbflow/adjoint.h"
#include "vdbflow/advect.h"
#include "vdbflow/derived.h"
#include "vdbflow/hessian.h"
#include "vdbflow/reduce.h"
#include "vdbflow/route.h"
