#pragma once
// Whole files: read with an error that names what was wanted, and written atomically (a
// temporary file beside the target, flushed, then renamed over it), so that a crash
// never leaves a half-written checkpoint, state dict or exported model.
#include <string>
#include <vector>

namespace fastcpp {

void write_atomically(const std::string& path, const std::vector<char>& bytes);
// "<what> 'path' not found or unreadable" when it cannot be read.
std::vector<char> read_file(const std::string& path, const std::string& what = "checkpoint");

}  // namespace fastcpp
