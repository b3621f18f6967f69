// Writing safetensors atomically: SafetensorsStreamWriter does the file work (temp file in the
// target's directory, header, data, fsync, rename); SafetensorsWriter collects tensors in memory
// and streams them through it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/safetensors.h"

namespace fp4lm::io {

namespace {

// numel x dtype_size, or Error naming the tensor when the shape is invalid or too large.
size_t checked_nbytes(const std::string& path, const std::string& name, DType dtype,
                      const Shape& shape) {
  uint64_t numel = 1;
  bool overflow = false;
  for (int64_t d : shape) {
    if (d < 0) fail("{}: tensor '{}': shape {} has a negative dimension", path, name, shape_str(shape));
    overflow = overflow || __builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel);
  }
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) numel = 0, overflow = false;
  uint64_t nbytes = 0;
  if (overflow || numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
      __builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(dtype)), &nbytes) ||
      nbytes > std::numeric_limits<size_t>::max())
    fail("{}: tensor '{}': shape {} has too many elements", path, name, shape_str(shape));
  return static_cast<size_t>(nbytes);
}

void check_name(const std::string& where, const std::string& name) {
  if (name.empty()) fail("{}: a tensor name must not be empty", where);
  if (name == "__metadata__") fail("{}: '__metadata__' is reserved and cannot name a tensor", where);
}

void write_all_at(int fd, const void* data, size_t n, uint64_t offset, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    // Large writes are split: Linux transfers at most ~2 GiB per call.
    size_t chunk = std::min<size_t>(n, size_t{1} << 30);
    ssize_t w = ::pwrite(fd, p, chunk, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      fail("{}: write failed: {}", path, std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
}

}  // namespace

// ---------------------------------------------------------------- SafetensorsStreamWriter

SafetensorsStreamWriter::SafetensorsStreamWriter(const std::string& path, Layout layout,
                                                 std::map<std::string, std::string> metadata)
    : path_(path) {
  // Data order: decreasing element size (stable), so with the data area starting at a multiple
  // of 8 every tensor is naturally aligned. Offsets stay contiguous (no gaps), as other
  // safetensors readers require.
  std::vector<size_t> order(layout.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return dtype_size(std::get<1>(layout[a])) > dtype_size(std::get<1>(layout[b]));
  });

  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<uint64_t> data_offset(layout.size());
  uint64_t pos = 0;
  for (size_t i : order) {
    const auto& [name, dtype, shape] = layout[i];
    check_name(path, name);
    if (header.contains(name)) fail("{}: tensor '{}' declared twice", path, name);
    size_t nbytes = checked_nbytes(path, name, dtype, shape);
    header[name] = {{"dtype", dtype_name(dtype)},
                    {"shape", shape},
                    {"data_offsets", {pos, pos + nbytes}}};
    data_offset[i] = pos;
    pos += nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // pad so the data area starts 8-aligned
  if (text.size() > kMaxSafetensorsHeaderBytes)
    fail("{}: safetensors header would be {} bytes, over the 100 MiB limit", path, text.size());

  slots_.reserve(layout.size());
  const uint64_t data_start = 8 + text.size();
  for (size_t i = 0; i < layout.size(); ++i)
    slots_.push_back({std::get<0>(layout[i]),
                      checked_nbytes(path, std::get<0>(layout[i]), std::get<1>(layout[i]),
                                     std::get<2>(layout[i])),
                      data_start + data_offset[i]});

  // The temp file sits in the target's directory so the final rename cannot cross filesystems.
  std::filesystem::path target(path);
  std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : ".";
  std::string templ = (dir / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  fd_ = ::mkstemp(buf.data());
  if (fd_ < 0) fail("{}: cannot create a temporary file in {}: {}", path, dir.string(), std::strerror(errno));
  temp_path_ = buf.data();
  ::fchmod(fd_, 0644);  // mkstemp creates 0600; checkpoints are meant to be shared

  try {
    uint8_t len[8];
    uint64_t n = text.size();
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
    write_all_at(fd_, len, 8, 0, temp_path_);
    write_all_at(fd_, text.data(), text.size(), 8, temp_path_);
    // Size the file now: zero-length tensors need no write, and a short file can't be renamed.
    if (::ftruncate(fd_, static_cast<off_t>(data_start + pos)) != 0)
      fail("{}: cannot size the file to {} bytes: {}", temp_path_, data_start + pos,
           std::strerror(errno));
  } catch (...) {
    abort();
    throw;
  }
}

void SafetensorsStreamWriter::write_tensor(const std::string& name, const void* data,
                                           size_t nbytes) {
  if (fd_ < 0) fail("{}: write_tensor('{}') after the writer finished or failed", path_, name);
  if (next_ >= slots_.size())
    fail("{}: tensor '{}' written, but all {} declared tensors are already written", path_, name,
         slots_.size());
  const Slot& s = slots_[next_];
  if (name != s.name)
    fail("{}: tensor '{}' written out of order; expected '{}' (tensor {} of {})", path_, name,
         s.name, next_ + 1, slots_.size());
  if (nbytes != s.nbytes)
    fail("{}: tensor '{}': {} bytes given, the declared shape needs {}", path_, name, nbytes,
         s.nbytes);
  try {
    if (nbytes > 0) write_all_at(fd_, data, nbytes, s.file_offset, temp_path_);
  } catch (...) {
    abort();
    throw;
  }
  ++next_;
}

void SafetensorsStreamWriter::finish() {
  if (finished_) return;
  if (fd_ < 0) fail("{}: finish() after a failed write", path_);
  if (next_ != slots_.size())
    fail("{}: finish() with {} of {} tensors written; next expected '{}'", path_, next_,
         slots_.size(), slots_[next_].name);
  try {
    if (::fsync(fd_) != 0) fail("{}: fsync failed: {}", temp_path_, std::strerror(errno));
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) {
      fail("{}: close failed: {}", temp_path_, std::strerror(errno));
    }
    if (::rename(temp_path_.c_str(), path_.c_str()) != 0)
      fail("{}: cannot rename {} to it: {}", path_, temp_path_, std::strerror(errno));
  } catch (...) {
    abort();
    throw;
  }
  finished_ = true;
}

void SafetensorsStreamWriter::abort() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
  temp_path_.clear();
}

