// The linear entry points, w8a8_linear, gguf_linear, gguf_dequantize and linear: their argument
// checks, the variant lookup and the row / thread split around the ISA region's loops (w8a8.h,
// gguf.h, gguf_dequant.h, linear.h). Plain x86-64 code, included by kernels.cpp after
// attention_calls.h (inside its namespace), as decoder.h is: headers of that one translation
// unit, kept apart so that kernels.cpp stays short.

// x [M, K] fp32 or bf16 (rows contiguous); packed [Np/32 * Kp/4 * 128] int8; comp [Np] int32
// (128 * row sums of the weights, for the VNNI variants); w_scale [Np] fp32; bias [N] fp32 or
// None; passes 1 (x in int8) or 2 (plus its int8 residual); norm: RMSNorm weight [K] fp32 to
// apply to x first (with eps), or None; variant: a w8a8_variants() name, "" for the best.
// Returns fp32 [M, N].
at::Tensor w8a8_linear(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& comp,
                       const at::Tensor& w_scale, const c10::optional<at::Tensor>& bias, int64_t N,
                       int64_t passes, const c10::optional<at::Tensor>& norm, double eps,
                       const std::string& variant) {
  require_cpu();
  const W8A8Loop* loop = variant_named(variant, "w8a8_linear").loop;
  TORCH_CHECK(x.dim() == 2 && x.stride(1) == 1, "x must be 2-D with contiguous rows");
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16, "x: fp32/bf16");
  TORCH_CHECK(passes == 1 || passes == 2, "passes must be 1 or 2");
  const int P = static_cast<int>(passes);
  const int64_t M = x.size(0), K = x.size(1), Kp = (K + 3) / 4 * 4;
  const int64_t panels = (N + 31) / 32;
  TORCH_CHECK(packed.scalar_type() == at::kChar && packed.is_contiguous() && packed.numel() == panels * 32 * Kp,
              "packed weight does not match x / N");
  TORCH_CHECK(comp.scalar_type() == at::kInt && comp.is_contiguous() && comp.numel() >= panels * 32,
              "comp: int32 [Np]");
  TORCH_CHECK(w_scale.scalar_type() == at::kFloat && w_scale.is_contiguous() && w_scale.numel() >= panels * 32,
              "w_scale: fp32 [Np]");
  TORCH_CHECK(!bias.has_value() || (bias->scalar_type() == at::kFloat && bias->is_contiguous() &&
                                    bias->numel() == N), "bias: fp32 [N]");
  TORCH_CHECK(!norm.has_value() || (norm->scalar_type() == at::kFloat && norm->is_contiguous() &&
                                    norm->numel() == K), "norm: fp32 [K]");
  at::Tensor y = at::empty({M, N}, x.options().dtype(at::kFloat));
  if (M == 0) return y;

  const int64_t rows = M * P;  // sub-rows
  at::Tensor xq = at::empty({rows * Kp}, x.options().dtype(at::kByte));
  at::Tensor sx = at::empty({rows}, x.options().dtype(at::kFloat));
  uint8_t* xqp = xq.data_ptr<uint8_t>();
  float* sxp = sx.data_ptr<float>();
  const float* g = norm.has_value() ? norm->data_ptr<float>() : nullptr;
  const int64_t ldx = x.stride(0);
  const bool bf16 = x.scalar_type() == at::kBFloat16;
  const void* xp = x.data_ptr();
  // Rows quantise independently; in parallel only when there are enough of them (prefill) to
  // pay for a second fork (~0.2 us a row here, ~2 us a fork).
  at::parallel_for(0, M, M >= 32 ? 8 : M + 1, [&](int64_t m0, int64_t m1) {
    std::vector<float> v(K);
    const float e = static_cast<float>(eps);
    if (bf16)
      isa::quantize_rows(static_cast<const uint16_t*>(xp) + m0 * ldx, ldx, m1 - m0, K, Kp, P, g, e,
                         loop->offset, v.data(), xqp + m0 * P * Kp, sxp + m0 * P);
    else
      isa::quantize_rows(static_cast<const float*>(xp) + m0 * ldx, ldx, m1 - m0, K, Kp, P, g, e,
                         loop->offset, v.data(), xqp + m0 * P * Kp, sxp + m0 * P);
  });
  const int8_t* wp = packed.data_ptr<int8_t>();
  const int32_t* cp = comp.data_ptr<int32_t>();
  const float* swp = w_scale.data_ptr<float>();
  const float* bp = bias.has_value() ? bias->data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  // Output channels split across threads (contiguous weight ranges).
  at::parallel_for(0, panels, 1, [&](int64_t p0, int64_t p1) {
    std::vector<int32_t> acc(32 * std::min(rows, isa::kRowBlock));
    isa::panels(*loop, p0, p1, xqp, sxp, rows, P, Kp, wp, cp, swp, bp, yp, N, acc.data());
  });
  return y;
}

