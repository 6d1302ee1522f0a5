// emulate/cuda_host.h - the CUDA execution model on the host, so that sample.cu's device code (the
// VDB_DEVICE_COMPILE branch of every header) runs on a machine without a GPU (VDBFLOW_CUDA_EMULATE=1).
//
// Included before sample.cu by the table vdbflow/devices/cuda_build.py generates, and compiled by the host's
// C++ compiler into a shared library that vdbflow/devices/emulation.py loads in place of a CUDA module:
//   - the execution-space keywords (__global__, __device__, __host__, __forceinline__, __launch_bounds__)
//     expand to host C++; threadIdx, blockIdx, blockDim and gridDim are per-host-thread variables;
//   - the intrinsics the kernels call (__popc, __popcll, __ffsll, __fns, __fmul_rn, __dmul_rn, __longlong_as_double) and atomicAdd on double (a real
//     compare-and-swap loop: blocks run on several host threads, so a missing atomic loses updates here
//     as it would on a GPU);
//   - launch<F>(grid, block, args, host_threads): a kernel launch.  args is CUDA's kernelParams array (one
//     pointer to each argument); blocks are handed out to host_threads threads, the threads of one block
//     run one after another, in an order that is not the index order (thread_order; such kernels use no
//     __syncthreads and no shared memory);
//   - launch_synchronized<F>(...): the launch of a kernel that synchronizes its threads
//     (cuda_build.BLOCK_SYNCHRONIZED): every thread of a block is a host thread, __syncthreads() a barrier
//     among them, blocks run one after another, and __shared__ is a static variable of the kernel (one block
//     at a time holds it, as one block holds its shared memory on a GPU); atomicAdd on 32- and 64-bit
//     unsigned counters;
//   - faults: a launch runs under a SIGSEGV handler (FaultGuard) that turns a fault inside a kernel (the
//     emulated device memory's guard pages: an out-of-bounds read or write; a null pointer) into an error the
//     launch returns (address, block, thread) instead of a crash; the other threads of the launch stop;
//   - signature<F>(): a letter a scalar parameter, 'p' and the pointee's letter a pointer, so the Python side
//     packs each argument as the kernel reads it and refuses a scalar of another type or an array of another
//     dtype (what CuPy would pass through silently).
// Floating point: the host compiler does not contract a*b+c into an FMA (-ffp-contract=off) and keeps
// subnormals, where nvcc contracts by default: see docs/gpu.md for what that means for comparisons.
#pragma once
#include <math.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <csetjmp>
#include <csignal>
#include <ucontext.h>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#define VDBFLOW_CUDA_EMULATE 1
// the device's branches of the headers (grid.h's __popcll and __ffsll, advect.h's __dmul_rn) run here as
// on a GPU: what nvcc and NVRTC see as sm_90
#define __CUDA_ARCH__ 900
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __shared__ static

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};
extern thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;

// products rounded on their own, never fused into an add (CUDA's promise for __fmul_rn): a volatile hides the
// product from the compiler, so that even a build that contracts (VDBFLOW_CUDA_EMULATE_FMA=1,
// -ffp-contract=fast) cannot fuse it once inlined
inline float __fmul_rn(float a, float b) {
  volatile float p = a * b;
  return p;
}
inline double __dmul_rn(double a, double b) {
  volatile double p = a * b;
  return p;
}
inline double __longlong_as_double(long long v) {
  double d;
  std::memcpy(&d, &v, sizeof d);
  return d;
}
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __popcll(unsigned long long v) { return __builtin_popcountll(v); }
inline int __ffsll(long long v) { return __builtin_ffsll(v); }

// Position of the offset-th set bit of mask counted from bit base (upwards for offset > 0, downwards for
// offset < 0; offset 0: base itself if set), 0xFFFFFFFF if there is none: CUDA's __fns.
inline unsigned __fns(unsigned mask, unsigned base, int offset) {
  if (base > 31) return 0xFFFFFFFFu;
  if (offset == 0) return (mask >> base) & 1u ? base : 0xFFFFFFFFu;
  const int step = offset > 0 ? 1 : -1;
  int left = offset > 0 ? offset : -offset;
  for (int b = (int)base; b >= 0 && b < 32; b += step)
    if ((mask >> b) & 1u && --left == 0) return (unsigned)b;
  return 0xFFFFFFFFu;
}

