// Fused CPU kernels for the element-wise hot spots of the RNNsearch family: the
// additive attention energy, the GRU gates and the softmax layer.  ctxnmt.models.kernels builds
// this file once per machine; ctxnmt.models.functional wraps each op in an autograd
// function and falls back to plain PyTorch where the build is unavailable.
//
// Why fused: done with PyTorch operations, the energy materialises (N, K, S, A)
// tensors twice per decoder step (forward and recomputed backward), and a GRU step
// is some fifteen small element-wise kernels plus their autograd bookkeeping.  Here
// each is one pass over its inputs, parallel over rows with ATen's thread pool.
//
// tanh x is evaluated as 2σ(2x) − 1 with expf, which the compiler vectorises through
// glibc's libmvec under -ffast-math (libm's tanhf does not vectorise as well).

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <tuple>

namespace {

// σ(2x); the clamp keeps expf finite (σ(±40) is 0 or 1 to float precision anyway).
inline float sigmoid2(float x) {
  x = fminf(fmaxf(x, -20.f), 20.f);
  return 1.f / (1.f + expf(-2.f * x));
}

inline float sigmoid(float x) {
  x = fminf(fmaxf(x, -40.f), 40.f);
  return 1.f / (1.f + expf(-x));
}

void check_rows(const at::Tensor& t, const char* name, int64_t width) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == at::kFloat, name, " must be a float32 CPU tensor");
  TORCH_CHECK(t.dim() == 2 && t.size(1) == width && t.stride(1) == 1, name,
              " must be (rows, ", width, ") with contiguous rows");
}

void check_contiguous(const at::Tensor& t, const char* name, int64_t dim) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == at::kFloat, name, " must be a float32 CPU tensor");
  TORCH_CHECK(t.dim() == dim && t.is_contiguous(), name, " must be a contiguous ", dim, "-d tensor");
}

// Restrict-qualified parameters (not locals) are what lets GCC vectorise these loops.
float energy_row(const float* __restrict__ key, const float* __restrict__ q, const float* __restrict__ v,
                 int64_t A) {
  float acc = 0.f;
  for (int64_t a = 0; a < A; ++a) acc += v[a] * sigmoid2(key[a] + q[a]);
  return acc;
}

void energy_backward_row(const float* __restrict__ key, const float* __restrict__ q, const float* __restrict__ v,
                         float g, float* __restrict__ gk, float* __restrict__ gq, float* __restrict__ gv,
                         int64_t A) {
  for (int64_t a = 0; a < A; ++a) {
    const float sig = sigmoid2(key[a] + q[a]);
    const float d = 4.f * g * v[a] * sig * (1.f - sig);  // g · v_a · (1 − tanh²)
    gk[a] += d;
    gq[a] += d;
    gv[a] += g * (2.f * sig - 1.f);
  }
}

template <bool SAVE>
void gru_row(const float* __restrict__ x, const float* __restrict__ u, const float* __restrict__ s, float m,
             float* __restrict__ o, float* __restrict__ sv, int64_t H) {
  for (int64_t j = 0; j < H; ++j) {
    const float r = sigmoid(x[j] + u[j]);
    const float z = sigmoid(x[H + j] + u[H + j]);
    const float c = 2.f * sigmoid2(x[2 * H + j] + r * u[2 * H + j]) - 1.f;
    const float hn = c + z * (s[j] - c);
    o[j] = s[j] + m * (hn - s[j]);
    if (SAVE) {
      sv[j] = r;
      sv[H + j] = z;
      sv[2 * H + j] = c;
      sv[3 * H + j] = u[2 * H + j];
    }
  }
}

