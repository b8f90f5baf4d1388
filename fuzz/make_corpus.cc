// Writes the fuzz targets' seed corpus: a few valid inputs and edge cases per target, built with the encoders the
// library uses, so the fuzzers start from inputs that reach deep into each parser. Usage: tbcoll_fuzz_corpus DIR
// (writes DIR/<target>/seed-<name>; tools/fuzz.sh --seeds regenerates fuzz/corpus). Inputs that once found a bug
// are kept beside the seeds as regress-<name>, written by hand, never by this program.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bootstrap/rendezvous.h"
#include "bootstrap/store_protocol.h"
#include "gguf_writer.h"
#include "transports/ibverbs/wire.h"
#include "transports/tcp/wire.h"

namespace {

std::filesystem::path out_dir;

void seed(const std::string& target, const std::string& name, const std::string& bytes) {
  const std::filesystem::path dir = out_dir / target;
  std::filesystem::create_directories(dir);
  std::ofstream(dir / ("seed-" + name), std::ios::binary) << bytes;
}

template <typename T>
std::string raw(const T& value) {
  return std::string(reinterpret_cast<const char*>(&value), sizeof(value));
}

std::string frame(uint8_t kind, uint8_t flags, uint32_t seq, const std::string& payload, uint32_t total) {
  namespace wire = tbcoll::ibverbs::wire;
  wire::Header header;
  header.kind = kind;
  header.flags = flags;
  header.seq = seq;
  header.credits = 3;
  header.payload = static_cast<uint32_t>(payload.size());
  header.flags |= wire::kSummed;
  header.total = total;
  header.comm_id = 0x1234;
  header.tag = 7;
  header.meta = 0x99;
  header.payload_sum = wire::payload_sum(reinterpret_cast<const uint8_t*>(payload.data()), payload.size());
  wire::seal(header);
  return raw(header) + payload;
}

void ibverbs() {
  namespace wire = tbcoll::ibverbs::wire;
  seed("ibverbs_wire", "data-frame", frame(1, 3, 0, "hello, world: a payload of a few bytes", 38));
  seed("ibverbs_wire", "credit-frame", frame(2, 0, 41, "", 0));
  seed("ibverbs_wire", "full-frame", frame(1, 1, 5, std::string(wire::kPayloadBytes, '\x5a'), 1 << 20));
  seed("ibverbs_wire", "short", "tb");
  wire::Hello hello;
  std::snprintf(hello.key, sizeof(hello.key), "host-a:1234:5678");
  std::snprintf(hello.peer_key, sizeof(hello.peer_key), "host-b:99:42");
  hello.qp_num = 17;
  hello.mtu = 3;
  hello.mode = 1;
  hello.recv_depth = 32;
  hello.bulk_qp_num = 18;
  hello.bulk_depth = 8;
  hello.slot_bytes = 512 * 1024;
  hello.token_bytes = 9;
  const wire::Notice abort_notice{static_cast<uint32_t>(wire::NoticeKind::kAbort), 0, 0x1234};
  // Port addresses as Port::address() writes them: "key|host:port|device|mode", mode uc, rc, uc+auto or rc+auto.
  seed("ibverbs_handshake", "hello-notice-address",
       raw(hello) + raw(abort_notice) + "host-a:1234:5678|192.168.1.2:40000|rdma_en3|uc");
  seed("ibverbs_handshake", "v6-address", raw(hello) + raw(abort_notice) + "k|[fe80::1]:1|rxe0|rc+auto");
  seed("ibverbs_handshake", "auto-mode",
       raw(hello) + raw(abort_notice) + "4d2.0.rdma_en0.9f3c|10.0.0.1:5|rdma_en0|uc+auto");
  // Refused: the 3-field address of wire version 1 (no mode), and an unknown mode.
  seed("ibverbs_handshake", "old-address", raw(hello) + raw(abort_notice) + "k|10.0.0.1:5|rdma_en0");
  seed("ibverbs_handshake", "bad-mode", raw(hello) + raw(abort_notice) + "k|10.0.0.1:5|rdma_en0|ud+auto");
  hello.version = 99;
  seed("ibverbs_handshake", "bad-version", raw(hello) + raw(abort_notice) + "k||d|uc");
}

void tcp() {
  namespace tcp = tbcoll::tcp;
  const std::string token = "job-token";
  const tcp::Hello hello{tcp::kHelloMagic, tcp::kProtocolVersion, static_cast<uint16_t>(token.size()), 0, 1, 42};
  // The target reads a cut count and cut sizes first, then the handshake bytes.
  seed("tcp_handshake", "accepted", std::string("\x02\x05\x10", 3) + raw(hello) + token);
  seed("tcp_handshake", "whole", std::string("\x00", 1) + raw(hello) + token);
  tcp::Hello long_token = hello;
  long_token.token_len = 2000;
  seed("tcp_handshake", "token-too-long", std::string("\x00", 1) + raw(long_token));
  seed("tcp_handshake", "garbage", std::string("\x00GET / HTTP/1.1\r\n\r\n", 20));
}

std::string store_request(tbcoll::store_protocol::Op op, const std::string& key, const std::string& value) {
  const tbcoll::store_protocol::RequestHeader header{static_cast<uint32_t>(op), static_cast<uint32_t>(key.size()),
                                                     static_cast<uint32_t>(value.size()), 0};
  return raw(header) + key + value;
}

void store() {
  namespace sp = tbcoll::store_protocol;
  const std::string token = "fuzz-token";
  const std::string hello = raw(sp::Hello{sp::kMagic, sp::kVersion, 0, static_cast<uint32_t>(token.size())}) + token;
  const int64_t one = 1;
  const std::string session = hello + store_request(sp::Op::kSet, "job/peer/0", "host=a\npid=1\n") +
                              store_request(sp::Op::kGet, "job/peer/0", "") +
                              store_request(sp::Op::kAdd, "job/read", raw(one)) +
                              store_request(sp::Op::kErase, "job/peer/0", "");
  seed("store_server", "session", session);
  seed("store_server", "parked-get", hello + store_request(sp::Op::kGet, "never/set", ""));
  seed("store_server", "wrong-token", raw(sp::Hello{sp::kMagic, sp::kVersion, 0, 5}) + "wrong");
  seed("store_server", "old-version", raw(sp::Hello{sp::kMagic, 1, 0, 0}));
  seed("store_server", "body-cut-short", hello + raw(sp::RequestHeader{1, 4000, 100000, 0}) + "abc");
  seed("store_protocol", "hello-and-requests", session);
  seed("store_protocol", "bad-requests",
       raw(sp::Hello{sp::kMagic, 1, 0, 5000}) + raw(sp::RequestHeader{9, 0, 0, 0}) +
           raw(sp::RequestHeader{3, 4, 7, 0}) + raw(sp::RequestHeader{2, 4, 1, 0}) +
           raw(sp::RequestHeader{1, 4097, 0, 0}) + raw(sp::RequestHeader{1, 1, 0, 1}));
}

void rendezvous() {
  namespace bs = tbcoll::bootstrap;
  bs::Published p;
  p.info.host_id = "a1b2c3d4-host";
  p.info.process_id = (uint64_t{4242} << 32) ^ 0x55aa;
  p.kernel = "6.1.0-13-amd64 #1 SMP";
  p.cpus = {0, 1, 2, 3, 6};
  p.world_size = 3;
  p.addresses["shm"] = "tbcoll-1234-0";
  p.addresses["tcp"] = "192.168.1.2:40001";
  p.addresses["ibverbs"] = "host-a:1:2|192.168.1.2:40002|rdma_en3";
  seed("rendezvous", "record", bs::encode(p));
  seed("rendezvous", "odd-record", "host=x=y\nno equals sign\npid=18446744073709551615\nworld=99999999999\ncpus=0-2,a\n"
                                   "dev.=empty name\nfuture.key=1\n");
  seed("rendezvous", "bad-pid", "pid=-1\n");
  seed("rendezvous", "host-port", "[::1]:65535");
}

void gguf() {
  tbcoll_fuzz::GgufWriter model;
  model.str("general.architecture", "llama");
  model.u32("llama.block_count", 1);
  model.u32("llama.embedding_length", 8);
  model.f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  model.strings("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b", "\xE2\x96\x81" "a", "<0x41>"});
  model.floats("tokenizer.ggml.scores", {0, 0, 0, -1, -2, -2, -0.5f, 0});
  model.ints("tokenizer.ggml.token_type", {2, 3, 3, 1, 1, 1, 1, 6});
  std::string f32(8 * 2 * 4, '\0');
  for (size_t i = 0; i < f32.size(); i += 4) f32[i + 3] = '\x3f';  // 0.5f-ish
  model.tensor("token_embd.weight", 0, {8, 2}, f32);
  model.tensor("output_norm.weight", 1, {8}, std::string(16, '\x3c'));
  std::string q8(34 * 2, '\x01');
  model.tensor("blk.0.ffn_up.weight", 8, {32, 2}, q8);
  const std::string file = model.file();
  seed("gguf", "tiny-model", file);
  seed("gguf", "truncated", file.substr(0, file.size() / 2));
  seed("gguf", "header-only", std::string("GGUF\x03\0\0\0", 8) + std::string(16, '\0'));
}

