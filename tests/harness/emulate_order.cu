// Kernels for tests/test_gpu_emulation_limits.py: the order the emulation runs the threads of a block in, and
// a kernel that counts on index order (each thread reads the value its left neighbour wrote), which a GPU
// does not promise and the emulation must not hide.
typedef long long i64;

__global__ void record_order(int* order, int* counter) {
  const int k = counter[blockIdx.x]++;  // one host thread runs a block's threads: no race
  order[blockIdx.x * blockDim.x + k] = (int)threadIdx.x;
}

__global__ void prefix_by_neighbour(int* x) {  // wrong on a GPU: thread t reads thread t-1's write
  const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  if (threadIdx.x > 0) x[t] += x[t - 1];
}