// Whether a call of `rows` sub-rows with P passes reads Q6_K's verify copy: the variant has its
// loop, the call is a few rows (one decoding row streams the smaller packed bytes) and the
// variant's wide loop (gguf_wide.h, which unpacks into L1 once per chunk) does not take it.
bool copy_reads(const GgufLoop& loop, int P, int64_t rows) {
  const GgufWide* w = loop.wide;
  return loop.fn[P - 1][kQ6_KU][1] && rows >= isa::kGgufCopyRows &&
         !(w && w->fn[P - 1][kQ6_K] && rows >= w->min_rows[P - 1][kQ6_K]);
}

// Whether gguf_linear reads a Q6_K verify copy on this variant with this many passes for some
// row count (Python makes the copy only then).
bool gguf_copy_used(int64_t passes, const std::string& variant) {
  const GgufLoop* loop = variant_named(variant, "gguf_copy_used").gguf;
  TORCH_CHECK(passes == 1 || passes == 2, "gguf_copy_used: passes must be 1 or 2");
  for (int64_t r = isa::kGgufCopyRows; r <= 64; ++r)
    if (copy_reads(*loop, static_cast<int>(passes), r)) return true;
  return false;
}

// x [M, K] fp32 or bf16 (rows contiguous, K a multiple of 32); packed: ggml.py's panel layout
// of format fmt (0 Q4_0, 1 Q4_1, 2 Q8_0, 3 Q5_0, 4 Q4_K, 5 Q6_K) for N output channels; passes 1 (x in int8 blocks) or
// 2 (plus their int8 residual); bias fp32 [N] or None; norm:
// RMSNorm weight fp32 [K] to apply to x first (with eps), or None; variant: a w8a8_variants()
// name (the GGUF loop of the same instructions), "" for the best; copy: Q6_K's verify copy
// (gguf.h; ggml.py pack(verify_copy=True)) or None, read by calls gguf_copy_used() says. Returns fp32 [M, N].
at::Tensor gguf_linear(const at::Tensor& x, const at::Tensor& packed, int64_t fmt, int64_t N, int64_t passes,
                       const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& norm, double eps,
                       const std::string& variant, const c10::optional<at::Tensor>& copy) {
  require_cpu();
  const GgufLoop* loop = variant_named(variant, "gguf_linear").gguf;
  TORCH_CHECK(fmt >= 0 && fmt < kGgufFormats, "gguf_linear: fmt must be 0-5 (Q4_0, Q4_1, Q8_0, Q5_0, Q4_K, Q6_K)");
  TORCH_CHECK(passes == 1 || passes == 2, "gguf_linear: passes must be 1 or 2");
  const int P = static_cast<int>(passes);
  TORCH_CHECK(x.dim() == 2 && x.stride(1) == 1, "x must be 2-D with contiguous rows");
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16, "x: fp32/bf16");
  const int64_t M = x.size(0), K = x.size(1), B = K / 32, panels = (N + 31) / 32;
  const int f = static_cast<int>(fmt);
  const int64_t block = gguf_superblocks(f) ? 256 : 32;
  TORCH_CHECK(K % block == 0 && K > 0, "gguf_linear: K must be a positive multiple of ", block, " for this format");
  TORCH_CHECK(packed.scalar_type() == at::kByte && packed.is_contiguous() &&
              packed.numel() == panels * gguf_panel_bytes(f, B), "packed weight does not match x / N / fmt");
  TORCH_CHECK(!bias.has_value() || (bias->scalar_type() == at::kFloat && bias->is_contiguous() &&
                                    bias->numel() == N), "bias: fp32 [N]");
  TORCH_CHECK(!norm.has_value() || (norm->scalar_type() == at::kFloat && norm->is_contiguous() &&
                                    norm->numel() == K), "norm: fp32 [K]");
  at::Tensor y = at::empty({M, N}, x.options().dtype(at::kFloat));
  if (M == 0 || N == 0) return y;
  const int64_t rows = M * P;  // sub-rows
  at::Tensor xq = at::empty({(rows + 15) * K}, x.options().dtype(at::kChar));  // AMX loads 16 rows at a time
  at::Tensor dx = at::empty({rows * B}, x.options().dtype(at::kFloat));
  at::Tensor xs = at::empty({2, rows * B}, x.options().dtype(at::kInt));  // block sums, first-half sums
  int8_t* xqp = xq.data_ptr<int8_t>();
  float* dxp = dx.data_ptr<float>();
  int32_t* xsp = xs.data_ptr<int32_t>();
  int32_t* xhp = xsp + rows * B;
  const float* g = norm.has_value() ? norm->data_ptr<float>() : nullptr;
  const int64_t ldx = x.stride(0);
  const bool bf16 = x.scalar_type() == at::kBFloat16;
  const void* xp = x.data_ptr();
  at::parallel_for(0, M, M >= 32 ? 8 : M + 1, [&](int64_t m0, int64_t m1) {  // as w8a8_linear
    std::vector<float> v(K);
    const float e = static_cast<float>(eps);
    if (bf16)
      isa::gguf_quantize_rows(static_cast<const uint16_t*>(xp) + m0 * ldx, ldx, m1 - m0, K, P, g, e, v.data(),
                              xqp + m0 * P * K, dxp + m0 * P * B, xsp + m0 * P * B, xhp + m0 * P * B);
    else
      isa::gguf_quantize_rows(static_cast<const float*>(xp) + m0 * ldx, ldx, m1 - m0, K, P, g, e, v.data(),
                              xqp + m0 * P * K, dxp + m0 * P * B, xsp + m0 * P * B, xhp + m0 * P * B);
  });
  // dx * float(xs), the float step's row term, once per call (not per tile and panel); P = 2:
  // at the row's second sub-row, dx1 * float(256 xs_0 + xs_1) (gguf.h)
  std::vector<float> xm(rows * B);
  for (int64_t i = 0; i < rows * B; ++i) {
    const int32_t x = P == 2 && i / B % 2 ? 256 * xsp[i - B] + xsp[i] : xsp[i];
    xm[i] = dxp[i] * static_cast<float>(x);
  }
  const uint8_t* wp = packed.data_ptr<uint8_t>();
  int fw = f;  // the format the loop reads
  if (copy.has_value() && f == kQ6_K && copy_reads(*loop, P, rows)) {
    TORCH_CHECK(copy->scalar_type() == at::kByte && copy->is_contiguous() &&
                copy->numel() == panels * gguf_panel_bytes(kQ6_KU, B), "copy does not match x / N (Q6_K)");
    wp = copy->data_ptr<uint8_t>();
    fw = kQ6_KU;
  }
  const float* bp = bias.has_value() ? bias->data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  const GgufRows xr{reinterpret_cast<const int32_t*>(xqp), K / 4, dxp, xsp, xhp, xm.data(), B};
  const isa::GgufLinear call{fw, P, rows, N, xr, wp, bp, yp};
  at::parallel_for(0, panels, 1, [&](int64_t p0, int64_t p1) {  // contiguous weight ranges
    std::vector<float> acc(32 * std::min(rows, isa::kGgufRowBlock));
    isa::gguf_panels(*loop, call, p0, p1, acc.data());
  });
  return y;
}