void gru_row_backward(const float* __restrict__ go, const float* __restrict__ sv, const float* __restrict__ s,
                      float m, float* __restrict__ gx, float* __restrict__ gu, float* __restrict__ gs, int64_t H) {
  for (int64_t j = 0; j < H; ++j) {
    const float r = sv[j], z = sv[H + j], c = sv[2 * H + j], uc = sv[3 * H + j];
    const float g = m * go[j];                        // ∂h' (the new state's share)
    const float dc = g * (1.f - z) * (1.f - c * c);  // through tanh's argument
    const float dz = g * (s[j] - c) * z * (1.f - z);
    const float dr = dc * uc * r * (1.f - r);
    gx[j] = dr;
    gx[H + j] = dz;
    gx[2 * H + j] = dc;
    gu[j] = dr;
    gu[H + j] = dz;
    gu[2 * H + j] = dc * r;
    gs[j] = g * z + (1.f - m) * go[j];
  }
}

// ---- additive attention energy ---------------------------------------------------
// e[n, k, s] = Σ_a v_a tanh(keys[n, s, a] + query[n, k, a])

// With `mask` (N, S), a position whose mask is 0 (source padding, which attention masks out
// afterwards) is not computed: its energy is 0.
at::Tensor additive_energy(const at::Tensor& keys, const at::Tensor& query, const at::Tensor& v,
                           const std::optional<at::Tensor>& mask) {
  check_contiguous(keys, "keys", 3);
  check_contiguous(query, "query", 3);
  check_contiguous(v, "v", 1);
  const int64_t N = keys.size(0), S = keys.size(1), A = keys.size(2), K = query.size(1);
  TORCH_CHECK(query.size(0) == N && query.size(2) == A && v.size(0) == A, "energy: shapes do not agree");
  if (mask) {
    check_contiguous(*mask, "mask", 2);
    TORCH_CHECK(mask->size(0) == N && mask->size(1) == S, "energy: the mask's shape is not the keys' (N, S)");
  }
  at::Tensor out = at::empty({N, K, S}, keys.options());
  const float* kp = keys.data_ptr<float>();
  const float* qp = query.data_ptr<float>();
  const float* vp = v.data_ptr<float>();
  const float* mp = mask ? mask->data_ptr<float>() : nullptr;
  float* op = out.data_ptr<float>();
  float vsum = 0.f;
  for (int64_t a = 0; a < A; ++a) vsum += vp[a];
  at::parallel_for(0, N * K, 1, [&](int64_t begin, int64_t end) {
    for (int64_t nk = begin; nk < end; ++nk) {
      const int64_t n = nk / K;
      for (int64_t s = 0; s < S; ++s) {
        if (mp && mp[n * S + s] == 0.f) {
          op[nk * S + s] = 0.f;
          continue;
        }
        op[nk * S + s] = 2.f * energy_row(kp + (n * S + s) * A, qp + nk * A, vp, A) - vsum;  // vᵀ(2σ − 1)
      }
    }
  });
  return out;
}

// Adds ∂keys into grad_keys (a decoder's running sum over steps, or zeros) and returns
// (∂query, ∂v).  Positions whose incoming gradient is zero (masked source padding) are
// skipped: they contribute nothing.
std::tuple<at::Tensor, at::Tensor> additive_energy_backward(const at::Tensor& grad, const at::Tensor& keys,
                                                            const at::Tensor& query, const at::Tensor& v,
                                                            at::Tensor grad_keys) {
  check_contiguous(grad, "grad", 3);
  check_contiguous(keys, "keys", 3);
  check_contiguous(query, "query", 3);
  check_contiguous(v, "v", 1);
  check_contiguous(grad_keys, "grad_keys", 3);
  const int64_t N = keys.size(0), S = keys.size(1), A = keys.size(2), K = query.size(1);
  TORCH_CHECK(grad.size(0) == N && grad.size(1) == K && grad.size(2) == S, "energy backward: grad shape");
  TORCH_CHECK(grad_keys.sizes() == keys.sizes(), "energy backward: grad_keys shape");
  at::Tensor grad_query = at::zeros({N, K, A}, keys.options());
  const int64_t threads = at::get_num_threads();
  at::Tensor grad_v_parts = at::zeros({threads, A}, keys.options());  // one row per thread, summed below
  const float* gp = grad.data_ptr<float>();
  const float* kp = keys.data_ptr<float>();
  const float* qp = query.data_ptr<float>();
  const float* vp = v.data_ptr<float>();
  float* gkp = grad_keys.data_ptr<float>();
  float* gqp = grad_query.data_ptr<float>();
  float* gvp = grad_v_parts.data_ptr<float>();
  at::parallel_for(0, N, 1, [&](int64_t begin, int64_t end) {
    float* gv = gvp + (at::get_thread_num() % threads) * A;
    for (int64_t n = begin; n < end; ++n) {
      for (int64_t k = 0; k < K; ++k) {
        const float* q = qp + (n * K + k) * A;
        float* gq = gqp + (n * K + k) * A;
        for (int64_t s = 0; s < S; ++s) {
          const float g = gp[(n * K + k) * S + s];
          if (g == 0.f) continue;
          energy_backward_row(kp + (n * S + s) * A, q, vp, g, gkp + (n * S + s) * A, gq, gv, A);
        }
      }
    }
  });
  return {grad_query, grad_v_parts.sum(0)};
}

