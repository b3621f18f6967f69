#pragma once
// The chat page `fp4lm serve` answers at / (src/server/web/: plain HTML, CSS and JavaScript,
// compiled into the binary by src/server/web/embed.cmake): which request path is which file,
// with its content type and the headers every asset is sent with.
#include <cstddef>
#include <span>
#include <string_view>

#include "server/http_message.h"

namespace fp4lm::server {

// One file of src/server/web as compiled in (the generated web_assets_data.cpp).
struct EmbeddedFile {
  const char* name;  // "index.html", "app.js", ...
  const unsigned char* data;
  size_t size;
};
std::span<const EmbeddedFile> embedded_web_files();

// The file a GET path names ("/" is index.html, "/app.js" app.js), or null.
const EmbeddedFile* find_web_asset(std::string_view path);
// "text/html; charset=utf-8", "text/javascript; charset=utf-8", ... by the name's extension.
std::string_view web_content_type(std::string_view name);
// 200 with the file, its content type, and headers that keep the page to its own origin
// (Content-Security-Policy: no inline script, no request to another origin) and fresh after an
// upgrade of the binary (Cache-Control: no-cache).
HttpResponse web_asset_response(const EmbeddedFile& f);
// The bytes of every file together (docs/SERVER.md states it; the tests check it stays small).
size_t web_assets_bytes();

}  // namespace fp4lm::server
