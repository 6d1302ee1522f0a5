// A test-only driver of the sampling headers, built with the undefined-behaviour sanitizer by
// tests/test_kernels_sanitized.py.  It reads a grid's kernel arrays from raw files, places the value
// array at a chosen byte misalignment (as a memory-mapped .nvdb file does), samples the points and
// prints values and Jacobians, one point per line.  The grid reaches the sampler as the kernels' one
// argument record (vdbflow/abi.h KernelAbi), as in the CPU extension and the CUDA entry points.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "vdbflow/abi.h"
#include "vdbflow/schemes.h"

using namespace vdbflow;

static std::vector<char> slurp(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) { std::perror(path.c_str()); std::exit(3); }
  std::fseek(f, 0, SEEK_END);
  const long n = std::ftell(f);
  std::fseek(f, 0, SEEK_SET);
  std::vector<char> out(n + 16);
  if (n && std::fread(out.data(), 1, n, f) != (size_t)n) std::exit(3);
  std::fclose(f);
  out.resize(n);
  return out;
}

template <class T>
static int run(const std::string& dir, int shift, int mode, int C, int index_layout, int world) {
  KernelAbi abi;
  std::memset(&abi, 0, sizeof(abi));
  std::vector<char> tables[LEVEL_COUNT];
  for (int l = 0; l < LEVEL_COUNT; ++l) {
    tables[l] = slurp(dir + "/table" + std::to_string(l));
    const size_t rows = tables[l].size() / 16;
    abi.tables[l] = rows ? (const int*)tables[l].data() : nullptr;
    abi.table_masks[l] = rows ? (u32)(rows - 1) : 0;
  }
  std::vector<char> masks = slurp(dir + "/masks"), prefix = slurp(dir + "/prefix");
  std::vector<char> offsets = slurp(dir + "/leaf_offset"), tiles = slurp(dir + "/tile_values");
  std::vector<char> background = slurp(dir + "/background"), points = slurp(dir + "/points");
  std::vector<char> raw = slurp(dir + "/values");
  // the values start `shift` bytes past an aligned address
  std::vector<char> storage(raw.size() + 64);
  char* base = storage.data() + (64 - ((size_t)storage.data() % 64)) % 64;
  if (base + shift + raw.size() > storage.data() + storage.size()) return 3;
  std::memcpy(base + shift, raw.data(), raw.size());
  abi.masks = (const u64*)masks.data();
  abi.prefix = (const u16*)prefix.data();
  abi.leaf_offset = (const i64*)offsets.data();
  abi.values = base + shift;
  abi.tile_values = tiles.data();
  abi.background = background.data();
  abi.components = C;
  abi.index_layout = index_layout;
  std::vector<char> params = slurp(dir + "/transform");
  if (params.size() != sizeof(abi.xform)) return 3;
  std::memcpy(abi.xform, params.data(), sizeof(abi.xform));
  abi.mode = mode;
  abi.points_world = abi.jacobian_world = world;
  const GridView<T> g = abi_grid<T>(abi);
  const PointTransform xf = abi_transform(abi);
  const double* p = (const double*)points.data();
  const size_t n = points.size() / (3 * sizeof(double));
  typedef typename RealOf<T>::type R;
  std::vector<T> value(C);
  std::vector<R> jacobian(3 * C);
  LeafCache cache;
  for (size_t i = 0; i < n; ++i) {
    sample_point<T, 0>(g, xf, p + 3 * i, abi.mode, true, value.data(), jacobian.data(), cache);
    for (int c = 0; c < C; ++c) std::printf("%.17g ", (double)value[c]);
    for (int e = 0; e < 3 * C; ++e) std::printf("%.17g ", (double)jacobian[e]);
    std::printf("\n");
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 8) return 2;
  const std::string dir = argv[1], type = argv[2];
  const int shift = std::atoi(argv[3]), mode = std::atoi(argv[4]), C = std::atoi(argv[5]);
  const int index_layout = std::atoi(argv[6]), world = std::atoi(argv[7]);
  if (type == "f32") return run<float>(dir, shift, mode, C, index_layout, world);
  if (type == "f64") return run<double>(dir, shift, mode, C, index_layout, world);
  if (type == "i32") return run<int>(dir, shift, mode, C, index_layout, world);
  return 2;
}
