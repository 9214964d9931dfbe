// libFuzzer target: DecodeExportedModel (schema/serving/model_io.h) on arbitrary bytes.
#include "fuzz/round_trip_check.h"
#include "schema/serving/model_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tessera::fuzz::CheckReader<tessera::ExportedModel>(
      data, size, tessera::schema_internal::FileKind::kModel, &tessera::DecodeExportedModel,
      &tessera::EncodeExportedModel);
}
