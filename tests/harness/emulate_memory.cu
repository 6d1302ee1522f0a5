// Kernels for tests/test_gpu_emulation_limits.py: reads and writes at an index the caller picks (past the
// end, before the start), and a copy through an address held in device memory (a record, as the kernels'
// KernelAbi holds its arrays), which reads freed memory when the array it points to was freed.
typedef long long i64;

__global__ void read_at(const double* x, i64 i, double* out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) out[0] = x[i];
}

__global__ void write_at(double* x, i64 i, double value) {
  if (blockIdx.x == 0 && threadIdx.x == 0) x[i] = value;
}

__global__ void copy_through(const unsigned long long* record, double* out, i64 n) {
  const double* x = reinterpret_cast<const double*>(record[0]);
  const i64 stride = (i64)blockDim.x * gridDim.x;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = x[i];
}
