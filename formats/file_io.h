#pragma once
// Whole files: read with an error that names what was wanted, and written atomically (a
// temporary file beside the target, flushed, then renamed over it), so that a crash
// never leaves a half-written checkpoint, state dict or exported model.
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace fastcpp {

// Where a writer hands its bytes, piece by piece. It never throws: a failed write is
// kept for the end (serializers such as torch.save's zip writer end their archive from
// a destructor, where a throw would terminate the process).
using ByteSink = std::function<void(const char* bytes, size_t size)>;

// "cannot write <what> 'path': ..." when it cannot be written; the temporary file goes.
// Temporary files of earlier writes of `path` that never finished (a process killed
// mid-write) go too: those no process holds locked, untouched for an hour.
void write_atomically(const std::string& path, const std::vector<char>& bytes, const std::string& what = "checkpoint");
// The same for what `produce` hands its sink, written as it comes (a checkpoint larger
// than the memory left is never held whole). An exception `produce` throws discards the file.
void write_atomically(const std::string& path, const std::function<void(const ByteSink&)>& produce,
                      const std::string& what = "checkpoint");
// "<what> 'path' not found or unreadable" when it cannot be opened; "... is a directory",
// "... cannot be read: <reason>" for a read that fails (never taken for the file's end).
std::vector<char> read_file(const std::string& path, const std::string& what = "checkpoint");

}  // namespace fastcpp
