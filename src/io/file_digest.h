#pragma once
// The two digests the Hugging Face Hub names files by: SHA-256 of the content (LFS files: the
// blob name and X-Linked-Etag) and git's blob SHA-1, sha1("blob <size>\0" + content) (the
// blob id and ETag of the small files kept in git). Lowercase hex. OpenSSL computes them.
#include <cstdint>
#include <string>

namespace fp4lm::io {

std::string sha256_file(const std::string& path);
std::string git_blob_sha1_file(const std::string& path);
// Of bytes in memory (tests, small files).
std::string sha256_hex(const std::string& bytes);

}  // namespace fp4lm::io
