#include "core/training/job_description.h"

#include <doctest/doctest.h>

#include <string>

namespace tessera {
namespace {

TEST_CASE("equal jobs have no differences, and every differing or missing fact is named") {
  const JobDescription coordinator = {{"batch_size", "512"}, {"steps", "100"}, {"seed", "1"}};
  CHECK(JobDifferences(coordinator, coordinator).empty());
  JobDescription worker = coordinator;
  worker["batch_size"] = "256";
  worker.erase("seed");
  worker["extra"] = "x";
  CHECK(JobDifferences(coordinator, worker) ==
        "batch_size: the coordinator's 512, this worker's 256; extra: the coordinator's (none), "
        "this worker's x; seed: the coordinator's 1, this worker's (none)");
}

TEST_CASE("many differences are capped and long values shortened in the message only") {
  JobDescription a, b;
  for (int k = 0; k < 11; ++k) {
    a[(k < 10 ? "key0" : "key") + std::to_string(k)] = "a";  // key00 ... key10, in order
    b[(k < 10 ? "key0" : "key") + std::to_string(k)] = "b";
  }
  const std::string message = JobDifferences(a, b);
  CHECK(message.find("key07:") != std::string::npos);
  CHECK(message.find("key08:") == std::string::npos);
  CHECK(message.find("; and 3 more") != std::string::npos);
  const JobDescription long_a = {{"model", std::string(200, 'x') + "1"}};
  const JobDescription long_b = {{"model", std::string(200, 'x') + "2"}};
  const std::string shortened = JobDifferences(long_a, long_b);
  CHECK(!shortened.empty());  // they differ only past the shown prefix, and still differ
  CHECK(shortened.size() < 300);
  CHECK(shortened.find("...") != std::string::npos);
}

}  // namespace
}  // namespace tessera
