#pragma once
// Whole files: read with an error that names what was wanted, and written atomically (a
// temporary file beside the target, flushed, then renamed over it), so that a crash
// never leaves a half-written checkpoint, state dict or exported model.
#include <string>
#include <vector>

namespace fastcpp {

// "cannot write <what> 'path': ..." when it cannot be written; the temporary file goes.
// Temporary files of earlier writes of `path` that never finished (a process killed
// mid-write) go too: those no process holds locked, untouched for an hour.
void write_atomically(const std::string& path, const std::vector<char>& bytes, const std::string& what = "checkpoint");
// "<what> 'path' not found or unreadable" when it cannot be opened; "... is a directory",
// "... cannot be read: <reason>" for a read that fails (never taken for the file's end).
std::vector<char> read_file(const std::string& path, const std::string& what = "checkpoint");

}  // namespace fastcpp
