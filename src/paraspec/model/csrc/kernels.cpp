// The CPU kernels for one instruction set, as one extension module: decode/verify attention
// (attention.h), the W8A8 linear (w8a8.h, w8a8_loop.h) and the fp32/bf16 linear (linear.h). csrc/build.py compiles this file
// twice, with -DPARASPEC_AVX512 into paraspec.model._kernels_avx512 and with -DPARASPEC_AVX2
// into paraspec.model._kernels_avx2, both with baseline x86-64 flags.
//
// Import safety: only the code between push_options and pop_options below is compiled for the
// module's instructions (isa_*.h's `#pragma GCC target`); the module init, pybind11, torch's
// header code and the argument checks here are plain x86-64, so importing either module never
// executes an instruction the CPU may lack. Every header is included before the region, so no
// inline function of theirs is compiled for the target and shared with baseline callers (the
// entry points, attention_calls.h and linear_calls.h, and decoder.h are this file's own code,
// included after it: plain x86-64 too). Each
// entry point checks cpu_supported() (CPUID) before it calls into the region, and refuses with
// an error where the CPU lacks a feature.

// only the torch headers used (torch/extension.h would double the compile time)
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/silu.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/utils/pybind.h>  // pybind11 and its at::Tensor type caster
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

// What every copy of w8a8_loop.h provides: its tile height, how it stores activations
// (q + offset) and the inner loop for 1..8 sub-rows.
using AccFn = void (*)(const int32_t*, int64_t, const int8_t*, int64_t, int64_t, int32_t*, bool);
struct W8A8Loop {
  int rows;
  int offset;
  AccFn fn[9];
};
#include "gguf_layout.h"
// A run of sub-rows' quantised activations (gguf.h): sub-row r's step k (4 features as one
// dword) at xw[r * K4 + k]; its block b's scale dx, sums xs, xh and float row term xm at [r * B + b].
struct GgufRows {
  const int32_t* xw;
  int64_t K4;
  const float* dx;
  const int32_t* xs;
  const int32_t* xh;
  const float* xm;
  int64_t B;
  GgufRows from(int64_t r) const { return {xw + r * K4, K4, dx + r * B, xs + r * B, xh + r * B, xm + r * B, B}; }
};
// One register tile's call (gguf_loop.h): blocks [b0, b1) of a panel for the sub-rows x, their
// float sums at acc[32 * r + channel]; pf: the weight bytes to fetch meanwhile, `lines` cache lines per block.
struct GgufTile {
  const uint8_t* panel;
  int64_t b0, b1;
  GgufRows x;
  float* acc;
  const uint8_t* pf;
  int64_t lines;
};
// What every copy of gguf_loop.h provides: its tile height and, per format (gguf.h's
// GgufFormat: Q4_0, Q4_1, Q8_0, Q5_0, Q4_K, Q6_K), the loop over a panel's blocks for 1..8 rows.
using GgufFn = void (*)(const GgufTile&);
// A variant's loop for calls of several sub-rows (AMX tiles: gguf_amx.h; AVX2's wide tiles:
// gguf_wide.h): per format (nullptr: none) all `rows` sub-rows of a row block over one panel's
// x.B blocks; begin() and end() (where not nullptr) set up and release per-thread state (AMX's tile state).
struct GgufPanel {
  const uint8_t* panel;
  GgufRows x;
  int64_t rows;
  float* acc;
};
using GgufWideFn = void (*)(const GgufPanel&);
struct GgufWide {
  int64_t min_rows[2][kGgufFormats];  // per pass count P - 1 and format, sub-rows from which a row block runs on it (fewer: the kRows tiles)
  void (*begin)();
  void (*end)();
  GgufWideFn fn[2][kGgufFormats];  // per pass count P - 1
};
struct GgufLoop {
  int rows[2][kGgufLoopFormats];  // sub-rows per register tile, per pass count P - 1 and format
  GgufFn fn[2][kGgufLoopFormats][9];  // per pass count P - 1 (P = 2: even sub-row counts only)
  const GgufWide* wide = nullptr;  // calls of wide->min_rows[P - 1][format] sub-rows or more
};
constexpr int64_t kPrefetch = 8192;  // bytes ahead in the weight stream
// The GGUF loop's prefetch distance for one-row calls (decoding): on AMD CPUs a short one (each
// block's lines asked for as it starts, a few ahead) beat 8 KB ahead with the weights streamed
// from DRAM; other CPUs keep 8 KB, where it was not measured (docs/design-notes.md).
inline const int64_t kGgufPrefetch = [] {
  unsigned a, b, c, d;
  const bool amd = __get_cpuid(0, &a, &b, &c, &d) && b == 0x68747541 && d == 0x69746e65 && c == 0x444d4163;
  return amd ? int64_t{256} : kPrefetch;  // "AuthenticAMD"
}();

