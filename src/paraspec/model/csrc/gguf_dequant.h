// GGUF packed panels (gguf.h's layout) back to a plain [N, K] weight in fp32 or bf16, for prompt
// chunks: a prompt is compute-bound, and torch's bf16 matmul (oneDNN, AMX where the CPU has it)
// runs a 256-row chunk several times faster than the integer kernel, whose job is the
// bandwidth-bound decode rows. Values as ggml defines them, in fp32 op for op as ggml.py's
// dequantize() (the file is built with -ffp-contract=off): Q4_0 (q - 8) * d, Q4_1 q * d + m,
// Q8_0 q * d; bf16 output rounds that to nearest even.
namespace isa {

inline uint16_t round_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);  // finite values only (ggml's are)
}

// Panels [p0, p1) of a packed weight with B = K / 32 blocks into rows of out (ld K), channels
// past N skipped. OUT: float or uint16_t (bf16 bits). A step's 128 values (4 features of each of
// 32 channels, channel-major) are computed as one array, so the loops vectorise; each channel's
// 4 then go to its row as one small copy.
template <typename OUT>
void gguf_dequantize_panels(int fmt, const uint8_t* wp, int64_t p0, int64_t p1, int64_t K, int64_t N, OUT* out) {
  const int64_t B = K / 32, rec = gguf_layout(fmt).record, sb = gguf_layout(fmt).scales;  // Q4_0 / Q4_1 / Q8_0 only
  alignas(64) float d[128], m[128], v[128], hs[64];  // per step element e = 4 * channel + feature
  alignas(64) uint16_t vb[128];
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t channels = std::min<int64_t>(32, N - p * 32);
    for (int64_t b = 0; b < B; ++b) {
      const uint8_t* r = wp + (p * B + b) * rec;
      const uint16_t* h = reinterpret_cast<const uint16_t*>(r);  // d[32] fp16 (| m[32] fp16)
      for (int i = 0; i < (fmt == kQ4_1 ? 64 : 32); i += 16) store(hs + i, load_half(h + i));
      for (int c = 0; c < 32; ++c)
        for (int f = 0; f < 4; ++f) {
          d[4 * c + f] = hs[c];
          m[4 * c + f] = fmt == kQ4_1 ? hs[32 + c] : 0.f;
        }
      for (int k = 0; k < 8; ++k) {  // step k: features 4k..4k+3 of the block
        if (fmt == kQ8_0) {
          const int8_t* s = reinterpret_cast<const int8_t*>(r + sb + 128 * k);
          for (int e = 0; e < 128; ++e) v[e] = static_cast<float>(s[e]) * d[e];
        } else {
          const uint8_t* s = r + sb + 64 * k;  // low nibbles: channels 0-15, high: 16-31
          const float off = fmt == kQ4_0 ? 8.f : 0.f;
          for (int e = 0; e < 64; ++e) v[e] = (static_cast<float>(s[e] & 15) - off) * d[e];
          for (int e = 0; e < 64; ++e) v[e + 64] = (static_cast<float>(s[e] >> 4) - off) * d[e + 64];
          if (fmt == kQ4_1)
            for (int e = 0; e < 128; ++e) v[e] = v[e] + m[e];
        }
        const void* src = v;
        if constexpr (!std::is_same_v<OUT, float>) {
          for (int e = 0; e < 128; ++e) vb[e] = round_bf16(v[e]);
          src = vb;
        }
        OUT* o = out + p * 32 * K + 32 * b + 4 * k;
        for (int64_t c = 0; c < channels; ++c)
          std::memcpy(o + c * K, static_cast<const OUT*>(src) + 4 * c, 4 * sizeof(OUT));
      }
    }
  }
}

}  // namespace isa