inline double atomicAdd(double* address, double value) {
  unsigned long long* word = reinterpret_cast<unsigned long long*>(address);
  unsigned long long old = __atomic_load_n(word, __ATOMIC_RELAXED), next;
  double sum;
  do {
    double before;
    std::memcpy(&before, &old, sizeof before);
    sum = before + value;
    std::memcpy(&next, &sum, sizeof next);
  } while (!__atomic_compare_exchange_n(word, &old, next, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  double before;
  std::memcpy(&before, &old, sizeof before);
  return before;
}

inline unsigned atomicAdd(unsigned* address, unsigned value) {
  return __atomic_fetch_add(address, value, __ATOMIC_RELAXED);
}
inline unsigned long long atomicAdd(unsigned long long* address, unsigned long long value) {
  return __atomic_fetch_add(address, value, __ATOMIC_RELAXED);
}

namespace vdb_emulate {

// Where a launch notes its first fault: address, block, thread, access (0 read, 1 write, 2 not known).
struct Fault {
  std::atomic<int> happened{0};
  unsigned long long address = 0, block = 0, thread = 0, access = 2;
  void note(void* at, void* context) {
    if (happened.exchange(1) == 0) {
      address = (unsigned long long)at;
      block = blockIdx.x;
      thread = threadIdx.x;
#if defined(__x86_64__) && defined(REG_ERR)
      access = (static_cast<ucontext_t*>(context)->uc_mcontext.gregs[REG_ERR] & 2) ? 1 : 0;  // page fault: W bit
#else
      (void)context;
#endif
    }
  }
};

inline thread_local sigjmp_buf* fault_jump = nullptr;  // set while this host thread runs kernel code
inline thread_local Fault* fault_note = nullptr;
inline struct sigaction previous_action;
inline std::mutex handler_lock;
inline int launches_running = 0;

inline void on_fault(int sig, siginfo_t* info, void* context) {
  sigjmp_buf* jump = fault_jump;
  if (jump != nullptr) {
    fault_jump = nullptr;
    fault_note->note(info->si_addr, context);
    siglongjmp(*jump, 1);
  }
  sigaction(sig, &previous_action, nullptr);  // not a kernel's fault: the handler before ours takes it, at once
}

// The SIGSEGV handler installed while launches of this library run (the one before restored after the last).
struct FaultGuard {
  FaultGuard() {
    std::lock_guard<std::mutex> hold(handler_lock);
    if (launches_running++ > 0) return;
    struct sigaction mine {};
    mine.sa_sigaction = on_fault;
    mine.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&mine.sa_mask);
    sigaction(SIGSEGV, &mine, &previous_action);
  }
  ~FaultGuard() {
    std::lock_guard<std::mutex> hold(handler_lock);
    if (--launches_running == 0) sigaction(SIGSEGV, &previous_action, nullptr);
  }
};

struct Stopped {};  // thrown at a barrier once a thread of the block faulted

// The threads of one block waiting for each other (C++17 has no std::barrier).
class BlockBarrier {
  std::mutex lock_;
  std::condition_variable wake_;
  unsigned threads_, waiting_ = 0;
  unsigned long long generation_ = 0;
  bool stopped_ = false;

 public:
  explicit BlockBarrier(unsigned threads) : threads_(threads) {}
  void wait() {
    std::unique_lock<std::mutex> hold(lock_);
    const unsigned long long generation = generation_;
    if (stopped_) throw Stopped{};
    if (++waiting_ == threads_) {
      waiting_ = 0;
      ++generation_;
      wake_.notify_all();
    } else {
      wake_.wait(hold, [&] { return generation != generation_ || stopped_; });
      if (stopped_) throw Stopped{};
    }
  }
  void stop() {
    std::lock_guard<std::mutex> hold(lock_);
    stopped_ = true;
    wake_.notify_all();
  }
};

inline thread_local BlockBarrier* block_barrier = nullptr;

template <class T>
constexpr char letter();

// A pointer parameter: 'p' and what it points to (an arithmetic type's letter, 'P' for a pointer, 'c' for
// char: bytes of any type, 'v' for a struct such as KernelAbi).
template <class U>
constexpr char pointee() {
  using V = std::remove_cv_t<U>;
  if constexpr (std::is_pointer_v<V>) return 'P';
  else if constexpr (std::is_same_v<V, char>) return 'c';
  else if constexpr (std::is_arithmetic_v<V>) return letter<V>();
  else return 'v';
}

template <class T>
constexpr char letter() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_pointer_v<U>) return 'p';
  else if constexpr (std::is_same_v<U, double>) return 'd';
  else if constexpr (std::is_same_v<U, float>) return 'f';
  else if constexpr (std::is_same_v<U, bool>) return '?';
  else if constexpr (std::is_integral_v<U>) {
    constexpr char sizes_signed[] = {'b', 'h', 0, 'i', 0, 0, 0, 'q'};
    constexpr char sizes_unsigned[] = {'B', 'H', 0, 'I', 0, 0, 0, 'Q'};
    return std::is_signed_v<U> ? sizes_signed[sizeof(U) - 1] : sizes_unsigned[sizeof(U) - 1];
  } else
    static_assert(sizeof(U) == 0, "a kernel parameter of a type the emulation cannot pack");
}