// ---- GRU gates ---------------------------------------------------------------------
// r = σ(x_r + h_r), z = σ(x_z + h_z), c = tanh(x_c + r ⊙ h_c), h' = c + z ⊙ (h − c),
// and where a mask is given, h' ← h + m (h' − h) (the state holds on padding).
// Rows are (rows, 3H) input and recurrent terms and (rows, H) states.  With `save`,
// the second output holds (r, z, c, h_c) per row for the backward pass.

std::tuple<at::Tensor, at::Tensor> gru_gates(const at::Tensor& xp, const at::Tensor& hp, const at::Tensor& h,
                                             const std::optional<at::Tensor>& mask, bool save) {
  const int64_t H = h.size(-1), R = h.size(0);
  check_rows(xp, "xp", 3 * H);
  check_rows(hp, "hp", 3 * H);
  check_rows(h, "h", H);
  TORCH_CHECK(xp.size(0) == R && hp.size(0) == R, "gru gates: row counts differ");
  if (mask) {
    TORCH_CHECK(mask->dim() == 1 && mask->size(0) == R && mask->scalar_type() == at::kFloat, "gru gates: mask");
  }
  at::Tensor out = at::empty({R, H}, h.options());
  at::Tensor saved = at::empty({save ? R : 0, 4 * H}, h.options());
  const float* xb = xp.data_ptr<float>();
  const float* hb = hp.data_ptr<float>();
  const float* sb = h.data_ptr<float>();
  const float* mb = mask ? mask->data_ptr<float>() : nullptr;
  const int64_t xs = xp.stride(0), hs = hp.stride(0), ss = h.stride(0), ms = mask ? mask->stride(0) : 0;
  float* ob = out.data_ptr<float>();
  float* svb = saved.data_ptr<float>();
  at::parallel_for(0, R, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float m = mb ? mb[i * ms] : 1.f;
      if (save) {
        gru_row<true>(xb + i * xs, hb + i * hs, sb + i * ss, m, ob + i * H, svb + i * 4 * H, H);
      } else {
        gru_row<false>(xb + i * xs, hb + i * hs, sb + i * ss, m, ob + i * H, nullptr, H);
      }
    }
  });
  return {out, saved};
}

// (∂xp, ∂hp, ∂h) from ∂h' and the saved (r, z, c, h_c).
std::tuple<at::Tensor, at::Tensor, at::Tensor> gru_gates_backward(const at::Tensor& grad, const at::Tensor& saved,
                                                                  const at::Tensor& h,
                                                                  const std::optional<at::Tensor>& mask) {
  const int64_t H = h.size(-1), R = h.size(0);
  check_rows(grad, "grad", H);
  check_rows(h, "h", H);
  check_contiguous(saved, "saved", 2);
  TORCH_CHECK(saved.size(0) == R && saved.size(1) == 4 * H && grad.size(0) == R, "gru gates backward: shapes");
  at::Tensor grad_xp = at::empty({R, 3 * H}, h.options());
  at::Tensor grad_hp = at::empty({R, 3 * H}, h.options());
  at::Tensor grad_h = at::empty({R, H}, h.options());
  const float* gb = grad.data_ptr<float>();
  const float* svb = saved.data_ptr<float>();
  const float* sb = h.data_ptr<float>();
  const float* mb = mask ? mask->data_ptr<float>() : nullptr;
  const int64_t gs = grad.stride(0), ss = h.stride(0), ms = mask ? mask->stride(0) : 0;
  float* gxb = grad_xp.data_ptr<float>();
  float* ghb = grad_hp.data_ptr<float>();
  float* gsb = grad_h.data_ptr<float>();
  at::parallel_for(0, R, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      gru_row_backward(gb + i * gs, svb + i * 4 * H, sb + i * ss, mb ? mb[i * ms] : 1.f, gxb + i * 3 * H,
                       ghb + i * 3 * H, gsb + i * H, H);
    }
  });
  return {grad_xp, grad_hp, grad_h};
}

