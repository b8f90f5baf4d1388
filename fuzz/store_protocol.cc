// Fuzz target: the rendezvous store's wire format (src/bootstrap/store_protocol.h), the pure part: any bytes as a
// client hello and as request headers get the verdict the format's comment promises, and never an exception.
//   - check_hello accepts exactly the magic, this version and a token of at most kMaxTokenBytes.
//   - check_request accepts exactly the known ops with bounded key and value lengths (add: 8 bytes; get and erase:
//     none), reserved zero; what it refuses is named in a non-empty reason.
//   - A request encoded from the input's fields parses back to the same header.
// The server itself, fed the same bytes over a socket, is fuzz/store_server.cc.
#include "bootstrap/store_protocol.h"
#include "fuzz_support.h"

namespace sp = tbcoll::store_protocol;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tbcoll_fuzz::Reader in(data, size);
  const sp::Hello hello = in.take<sp::Hello>();
  const sp::Status verdict = sp::check_hello(hello);
  const bool ours = hello.magic == sp::kMagic && hello.token_len <= sp::kMaxTokenBytes;
  FUZZ_CHECK((verdict == sp::Status::kBadRequest) == !ours);
  FUZZ_CHECK((verdict == sp::Status::kOk) == (ours && hello.version == sp::kVersion));
  FUZZ_CHECK(sp::status_text(static_cast<uint32_t>(verdict)) != "");

  while (in.left() > 0) {
    const sp::RequestHeader request = in.take<sp::RequestHeader>();
    const std::string problem = sp::check_request(request);
    const bool known = request.op >= 1 && request.op <= 4;
    bool valid = known && request.key_len >= 1 && request.key_len <= sp::kMaxKeyBytes &&
                 request.value_len <= sp::kMaxValueBytes && request.reserved == 0;
    if (known) {
      const auto op = static_cast<sp::Op>(request.op);
      if (op == sp::Op::kAdd) valid = valid && request.value_len == 8;
      if (op == sp::Op::kGet || op == sp::Op::kErase) valid = valid && request.value_len == 0;
      FUZZ_CHECK(std::string(sp::op_name(op)) != "unknown op");
    }
    FUZZ_CHECK(problem.empty() == valid);
    // The server answers with any status; the client turns each into a message.
    FUZZ_CHECK(!sp::status_text(request.value_len).empty());

    // Encode and parse back: the bytes a client writes for these fields are the header the server reads.
    const sp::RequestHeader encoded{request.op, request.key_len, request.value_len, request.reserved};
    uint8_t bytes[sizeof(encoded)];
    std::memcpy(bytes, &encoded, sizeof(encoded));
    sp::RequestHeader decoded;
    std::memcpy(&decoded, bytes, sizeof(decoded));
    FUZZ_CHECK(sp::check_request(decoded) == problem);
  }
  return 0;
}
