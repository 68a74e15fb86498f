// This machine's memory, as the CPU device reports it and as manifests are checked against.
#pragma once

#include <unistd.h>

#include <cstdint>

namespace tokenhost {

// Physical memory in bytes; 0 when the system does not say.
inline uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}

}  // namespace tokenhost
