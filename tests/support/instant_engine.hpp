// An engine actor that answers every request at once with one token (7) under its name: a router's
// candidate whose own work is nothing, for tests of what the router chooses.
#pragma once

#include <string>

#include "actors/messages.hpp"

namespace tokenhost::testing {

inline engine_actor::behavior_type instant_engine(engine_actor::pointer, std::string name) {
  return {
      [=](generate_atom, GenerateRequest) -> GenerateResult {
        GenerateResult r;
        r.tokens = {7};
        r.finish_reason = "length";
        r.engine = name;
        return r;
      },
      [=](swap_atom, SlotSwap) -> SwapResult { return {false, "instant"}; },
      [=](status_atom, const std::string&) -> StatusJson { return {"{}"}; },
      [=](cancel_atom, uint64_t) {},
      [=](drain_atom) {},
      [=](retire_atom) {},
      [=](tick_atom) {},
  };
}

}  // namespace tokenhost::testing
