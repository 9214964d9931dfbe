// libFuzzer target: DelimitedTextSource (tessera/delimited_text.h) on arbitrary bytes, plain or
// gzip, with and without skip_bad_lines. The first input byte picks the format and the flag;
// the rest is the file. Whatever Open accepts must read back every row it indexed, in one batch
// and row by row, with one row per example in every feature; nothing may crash or hang.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/base/mem_env.h"
#include "tessera/data.h"
#include "tessera/delimited_text.h"

namespace {

bool SameRows(const tessera::Batch& batch, int64_t n) {
  if (batch.size != n || batch.labels.rows() != n) return false;
  for (const auto& [name, ids] : batch.ids) {
    if (static_cast<int64_t>(ids.size()) != n) return false;
  }
  for (const auto& [name, list] : batch.id_lists) {
    if (list.num_rows() != n) return false;
  }
  for (const auto& [name, value] : batch.dense) {
    if (value.rows() != n) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t choice = data[0];
  tessera::TextFormat format = tessera::CriteoFormat();
  if (choice & 1) {
    // A short layout with every kind of column, so that small inputs reach the list parser.
    absl::StatusOr<tessera::TextFormat> spec =
        tessera::ParseTextFormat("label,dense:x*2,cat:c,list:tags:|,skip", ',');
    if (!spec.ok()) std::abort();
    format = *std::move(spec);
  }
  format.skip_bad_lines = (choice & 2) != 0;
  std::unique_ptr<tessera::MemEnv> env = tessera::NewMemEnv();
  const std::string path = "/data.txt";
  if (!tessera::WriteFileAtomically(*env, path,
                                    std::string(reinterpret_cast<const char*>(data) + 1, size - 1),
                                    /*sync_directory=*/false)
           .ok()) {
    std::abort();
  }
  absl::StatusOr<std::shared_ptr<const tessera::DelimitedTextSource>> source =
      tessera::DelimitedTextSource::Open({path}, format, env.get());
  if (!source.ok()) return 0;
  const int64_t n = (*source)->size();
  std::vector<int64_t> rows;
  for (int64_t r = n - 1; r >= 0; --r) rows.push_back(r);  // backwards: runs are re-sorted
  absl::StatusOr<tessera::Batch> all = (*source)->Read(rows);
  if (!all.ok() || !SameRows(*all, n)) std::abort();
  for (int64_t r = 0; r < n && r < 64; ++r) {
    const int64_t one[] = {r};
    absl::StatusOr<tessera::Batch> batch = (*source)->Read(one);
    if (!batch.ok() || !SameRows(*batch, 1)) std::abort();
  }
  // A second Open finds the sidecar index the first wrote and must agree with it.
  absl::StatusOr<std::shared_ptr<const tessera::DelimitedTextSource>> again =
      tessera::DelimitedTextSource::Open({path}, format, env.get());
  if (!again.ok() || (*again)->size() != n) std::abort();
  return 0;
}