// ---- the k most probable next words ------------------------------------------------
// For logits stored vocabulary-major, (V, R) = W_o tᵀ (the faster product order on CPU
// for decoding's few rows) plus the bias b (V), added here rather than by a pass of its
// own, the k largest log-probabilities of each of the R rows
// and their word ids, best first, without forming or transposing the (R, V) log-softmax:
// one pass keeps each row's k best logits, one vectorised pass sums exp(logit − max).

void insert_top(float x, int64_t v, float* vals, int64_t* ids, int64_t k) {
  int64_t j = k - 1;  // x beats vals[k − 1]: shift the smaller ones down; ties keep the earlier id first
  while (j > 0 && vals[j - 1] < x) {
    vals[j] = vals[j - 1];
    ids[j] = ids[j - 1];
    --j;
  }
  vals[j] = x;
  ids[j] = v;
}

void sum_exp_rows(const float* __restrict__ row, float b, const float* __restrict__ max, float* __restrict__ sum,
                  int64_t width) {
  for (int64_t r = 0; r < width; ++r) sum[r] += expf(row[r] + b - max[r]);
}

// The checks and outputs both top-k kernels share: the bias (V,), k in 1..V, and the R rows'
// k values and word ids, and each row's log Z, so that a caller can read any other word's
// log-probability (a length-ratio prior's </s>) from its logit without a log-softmax of the row.
std::tuple<at::Tensor, at::Tensor, at::Tensor> top_outputs(const at::Tensor& logits, const at::Tensor& bias,
                                                           int64_t R, int64_t V, int64_t k, const char* op) {
  check_contiguous(bias, "bias", 1);
  TORCH_CHECK(bias.size(0) == V, op, ": bias must be (V,)");
  TORCH_CHECK(k >= 1 && k <= V, op, ": k must be in 1..V");
  return {at::empty({R, k}, logits.options()), at::empty({R, k}, logits.options().dtype(at::kLong)),
          at::empty({R}, logits.options())};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> log_softmax_topk(const at::Tensor& logits_t, const at::Tensor& bias,
                                                                int64_t k) {
  check_contiguous(logits_t, "logits_t", 2);
  const int64_t V = logits_t.size(0), R = logits_t.size(1);
  auto [values, ids, log_zs] = top_outputs(logits_t, bias, R, V, k, "log_softmax_topk");
  float* zp = log_zs.data_ptr<float>();
  const float* bp = bias.data_ptr<float>();
  const float* lp = logits_t.data_ptr<float>();
  float* vp = values.data_ptr<float>();
  int64_t* ip = ids.data_ptr<int64_t>();
  const int64_t block = 16;  // columns per task: one cache line of each vocabulary row
  at::parallel_for(0, (R + block - 1) / block, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t r0 = b * block, width = std::min(block, R - r0);
      float* vals = vp + r0 * k;
      int64_t* top = ip + r0 * k;
      float thresholds[block], max[block], sum[block];
      for (int64_t r = 0; r < width; ++r) {
        for (int64_t j = 0; j < k; ++j) {
          vals[r * k + j] = std::numeric_limits<float>::lowest();
          top[r * k + j] = 0;
        }
        thresholds[r] = std::numeric_limits<float>::lowest();
        sum[r] = 0.f;
      }
      for (int64_t v = 0; v < V; ++v) {
        const float* row = lp + v * R + r0;
        for (int64_t r = 0; r < width; ++r) {
          const float x = row[r] + bp[v];
          if (x > thresholds[r]) {
            insert_top(x, v, vals + r * k, top + r * k, k);
            thresholds[r] = vals[r * k + k - 1];
          }
        }
      }
      for (int64_t r = 0; r < width; ++r) max[r] = vals[r * k];
      for (int64_t v = 0; v < V; ++v) sum_exp_rows(lp + v * R + r0, bp[v], max, sum, width);
      for (int64_t r = 0; r < width; ++r) {
        const float log_z = max[r] + logf(sum[r]);
        for (int64_t j = 0; j < k; ++j) vals[r * k + j] -= log_z;
        zp[r0 + r] = log_z;
      }
    }
  });
  return {values, ids, log_zs};
}

