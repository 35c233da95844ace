// A read-only memory map of a whole file. Model weights are used in place from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ferry {

// Throws ferry::Error unless `path` names a regular file (after symlinks). Checked before open(): opening a
// FIFO for reading blocks until a writer comes, forever if none does.
void check_regular_file(const std::string& path);

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // throws ferry::Error naming the path and errno
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ferry
