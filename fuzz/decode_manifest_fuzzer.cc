// libFuzzer target: DecodeManifest (schema/checkpoint/checkpoint_io.h) on arbitrary bytes.
#include "fuzz/round_trip_check.h"
#include "schema/checkpoint/checkpoint_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tessera::fuzz::CheckReader<tessera::CheckpointManifest>(
      data, size, tessera::schema_internal::FileKind::kManifest, &tessera::DecodeManifest,
      &tessera::EncodeManifest);
}
