// The GGUF formats the kernels run and their packed layout's sizes (gguf.h describes the layout;
// ggml.py / ggml_kquants.py write it). Plain constants, included before the ISA headers.
#pragma once
#include <cstdint>

enum GgufFormat : int { kQ4_0 = 0, kQ4_1 = 1, kQ8_0 = 2, kQ5_0 = 3, kQ4_K = 4, kQ6_K = 5 };
constexpr int kGgufFormats = 6;
// Q6_K's verify copy (gguf.h): the loops' tables have it as a seventh format
constexpr int kQ6_KU = 6, kGgufLoopFormats = 7;
// Bytes of a format's record (scales and 8 steps) and superblock header; a superblock is a
// header and 8 records (a flat format's "superblock" is just 8 records).
struct GgufLayout { int64_t scales, record, header; };
constexpr GgufLayout gguf_layout(int fmt) {
  return fmt == kQ4_1 ? GgufLayout{128, 128 + 512, 0}
       : fmt == kQ8_0 ? GgufLayout{64, 64 + 1024, 0}
       : fmt == kQ5_0 ? GgufLayout{64, 64 + 8 * 80, 0}
       : fmt == kQ4_K ? GgufLayout{64, 64 + 512, 128}
       : fmt == kQ6_K ? GgufLayout{64, 64 + 512 + 256, 64}
       : fmt == kQ6_KU ? GgufLayout{64, 64 + 1024, 64}
       : GgufLayout{64, 64 + 512, 0};
}
inline bool gguf_superblocks(int fmt) {  // K % 256 == 0
  return fmt == kQ4_K || fmt == kQ6_K || fmt == kQ6_KU;
}
// a panel's bytes: K / 32 blocks (B a multiple of 8 for the K-quants)
inline int64_t gguf_panel_bytes(int fmt, int64_t B) {
  const GgufLayout l = gguf_layout(fmt);
  return B * l.record + (B / 8) * l.header;
}

