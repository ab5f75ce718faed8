// CPU bindings: every op takes a (rows, d) contiguous tensor and an optional (rows, d) bool
// mask (an undefined/empty tensor means "all positions valid"), runs the row algorithm over
// the unmasked positions of each row in parallel over rows, and writes 0 (group -1) at
// masked positions.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <vector>

#include "row_algorithms.h"

namespace regattn {
namespace {

void check_rows(const torch::Tensor& x, const torch::Tensor& mask) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous(), "regattn kernels expect a contiguous (rows, d) tensor");
  TORCH_CHECK(x.device().is_cpu(), "regattn CPU kernel called with a ", x.device(), " tensor");
  if (mask.defined() && mask.numel() > 0) {
    TORCH_CHECK(mask.sizes() == x.sizes() && mask.is_contiguous() && mask.scalar_type() == torch::kBool,
                "mask must be a contiguous bool tensor of the same shape as the scores");
  }
}

// Grain so that a task holds at least ~16k values: small batches stay on one thread.
int64_t grain_for(int64_t d) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(d, 1)); }

// Runs fn(row, row_in, row_out, row_group, n) on each row's unmasked values, gathered into
// per-thread scratch when the row is masked (so the algorithms see consecutive unmasked
// positions as neighbours), and scatters results back.
template <typename T, typename Fn>
void for_each_row(const torch::Tensor& x, const torch::Tensor& mask, torch::Tensor& out,
                  int64_t* group, Fn fn) {
  const int64_t rows = x.size(0), d = x.size(1);
  const T* xp = x.data_ptr<T>();
  T* op = out.data_ptr<T>();
  const bool* mp = (mask.defined() && mask.numel() > 0) ? mask.data_ptr<bool>() : nullptr;
  at::parallel_for(0, rows, grain_for(d), [&](int64_t begin, int64_t end) {
    std::vector<T> in_buf(d), out_buf(d);
    std::vector<int64_t> group_buf(d), index(d);
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = xp + r * d;
      T* orow = op + r * d;
      int64_t* grow = group ? group + r * d : group_buf.data();
      if (!mp) {
        fn(r, xr, orow, grow, d);
        continue;
      }
      const bool* mr = mp + r * d;
      int64_t n = 0;
      for (int64_t i = 0; i < d; ++i) {
        if (mr[i]) {
          index[n] = i;
          in_buf[n++] = xr[i];
        }
      }
      fn(r, in_buf.data(), out_buf.data(), group_buf.data(), n);
      for (int64_t i = 0; i < d; ++i) {
        orow[i] = T(0);
        if (group) grow[i] = -1;
      }
      for (int64_t j = 0; j < n; ++j) {
        orow[index[j]] = out_buf[j];
        if (group) grow[index[j]] = group_buf[j];
      }
    }
  });
}

torch::Tensor project_simplex_rows(torch::Tensor z, torch::Tensor mask) {
  check_rows(z, mask);
  auto y = torch::empty_like(z);
  const int64_t d = z.size(1);
  AT_DISPATCH_FLOATING_TYPES(z.scalar_type(), "project_simplex_rows", [&] {
    for_each_row<scalar_t>(z, mask, y, nullptr,
                           [d](int64_t, const scalar_t* in, scalar_t* out, int64_t*, int64_t n) {
                             thread_local std::vector<scalar_t> candidates;
                             if ((int64_t)candidates.size() < d) candidates.resize(d);
                             project_simplex_row(in, out, n, candidates.data());
                           });
  });
  return y;
}

std::vector<torch::Tensor> prox_tv1d_rows(torch::Tensor x, torch::Tensor mask, double lam) {
  check_rows(x, mask);
  auto z = torch::empty_like(x);
  auto group = torch::empty(x.sizes(), x.options().dtype(torch::kLong));
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "prox_tv1d_rows", [&] {
    const scalar_t l = static_cast<scalar_t>(lam);
    for_each_row<scalar_t>(x, mask, z, group.data_ptr<int64_t>(),
                           [l](int64_t, const scalar_t* in, scalar_t* out, int64_t* g, int64_t n) {
                             prox_tv1d_row(in, out, g, n, l);
                           });
  });
  return {z, group};
}

// Per-thread scratch of the sort + pool-adjacent-violators rows.
template <typename T>
struct PoolScratch {
  std::vector<std::pair<T, int64_t>> order;  // (value, position), sorted decreasingly
  std::vector<T> a, sum;
  std::vector<int64_t> block, start;

