#include "hub/digest.h"

#include <openssl/evp.h>

#include <cstdio>
#include <memory>
#include <vector>

#include "core/check.h"

namespace ferry::hub {
namespace {

class Hasher {
 public:
  explicit Hasher(DigestKind kind) : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
    FERRY_CHECK(ctx_ && EVP_DigestInit_ex(ctx_.get(), kind == DigestKind::kSha256 ? EVP_sha256() : EVP_sha1(), nullptr) == 1,
                "cannot start a checksum (OpenSSL)");
  }
  void update(const void* p, size_t n) { FERRY_CHECK(EVP_DigestUpdate(ctx_.get(), p, n) == 1, "checksum failed (OpenSSL)"); }
  std::string hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    FERRY_CHECK(EVP_DigestFinal_ex(ctx_.get(), md, &n) == 1, "checksum failed (OpenSSL)");
    static constexpr char kHex[] = "0123456789abcdef";
    std::string s;
    for (unsigned int i = 0; i < n; ++i) {
      s += kHex[md[i] >> 4];
      s += kHex[md[i] & 15];
    }
    return s;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx_;
};

void git_header(Hasher& h, DigestKind kind, uint64_t size) {
  if (kind != DigestKind::kGitBlobSha1) return;
  const std::string head = "blob " + std::to_string(size);
  h.update(head.data(), head.size() + 1);  // with its '\0'
}

}  // namespace

std::string file_digest(const std::filesystem::path& path, DigestKind kind) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  FERRY_CHECK(!ec, "cannot read '{}': {}", path.string(), ec.message());
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  FERRY_CHECK(f != nullptr, "cannot read '{}'", path.string());
  Hasher h(kind);
  git_header(h, kind, size);
  std::vector<char> buf(size_t(1) << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0) h.update(buf.data(), n);
  FERRY_CHECK(!std::ferror(f.get()), "cannot read '{}'", path.string());
  return h.hex();
}

std::string bytes_digest(std::string_view bytes, DigestKind kind) {
  Hasher h(kind);
  git_header(h, kind, bytes.size());
  h.update(bytes.data(), bytes.size());
  return h.hex();
}

}  // namespace ferry::hub