template <class F>
struct Params;
template <class... A>
struct Params<void (*)(A...)> {
  template <class T>
  static std::string token_of() {
    using U = std::remove_cv_t<T>;
    if constexpr (std::is_pointer_v<U>) return std::string{'p', pointee<std::remove_pointer_t<U>>()};
    else return std::string{letter<U>()};
  }
  static std::string signature() { return (std::string() + ... + token_of<A>()); }
  template <size_t... I>
  static void call(void (*f)(A...), void** args, std::index_sequence<I...>) {
    f(*static_cast<std::remove_cv_t<std::remove_reference_t<A>>*>(args[I])...);
  }
  static void call(void (*f)(A...), void** args) { call(f, args, std::index_sequence_for<A...>()); }
};

template <auto F>
const char* signature() {
  static const std::string s = Params<decltype(F)>::signature();
  return s.c_str();
}

// The k-th thread of block b to run: no block runs its threads in index order, so that code counting on it
// (thread 0 first, a neighbour's write already made) shows: even blocks run them last to first, odd blocks
// odd threads first, then even ones.
inline unsigned thread_order(unsigned b, unsigned k, unsigned block) {
  if (b % 2 == 0) return block - 1 - k;
  const unsigned odd = block / 2;  // threads 1, 3, 5, ...
  return k < odd ? 2 * k + 1 : 2 * (k - odd);
}

// One launch: blocks taken in turn by host_threads threads (the calling thread among them), the threads of a
// block one after another in thread_order.
template <auto F>
void launch_blocks(unsigned grid, unsigned block, void** args, int host_threads, Fault* fault) {
  std::atomic<unsigned> next{0};
  auto worker = [&]() {
    blockDim = dim3{block, 1, 1};
    gridDim = dim3{grid, 1, 1};
    sigjmp_buf jump;
    if (sigsetjmp(jump, 1) != 0) {  // a fault in this thread's kernel code: no further blocks
      next = grid;
      return;
    }
    fault_note = fault;
    fault_jump = &jump;
    for (unsigned b = next++; b < grid; b = next++) {
      blockIdx = dim3{b, 0, 0};
      for (unsigned k = 0; k < block; ++k) {
        threadIdx = dim3{thread_order(b, k, block), 0, 0};
        Params<decltype(F)>::call(F, args);
      }
      if (fault->happened) break;
    }
    fault_jump = nullptr;
  };
  const int extra = host_threads > 1 ? (int)std::min<unsigned>(host_threads, grid) - 1 : 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < extra; ++t) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
}