// packed: ggml.py's panel layout of format fmt for an [N, K] weight; out: a contiguous fp32 or
// bf16 [N, K] tensor the values are written to (gguf_dequant.h), for prompt chunks' matmuls.
void gguf_dequantize(const at::Tensor& packed, int64_t fmt, int64_t N, at::Tensor& out) {
  require_cpu();
  TORCH_CHECK(fmt >= 0 && fmt < kGgufFormats, "gguf_dequantize: fmt must be 0-5 (Q4_0, Q4_1, Q8_0, Q5_0, Q4_K, Q6_K)");
  TORCH_CHECK(out.dim() == 2 && out.size(0) == N && out.is_contiguous() &&
              (out.scalar_type() == at::kFloat || out.scalar_type() == at::kBFloat16),
              "gguf_dequantize: out must be a contiguous fp32 or bf16 [N, K]");
  const int64_t K = out.size(1), B = K / 32, panels = (N + 31) / 32;
  const int f = static_cast<int>(fmt);
  const int64_t block = gguf_superblocks(f) ? 256 : 32;
  TORCH_CHECK(K % block == 0 && K > 0, "gguf_dequantize: K must be a positive multiple of ", block, " for this format");
  TORCH_CHECK(packed.scalar_type() == at::kByte && packed.is_contiguous() &&
              packed.numel() == panels * gguf_panel_bytes(f, B), "packed weight does not match out / fmt");
  const uint8_t* wp = packed.data_ptr<uint8_t>();
  const bool bf16 = out.scalar_type() == at::kBFloat16;
  void* op = out.data_ptr();
  at::parallel_for(0, panels, 1, [&](int64_t p0, int64_t p1) {
    if (bf16) isa::gguf_dequantize_panels(f, wp, p0, p1, K, N, static_cast<uint16_t*>(op));
    else isa::gguf_dequantize_panels(f, wp, p0, p1, K, N, static_cast<float*>(op));
  });
}