#pragma GCC push_options
#if defined(PARASPEC_AVX512)
#include "isa_avx512.h"
#elif defined(PARASPEC_AVX2)
#include "isa_avx2.h"
#else
#error "compile with -DPARASPEC_AVX512 or -DPARASPEC_AVX2 (csrc/build.py does)"
#endif
#include "vec.h"
#include "attention.h"
#include "w8a8.h"
#include "gguf.h"
#include "gguf_dequant.h"
#include "linear.h"
#pragma GCC pop_options
#if defined(PARASPEC_AVX512) && defined(__linux__)
#define PARASPEC_AMX 1
#include "gguf_amx.h"  // its own target region (AMX), after the module's
#endif

// ---- plain x86-64 from here on ----
namespace {

#ifdef PARASPEC_AMX
// CPUID has AMX-TILE and AMX-INT8, and Linux lets this process use the tile data state (it
// must be asked for once, ARCH_REQ_XCOMP_PERM, before the first tile instruction).
bool amx_usable() {
  static const bool ok = [] {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 25))) return false;
    constexpr long kReqXcompPerm = 0x1023, kXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtiledata) == 0;
  }();
  return ok;
}
// vnni512's loops, and AMX tiles for calls with many sub-rows
const GgufLoop kAmxLoop = [] {
  GgufLoop l = isa::vnni512::kGgufLoop;
  l.wide = &isa::amx::kGgufAmx;
  return l;
}();
#endif

bool cpu_supported() {
  static const bool ok = [] {
    __builtin_cpu_init();
    return PARASPEC_CPU_SUPPORTED();
  }();
  return ok;
}

void require_cpu() {
  TORCH_CHECK(cpu_supported(), "paraspec: this CPU lacks instructions _kernels_" PARASPEC_ISA
              " was compiled for (see its cpu_supported())");
}

struct Variant {
  const char* name;
  const W8A8Loop* loop;
  const GgufLoop* gguf;
};

// The W8A8 inner loops this CPU can run, best first.
std::vector<Variant> variants() {
  if (!cpu_supported()) return {};
#if defined(PARASPEC_AVX512)
  std::vector<Variant> v;
#ifdef PARASPEC_AMX
  if (amx_usable()) v.push_back({"amx", &isa::vnni512::kLoop, &kAmxLoop});
#endif
  v.push_back({"vnni512", &isa::vnni512::kLoop, &isa::vnni512::kGgufLoop});
  return v;
#else
  std::vector<Variant> v;
#ifdef PARASPEC_AVXVNNI
  if (__builtin_cpu_supports("avxvnni")) v.push_back({"avxvnni", &isa::avxvnni::kLoop, &isa::avxvnni::kGgufWideLoop});
#endif
  v.push_back({"avx2", &isa::avx2::kLoop, &isa::avx2::kGgufWideLoop});
  return v;
#endif
}

// The variant called `name` ("" for the best); an error naming `op` where this CPU runs none.
const Variant& variant_named(const std::string& name, const char* op) {
  static const std::vector<Variant> runnable = variants();  // CPUID and the OS do not change
  for (const Variant& v : runnable)
    if (name.empty() || name == v.name) return v;
  TORCH_CHECK(false, op, ": variant '", name, "' is not one this CPU runs");
}

std::vector<std::string> variant_names() {
  std::vector<std::string> names;
  for (const Variant& v : variants()) names.emplace_back(v.name);
  return names;
}

