// The attention entry points, attention and rope_attention: their argument checks and the
// per-row slot lists around attention.h's kernels (plain x86-64 code: the kernels themselves are
// in the ISA region). Included by kernels.cpp after require_cpu (inside its namespace), like
// decoder.h: a header of that one translation unit, kept apart so that kernels.cpp stays short.

// q [n_q, n_heads, hd] fp32, heads contiguous (rows may be strided: a slice of qkv); k and v
// [n_kv, cap, hd] fp32 or both fp16 (one layer; fp16 is widened to fp32 as it is read). Every row sees the
// keys [0, start); visible [n_q, m] bool (m >= n_q) says which of the slots [start, start + m)
// row i sees: the new rows' keys are the last n_q of them (m == n_q: the usual draft tree over
// the committed cache; m > n_q: committed slots under a mask too, as ASPD's sibling branches).
// An empty tensor is a causal chain of new rows at [start, start + n_q). order [m] int64, if given:
// a row takes its masked slots by ascending order[j] (ties by slot) instead of by slot: ASPD's
// flattened order, where a block's slots are interleaved by step (the sum's order is part of its
// bits). Returns [n_q, n_heads * hd] fp32.
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t start,
                     at::Tensor visible, double scale, const c10::optional<at::Tensor>& order) {
  require_cpu();
  TORCH_CHECK(q.dim() == 3 && q.scalar_type() == at::kFloat && q.stride(2) == 1 && q.stride(1) == q.size(2),
              "q: [n_q, heads, hd] fp32 with contiguous heads");
  const bool half_kv = k.scalar_type() == at::kHalf;
  TORCH_CHECK(k.dim() == 3 && (half_kv || k.scalar_type() == at::kFloat) && k.is_contiguous(),
              "k: [kv, cap, hd] fp32 or fp16");
  TORCH_CHECK(v.dim() == 3 && v.scalar_type() == k.scalar_type() && v.is_contiguous(), "v: [kv, cap, hd], k's dtype");
  const int64_t n_q = q.size(0), n_heads = q.size(1), hd = q.size(2), q_ld = q.stride(0);
  const int64_t n_kv = k.size(0), cap = k.size(1);
  TORCH_CHECK(k.size(2) == hd && v.size(2) == hd && v.size(1) == cap && v.size(0) == n_kv && n_kv > 0 &&
              n_heads % n_kv == 0, "shapes");
  const bool causal = visible.numel() == 0;
  const int64_t m = causal ? n_q : visible.size(1);
  if (!causal) {
    TORCH_CHECK(visible.scalar_type() == at::kBool && visible.dim() == 2 && visible.size(0) == n_q &&
                visible.size(1) >= n_q, "visible: [n_q, m >= n_q] bool");
    visible = visible.contiguous();
  }
  TORCH_CHECK(start >= 0 && start + m <= cap, "the new rows must fit in the cache");
  const int64_t group = n_heads / n_kv;
  // per row: the masked slots it sees, in slot order (every row sees [0, start))
  std::vector<std::vector<int64_t>> extra(n_q);
  const bool* vis = causal ? nullptr : visible.data_ptr<bool>();
  for (int64_t i = 0; i < n_q; ++i)
    for (int64_t j = 0; j < m; ++j)
      if (causal ? j <= i : vis[i * m + j]) extra[i].push_back(start + j);
  if (order && order->numel()) {
    TORCH_CHECK(order->scalar_type() == at::kLong && order->numel() == m, "order: [m] int64");
    const at::Tensor o = order->contiguous();
    const int64_t* rank = o.data_ptr<int64_t>();
    const auto before = [&](int64_t a, int64_t b) { return rank[a - start] < rank[b - start]; };
    for (auto& e : extra)
      if (!std::is_sorted(e.begin(), e.end(), before)) std::stable_sort(e.begin(), e.end(), before);
  }

  auto out = at::empty({n_q, n_heads * hd}, q.options());
  const float* qp = q.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const float sc = static_cast<float>(scale);
  // Work items: (row block, kv head). A block walks the committed keys once for all its rows,
  // so fewer, larger blocks move fewer bytes (one row at 1000 keys reads 2.3 MB a layer); the
  // block count is the smallest that gives the threads the least rows each (items go to
  // threads in equal contiguous runs). Only the speed depends on the blocking, never the bits.
  const int64_t threads = std::max<int64_t>(1, at::get_num_threads());
  int64_t blocks = 1, best = INT64_MAX;
  for (int64_t b = 1; b <= n_q; ++b) {
    const int64_t span = (b * n_kv + threads - 1) / threads * ((n_q + b - 1) / b);  // rows x kv heads a thread does
    if (span < best) best = span, blocks = b;
  }
  const int64_t rows = (n_q + blocks - 1) / blocks;   // per block
  blocks = (n_q + rows - 1) / rows;
  const int64_t ld = start + m + 16;                  // scratch per (row, head): its scores
  const auto run = [&](const auto* kp, const auto* vp) {
    at::parallel_for(0, blocks * n_kv, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> s(rows * group * ld);
      std::vector<float> sum(rows * group * (hd + 1));
      std::vector<isa::Keys> keys(rows);
      for (int64_t w = begin; w < end; ++w) {
        const int64_t i0 = w / n_kv * rows, kv = w % n_kv, nr = std::min(rows, n_q - i0);
        for (int64_t r = 0; r < nr; ++r)
          keys[r] = {start, extra[i0 + r].data(), static_cast<int64_t>(extra[i0 + r].size())};
        const int64_t h0 = kv * group;
        isa::attend_block(qp + i0 * q_ld + h0 * hd, q_ld, nr, group, kp + kv * cap * hd,
                          vp + kv * cap * hd, hd, keys.data(), sc, s.data(), ld, sum.data(),
                          op + (i0 * n_heads + h0) * hd, n_heads * hd);
      }
    });
  };
  if (half_kv)
    run(reinterpret_cast<const isa::Half*>(k.data_ptr<at::Half>()),
        reinterpret_cast<const isa::Half*>(v.data_ptr<at::Half>()));
  else
    run(k.data_ptr<float>(), v.data_ptr<float>());
  return out;
}

