// The SDK headers, C and C++ helper alike, compile as C++ with -Wall -Wextra -Werror -pedantic.
#include <tokenhost/plugin.hpp>
#include <tokenhost/fp16.hpp>
#include <tokenhost/plugin_kv.hpp>
#include <tokenhost/plugin_sched.hpp>
#include <tokenhost/plugin_spec.hpp>
#include <tokenhost/plugin_draft.hpp>
#include <tokenhost/plugin_kv_pool.hpp>
#include <tokenhost/plugin_kv_blocks.hpp>
#include <tokenhost/plugin_moe.hpp>
#include <tokenhost/plugin_moe_balance.hpp>
#include <tokenhost/tokenhost.h>

#include <cstdio>

int main() {
  static_assert(sizeof(th_plugin_descriptor) > 0, "descriptor visible from C++");
  std::printf("SDK headers compile as C++%ld\n", long(__cplusplus));
  return 0;
}
