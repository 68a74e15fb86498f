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
    // An MoE model whose source states nothing (a synthetic shape) renormalizes, as Mixtral does.
    if (m.n_experts > 0 && m.expert_weights_norm == TH_EXPERT_WEIGHTS_UNSTATED) m.expert_weights_norm = TH_EXPERT_WEIGHTS_NORMALIZED;
    return m;
  }
  // The model as an engine (or its draft sessions) holding its KV cache in `kv_dtype` serves it: the
  // plugins it creates see the engine's KV element type in th_model_info.kv_dtype.
  ModelSpec with_kv_dtype(th_dtype kv_dtype) const {
    ModelSpec out = *this;
    out.info.kv_dtype = kv_dtype;
    return out;
  }
};

}  // namespace tokenhost
