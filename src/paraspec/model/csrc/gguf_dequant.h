// GGUF packed panels (gguf.h's layout) back to a plain [N, K] weight in fp32 or bf16, for prompt
// chunks: a prompt is compute-bound, and torch's bf16 matmul (oneDNN, AMX where the CPU has it)
// runs a 256-row chunk several times faster than the integer kernel, whose job is the
// bandwidth-bound decode rows. Values as ggml defines them, in fp32 op for op as ggml.py's
// dequantize() (the file is built with -ffp-contract=off), U the stored unsigned value:
//   Q4_0 (U - 8) * d    Q5_0 (U - 16) * d    Q8_0 q * d    Q4_1 U * d + m
//   Q4_K U * (d * sc) + -(dmin * mn)         Q6_K (d * sc) * (U - 32), sc the 16-half's
// (the K-quants' scale products are exact in fp32); bf16 output rounds that to nearest even.
namespace isa {

inline uint16_t round_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);  // finite values only (ggml's are)
}

// One 32-block of a panel (all 32 channels) into rows of out (ld K; column 32 * b), channels
// past `channels` skipped. hdr: its superblock's header (K-quants), r: its record. A step's 128
// values (4 features of each of 32 channels, channel-major: e = 4 * channel + feature) are
// computed as one array with the format fixed at compile time, so the loops vectorise; each
// channel's 4 then go to its row as one small copy.
template <int FMT, typename OUT>
void gguf_dequantize_block(const uint8_t* hdr, const uint8_t* r, int64_t b, int64_t K, int64_t channels, OUT* out) {
  constexpr bool Q8 = FMT == kQ8_0, Q41 = FMT == kQ4_1, Q5 = FMT == kQ5_0, Q4K = FMT == kQ4_K, Q6 = FMT == kQ6_K;
  constexpr float off = FMT == kQ4_0 ? 8.f : Q5 ? 16.f : Q6 ? 32.f : 0.f;  // what U is centred on
  alignas(64) float hs[64], dc[32], mc[32], dc2[32];  // the 32 channels' scales (dc2: Q6_K's second half)
  alignas(64) float d[128], m[128], d2[128], u[128], v[128];
  alignas(64) uint16_t vb[128];
  // the block's channel scales: fp16 -> fp32 is exact, so vector or scalar conversion agree
  const uint16_t* h = reinterpret_cast<const uint16_t*>(Q4K || Q6 ? hdr : r);
  for (int i = 0; i < (Q41 || Q4K ? 64 : 32); i += 16) store(hs + i, load_half(h + i));
  for (int c = 0; c < 32; ++c) {
    if constexpr (Q4K) {                           // as ggml_kquants.unpack_k: d * sc, -(dmin * mn)
      dc[c] = hs[c] * static_cast<float>(r[c]);
      mc[c] = -(hs[32 + c] * static_cast<float>(r[32 + c]));
    } else if constexpr (Q6) {                     // the superblock's d times each 16-half's int8 scale
      dc[c] = hs[c] * static_cast<float>(static_cast<int8_t>(r[c]));
      dc2[c] = hs[c] * static_cast<float>(static_cast<int8_t>(r[32 + c]));
    } else {
      dc[c] = hs[c];
      mc[c] = Q41 ? hs[32 + c] : 0.f;
    }
  }
  for (int e = 0; e < 128; ++e) {
    d[e] = dc[e >> 2];
    m[e] = mc[e >> 2];
    d2[e] = Q6 ? dc2[e >> 2] : 0.f;
  }
  const uint8_t* s = r + gguf_layout(FMT).scales;  // the steps
  for (int k = 0; k < 8; ++k) {                    // step k: features 4k..4k+3 of the block
    if constexpr (Q8) {
      const int8_t* q = reinterpret_cast<const int8_t*>(s + 128 * k);
      for (int e = 0; e < 128; ++e) u[e] = static_cast<float>(q[e]);
    } else {
      // nibbles: byte i holds U[i] (channels 0-15) low and U[64 + i] (16-31) high; Q5_0 then a
      // 16-byte plane of U's bit 4 (bit i of the plane: U[i]); Q6_K after all 8 steps' nibbles,
      // 8 x 32 bytes of bits 4-5 (bits 2j, 2j + 1 of byte i: U[32 j + i])
      const uint8_t* q = s + (Q5 ? 80 : 64) * k;
      alignas(64) uint8_t U[128];
      for (int e = 0; e < 64; ++e) {
        U[e] = q[e] & 15;
        U[e + 64] = q[e] >> 4;
      }
      if constexpr (Q5)  // a plane byte's 8 bits to 8 bytes of 0 / 16, in 64-bit words (no per-lane shifts)
        for (int j = 0; j < 16; ++j) {
          const uint64_t t = (q[64 + j] * 0x0101010101010101ull) & 0x8040201008040201ull;  // byte t: bit t
          const uint64_t hi = ((t + 0x7F7F7F7F7F7F7F7Full) & 0x8080808080808080ull) >> 3;  // nonzero -> 16
          uint64_t w;
          std::memcpy(&w, U + 8 * j, 8);
          w |= hi;
          std::memcpy(U + 8 * j, &w, 8);
        }
      if constexpr (Q6) {
        const uint8_t* hb = s + 512 + 32 * k;
        for (int j = 0; j < 4; ++j)  // one shift per j: vectorises
          for (int i = 0; i < 32; ++i) U[32 * j + i] |= ((hb[i] >> (2 * j)) & 3) << 4;
      }
      for (int e = 0; e < 128; ++e) u[e] = static_cast<float>(U[e]);
    }
    if constexpr (Q41 || Q4K) {
      for (int e = 0; e < 128; ++e) v[e] = u[e] * d[e] + m[e];  // no FMA: -ffp-contract=off
    } else if constexpr (Q6) {
      const float* sc = k < 4 ? d : d2;               // steps 0-3: features 0-15, the first 16-half
      for (int e = 0; e < 128; ++e) v[e] = sc[e] * (u[e] - off);
    } else {
      for (int e = 0; e < 128; ++e) v[e] = (u[e] - off) * d[e];
    }
    const void* src = v;
    if constexpr (!std::is_same_v<OUT, float>) {
      for (int e = 0; e < 128; ++e) vb[e] = round_bf16(v[e]);
      src = vb;
    }
    OUT* o = out + 32 * b + 4 * k;
    for (int64_t c = 0; c < channels; ++c)
      std::memcpy(o + c * K, static_cast<const OUT*>(src) + 4 * c, 4 * sizeof(OUT));
  }
}

