#include "core/training/job_description.h"

#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera {
namespace {

constexpr size_t kMostListed = 8;
constexpr size_t kLongestValue = 120;

std::string Shown(const JobDescription& job, const std::string& key) {
  auto it = job.find(key);
  if (it == job.end()) return "(none)";
  if (it->second.size() <= kLongestValue) return it->second;
  return absl::StrCat(it->second.substr(0, kLongestValue), "...");
}

}  // namespace

std::string JobDifferences(const JobDescription& coordinator, const JobDescription& worker) {
  std::set<std::string> keys;
  for (const auto& [key, value] : coordinator) keys.insert(key);
  for (const auto& [key, value] : worker) keys.insert(key);
  std::vector<std::string> differences;
  size_t more = 0;
  for (const std::string& key : keys) {
    auto a = coordinator.find(key), b = worker.find(key);
    const bool same = a != coordinator.end() && b != worker.end() && a->second == b->second;
    if (same) continue;
    if (differences.size() == kMostListed) {
      ++more;
      continue;
    }
    differences.push_back(absl::StrCat(key, ": the coordinator's ", Shown(coordinator, key),
                                       ", this worker's ", Shown(worker, key)));
  }
  std::string out = absl::StrJoin(differences, "; ");
  if (more > 0) absl::StrAppend(&out, "; and ", more, " more");
  return out;
}

}  // namespace tessera
