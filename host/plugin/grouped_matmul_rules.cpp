#include "plugin/grouped_matmul_rules.hpp"

#include <cstddef>

#include "model/quant.hpp"

namespace tokenhost {
namespace {

// The weight types the host's kernels compute with.
bool kernel_type(th_dtype t) {
  return t == TH_DTYPE_F32 || t == TH_DTYPE_F16 || t == TH_DTYPE_BF16 || t == TH_DTYPE_Q8_0 || t == TH_DTYPE_Q4_0 ||
         t == TH_DTYPE_Q4_K || t == TH_DTYPE_Q6_K;
}

}  // namespace

std::string grouped_matmul_error(const th_grouped_matmul_args* a) {
  using std::to_string;
  if (a == nullptr) return "no arguments (NULL)";
  if (!TH_HAS_MEMBER(a, th_grouped_matmul_args, y))
    return "struct_size " + to_string(a->struct_size) + " is below th_grouped_matmul_args' " +
           to_string(TH_SIZE_THROUGH(th_grouped_matmul_args, y));
  if (a->n_groups == 0) return "n_groups is 0";
  if (a->n_products == 0 || a->n_products > 4) return "n_products " + to_string(a->n_products) + " is outside 1..4";
  if (a->cols == 0) return "cols is 0";
  if (a->weights == nullptr || a->row_begin == nullptr || a->y == nullptr) return "weights, row_begin or y is NULL";
  if (a->row_begin[0] != 0) return "row_begin[0] is " + to_string(a->row_begin[0]) + ", not 0";
  for (uint32_t g = 0; g < a->n_groups; ++g)
    if (a->row_begin[g + 1] < a->row_begin[g])
      return "row_begin[" + to_string(g + 1) + "] = " + to_string(a->row_begin[g + 1]) + " is below row_begin[" +
             to_string(g) + "] = " + to_string(a->row_begin[g]);
  const uint32_t n_rows = a->row_begin[a->n_groups];
  if (n_rows > 0 && a->x == nullptr) return "x is NULL";
  for (uint32_t j = 0; j < a->n_products; ++j)
    if (a->y[j] == nullptr) return "y[" + to_string(j) + "] is NULL";
  // Every weight a group with rows reads: of the first such weight's type and device, the product's rows.
  const th_tensor* first = nullptr;
  std::vector<int64_t> rows(a->n_products, -1);
  for (uint32_t g = 0; g < a->n_groups; ++g) {
    if (a->row_begin[g + 1] == a->row_begin[g]) continue;
    for (uint32_t j = 0; j < a->n_products; ++j) {
      const size_t i = size_t(g) * a->n_products + j;
      const th_tensor& t = a->weights[i];
      const std::string what = "weights[" + to_string(i) + "] (group " + to_string(g) + ", product " + to_string(j) + ")";
      if (!kernel_type(t.dtype))
        return what + ": dtype " + quant::dtype_name(t.dtype) +
               " is not one the host's kernels take (f32, f16, bf16, q8_0, q4_0, q4_K, q6_K)";
      if (first == nullptr) first = &t;
      if (t.dtype != first->dtype)
        return what + ": dtype " + quant::dtype_name(t.dtype) + ", the call's first weight's is " + quant::dtype_name(first->dtype);
      if (t.device != first->device) return what + ": on another device than the call's first weight";
      if (t.data == nullptr) return what + ": data is NULL";
      if (t.ne[0] != int64_t(a->cols))
        return what + ": ne[0] = " + to_string(t.ne[0]) + ", not cols = " + to_string(a->cols);
      if (a->cols % quant::block_elems(t.dtype) != 0)
        return "cols = " + to_string(a->cols) + " is not a multiple of " + quant::dtype_name(t.dtype) + "'s block of " +
               to_string(quant::block_elems(t.dtype));
      if (t.ne[1] <= 0 || t.ne[1] > (int64_t(1) << 31)) return what + ": ne[1] = " + to_string(t.ne[1]) + " rows";
      if (t.ne[2] > 1 || t.ne[3] > 1) return what + ": more than two dimensions";
      if (rows[j] < 0) rows[j] = t.ne[1];
      if (t.ne[1] != rows[j])
        return what + ": " + to_string(t.ne[1]) + " rows, product " + to_string(j) + "'s other weights have " + to_string(rows[j]);
      const size_t row_bytes = quant::row_bytes(t.dtype, t.ne[0]);
      if (t.nb[1] < int64_t(row_bytes))
        return what + ": nb[1] = " + to_string(t.nb[1]) + " bytes, below a row's " + to_string(row_bytes);
    }
  }
  return "";
}

}  // namespace tokenhost