// The same for row-major logits (R, V), as an int8 product returns them: one task per row,
// whose logits are contiguous, so that they need not be transposed first (a copy of the whole
// (R, V) block, a sixth of an int8 search step's time).
std::tuple<at::Tensor, at::Tensor, at::Tensor> row_log_softmax_topk(const at::Tensor& logits, const at::Tensor& bias,
                                                                    int64_t k) {
  check_contiguous(logits, "logits", 2);
  const int64_t R = logits.size(0), V = logits.size(1);
  auto [values, ids, log_zs] = top_outputs(logits, bias, R, V, k, "row_log_softmax_topk");
  const float* bp = bias.data_ptr<float>();
  const float* lp = logits.data_ptr<float>();
  float* vp = values.data_ptr<float>();
  int64_t* ip = ids.data_ptr<int64_t>();
  float* zp = log_zs.data_ptr<float>();
  at::parallel_for(0, R, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = lp + r * V;
      float* vals = vp + r * k;
      int64_t* top = ip + r * k;
      for (int64_t j = 0; j < k; ++j) {
        vals[j] = std::numeric_limits<float>::lowest();
        top[j] = 0;
      }
      float threshold = std::numeric_limits<float>::lowest();
      for (int64_t v = 0; v < V; ++v) {
        const float x = row[v] + bp[v];
        if (x > threshold) {
          insert_top(x, v, vals, top, k);
          threshold = vals[k - 1];
        }
      }
      const float max = vals[0];
      float sum = 0.f;
      for (int64_t v = 0; v < V; ++v) sum += expf(row[v] + bp[v] - max);
      const float log_z = max + logf(sum);
      for (int64_t j = 0; j < k; ++j) vals[j] -= log_z;
      zp[r] = log_z;
    }
  });
  return {values, ids, log_zs};
}

// ---- training's softmax layer ------------------------------------------------------
// For logits stored vocabulary-major, (V, R) = W_o Tᵀ (the faster product order for
// training's chunks too) plus the bias b (V), added on reading, each column's label-smoothed cross-entropy
//   −(1 − ε) log p_target − ε/V Σ_v log p_v
// is returned, and the logits are overwritten with its gradient,
//   softmax − ((1 − ε)·onehot(target) + ε/V),
// in three passes over a block of columns (max; Σ exp and Σ logit; the gradient), where
// PyTorch would take a log-softmax, an exp, a gather and two updates of an (R, V) copy.

void max_rows(const float* __restrict__ row, float b, float* __restrict__ max, int64_t width) {
  for (int64_t r = 0; r < width; ++r) max[r] = fmaxf(max[r], row[r] + b);
}

void sum_exp_and_logit_rows(const float* __restrict__ row, float b, const float* __restrict__ max,
                            float* __restrict__ sum, float* __restrict__ total, int64_t width) {
  for (int64_t r = 0; r < width; ++r) {
    sum[r] += expf(row[r] + b - max[r]);
    total[r] += row[r] + b;
  }
}