// Panels [p0, p1) of a packed weight with B = K / 32 blocks into rows of out (ld K), channels
// past N skipped. OUT: float or uint16_t (bf16 bits).
template <int FMT, typename OUT>
void gguf_dequantize_format(const uint8_t* wp, int64_t p0, int64_t p1, int64_t K, int64_t N, OUT* out) {
  constexpr GgufLayout LAY = gguf_layout(FMT);
  const int64_t B = K / 32, pb = gguf_panel_bytes(FMT, B);
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t channels = std::min<int64_t>(32, N - p * 32);
    for (int64_t b = 0; b < B; ++b) {  // a superblock: its header, then 8 records (flat formats: no header)
      const uint8_t* hdr = wp + p * pb + (b >> 3) * (LAY.header + 8 * LAY.record);
      gguf_dequantize_block<FMT>(hdr, hdr + LAY.header + (b & 7) * LAY.record, b, K, channels, out + p * 32 * K);
    }
  }
}

template <typename OUT>
void gguf_dequantize_panels(int fmt, const uint8_t* wp, int64_t p0, int64_t p1, int64_t K, int64_t N, OUT* out) {
  switch (fmt) {
    case kQ4_0: return gguf_dequantize_format<kQ4_0>(wp, p0, p1, K, N, out);
    case kQ4_1: return gguf_dequantize_format<kQ4_1>(wp, p0, p1, K, N, out);
    case kQ8_0: return gguf_dequantize_format<kQ8_0>(wp, p0, p1, K, N, out);
    case kQ5_0: return gguf_dequantize_format<kQ5_0>(wp, p0, p1, K, N, out);
    case kQ4_K: return gguf_dequantize_format<kQ4_K>(wp, p0, p1, K, N, out);
    case kQ6_K: return gguf_dequantize_format<kQ6_K>(wp, p0, p1, K, N, out);
  }
}

}  // namespace isa