// x [M, K] fp32 (rows contiguous); w [N, K] fp32 or bf16, contiguous (the model's tensor as
// stored); bias fp32 [N] or None; norm: RMSNorm weight fp32 [K] to apply to each row first (with
// eps), or None. Returns fp32 [M, N]: y = x' @ w.T (+ bias), each output one fixed dot product
// (linear.h), so a row's bits depend on that row alone.
at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const c10::optional<at::Tensor>& bias,
                  const c10::optional<at::Tensor>& norm, double eps) {
  require_cpu();
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.stride(1) == 1,
              "linear: x must be fp32 [M, K] with contiguous rows");
  TORCH_CHECK(w.dim() == 2 && (w.scalar_type() == at::kFloat || w.scalar_type() == at::kBFloat16) &&
              w.is_contiguous(), "linear: w must be a contiguous fp32 or bf16 [N, K]");
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  TORCH_CHECK(w.size(1) == K, "linear: x has ", K, " features, w ", w.size(1));
  TORCH_CHECK(!bias.has_value() || (bias->scalar_type() == at::kFloat && bias->is_contiguous() &&
                                    bias->numel() == N), "linear: bias must be fp32 [N]");
  TORCH_CHECK(!norm.has_value() || (norm->scalar_type() == at::kFloat && norm->is_contiguous() &&
                                    norm->numel() == K), "linear: norm must be fp32 [K]");
  at::Tensor y = at::empty({M, N}, x.options());
  if (M == 0 || N == 0) return y;
  const float* xp = x.data_ptr<float>();
  int64_t ldx = M > 1 ? x.stride(0) : K;
  at::Tensor xn;
  if (norm.has_value()) {  // the normalised rows, once for every channel
    xn = at::empty({M, K}, x.options());
    const float* g = norm->data_ptr<float>();
    float* xnp = xn.data_ptr<float>();
    const float e = static_cast<float>(eps);
    at::parallel_for(0, M, M >= 32 ? 8 : M + 1, [&](int64_t m0, int64_t m1) {
      isa::rms_norm_rows(xp + m0 * ldx, ldx, m1 - m0, K, g, e, xnp + m0 * K, K);
    });
    xp = xnp, ldx = K;
  }
  const float* bp = bias.has_value() ? bias->data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  const bool bf16 = w.scalar_type() == at::kBFloat16;
  const void* wp = w.data_ptr();
  // Output channels split across threads in contiguous ranges of whole blocks.
  constexpr int64_t C = isa::kLinCols;
  at::parallel_for(0, (N + C - 1) / C, 1, [&](int64_t b0, int64_t b1) {
    const int64_t n0 = b0 * C, n1 = std::min(b1 * C, N);
    std::vector<float> acc(isa::linear_acc_floats(M) + 16);  // the row tiles' accumulators
    float* ap = acc.data() + (-reinterpret_cast<uintptr_t>(acc.data()) / 4 & 15);  // 64-byte aligned
    if (bf16) {
      std::vector<float> wf(M > isa::kLinRows ? C * K : 0);  // a block's weights widened, for row tiles after the first
      isa::linear_channels(xp, ldx, M, static_cast<const uint16_t*>(wp), K, bp, yp, N, n0, n1, ap, wf.data());
    } else {
      isa::linear_channels(xp, ldx, M, static_cast<const float*>(wp), K, bp, yp, N, n0, n1, ap, nullptr);
    }
  });
  return y;
}
