// libFuzzer target: DecodeSlice (schema/checkpoint/checkpoint_io.h) on arbitrary bytes.
#include "fuzz/round_trip_check.h"
#include "schema/checkpoint/checkpoint_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tessera::fuzz::CheckReader<tessera::TensorSlice>(
      data, size, tessera::schema_internal::FileKind::kSlice, &tessera::DecodeSlice,
      &tessera::EncodeSlice);
}