  static PoolScratch& for_thread(int64_t d) {
    thread_local PoolScratch scratch;
    if ((int64_t)scratch.order.size() < d) {
      scratch.order.resize(d);
      scratch.a.resize(d);
      scratch.sum.resize(d);
      scratch.block.resize(d);
      scratch.start.resize(d);
    }
    return scratch;
  }

  // sorts order[0, n) and pools a_k = value_k - lam (n-1-k) into non-increasing blocks
  void sort_and_pool(int64_t n, T lam) {
    std::sort(order.begin(), order.begin() + n,
              [](const std::pair<T, int64_t>& p, const std::pair<T, int64_t>& q) { return p.first > q.first; });
    for (int64_t k = 0; k < n; ++k) a[k] = order[k].first - lam * T(n - 1 - k);
    pav_nonincreasing(a.data(), block.data(), n, start.data(), sum.data());
  }
};

// prox of lam * sum_{i<j} max(z_i, z_j) = lam * sum_k (n-1-k) z_[k] (values sorted
// decreasingly, k from 0): an ordered weighted sum, convex because the weights decrease.
// Sort, subtract the weights, pool adjacent violators, undo the sort (Zeng & Figueiredo 2014,
// without their absolute values: see mappings/oscar.py for why).
template <typename T>
void prox_pairwise_max_row(const T* x, T* z, int64_t* group, int64_t n, T lam, PoolScratch<T>& s) {
  for (int64_t i = 0; i < n; ++i) s.order[i] = {x[i], i};
  s.sort_and_pool(n, lam);
  for (int64_t k = 0; k < n; ++k) {
    z[s.order[k].second] = s.a[k];
    group[s.order[k].second] = s.block[k];
  }
}

std::vector<torch::Tensor> prox_pairwise_max_rows(torch::Tensor x, torch::Tensor mask, double lam) {
  check_rows(x, mask);
  auto z = torch::empty_like(x);
  auto group = torch::empty(x.sizes(), x.options().dtype(torch::kLong));
  const int64_t d = x.size(1);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "prox_pairwise_max_rows", [&] {
    const scalar_t l = static_cast<scalar_t>(lam);
    for_each_row<scalar_t>(x, mask, z, group.data_ptr<int64_t>(),
                           [l, d](int64_t, const scalar_t* in, scalar_t* out, int64_t* g, int64_t n) {
                             prox_pairwise_max_row(in, out, g, n, l, PoolScratch<scalar_t>::for_thread(d));
                           });
  });
  return {z, group};
}

torch::Tensor entmax15_rows(torch::Tensor x, torch::Tensor mask) {
  check_rows(x, mask);
  auto y = torch::empty_like(x);
  const int64_t d = x.size(1);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "entmax15_rows", [&] {
    for_each_row<scalar_t>(x, mask, y, nullptr,
                           [d](int64_t, const scalar_t* in, scalar_t* out, int64_t*, int64_t n) {
                             thread_local std::vector<scalar_t> sorted;
                             if ((int64_t)sorted.size() < d) sorted.resize(d);
                             entmax15_row(in, out, n, sorted.data());
                           });
  });
  return y;
}

