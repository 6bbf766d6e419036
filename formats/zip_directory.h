#pragma once
// The sizes a zip archive's central directory claims for its records, checked against
// the archive itself before libtorch's reader sees it: that reader allocates a record's
// claimed size before reading it (a 2.7 KB file claiming a 4 GB record took 8 GB, found
// by fuzzing).
#include <vector>

namespace fastcpp {

// Throws fastcpp::Error unless every record's compressed bytes lie inside `bytes` and its
// uncompressed size is one those bytes can hold: the same size when stored, at most
// deflate's 1032:1 when deflated. An archive without a readable directory passes; the
// zip reader refuses it then.
void check_zip_record_sizes(const std::vector<char>& bytes);

}  // namespace fastcpp
