// A kernel for tests/test_gpu_emulation_limits.py whose threads synchronize, named as the emulation's
// synchronized launches are picked (cuda_build.BLOCK_SYNCHRONIZED: vdbflow::reduce_kernel<...>): thread
// `who` of block 0 reads x[i] before the block's __syncthreads, the others wait there for it.
typedef long long i64;

namespace vdbflow {
template <int N>
__global__ void reduce_kernel(const double* x, i64 i, unsigned who, double* out) {
  __shared__ double seen[1];
  if (blockIdx.x == 0 && threadIdx.x == who) seen[0] = x[i];
  __syncthreads();
  if (threadIdx.x == 0) out[blockIdx.x] = seen[0];
}
}  // namespace vdbflow
