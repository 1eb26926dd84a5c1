#include "fp4gap/reference.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>

#include "fp4gap/numeric.hpp"
#include "fp4gap/status.hpp"

namespace fp4gap {

namespace {

void check_view(const OperandView& v, const char* what) {
  const std::string name(what);
  if (v.rows < 1 || v.k < 1) {
    throw InvalidArgument(name + ": rows < 1 or k < 1: rows = " + std::to_string(v.rows) +
                          ", k = " + std::to_string(v.k) + " (an operand needs at least one element)");
  }
  switch (v.format) {
    case OperandFormat::nvfp4:
      if (v.k % kBlockSize != 0) {
        throw InvalidArgument(name + ": K % 16 != 0: K = " + std::to_string(v.k) + " (NVFP4 blocks are 16 elements)");
      }
      if (v.codes == nullptr || v.scales == nullptr) {
        throw InvalidArgument(name + ": an nvfp4 operand needs codes and scales (got a null pointer)");
      }
      break;
    case OperandFormat::bf16:
      if (v.bf16 == nullptr) throw InvalidArgument(name + ": a bf16 operand needs bf16 data (got a null pointer)");
      break;
    case OperandFormat::e4m3:
      if (v.codes == nullptr) throw InvalidArgument(name + ": an e4m3 operand needs codes (got a null pointer)");
      break;
  }
}

// Register-blocked tile: kMr x kNr outputs, each with its own accumulator chain.
constexpr int kMr = 4;
constexpr int kNr = 4;
// Cache blocking: a kMc x kKc block of A (doubles) stays in L2 while a kKc x kNr panel of B
// streams through L1.
constexpr std::int64_t kKc = 256;
constexpr std::int64_t kMc = 64;
constexpr std::int64_t kNc = 256;
static_assert(kMc % kMr == 0 && kNc % kNr == 0, "a tile holds whole register blocks");

// Every product of two dequantized operands is exact in double (at most 16 significant bits), so
// each output is the plain sequential sum over k of exact products: the accumulation order is
// fixed by k alone, which makes the result independent of the thread count and of the blocking,
// and equal bit for bit to a naive triple loop in double.
void micro_kernel(const double* a, const double* b, std::int64_t kc, double* c, double* s,
                  std::int64_t ldc) {
  double acc[kMr][kNr];
  double abs_acc[kMr][kNr];
  for (int i = 0; i < kMr; ++i) {
    for (int j = 0; j < kNr; ++j) {
      acc[i][j] = c[i * ldc + j];
      abs_acc[i][j] = s[i * ldc + j];
    }
  }
  for (std::int64_t kk = 0; kk < kc; ++kk) {
    const double* ak = a + kk * kMr;
    const double* bk = b + kk * kNr;
    for (int i = 0; i < kMr; ++i) {
      for (int j = 0; j < kNr; ++j) {
        const double p = ak[i] * bk[j];
        acc[i][j] += p;
        abs_acc[i][j] += std::fabs(p);
      }
    }
  }
  for (int i = 0; i < kMr; ++i) {
    for (int j = 0; j < kNr; ++j) {
      c[i * ldc + j] = acc[i][j];
      s[i * ldc + j] = abs_acc[i][j];
    }
  }
}

// Copies rows [r0, r0 + nrows) x columns [k0, k0 + kc) of a row-major float matrix into panels of
// `width` rows, k-major inside a panel (panel[kk * width + r]); rows past the end are zero.
void pack_panels(const float* x, std::int64_t ld, std::int64_t r0, std::int64_t nrows, std::int64_t k0,
                 std::int64_t kc, int width, double* out) {
  const std::int64_t panels = (nrows + width - 1) / width;
  for (std::int64_t p = 0; p < panels; ++p) {
    double* panel = out + p * kc * width;
    for (int r = 0; r < width; ++r) {
      const std::int64_t row = p * width + r;
      if (row < nrows) {
        const float* src = x + (r0 + row) * ld + k0;
        for (std::int64_t kk = 0; kk < kc; ++kk) panel[kk * width + r] = static_cast<double>(src[kk]);
      } else {
        for (std::int64_t kk = 0; kk < kc; ++kk) panel[kk * width + r] = 0.0;
      }
    }
  }
}

struct GemmShape {
  std::int64_t m, n, k;
};

// One output tile [i0, i0 + kMc) x [j0, j0 + kNc), accumulated over the whole of K into sums
// (row stride n) of the caller's result.
class TileWorker {
 public:
  TileWorker()
      : a_pack_(static_cast<std::size_t>(kMc * kKc)),
        b_pack_(static_cast<std::size_t>(kNc * kKc)),
        c_tile_(static_cast<std::size_t>(kMc * kNc)),
        s_tile_(static_cast<std::size_t>(kMc * kNc)) {}

