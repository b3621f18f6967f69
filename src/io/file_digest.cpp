#include "io/file_digest.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include <openssl/evp.h>

#include "core/error.h"

namespace fp4lm::io {
namespace {

struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
struct FileClose {
  void operator()(FILE* f) const { std::fclose(f); }
};

std::string hex(const unsigned char* d, unsigned n) {
  static const char* k = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (unsigned i = 0; i < n; ++i) {
    s[2 * i] = k[d[i] >> 4];
    s[2 * i + 1] = k[d[i] & 15];
  }
  return s;
}

// Digest of `prefix` then the file's bytes.
std::string digest_file(const EVP_MD* md, const std::string& path, bool git_blob_prefix) {
  std::unique_ptr<FILE, FileClose> f(std::fopen(path.c_str(), "rb"));
  if (!f) fail("{}: cannot open: {}", path, std::strerror(errno));
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex(ctx.get(), md, nullptr) != 1) fail("{}: OpenSSL digest init failed", path);
  if (git_blob_prefix) {
    if (std::fseek(f.get(), 0, SEEK_END) != 0) fail("{}: cannot seek: {}", path, std::strerror(errno));
    const long size = std::ftell(f.get());
    std::rewind(f.get());
    const std::string prefix = "blob " + std::to_string(size);
    EVP_DigestUpdate(ctx.get(), prefix.data(), prefix.size() + 1);  // with its '\0'
  }
  std::vector<char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0) EVP_DigestUpdate(ctx.get(), buf.data(), n);
  if (std::ferror(f.get())) fail("{}: read error: {}", path, std::strerror(errno));
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_DigestFinal_ex(ctx.get(), out, &len);
  return hex(out, len);
}

}  // namespace

std::string sha256_file(const std::string& path) { return digest_file(EVP_sha256(), path, false); }
std::string git_blob_sha1_file(const std::string& path) { return digest_file(EVP_sha1(), path, true); }

std::string sha256_hex(const std::string& bytes) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_Digest(bytes.data(), bytes.size(), out, &len, EVP_sha256(), nullptr);
  return hex(out, len);
}

}  // namespace fp4lm::io