// the entry points (plain x86-64: argument checks around the region's kernels), then the
// one-call decoder over them
#include "attention_calls.h"
#include "linear_calls.h"
#include "decoder.h"

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.attr("ISA") = PARASPEC_ISA;
  m.attr("VERSION") = 22;  // bumped when a signature or what it accepts changes: the Python side ignores a stale build
  m.def("cpu_supported", &cpu_supported, "this CPU (CPUID, OS state saving) runs every kernel here");
  m.def("w8a8_variants", &variant_names, "the W8A8 inner loops this CPU runs, best first");
  m.def("attention", &attention, "decode / draft-verify attention (row-invariant: a fixed fp32 operation order per row and head)",
        py::arg("q"), py::arg("k"), py::arg("v"), py::arg("start"), py::arg("visible"), py::arg("scale"),
        py::arg("order") = py::none());
  m.def("rope_attention", &rope_attention, "rotary embedding of q and k, their cache write, then attention",
        py::arg("qkv"), py::arg("cos"), py::arg("sin"), py::arg("k"), py::arg("v"), py::arg("length"),
        py::arg("start"), py::arg("visible"), py::arg("scale"), py::arg("order") = py::none());
  m.def("w8a8_linear", &w8a8_linear, "per-row W8A8 linear", py::arg("x"), py::arg("packed"),
        py::arg("comp"), py::arg("w_scale"), py::arg("bias"), py::arg("n"), py::arg("passes"),
        py::arg("norm") = py::none(), py::arg("eps") = 0.0, py::arg("variant") = "");
  m.def("gguf_linear", &gguf_linear, "per-row GGUF block-quantised linear (Q4_0, Q4_1, Q8_0, Q5_0, Q4_K, Q6_K)", py::arg("x"),
        py::arg("packed"), py::arg("fmt"), py::arg("n"), py::arg("passes"), py::arg("bias") = py::none(),
        py::arg("norm") = py::none(),
        py::arg("eps") = 0.0, py::arg("variant") = "", py::arg("copy") = py::none());
  m.def("gguf_copy_used", &gguf_copy_used, "whether gguf_linear reads a Q6_K verify copy (ggml.py pack)",
        py::arg("passes"), py::arg("variant") = "");
  m.def("gguf_dequantize", &gguf_dequantize, "GGUF packed panels -> fp32/bf16 [N, K] (prompt matmuls)",
        py::arg("packed"), py::arg("fmt"), py::arg("n"), py::arg("out"));
  m.def("linear", &linear, "row-invariant fp32/bf16-weight linear, optional fused RMSNorm", py::arg("x"),
        py::arg("w"), py::arg("bias") = py::none(), py::arg("norm") = py::none(), py::arg("eps") = 0.0);
  py::class_<GgufDecoderConfig>(m, "GgufDecoderConfig", "what a GgufDecoder runs (decoder.h): set each field")
      .def(py::init<>())
      .def_readwrite("packed", &GgufDecoderConfig::packed)
      .def_readwrite("fmts", &GgufDecoderConfig::fmts)
      .def_readwrite("ns", &GgufDecoderConfig::ns)
      .def_readwrite("passes", &GgufDecoderConfig::passes)
      .def_readwrite("biases", &GgufDecoderConfig::biases)
      .def_readwrite("copies", &GgufDecoderConfig::copies)
      .def_readwrite("counts", &GgufDecoderConfig::counts)
      .def_readwrite("attn_norms", &GgufDecoderConfig::attn_norms)
      .def_readwrite("ffn_norms", &GgufDecoderConfig::ffn_norms)
      .def_readwrite("eps", &GgufDecoderConfig::eps)
      .def_readwrite("variant", &GgufDecoderConfig::variant)
      .def_readwrite("n_heads", &GgufDecoderConfig::n_heads)
      .def_readwrite("n_kv", &GgufDecoderConfig::n_kv)
      .def_readwrite("head_dim", &GgufDecoderConfig::head_dim)
      .def_readwrite("scale", &GgufDecoderConfig::scale);
  py::class_<GgufDecoder>(m, "GgufDecoder", "a decode / verify forward's layers on GGUF linears, one call (decoder.h)")
      .def(py::init<GgufDecoderConfig>(), py::arg("config"))
      .def("forward", &GgufDecoder::forward, py::call_guard<py::gil_scoped_release>(), py::arg("x"), py::arg("cos"),
           py::arg("sin"), py::arg("ks"), py::arg("vs"), py::arg("rows"), py::arg("lengths"), py::arg("starts"),
           py::arg("masks"), py::arg("orders"));
}
