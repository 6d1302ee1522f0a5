// Kernels for tests/test_gpu_emulation.py: the emulation of CUDA must show a race that a GPU would show.
// Every thread adds 1 to one counter, n times in all: plainly (a read-modify-write race between threads
// of different blocks) or with atomicAdd.
typedef long long i64;

__global__ void add_plain(double* counter, i64 n) {
  const i64 stride = (i64)blockDim.x * gridDim.x;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    volatile double* c = counter;
    const double seen = *c;
    for (int spin = 0; spin < 64; ++spin) (void)*c;  // widen the window between the read and the write
    *c = seen + 1.0;
  }
}

__global__ void add_atomic(double* counter, i64 n) {
  const i64 stride = (i64)blockDim.x * gridDim.x;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) atomicAdd(counter, 1.0);
}
