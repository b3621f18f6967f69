#include "server/web_assets.h"

#include <string>

namespace fp4lm::server {

const EmbeddedFile* find_web_asset(std::string_view path) {
  if (path == "/") path = "/index.html";
  if (path.size() < 2 || path[0] != '/') return nullptr;
  path.remove_prefix(1);
  for (const EmbeddedFile& f : embedded_web_files())
    if (path == f.name) return &f;
  return nullptr;
}

std::string_view web_content_type(std::string_view name) {
  const auto ends = [&](std::string_view ext) { return name.ends_with(ext); };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".svg")) return "image/svg+xml";
  if (ends(".png")) return "image/png";
  return "application/octet-stream";
}

HttpResponse web_asset_response(const EmbeddedFile& f) {
  HttpResponse r;
  r.status = 200;
  r.content_type = std::string(web_content_type(f.name));
  r.body.assign(reinterpret_cast<const char*>(f.data), f.size);
  // data: images are what a pasted or attached image becomes (the vision path); blob: none.
  r.headers = {{"Cache-Control", "no-cache"},
               {"X-Content-Type-Options", "nosniff"},
               {"Content-Security-Policy",
                "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
                "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"},
               {"Referrer-Policy", "no-referrer"}};
  return r;
}

size_t web_assets_bytes() {
  size_t n = 0;
  for (const EmbeddedFile& f : embedded_web_files()) n += f.size;
  return n;
}

}  // namespace fp4lm::server
