#include "formats/zip_directory.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/error.h"

namespace fastcpp {
namespace {

constexpr uint32_t kEndOfDirectory = 0x06054b50, kZip64Locator = 0x07064b50, kZip64End = 0x06064b50,
                   kDirectoryEntry = 0x02014b50;
constexpr uint64_t kDeflateMaxRatio = 1032;

// Little-endian fields at `at`, or nothing past the end.
class Fields {
 public:
  explicit Fields(const std::vector<char>& bytes) : bytes_(bytes) {}
  bool has(uint64_t at, uint64_t n) const { return at <= bytes_.size() && n <= bytes_.size() - at; }
  uint64_t get(uint64_t at, int width) const {
    uint64_t value = 0;
    for (int i = width - 1; i >= 0; --i) value = value << 8 | static_cast<unsigned char>(bytes_[at + i]);
    return value;
  }

 private:
  const std::vector<char>& bytes_;
};

struct Directory {
  uint64_t offset = 0, entries = 0;
};

// The central directory's place from the end-of-directory records; false when there is
// none to read.
bool find_directory(const Fields& f, uint64_t size, Directory& dir) {
  if (size < 22) return false;
  const uint64_t lowest = size > 22 + 65535 ? size - 22 - 65535 : 0;  // the comment is at most 64 KB
  for (uint64_t at = size - 22;; --at) {
    if (f.get(at, 4) == kEndOfDirectory) {
      dir = {f.get(at + 16, 4), f.get(at + 10, 2)};
      // A zip64 record, when there is one, is what the reader (miniz) goes by, whatever
      // the classic record says (libtorch writes both).
      if (at >= 20 && f.get(at - 20, 4) == kZip64Locator) {
        const uint64_t end64 = f.get(at - 20 + 8, 8);
        if (f.has(end64, 56) && f.get(end64, 4) == kZip64End) dir = {f.get(end64 + 48, 8), f.get(end64 + 32, 8)};
      }
      return true;
    }
    if (at == lowest) return false;
  }
}

}  // namespace

void check_zip_record_sizes(const std::vector<char>& bytes) {
  const Fields f(bytes);
  Directory dir;
  if (!find_directory(f, bytes.size(), dir)) return;
  uint64_t at = dir.offset;
  for (uint64_t i = 0; i < dir.entries && f.has(at, 46) && f.get(at, 4) == kDirectoryEntry; ++i) {
    const uint64_t method = f.get(at + 10, 2), name_length = f.get(at + 28, 2), extra_length = f.get(at + 30, 2),
                   comment_length = f.get(at + 32, 2);
    uint64_t compressed = f.get(at + 20, 4), uncompressed = f.get(at + 24, 4);
    // Saturated sizes are in the zip64 extra field (id 1): uncompressed first, then compressed.
    for (uint64_t e = at + 46 + name_length; f.has(e, 4) && e + 4 <= at + 46 + name_length + extra_length;) {
      const uint64_t id = f.get(e, 2), length = f.get(e + 2, 2);
      if (id == 1) {
        uint64_t field = e + 4;
        if (uncompressed == 0xffffffff && f.has(field, 8)) uncompressed = f.get(field, 8), field += 8;
        if (compressed == 0xffffffff && f.has(field, 8)) compressed = f.get(field, 8);
      }
      e += 4 + length;
    }
    const std::string name = f.has(at + 46, name_length) ? std::string(&bytes[at + 46], name_length) : "?";
    const uint64_t limit = method == 0 ? compressed : std::max<uint64_t>(compressed, 1) * kDeflateMaxRatio;
    if (compressed > bytes.size() || uncompressed > limit)
      throw Error("the archive's record " + name + " claims " + std::to_string(uncompressed) + " bytes from " +
                  std::to_string(compressed) + " in a file of " + std::to_string(bytes.size()));
    at += 46 + name_length + extra_length + comment_length;
  }
}

}  // namespace fastcpp
