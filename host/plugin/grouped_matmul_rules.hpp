// The rules of th_host_api.grouped_matmul's arguments (th_host_api.h), checked before the host's
// kernels read anything a plugin passed: sizes, offsets, one weight type and shape per product.
#pragma once

#include <string>

#include <tokenhost/tokenhost.h>

namespace tokenhost {

// "" when args keeps every rule, else what breaks the first it breaks, naming the member (and the
// weight's group and product).
std::string grouped_matmul_error(const th_grouped_matmul_args* args);

}  // namespace tokenhost
