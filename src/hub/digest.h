// Checksums of downloaded files, as the Hub states them: sha256 of the content (LFS files) and the git blob id
// (sha1 of "blob <size>\0" + content) of files kept in git. OpenSSL's libcrypto (already a dependency of
// cpp-httplib's TLS).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace ferry::hub {

enum class DigestKind { kSha256, kGitBlobSha1 };

// Lower-case hex digest of a file's contents; throws ferry::Error when it cannot be read.
std::string file_digest(const std::filesystem::path& path, DigestKind kind);
// Of bytes in memory (tests, small bodies).
std::string bytes_digest(std::string_view bytes, DigestKind kind);

}  // namespace ferry::hub
