#include "formats/file_io.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace fastcpp {
namespace {

// A new file beside `path`, made with O_EXCL: no other writer (another thread, process or
// host sharing the folder) and no file already there can be taken for it. Locked while
// it is written: the lock goes with the process, however it ends. -1 and errno when none
// can be made.
int create_temporary(const std::string& path, std::string& temp) {
  static std::atomic<uint64_t> made{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    temp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(made++);
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) ::flock(fd, LOCK_EX);  // best effort: where locks are not kept, only the age below tells
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;  // errno: EEXIST
}

// Removes what writes of `path` that never finished left (a process killed mid-write, as a
// preempted job's): temporary files nobody holds locked and untouched for an hour (a
// writer writes on, and a file system that keeps no locks across hosts leaves the age
// alone to tell). Best effort: a file another process removes first is fine.
void remove_stale_temporaries(const std::filesystem::path& target) {
  namespace fs = std::filesystem;
  const auto prefix = target.filename().string() + ".tmp.";
  const auto folder = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code error;
  for (auto it = fs::directory_iterator(folder, error); !error && it != fs::directory_iterator(); it.increment(error)) {
    const auto& file = it->path();
    if (file.filename().string().rfind(prefix, 0) != 0) continue;
    std::error_code age_error;
    const auto touched = fs::last_write_time(file, age_error);
    if (age_error || fs::file_time_type::clock::now() - touched < std::chrono::hours(1)) continue;
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) ::unlink(file.c_str());  // no writer holds it
    ::close(fd);
  }
}

}  // namespace

void write_atomically(const std::string& path, const std::vector<char>& bytes, const std::string& what) {
  write_atomically(path, [&](const ByteSink& sink) { sink(bytes.data(), bytes.size()); }, what);
}

void write_atomically(const std::string& path, const std::function<void(const ByteSink&)>& produce,
                      const std::string& what) {
  const auto fail = [&](const std::string& reason) {
    throw Error("cannot write " + what + " '" + path + "': " + reason);
  };
  const std::filesystem::path target(path);
  const auto folder = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  std::error_code made;
  std::filesystem::create_directories(folder, made);
  if (made) fail("cannot make its folder '" + folder.string() + "': " + made.message());
  std::string temp;
  const int fd = create_temporary(path, temp);
  if (fd < 0) fail(std::strerror(errno));
  const auto discard = [&] {
    ::close(fd);
    ::unlink(temp.c_str());
  };
  int write_error = 0;  // the first failed write's; the writes after it are dropped
  const ByteSink sink = [&](const char* bytes, size_t size) {
    for (size_t written = 0; written < size && !write_error;) {
      const auto n = ::write(fd, bytes + written, size - written);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) write_error = errno;
      else written += static_cast<size_t>(n);
    }
  };
  try {
    produce(sink);
  } catch (...) {
    discard();
    throw;
  }
  if (write_error || ::fsync(fd) != 0) {
    const int error = write_error ? write_error : errno;
    discard();
    fail(std::strerror(error));
  }
  // close reports a write the file system deferred (NFS, quotas).
  if (::close(fd) != 0 || std::rename(temp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    fail(std::strerror(error));
  }
  remove_stale_temporaries(target);
  // The rename itself reaches the disk with its folder's entry.
  if (const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY); dir >= 0) {
    ::fsync(dir);  // best effort: some file systems cannot sync a folder
    ::close(dir);
  }
}

std::vector<char> read_file(const std::string& path, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(what + " '" + path + "' not found or unreadable");
  const auto fail = [&](const std::string& reason) {
    ::close(fd);
    throw Error(what + " '" + path + "' " + reason);
  };
  struct stat status {};
  if (::fstat(fd, &status) != 0) fail("cannot be read: " + std::string(std::strerror(errno)));
  if (S_ISDIR(status.st_mode)) fail("is a directory");
  // Read to the end, not to the size fstat gives: files of /proc, say, give 0.
  std::vector<char> bytes(S_ISREG(status.st_mode) ? static_cast<size_t>(status.st_size) : 0);
  size_t filled = 0;
  char more[1 << 16];
  for (;;) {
    const bool room = filled < bytes.size();
    const auto n = room ? ::read(fd, bytes.data() + filled, bytes.size() - filled) : ::read(fd, more, sizeof more);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("cannot be read: " + std::string(std::strerror(errno)));  // not taken for its end
    if (n == 0) break;
    if (!room) bytes.insert(bytes.end(), more, more + n);
    filled += static_cast<size_t>(n);
  }
  ::close(fd);
  bytes.resize(filled);  // a file cut short while it was read
  return bytes;
}

}  // namespace fastcpp
