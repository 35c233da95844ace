#include "core/tensor.h"

namespace ferry {

std::string Tensor::shape_str() const {
  std::string s = "(";
  for (int i = 0; i < n_dims; ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + ")";
}

}  // namespace ferry
