// The decoder layers of one decode / verify forward over GGUF linears and the csrc attention, in
// one call from Python. transformer.forward's layer loop is the readable reference; this runs the
// same kernels (gguf_linear, rope_attention) and the same ATen ops (cat, add_, silu, mul_) on
// the same inputs in the same order, so its bits are that loop's. What it saves is the Python
// between them: about ten calls a layer, each a few microseconds of interpreter and argument
// parsing, which on a 30-layer 135M model added up to a sixth of a one-row step on 2 threads.
// Included by kernels.cpp after those functions (plain x86-64 code, inside its namespace).

// What a GgufDecoder runs. Per layer, four linears in the order wqkv, wo, w_gate_up, w_down, each
// of counts[j] parts (a fused weight whose parts differ in GGUF format: ggml_parts.py): per part
// its packed weight, format, output size, activation passes, bias and Q6_K verify copy (empty
// tensors: none), the parts of a linear in its output order; per layer the fp32 RMSNorm weights
// fused into wqkv and w_gate_up. variant: the kernels' (gguf_linear's); the attention's shape and scale.
struct GgufDecoderConfig {
  std::vector<at::Tensor> packed;
  std::vector<int64_t> fmts, ns, passes;
  std::vector<at::Tensor> biases, copies;
  std::vector<int64_t> counts;
  std::vector<at::Tensor> attn_norms, ffn_norms;
  double eps = 0.0;
  std::string variant;
  int64_t n_heads = 0, n_kv = 0, head_dim = 0;
  double scale = 0.0;
};

class GgufDecoder {
 public:
  explicit GgufDecoder(GgufDecoderConfig c)
      : packed_(std::move(c.packed)), fmts_(std::move(c.fmts)), ns_(std::move(c.ns)), passes_(std::move(c.passes)),
        counts_(std::move(c.counts)), attn_norms_(std::move(c.attn_norms)), ffn_norms_(std::move(c.ffn_norms)),
        eps_(c.eps), variant_(std::move(c.variant)), n_heads_(c.n_heads), n_kv_(c.n_kv), hd_(c.head_dim),
        scale_(c.scale) {
    const size_t n = attn_norms_.size();
    TORCH_CHECK(ffn_norms_.size() == n && counts_.size() == 4 * n, "GgufDecoder: four linears and two norms per layer");
    int64_t parts = 0;
    for (int64_t k : counts_) {
      TORCH_CHECK(k >= 1, "GgufDecoder: a linear has at least one part");
      firsts_.push_back(parts);
      parts += k;
    }
    const size_t p = static_cast<size_t>(parts);
    TORCH_CHECK(packed_.size() == p && fmts_.size() == p && ns_.size() == p && passes_.size() == p &&
                    c.biases.size() == p && c.copies.size() == p,
                "GgufDecoder: one packed weight, format, size, passes, bias and copy per part");
    for (const at::Tensor& b : c.biases)
      biases_.push_back(b.numel() ? c10::optional<at::Tensor>(b) : c10::nullopt);
    for (const at::Tensor& t : c.copies)
      copies_.push_back(t.numel() ? c10::optional<at::Tensor>(t) : c10::nullopt);
  }

  // x [T, dim] fp32, the residual stream (updated in place and returned); cos, sin [T, 1, hd]
  // the rows' rotary tables. Per sequence s (its rows follow the previous sequences'): its
  // cache's k and v [layers, n_kv, cap, hd], its new rows, committed length, start (SeqInput),
  // tree mask (empty: causal) and key order (None). Rows after the sequences' are padding.
  at::Tensor forward(at::Tensor x, const at::Tensor& cos, const at::Tensor& sin, const std::vector<at::Tensor>& ks,
                     const std::vector<at::Tensor>& vs, const std::vector<int64_t>& rows,
                     const std::vector<int64_t>& lengths, const std::vector<int64_t>& starts,
                     const std::vector<at::Tensor>& masks, const std::vector<c10::optional<at::Tensor>>& orders) {
    const size_t S = rows.size();
    TORCH_CHECK(ks.size() == S && vs.size() == S && lengths.size() == S && starts.size() == S && masks.size() == S &&
                    orders.size() == S, "GgufDecoder.forward: one cache, length, start, mask and order per sequence");
    TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous(), "x: contiguous fp32 [T, dim]");
    int64_t used = 0;
    for (int64_t r : rows) used += r;
    const int64_t pad = x.size(0) - used;
    TORCH_CHECK(pad >= 0, "GgufDecoder.forward: more sequence rows than x has");
    for (size_t i = 0; i < attn_norms_.size(); ++i) {
      const size_t w = 4 * i;
      at::Tensor qkv = linear(w, x, attn_norms_[i]).view({-1, n_heads_ + 2 * n_kv_, hd_});
      std::vector<at::Tensor> outs;
      int64_t r0 = 0;
      for (size_t s = 0; s < S; ++s) {
        outs.push_back(rope_attention(qkv.narrow(0, r0, rows[s]), cos.narrow(0, r0, rows[s]),
                                      sin.narrow(0, r0, rows[s]), ks[s].select(0, i), vs[s].select(0, i), lengths[s],
                                      starts[s], masks[s], scale_, orders[s]));
        r0 += rows[s];
      }
      if (pad) outs.push_back(at::zeros({pad, n_heads_ * hd_}, x.options()));
      x.add_(linear(w + 1, outs.size() == 1 ? outs[0] : at::cat(outs), c10::nullopt));
      std::vector<at::Tensor> gate_up = linear(w + 2, x, ffn_norms_[i]).chunk(2, -1);
      x.add_(linear(w + 3, at::silu(gate_up[0]).mul_(gate_up[1]), c10::nullopt));
    }
    return x;
  }

 private:
  // linear j: its parts' outputs side by side (cat copies bits: each part's are a gguf_linear's)
  at::Tensor linear(size_t j, const at::Tensor& x, const c10::optional<at::Tensor>& norm) const {
    const size_t first = static_cast<size_t>(firsts_[j]), n = static_cast<size_t>(counts_[j]);
    if (n == 1) return part(first, x, norm);
    std::vector<at::Tensor> ys;
    for (size_t p = first; p < first + n; ++p) ys.push_back(part(p, x, norm));
    return at::cat(ys, -1);
  }

  at::Tensor part(size_t p, const at::Tensor& x, const c10::optional<at::Tensor>& norm) const {
    return gguf_linear(x, packed_[p], fmts_[p], ns_[p], passes_[p], biases_[p], norm, norm ? eps_ : 0.0,
                       variant_, copies_[p]);
  }

  std::vector<at::Tensor> packed_;
  std::vector<int64_t> fmts_, ns_, passes_, counts_, firsts_;
  std::vector<c10::optional<at::Tensor>> biases_, copies_;
  std::vector<at::Tensor> attn_norms_, ffn_norms_;
  double eps_;
  std::string variant_;
  int64_t n_heads_, n_kv_, hd_;
  double scale_;
};