// One decode/verify layer's attention from its fused projections, in one call per sequence:
// qkv [n_q, n_heads + 2 * n_kv, hd] fp32 (heads contiguous), rotary tables cos, sin [n_q, hd]
// (rotate-half layout); rotates q and k (x * cos + rotate_half(x) * sin, each product and the
// sum rounded as the torch path's apply_rope rounds them), writes k and v to the cache slots
// [length, length + n_q), then attention(q, k, v, start, visible, scale, order).
at::Tensor rope_attention(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& k,
                          const at::Tensor& v, int64_t length, int64_t start, at::Tensor visible, double scale,
                          const c10::optional<at::Tensor>& order) {
  require_cpu();
  TORCH_CHECK(qkv.dim() == 3 && qkv.scalar_type() == at::kFloat && qkv.stride(2) == 1 &&
              qkv.stride(1) == qkv.size(2), "qkv: [n_q, heads + 2 kv heads, hd] fp32 with contiguous heads");
  TORCH_CHECK(k.dim() == 3 && (k.scalar_type() == at::kFloat || k.scalar_type() == at::kHalf) && k.is_contiguous() &&
              v.is_contiguous() && v.sizes() == k.sizes() && v.scalar_type() == k.scalar_type(),
              "k, v: [kv, cap, hd] fp32 or fp16");
  const int64_t n_q = qkv.size(0), hd = qkv.size(2), n_kv = k.size(0), n_heads = qkv.size(1) - 2 * n_kv;
  TORCH_CHECK(n_heads > 0 && k.size(2) == hd && hd % 2 == 0, "shapes");
  TORCH_CHECK(cos.scalar_type() == at::kFloat && sin.scalar_type() == at::kFloat && cos.is_contiguous() &&
              sin.is_contiguous() && cos.numel() == n_q * hd && sin.numel() == n_q * hd, "cos, sin: [n_q, hd] fp32");
  TORCH_CHECK(length >= 0 && length + n_q <= k.size(1), "the new rows must fit in the cache");
  auto q = at::empty({n_q, n_heads, hd}, qkv.options());
  const int64_t cap = k.size(1), half = hd / 2;
  const float* x = qkv.data_ptr<float>();
  const float* c = cos.data_ptr<float>();
  const float* sn = sin.data_ptr<float>();
  float* qp = q.data_ptr<float>();
  std::vector<float> kr(hd);  // a rotated K row, before it is stored in the cache's dtype
  const auto write = [&](auto* kp, auto* vp) {
    for (int64_t i = 0; i < n_q; ++i) {
      const float* row = x + i * qkv.stride(0);
      const float* ci = c + i * hd;
      const float* si = sn + i * hd;
      for (int64_t h = 0; h < n_heads + n_kv; ++h) {  // q heads, then k heads
        const float* a = row + h * hd;
        float* o = h < n_heads ? qp + (i * n_heads + h) * hd : kr.data();
        for (int64_t d = 0; d < half; ++d) o[d] = a[d] * ci[d] + (-a[d + half]) * si[d];
        for (int64_t d = half; d < hd; ++d) o[d] = a[d] * ci[d] + a[d - half] * si[d];
        if (h >= n_heads) isa::kv_store(o, kp + ((h - n_heads) * cap + length + i) * hd, hd);
      }
      for (int64_t h = 0; h < n_kv; ++h)
        isa::kv_store(row + (n_heads + n_kv + h) * hd, vp + (h * cap + length + i) * hd, hd);
    }
  };
  if (k.scalar_type() == at::kHalf)
    write(reinterpret_cast<isa::Half*>(k.data_ptr<at::Half>()), reinterpret_cast<isa::Half*>(v.data_ptr<at::Half>()));
  else
    write(k.data_ptr<float>(), v.data_ptr<float>());
  return attention(q, k, v, start, std::move(visible), scale, order);
}
