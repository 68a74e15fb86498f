// The model an engine serves, as plugins see it (th_model_info plus the strings it points to).
#pragma once

#include <string>

#include <tokenhost/tokenhost.h>

namespace tokenhost {

struct ModelSpec {
  std::string name;          // model name in the deployment
  std::string architecture = "llama";
  th_model_info info{};      // architecture pointer is set by to_abi()
  // The ABI's view; it points into this spec, which must outlive it.
  th_model_info to_abi() const {
    th_model_info m = info;
    m.struct_size = sizeof(th_model_info);
    m.architecture = architecture.c_str();
    return m;
  }
};

}  // namespace tokenhost
