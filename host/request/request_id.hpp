// Every client request's id: the one its client sent (X-Request-Id) when it is a usable one, else one
// made here. It is returned with the answer and carried in every log line about the request.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tokenhost::request {

// The longest client id taken as it is; longer ones are replaced.
inline constexpr size_t kMaxRequestIdBytes = 128;

// `sent` when it is 1 to kMaxRequestIdBytes characters of letters, digits and -_.:/+= (what goes into
// a header and a log line unescaped), else a new id: "req-" and 24 hexadecimal digits.
std::string request_id_from(std::string_view sent);
// A new id ("req-" and 24 hexadecimal digits, random).
std::string new_request_id();
// The request module's random numbers (ids, seeds for requests that bring none, response ids): one
// generator seeded from std::random_device, shared by every thread.
uint64_t draw_random();

}  // namespace tokenhost::request