// One launch of a kernel that synchronizes its threads: `block` host threads, each the same thread of every
// block in turn, a barrier at each __syncthreads() and at the end of each block.
template <auto F>
void launch_synchronized_blocks(unsigned grid, unsigned block, void** args, Fault* fault) {
  BlockBarrier barrier(block);
  auto worker = [&](unsigned t) {
    block_barrier = &barrier;
    blockDim = dim3{block, 1, 1};
    gridDim = dim3{grid, 1, 1};
    threadIdx = dim3{t, 0, 0};
    sigjmp_buf jump;
    if (sigsetjmp(jump, 1) != 0) {  // a fault: the block's other threads stop at their next barrier
      barrier.stop();
      block_barrier = nullptr;
      return;
    }
    fault_note = fault;
    fault_jump = &jump;
    try {
      for (unsigned b = 0; b < grid; ++b) {
        blockIdx = dim3{b, 0, 0};
        Params<decltype(F)>::call(F, args);
        barrier.wait();
      }
    } catch (const Stopped&) {
    }
    fault_jump = nullptr;
    block_barrier = nullptr;
  };
  std::vector<std::thread> threads;
  for (unsigned t = 1; t < block; ++t) threads.emplace_back(worker, t);
  worker(0);
  for (auto& t : threads) t.join();
}

// the calling thread's last launch: faulted, address, block, thread, access (vdbflow_emulate_fault)
inline thread_local unsigned long long last_fault[5] = {0, 0, 0, 0, 0};

inline void note_launch(const Fault& fault) {
  const unsigned long long noted[5] = {(unsigned long long)fault.happened.load(), fault.address, fault.block,
                                       fault.thread, fault.access};
  std::memcpy(last_fault, noted, sizeof noted);
}

template <auto F>
void launch(unsigned grid, unsigned block, void** args, int host_threads) {
  Fault fault;
  {
    FaultGuard guard;
    launch_blocks<F>(grid, block, args, host_threads, &fault);
  }
  note_launch(fault);
}

template <auto F>
void launch_synchronized(unsigned grid, unsigned block, void** args, int) {
  Fault fault;
  {
    FaultGuard guard;
    launch_synchronized_blocks<F>(grid, block, args, &fault);
  }
  note_launch(fault);
}

struct Entry {
  const char* name;
  void (*launch)(unsigned, unsigned, void**, int);
  const char* (*signature)();
};

}  // namespace vdb_emulate

// A barrier among the threads of the block; outside launch_synchronized a kernel missing from
// cuda_build.BLOCK_SYNCHRONIZED, which would deadlock: said and stopped.
inline void __syncthreads() {
  if (!vdb_emulate::block_barrier) {
    std::fputs("vdbflow emulation: __syncthreads() in a kernel launched without launch_synchronized: list it in "
               "vdbflow/devices/cuda_build.py BLOCK_SYNCHRONIZED\n", stderr);
    std::abort();
  }
  vdb_emulate::block_barrier->wait();
}

#define VDB_EMULATE_ENTRY(NAME, ...) \
  vdb_emulate::Entry { NAME, &vdb_emulate::launch<__VA_ARGS__>, &vdb_emulate::signature<__VA_ARGS__> }
#define VDB_EMULATE_SYNCHRONIZED_ENTRY(NAME, ...) \
  vdb_emulate::Entry { NAME, &vdb_emulate::launch_synchronized<__VA_ARGS__>, &vdb_emulate::signature<__VA_ARGS__> }

// After a launch on the calling thread: 0, or 1 and its fault's address, block, thread and access (0 read,
// 1 write, 2 not known) in out[0..3].
extern "C" int vdbflow_emulate_fault(unsigned long long* out) {
  std::memcpy(out, vdb_emulate::last_fault + 1, 4 * sizeof(unsigned long long));
  return (int)vdb_emulate::last_fault[0];
}
