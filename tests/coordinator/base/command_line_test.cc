// The command-line conventions (tessera/command_line.h): --help's text lists every flag a
// program can set, in its groups, with defaults, wrapped; the exit status of each outcome. The
// binaries themselves (parsing, --help, exit codes) are run by tests/e2e/command_line.sh.
#include "tessera/command_line.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "coordinator/training/training_flags.h"

ABSL_FLAG(int32_t, help_test_width, 7,
          "a flag of this test, whose description is long enough to be wrapped by FormatHelp onto "
          "a second line indented under the first");
ABSL_FLAG(std::string, help_test_name, "x", "another flag of this test");

namespace tessera {
namespace {

size_t Count(const std::string& text, const std::string& part) {
  size_t count = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) {
    ++count;
  }
  return count;
}

ProgramHelp TestHelp() {
  ProgramHelp help;
  help.name = "trainer";
  help.usage = "trainer [flags]";
  help.about =
      "Trains a model. This paragraph is long enough that it has to be wrapped at the hundredth "
      "column of the terminal, once at least.\n"
      "  an indented line is kept as it is, however it is laid out\n";
  help.groups.push_back({"This program's flags", {}, __FILE__});
  for (const FlagGroup& group : TrainingFlagGroups()) help.groups.push_back(group);
  return help;
}

TEST_CASE("--help lists every flag of the program once, in its group, with its default") {
  const std::string text = FormatHelp(TestHelp());
  CAPTURE(text);
  CHECK(absl::StartsWith(text, "usage: trainer [flags]\n\nTrains a model."));
  CHECK(absl::StrContains(text, "\n  an indented line is kept as it is, however it is laid out\n"));
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    CHECK_MESSAGE(line.size() <= 100, line);
  }
  // Every flag a user can set (all but Abseil's own) appears once, as --name.
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (absl::StrContains(flag->Filename(), "absl/flags/")) continue;
    CAPTURE(name);
    CHECK(Count(text, "\n  --" + std::string(name) + "=") +
              Count(text, "\n  --" + std::string(name) + " ") ==
          1);
  }
  // Groups in order, this file's flags by name, the shared ones as the groups list them.
  const size_t own = text.find("\nThis program's flags:\n");
  const size_t training = text.find("\nTraining (the simulation by default):\n");
  const size_t networked = text.find("\nNetworked cluster (--cluster_spec or the TF_CONFIG");
  const size_t common = text.find("\nFlags of every Tessera program:\n");
  REQUIRE(own != std::string::npos);
  CHECK(own < training);
  CHECK(training < networked);
  CHECK(networked < common);
  CHECK(text.find("--help_test_name=") < text.find("--help_test_width="));
  CHECK(text.find("--help_test_width=") < training);
  CHECK(text.find("--cluster_spec=") < text.find("--role"));
  CHECK(text.find("--role") > networked);
  // Defaults: strings quoted, an optional flag without one bare.
  CHECK(absl::StrContains(text, "\n  --help_test_width=7 "));
  CHECK(absl::StrContains(text, "\n  --help_test_name=\"x\" "));
  CHECK(absl::StrContains(text, "\n  --checkpoint_dir=\"\" "));
  CHECK(absl::StrContains(text, "\n  --mode "));
  // A long description is wrapped under its column.
  CHECK(absl::StrContains(text, "\n  --help_test_width=7             a flag of this test, whose "
                                "description is long enough to be\n" +
                                    std::string(34, ' ') + "wrapped by FormatHelp onto"));
  // The flags every program takes, and the exit status.
  CHECK(absl::StrContains(text, "\n  --flagfile=FILE "));
  CHECK(absl::StrContains(text, "\n  --help "));
  CHECK(absl::StrContains(text, "\n  --version "));
  CHECK(absl::StrContains(text, "Exit status: 0 on success, 2 for bad usage or input"));
}

TEST_CASE("--help of one part of a program lists only its groups") {
  ProgramHelp help;
  help.name = "tool part";
  help.usage = "tool part [flags]";
  help.groups.push_back({"Flags", {"help_test_width", "no_such_flag"}});
  help.list_ungrouped = false;
  const std::string text = FormatHelp(help);
  CAPTURE(text);
  CHECK(absl::StrContains(text, "\nFlags:\n  --help_test_width=7 "));
  CHECK_FALSE(absl::StrContains(text, "no_such_flag"));
  CHECK_FALSE(absl::StrContains(text, "--help_test_name"));
  CHECK_FALSE(absl::StrContains(text, "--checkpoint_dir"));
  CHECK_FALSE(absl::StrContains(text, "Other flags"));
}

TEST_CASE("the exit status: 0 ok, 2 bad usage or input, 1 a failure while running") {
  CHECK(ExitCode(absl::OkStatus()) == 0);
  for (const absl::Status& usage :
       {absl::InvalidArgumentError("--mode"), absl::NotFoundError("no file"),
        absl::FailedPreconditionError("checkpoints of another run"),
        absl::OutOfRangeError("id 9"), absl::DataLossError("checksum")}) {
    CAPTURE(usage);
    CHECK(ExitCode(usage) == 2);
  }
  for (const absl::Status& runtime :
       {absl::UnavailableError("ps 1 lost"), absl::AbortedError("the run failed"),
        absl::InternalError("bug"), absl::CancelledError("stopped"),
        absl::ResourceExhaustedError("memory"), absl::DeadlineExceededError("slow"),
        absl::UnknownError("?")}) {
    CAPTURE(runtime);
    CHECK(ExitCode(runtime) == 1);
  }
}

}  // namespace
}  // namespace tessera