void tokenizer() {
  // flags | vocabulary length (u16) | pieces, one a line | text
  const std::string vocab = "\xE2\x96\x81t\nhe\nthe\n\xE2\x96\x81the\nis\n\xE2\x96\x81is\n\xC3\xA9t\xC3\xA9\n<0x\n41>";
  std::string input("\x03", 1);
  input += static_cast<char>(vocab.size() & 0xff);
  input += static_cast<char>(vocab.size() >> 8);
  seed("tokenizer", "english", input + vocab + "the cat is there. \xC3\xA9t\xC3\xA9 \xF0\x9F\x98\x80 <0x41>");
  seed("tokenizer", "empty-text", input + vocab);
  seed("tokenizer", "bytes", std::string("\x00\x00\x00", 3) + std::string("\x01\x7f\x80\xff\t\n", 6));
}

// C API programs (fuzz/c_api.cc): each step is (selector, communicator pick, fields); the selector's bits 5-7 pick
// the kind of call. One program per kind, and one that mixes them.
void c_api() {
  auto program = [](std::initializer_list<int> kinds, int steps, unsigned salt) {
    std::string out;
    unsigned x = salt;
    for (int i = 0; i < steps; ++i) {
      const int kind = *(kinds.begin() + i % static_cast<int>(kinds.size()));
      out += static_cast<char>(kind * 32 + i % 3);
      out += static_cast<char>(i % 7);
      for (int field = 0; field < 12; ++field) {
        x = x * 1103515245u + 12345u;
        out += static_cast<char>((x >> 16) % (field % 3 == 0 ? 70 : 256));
      }
    }
    return out;
  };
  seed("c_api", "collectives", program({0, 1}, 24, 1));
  seed("c_api", "requests", program({2, 3, 2, 3, 3}, 20, 2));
  seed("c_api", "memory", program({4}, 24, 3));
  seed("c_api", "lifetime", program({0, 5, 0, 7}, 24, 4));
  seed("c_api", "groups", program({6, 0, 1, 6, 2}, 30, 5));
  seed("c_api", "mixed", program({0, 1, 2, 3, 4, 5, 6, 7}, 48, 6));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR (writes DIR/<target>/seed-*)\n", argv[0]);
    return 2;
  }
  out_dir = argv[1];
  ibverbs();
  tcp();
  store();
  rendezvous();
  gguf();
  tokenizer();
  c_api();
  return 0;
}
