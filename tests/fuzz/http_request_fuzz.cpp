// Fuzz target for common/http_server.h's parse_request, what `rgpu-server --metrics-listen` runs on
// every byte a peer sends: any bytes must parse, wait for more, or be refused with an error status,
// without reading past the end; an accepted request names GET or HEAD and a path that starts with
// '/', and the answer formats.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/http_server.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rgpu::http;
  std::vector<char> exact(data, data + size);  // ASan sees a read past the input
  Request req;
  Response err;
  switch (parse_request(std::string_view(exact.data(), exact.size()), &req, &err)) {
    case Parse::kOk:
      if ((req.method != "GET" && req.method != "HEAD") || req.path.empty() || req.path[0] != '/') abort();
      break;
    case Parse::kError:
      if (err.status < 400 || err.status > 599 || format_response(err, false).rfind("HTTP/1.1 ", 0) != 0) abort();
      break;
    case Parse::kIncomplete:
      if (size >= kMaxHead) abort();
      break;
  }
  return 0;
}

void rgpu_fuzz_seeds(std::vector<std::vector<uint8_t>>* out) {
  for (const char* s : {"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:9714\r\nAccept: */*\r\n\r\n",
                        "HEAD /healthz HTTP/1.0\r\n\r\n", "GET /metrics?name[]=x HTTP/1.1\r\nHost: a\r\n\r\n",
                        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n"}) {
    std::string t(s);
    out->emplace_back(t.begin(), t.end());
  }
}