// J^T g of the sparse mappings (see sparse_jvp_row); y is 0 and group -1 at masked
// positions, so no gathering is needed. alpha = 2 for the simplex-projection family;
// a non-empty alpha_rows ((rows,), the output's dtype) gives one entmax alpha per row.
torch::Tensor sparse_jvp_rows(torch::Tensor y, torch::Tensor g, double alpha, torch::Tensor group,
                              torch::Tensor alpha_rows) {
  check_rows(y, torch::Tensor());
  TORCH_CHECK(g.sizes() == y.sizes() && g.is_contiguous() && g.scalar_type() == y.scalar_type(),
              "gradient must match the output's shape and dtype");
  const bool grouped = group.defined() && group.numel() > 0;
  if (grouped) TORCH_CHECK(group.sizes() == y.sizes() && group.scalar_type() == torch::kLong && group.is_contiguous());
  auto out = torch::empty_like(y);
  const int64_t rows = y.size(0), d = y.size(1);
  AT_DISPATCH_FLOATING_TYPES(y.scalar_type(), "sparse_jvp_rows", [&] {
    const scalar_t* yp = y.data_ptr<scalar_t>();
    const scalar_t* gp = g.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    const int64_t* grp = grouped ? group.data_ptr<int64_t>() : nullptr;
    const scalar_t a = static_cast<scalar_t>(alpha);
    const bool per_row = alpha_rows.defined() && alpha_rows.numel() > 0;
    if (per_row) {
      TORCH_CHECK(alpha_rows.dim() == 1 && alpha_rows.size(0) == rows && alpha_rows.scalar_type() == y.scalar_type() &&
                  alpha_rows.is_contiguous(), "alpha_rows must be a contiguous (rows,) tensor of the output's dtype");
    }
    const scalar_t* ap = per_row ? alpha_rows.data_ptr<scalar_t>() : nullptr;
    auto run = [&](auto row_fn) {
      at::parallel_for(0, rows, grain_for(d), [&](int64_t begin, int64_t end) {
        std::vector<scalar_t> acc(grouped ? d : 0), count(grouped ? d : 0);
        for (int64_t r = begin; r < end; ++r) {
          row_fn(yp + r * d, gp + r * d, op + r * d, d, ap ? ap[r] : a, grp ? grp + r * d : nullptr, acc.data(),
                 count.data());
        }
      });
    };
    if (per_row) {
      run(sparse_jvp_row<scalar_t, SupportWeight::kPow>);
    } else if (alpha == 2.0) {
      run(sparse_jvp_row<scalar_t, SupportWeight::kOne>);
    } else if (alpha == 1.5) {
      run(sparse_jvp_row<scalar_t, SupportWeight::kSqrt>);
    } else {
      run(sparse_jvp_row<scalar_t, SupportWeight::kPow>);
    }
  });
  return out;
}

// alpha-entmax with one alpha per row (alpha: (rows,) tensor of the scores' dtype, > 1).
torch::Tensor entmax_bisect_rows(torch::Tensor x, torch::Tensor mask, torch::Tensor alpha) {
  check_rows(x, mask);
  TORCH_CHECK(alpha.dim() == 1 && alpha.size(0) == x.size(0) && alpha.scalar_type() == x.scalar_type() &&
                  alpha.is_contiguous(), "alpha must be a contiguous (rows,) tensor of the scores' dtype");
  auto y = torch::empty_like(x);
  const int64_t d = x.size(1);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "entmax_bisect_rows", [&] {
    const scalar_t* ap = alpha.data_ptr<scalar_t>();
    for_each_row<scalar_t>(x, mask, y, nullptr,
                           [d, ap](int64_t r, const scalar_t* in, scalar_t* out, int64_t*, int64_t n) {
                             thread_local std::vector<scalar_t> candidates;
                             if ((int64_t)candidates.size() < d) candidates.resize(d);
                             entmax_bisect_row(in, out, n, ap[r], candidates.data());
                           });
  });
  return y;
}

torch::Tensor sq_pnorm_max_rows(torch::Tensor x, torch::Tensor mask, double gamma, double p) {
  check_rows(x, mask);
  auto y = torch::empty_like(x);
  const int64_t d = x.size(1);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "sq_pnorm_max_rows", [&] {
    const scalar_t g = static_cast<scalar_t>(gamma), pp = static_cast<scalar_t>(p);
    for_each_row<scalar_t>(x, mask, y, nullptr,
                           [d, g, pp](int64_t, const scalar_t* in, scalar_t* out, int64_t*, int64_t n) {
                             thread_local std::vector<scalar_t> candidates;
                             if ((int64_t)candidates.size() < d) candidates.resize(d);
                             sq_pnorm_max_row(in, out, n, g, pp, candidates.data());
                           });
  });
  return y;
}

}  // namespace
}  // namespace regattn

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "regattn CPU kernels (rows x d, optional bool mask)";
  m.def("project_simplex_rows", &regattn::project_simplex_rows, "simplex projection of each row");
  m.def("prox_tv1d_rows", &regattn::prox_tv1d_rows, "1-D TV prox of each row -> (z, segment id)");
  m.def("prox_pairwise_max_rows", &regattn::prox_pairwise_max_rows, "prox of lam*sum_{i<j} max(z_i, z_j) of each row -> (z, cluster id)");
  m.def("sparse_jvp_rows", &regattn::sparse_jvp_rows, "backward of the sparse mappings, optionally group-averaged");
  m.def("entmax_bisect_rows", &regattn::entmax_bisect_rows, "alpha-entmax of each row, one alpha per row");
  m.def("sq_pnorm_max_rows", &regattn::sq_pnorm_max_rows, "sq-pnorm-max of each row");
  m.def("entmax15_rows", &regattn::entmax15_rows, "exact 1.5-entmax of each row");
}