SafetensorsStreamWriter::~SafetensorsStreamWriter() {
  if (!finished_) abort();
}

// ---------------------------------------------------------------- SafetensorsWriter

void SafetensorsWriter::add(const std::string& name, DType dtype, Shape shape, const void* data,
                            size_t nbytes) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  if (!p && nbytes) fail("SafetensorsWriter: tensor '{}': null data with {} bytes", name, nbytes);
  add(name, dtype, std::move(shape), p ? std::vector<uint8_t>(p, p + nbytes) : std::vector<uint8_t>());
}

void SafetensorsWriter::add(const std::string& name, DType dtype, Shape shape,
                            std::vector<uint8_t> bytes) {
  check_name("SafetensorsWriter", name);
  if (names_.count(name)) fail("SafetensorsWriter: tensor '{}' added twice", name);
  size_t expect = checked_nbytes("SafetensorsWriter", name, dtype, shape);
  if (bytes.size() != expect)
    fail("SafetensorsWriter: tensor '{}': {} bytes given, shape {} of {} needs {}", name,
         bytes.size(), shape_str(shape), dtype_name(dtype), expect);
  names_.emplace(name, tensors_.size());
  tensors_.push_back({name, dtype, std::move(shape), std::move(bytes)});
}

void SafetensorsWriter::write(const std::string& path) const {
  SafetensorsStreamWriter::Layout layout;
  layout.reserve(tensors_.size());
  for (const auto& t : tensors_) layout.emplace_back(t.name, t.dtype, t.shape);
  SafetensorsStreamWriter w(path, std::move(layout), metadata_);
  for (const auto& t : tensors_) w.write_tensor(t.name, t.bytes.data(), t.bytes.size());
  w.finish();
}

}  // namespace fp4lm::io