void softmax_minus_rows(float* __restrict__ row, float b, const float* __restrict__ log_z, float smooth,
                        int64_t width) {
  for (int64_t r = 0; r < width; ++r) row[r] = expf(row[r] + b - log_z[r]) - smooth;
}

at::Tensor softmax_xent_columns(at::Tensor& logits_t, const at::Tensor& bias, const at::Tensor& target, double eps) {
  check_contiguous(logits_t, "logits_t", 2);
  const int64_t V = logits_t.size(0), R = logits_t.size(1);
  check_contiguous(bias, "bias", 1);
  TORCH_CHECK(bias.size(0) == V, "softmax_xent_columns: bias must be (V,)");
  const float* bp = bias.data_ptr<float>();
  TORCH_CHECK(target.dim() == 1 && target.size(0) == R && target.scalar_type() == at::kLong,
              "softmax_xent_columns: target must be (R,) int64");
  const at::Tensor tgt = target.contiguous();
  TORCH_CHECK(R == 0 || (tgt.min().item<int64_t>() >= 0 && tgt.max().item<int64_t>() < V),
              "softmax_xent_columns: target out of range");
  at::Tensor loss = at::empty({R}, logits_t.options());
  float* lp = logits_t.data_ptr<float>();
  const int64_t* tp = tgt.data_ptr<int64_t>();
  float* out = loss.data_ptr<float>();
  const float smooth = static_cast<float>(eps) / static_cast<float>(V), hit = 1.f - static_cast<float>(eps);
  const int64_t block = 16;  // columns per task: one cache line of each vocabulary row
  at::parallel_for(0, (R + block - 1) / block, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t r0 = b * block, width = std::min(block, R - r0);
      float max[block], sum[block], total[block], log_z[block];
      for (int64_t r = 0; r < width; ++r) {
        max[r] = std::numeric_limits<float>::lowest();
        sum[r] = total[r] = 0.f;
      }
      for (int64_t v = 0; v < V; ++v) max_rows(lp + v * R + r0, bp[v], max, width);
      for (int64_t v = 0; v < V; ++v) sum_exp_and_logit_rows(lp + v * R + r0, bp[v], max, sum, total, width);
      for (int64_t r = 0; r < width; ++r) {
        log_z[r] = max[r] + logf(sum[r]);
        const int64_t t = tp[r0 + r];
        const float log_p_target = lp[t * R + r0 + r] + bp[t] - log_z[r];
        out[r0 + r] = -hit * log_p_target - smooth * (total[r] - static_cast<float>(V) * log_z[r]);
      }
      for (int64_t v = 0; v < V; ++v) softmax_minus_rows(lp + v * R + r0, bp[v], log_z, smooth, width);
      for (int64_t r = 0; r < width; ++r) lp[tp[r0 + r] * R + r0 + r] -= hit;
    }
  });
  return loss;
}

}  // namespace

TORCH_LIBRARY(ctxnmt, m) {
  m.def("softmax_xent_columns(Tensor(a!) logits_t, Tensor bias, Tensor target, float eps) -> Tensor",
        softmax_xent_columns);
  m.def("additive_energy(Tensor keys, Tensor query, Tensor v, Tensor? mask=None) -> Tensor", additive_energy);
  m.def("additive_energy_backward(Tensor grad, Tensor keys, Tensor query, Tensor v, Tensor(a!) grad_keys)"
        " -> (Tensor, Tensor)",
        additive_energy_backward);
  m.def("gru_gates(Tensor xp, Tensor hp, Tensor h, Tensor? mask, bool save) -> (Tensor, Tensor)", gru_gates);
  m.def("log_softmax_topk(Tensor logits_t, Tensor bias, int k) -> (Tensor, Tensor, Tensor)", log_softmax_topk);
  m.def("row_log_softmax_topk(Tensor logits, Tensor bias, int k) -> (Tensor, Tensor, Tensor)",
        row_log_softmax_topk);
  m.def("gru_gates_backward(Tensor grad, Tensor saved, Tensor h, Tensor? mask) -> (Tensor, Tensor, Tensor)",
        gru_gates_backward);
}
