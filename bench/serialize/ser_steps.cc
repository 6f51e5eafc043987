// Table 1: what each step of one message with a single 1024-byte payload field costs, for
// Protobuf, Cap'n Proto, FlatBuffers and the same payload sent as a scatter-gather list through
// nicmalloc. Steps are measured as cumulative prefixes of one message's life (a step of 50 ns is
// below what a clock read around it can resolve): BM_Steps/<serializer>/1_init runs init alone,
// 2_copy init + copy, 3_encode init + copy + encode, each ending with the message's teardown;
// 4_decode decodes one encoded message. report.py takes a step's cost as the difference of
// consecutive prefixes within one repetition. Each step is defined in README.md.
// Run with NICMALLOC_BACKEND=sim (nic_sga_init needs a backend); --benchmark_repetitions gives
// the spread.
#include <benchmark/benchmark.h>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/io.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "echo.capnp.h"
#include "echo.pb.h"
#include "echo_generated.h"
#include "nicmalloc.h"

namespace {

constexpr size_t kPayload = 1024;

// The application's payload: ordinary memory for the serializers, which copy it into their
// message; a dataplane block for the SG path, which sends it where it lies.
const uint8_t *Source() {
  static std::vector<uint8_t> src = [] {
    std::vector<uint8_t> v(kPayload);
    for (size_t i = 0; i < v.size(); i++)
      v[i] = static_cast<uint8_t>(i * 7 + 1);
    return v;
  }();
  return src.data();
}

// The SG message on the wire: this header, then the payload.
struct SgHeader {
  uint32_t len;
  uint32_t magic;
};
constexpr uint32_t kMagic = 0x53474d31;

uint8_t *DataplanePayload() {
  static uint8_t *p = [] {
    auto *b = static_cast<uint8_t *>(nic_malloc(kPayload));
    memcpy(b, Source(), kPayload);
    return b;
  }();
  return p;
}

// ---- Protobuf ----
void Protobuf(benchmark::State &state, int upto) {
  static std::vector<uint8_t> out(kPayload + 64);
  for (auto _ : state) {
    serbench::Echo m; // init (the destructor at the end of the iteration counts with it)
    if (upto >= 2) m.set_payload(Source(), kPayload);
    if (upto >= 3) {
      const size_t n = m.ByteSizeLong();
      m.SerializeWithCachedSizesToArray(out.data());
      benchmark::DoNotOptimize(n);
    }
    benchmark::ClobberMemory();
  }
}

void ProtobufDecode(benchmark::State &state) {
  serbench::Echo m;
  m.set_payload(Source(), kPayload);
  const std::string wire = m.SerializeAsString();
  for (auto _ : state) {
    serbench::Echo r;
    if (!r.ParseFromArray(wire.data(), static_cast<int>(wire.size())) ||
        r.payload().size() != kPayload)
      state.SkipWithError("parse failed");
    benchmark::DoNotOptimize(r.payload().data());
  }
}

// ---- Cap'n Proto ----
void Capnp(benchmark::State &state, int upto) {
  static std::vector<capnp::word> out(kPayload / 8 + 64);
  for (auto _ : state) {
    capnp::MallocMessageBuilder b; // init: the builder and its first (zeroed) segment
    auto root = b.initRoot<Echo>();
    if (upto >= 2) root.setPayload(capnp::Data::Reader(Source(), kPayload));
    if (upto >= 3) { // the segment table and the segments, into one transmit buffer
      kj::ArrayOutputStream os(
          kj::arrayPtr(reinterpret_cast<kj::byte *>(out.data()), out.size() * sizeof(capnp::word)));
      capnp::writeMessage(os, b);
      benchmark::DoNotOptimize(os.getArray().size());
    }
    benchmark::ClobberMemory();
  }
}

void CapnpDecode(benchmark::State &state) {
  capnp::MallocMessageBuilder b;
  b.initRoot<Echo>().setPayload(capnp::Data::Reader(Source(), kPayload));
  const kj::Array<capnp::word> wire = capnp::messageToFlatArray(b);
  for (auto _ : state) {
    capnp::FlatArrayMessageReader r(wire);
    auto p = r.getRoot<Echo>().getPayload();
    if (p.size() != kPayload) state.SkipWithError("read failed");
    benchmark::DoNotOptimize(p.begin());
  }
}

// ---- FlatBuffers ----
void Flatbuffers(benchmark::State &state, int upto) {
  for (auto _ : state) {
    flatbuffers::FlatBufferBuilder fbb(kPayload + 64); // init (its buffer comes at first write)
    if (upto >= 2) {
      auto v = fbb.CreateVector(Source(), kPayload);
      if (upto >= 3) {
        serbench::fb::FinishEchoBuffer(fbb, serbench::fb::CreateEcho(fbb, v));
        benchmark::DoNotOptimize(fbb.GetBufferPointer());
        benchmark::DoNotOptimize(fbb.GetSize());
      }
    }
    benchmark::ClobberMemory();
  }
}

void FlatbuffersDecode(benchmark::State &state) {
  flatbuffers::FlatBufferBuilder fbb;
  serbench::fb::FinishEchoBuffer(
      fbb, serbench::fb::CreateEcho(fbb, fbb.CreateVector(Source(), kPayload)));
  std::vector<uint8_t> wire(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  for (auto _ : state) {
    flatbuffers::Verifier v(wire.data(), wire.size());
    if (!serbench::fb::VerifyEchoBuffer(v)) state.SkipWithError("verify failed");
    auto *p = serbench::fb::GetEcho(wire.data())->payload();
    benchmark::DoNotOptimize(p->data());
    benchmark::DoNotOptimize(p->size());
  }
}

// ---- nicmalloc SG list: [header][payload], the payload a dataplane block ----
void Sg(benchmark::State &state, int upto) {
  uint8_t *payload = DataplanePayload();
  for (auto _ : state) {
    nic_sga sga;
    if (nic_sga_init(&sga, 0)) state.SkipWithError("nic_sga_init (NICMALLOC_BACKEND=sim?)");
    SgHeader h;
    if (upto >= 2) { // "copy": nothing to copy; the header is filled in
      h = {static_cast<uint32_t>(kPayload), kMagic};
      benchmark::DoNotOptimize(h);
    }
    if (upto >= 3 && // encode: each entry resolved (the short header copied to a bounce area)
        (nic_sga_add(&sga, &h, sizeof h) || nic_sga_add(&sga, payload, kPayload)))
      state.SkipWithError("nic_sga_add");
    nic_sga_reset(&sga); // teardown: what the post's completion would release
    benchmark::ClobberMemory();
  }
}

// The same message with its header written in front of the payload, in the payload's dataplane
// block: one entry of 1032 bytes, nothing copied.
void SgInline(benchmark::State &state, int upto) {
  static uint8_t *msg = static_cast<uint8_t *>(nic_malloc(sizeof(SgHeader) + kPayload));
  static const bool filled = (memcpy(msg + sizeof(SgHeader), Source(), kPayload), true);
  benchmark::DoNotOptimize(filled);
  for (auto _ : state) {
    nic_sga sga;
    if (nic_sga_init(&sga, 0)) state.SkipWithError("nic_sga_init (NICMALLOC_BACKEND=sim?)");
    if (upto >= 2) { // "copy": the header written in place
      const SgHeader h = {static_cast<uint32_t>(kPayload), kMagic};
      memcpy(msg, &h, sizeof h);
    }
    if (upto >= 3 && nic_sga_add(&sga, msg, sizeof(SgHeader) + kPayload))
      state.SkipWithError("nic_sga_add");
    nic_sga_reset(&sga);
    benchmark::ClobberMemory();
  }
}

void SgDecode(benchmark::State &state) {
  // A received message in dataplane memory, read where it landed.
  static uint8_t *msg = [] {
    auto *m = static_cast<uint8_t *>(nic_malloc(sizeof(SgHeader) + kPayload));
    SgHeader h = {static_cast<uint32_t>(kPayload), kMagic};
    memcpy(m, &h, sizeof h);
    memcpy(m + sizeof h, Source(), kPayload);
    return m;
  }();
  const size_t len = sizeof(SgHeader) + kPayload;
  for (auto _ : state) {
    benchmark::DoNotOptimize(msg);
    SgHeader h;
    memcpy(&h, msg, sizeof h);
    if (h.magic != kMagic || h.len != len - sizeof h) state.SkipWithError("bad message");
    const uint8_t *p = msg + sizeof h;
    benchmark::DoNotOptimize(p);
  }
}

void Register() {
  struct Ser {
    const char *name;
    void (*steps)(benchmark::State &, int);
    void (*decode)(benchmark::State &);
  };
  static const Ser sers[] = {{"protobuf", Protobuf, ProtobufDecode},
                             {"capnp", Capnp, CapnpDecode},
                             {"flatbuffers", Flatbuffers, FlatbuffersDecode},
                             {"sg", Sg, SgDecode},
                             {"sg-inline", SgInline, SgDecode}};
  static const char *prefix[] = {"1_init", "2_copy", "3_encode"};
  for (const Ser &s : sers) {
    for (int upto = 1; upto <= 3; upto++)
      benchmark::RegisterBenchmark(
          (std::string("BM_Steps/") + s.name + "/" + prefix[upto - 1]).c_str(),
          [f = s.steps, upto](benchmark::State &st) { f(st, upto); });
    benchmark::RegisterBenchmark((std::string("BM_Steps/") + s.name + "/4_decode").c_str(),
                                 s.decode);
  }
}

} // namespace

int main(int argc, char **argv) {
  GOOGLE_PROTOBUF_VERIFY_VERSION;
  // The backend opens at the first SG call, and the payload's chunk is registered at its first
  // entry: both before any measurement.
  nic_sga warm;
  if (nic_sga_init(&warm, 0) == 0) {
    nic_sga_add(&warm, DataplanePayload(), kPayload);
    nic_sga_reset(&warm);
  }
  // The backend the SG rows really ran on (the report labels them with it), whatever the
  // environment was meant to choose.
  nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  benchmark::AddCustomContext("nicmalloc_backend", s.backend ? s.backend : "none");
  Register();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