  void run(const float* a, const float* b, GemmShape sh, std::int64_t i0, std::int64_t j0, double* d,
           double* abs_sum) {
    const std::int64_t mb = std::min(kMc, sh.m - i0);
    const std::int64_t nb = std::min(kNc, sh.n - j0);
    const std::int64_t m_panels = (mb + kMr - 1) / kMr;
    const std::int64_t n_panels = (nb + kNr - 1) / kNr;
    std::fill(c_tile_.begin(), c_tile_.end(), 0.0);
    std::fill(s_tile_.begin(), s_tile_.end(), 0.0);
    for (std::int64_t k0 = 0; k0 < sh.k; k0 += kKc) {
      const std::int64_t kc = std::min(kKc, sh.k - k0);
      pack_panels(a, sh.k, i0, mb, k0, kc, kMr, a_pack_.data());
      pack_panels(b, sh.k, j0, nb, k0, kc, kNr, b_pack_.data());
      for (std::int64_t jp = 0; jp < n_panels; ++jp) {
        for (std::int64_t ip = 0; ip < m_panels; ++ip) {
          const std::int64_t off = ip * kMr * kNc + jp * kNr;
          micro_kernel(a_pack_.data() + ip * kc * kMr, b_pack_.data() + jp * kc * kNr, kc, c_tile_.data() + off,
                       s_tile_.data() + off, kNc);
        }
      }
    }
    for (std::int64_t i = 0; i < mb; ++i) {
      for (std::int64_t j = 0; j < nb; ++j) {
        d[(i0 + i) * sh.n + j0 + j] = c_tile_[static_cast<std::size_t>(i * kNc + j)];
        abs_sum[(i0 + i) * sh.n + j0 + j] = s_tile_[static_cast<std::size_t>(i * kNc + j)];
      }
    }
  }

