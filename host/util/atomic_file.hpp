// Files read and written whole. Writing is all or nothing: the bytes go to a temporary file beside it,
// flushed, then renamed over it, so that a reader (or a crash) never sees it half-written.
#pragma once

#include <string>
#include <string_view>

namespace tokenhost {

// Writes bytes to path with permissions `mode`. Throws std::runtime_error naming the path and the
// system's reason; path is unchanged then, and no temporary file is left.
void write_file_atomically(const std::string& path, std::string_view bytes, unsigned mode = 0644);

// The bytes of the file at path. Throws std::runtime_error naming the path and the system's reason.
std::string read_file(const std::string& path);

}  // namespace tokenhost
