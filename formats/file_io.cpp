#include "formats/file_io.h"

#include <fcntl.h>
#include <signal.h>
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

// This host's name, which the temporary files carry: their process ids mean something only here.
std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "host";
  return name;
}

// The prefix of the temporary files of `path` that `host`'s process `pid` writes.
std::string temporary_prefix(const std::string& path, const std::string& host, const std::string& pid) {
  return path + ".tmp." + host + "." + pid + ".";
}

// A new file beside `path`, made with O_EXCL: no other writer (another thread, process or
// host sharing the folder) and no file already there can be taken for it. -1 and errno
// when none can be made.
int create_temporary(const std::string& path, std::string& temp) {
  static std::atomic<uint64_t> made{0};
  static const std::string host = host_name();
  for (int attempt = 0; attempt < 100; ++attempt) {
    temp = temporary_prefix(path, host, std::to_string(::getpid())) + std::to_string(made++);
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;  // errno: EEXIST
}

// Removes what writes of `path` that never finished left (a process killed mid-write, as a
// preempted job's): a temporary file of a process of this host that has ended, or of any
// host, untouched for a day. Best effort: a file another process removes first is fine.
void remove_stale_temporaries(const std::filesystem::path& target) try {
  namespace fs = std::filesystem;
  const auto host = host_name(), name = target.filename().string() + ".tmp.";
  const auto folder = target.has_parent_path() ? target.parent_path() : fs::path(".");
  for (const auto& entry : fs::directory_iterator(folder)) {
    const auto file = entry.path().filename().string();
    if (file.rfind(name, 0) != 0) continue;
    // <name><host>.<pid>.<n>: the host may hold dots, the pid and count do not.
    const auto count_dot = file.rfind('.'), pid_dot = file.rfind('.', count_dot - 1);
    if (pid_dot == std::string::npos || pid_dot < name.size()) continue;
    const auto pid = file.substr(pid_dot + 1, count_dot - pid_dot - 1);
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    const bool ours = file.substr(name.size(), pid_dot - name.size()) == host;
    const bool ended = ours && ::kill(static_cast<pid_t>(std::stoll(pid)), 0) != 0 && errno == ESRCH;
    std::error_code error;
    const auto touched = fs::last_write_time(entry.path(), error);
    const bool abandoned = !error && fs::file_time_type::clock::now() - touched > std::chrono::hours(24);
    if (ended || abandoned) fs::remove(entry.path(), error);
  }
} catch (const std::exception&) {  // a folder that cannot be listed: the write itself succeeded
}

}  // namespace

void write_atomically(const std::string& path, const std::vector<char>& bytes, const std::string& what) {
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
  const auto discard = [&](int error) {
    ::close(fd);
    ::unlink(temp.c_str());
    fail(std::strerror(error));
  };
  size_t written = 0;
  while (written < bytes.size()) {
    const auto n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) discard(errno);
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) discard(errno);
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