 private:
  std::vector<double> a_pack_, b_pack_, c_tile_, s_tile_;
};

}  // namespace

OperandView nvfp4_operand(const Nvfp4Matrix& m) {
  OperandView v;
  v.format = OperandFormat::nvfp4;
  v.rows = m.rows;
  v.k = m.cols;
  v.codes = m.codes.data();
  v.scales = m.scales.data();
  v.layout = m.layout;
  return v;
}

OperandView bf16_operand(const std::vector<std::uint16_t>& bf16, std::int64_t rows, std::int64_t k) {
  OperandView v;
  v.format = OperandFormat::bf16;
  v.rows = rows;
  v.k = k;
  v.bf16 = bf16.data();
  return v;
}

std::vector<float> operand_values(const OperandView& v) {
  check_view(v, "operand");
  const std::size_t count = static_cast<std::size_t>(v.rows) * static_cast<std::size_t>(v.k);
  std::vector<float> out(count);
  switch (v.format) {
    case OperandFormat::nvfp4: {
      const std::int64_t row_bytes = v.k / 2;
      for (std::int64_t r = 0; r < v.rows; ++r) {
        const std::uint8_t* codes = v.codes + r * row_bytes;
        float* dst = out.data() + r * v.k;
        for (std::int64_t kb = 0; kb < v.k / kBlockSize; ++kb) {
          const float scale = e4m3_to_float(v.scales[scale_offset(v.layout, r, kb, v.k)]);
          for (int e = 0; e < kBlockSize; ++e) {
            const std::int64_t c = kb * kBlockSize + e;
            const std::uint8_t byte = codes[c / 2];
            const std::uint8_t code = (c % 2 == 0) ? (byte & 0x0Fu) : static_cast<std::uint8_t>(byte >> 4);
            dst[c] = e2m1_to_float(code) * scale;
          }
        }
      }
      break;
    }
    case OperandFormat::bf16:
      for (std::size_t i = 0; i < count; ++i) out[i] = bf16_to_float(v.bf16[i]);
      break;
    case OperandFormat::e4m3:
      for (std::size_t i = 0; i < count; ++i) out[i] = e4m3_to_float(v.codes[i]);
      break;
  }
  return out;
}

ReferenceResult reference_gemm(const OperandView& a, const OperandView& b, double alpha, int threads) {
  check_view(a, "A");
  check_view(b, "B");
  if (a.k != b.k) {
    throw InvalidArgument("A.k != B.k: A is [" + std::to_string(a.rows) + ", " + std::to_string(a.k) + "], B is [" +
                          std::to_string(b.rows) + ", " + std::to_string(b.k) + "] (both operands run along K)");
  }
  if (threads < 0) throw InvalidArgument("threads < 0: threads = " + std::to_string(threads));
  const GemmShape sh{a.rows, b.rows, a.k};
  const std::vector<float> av = operand_values(a);
  const std::vector<float> bv = operand_values(b);

  ReferenceResult result;
  result.m = sh.m;
  result.n = sh.n;
  const std::size_t outputs = static_cast<std::size_t>(sh.m) * static_cast<std::size_t>(sh.n);
  result.d.resize(outputs);
  result.abs_sum.resize(outputs);

  const std::int64_t tiles_m = (sh.m + kMc - 1) / kMc;
  const std::int64_t tiles_n = (sh.n + kNc - 1) / kNc;
  const std::int64_t tiles = tiles_m * tiles_n;
  std::atomic<std::int64_t> next{0};
  auto work = [&] {
    TileWorker worker;
    for (std::int64_t t = next.fetch_add(1); t < tiles; t = next.fetch_add(1)) {
      worker.run(av.data(), bv.data(), sh, (t / tiles_n) * kMc, (t % tiles_n) * kNc, result.d.data(),
                 result.abs_sum.data());
    }
  };
  std::int64_t workers = threads > 0 ? threads : static_cast<std::int64_t>(std::thread::hardware_concurrency());
  workers = std::clamp<std::int64_t>(workers, 1, tiles);
  if (workers == 1) {
    work();
  } else {
    std::vector<std::thread> pool;
    pool.reserve(static_cast<std::size_t>(workers));
    for (std::int64_t t = 0; t < workers; ++t) pool.emplace_back(work);
    for (std::thread& t : pool) t.join();
  }

  const double abs_alpha = std::fabs(alpha);
  for (std::size_t i = 0; i < outputs; ++i) {
    result.d[i] *= alpha;
    result.abs_sum[i] *= abs_alpha;
  }
  return result;
}

namespace {

// double -> float rounding to odd: truncate, then set the last bit when inexact. Rounding that
// result to a format with at most 22 significand bits (bf16, fp16) to nearest even equals rounding
// the double directly; a plain double -> float -> bf16 chain could round twice at a midpoint.
float round_to_odd_float(double v) {
  float f = static_cast<float>(v);
  if (!std::isfinite(f) || static_cast<double>(f) == v) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(v)) f = std::nextafter(f, 0.0f);
  return bits_float(float_bits(f) | 1u);
}

}  // namespace

float round_to_output(double v, OutputType t) {
  switch (t) {
    case OutputType::f32: return static_cast<float>(v);
    case OutputType::bf16: return bf16_to_float(float_to_bf16(round_to_odd_float(v)));
    case OutputType::f16: return fp16_to_float(float_to_fp16(round_to_odd_float(v)));
  }
  return static_cast<float>(v);
}

}  // namespace fp4gap
