// The command-line conventions every Tessera program follows (the training programs of examples/
// and the `tessera` binary; README, "Command lines"):
//   - `--help` prints what the program does and every flag a user of it can set, in groups, each
//     with its default, and exits 0 (FormatHelp);
//   - one exit status: 0 success, 2 bad usage or input (a flag, argument, file, model or
//     configuration the user gave), 1 a failure while running (ExitCode);
//   - flags can come from a file: `--flagfile=FILE` reads one `--name=value` a line (Abseil's),
//     the command line's flags after it overriding its lines;
//   - `--version` prints the version line (tessera/version.h: "tessera 0.1.0 (Release build)") and
//     exits 0.
//
// Example (examples/recsys.cc):
//   int main(int argc, char** argv) {
//     ProgramHelp help;
//     help.name = "recsys";
//     help.usage = "recsys [flags]";
//     help.about = "Trains the recsys reference model on parameter servers.";
//     help.groups.push_back({"Model, data and schedule", {}, __FILE__});  // this file's flags
//     for (const FlagGroup& group : TrainingFlagGroups()) help.groups.push_back(group);
//     return RunProgram(argc, argv, help, [] { return Run(); });
//   }
//
// Thread-safety: call ParseCommandLine and RunProgram once, from main, before other threads.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tessera {

// Flags shown together under a title: those named in `flags` (without "--", in that order),
// then those defined in the source file `file` (a flag's file as Abseil records it, __FILE__ of
// its definition; "": none), by name.
struct FlagGroup {
  std::string title;
  std::vector<std::string> flags;
  std::string file = "";
};

// What --help prints.
struct ProgramHelp {
  std::string name;   // in messages: "recsys", "tessera serve"
  std::string usage;  // "recsys [flags]"
  std::string about;  // what the program does: a paragraph or more, printed as it is
  std::vector<FlagGroup> groups;
  // Whether the flags of the program in no group (Abseil's own left out) are listed at the end,
  // under "Other flags", so that none is hidden; false for a help that describes a part of a
  // program (one `tessera` command).
  bool list_ungrouped = true;
};

// The help text: usage, about, each group's flags (`--name=default` and the flag's help,
// wrapped), then the flags every program takes (--flagfile, --help).
std::string FormatHelp(const ProgramHelp& help);

// A parsed command line: the arguments that are not flags (argv[0] left out), and whether help
// was asked for (--help, -help, --helpfull, --helpshort, --help=...; removed before parsing).
struct CommandLine {
  std::vector<std::string> arguments;
  bool help = false;
};

// Parses argv, setting every flag (Abseil's parser: --flagfile, --name=value, --name value,
// --noname); --version prints the version line and exits 0. A usage error — an unknown flag, a
// value that does not parse, a flagfile that cannot be read — exits the process with status 2
// after Abseil's message (Note [Usage errors exit 2]).
// It also makes stdout line buffered (as on a terminal), so that a program's stdout and stderr
// keep their order when redirected to one file.
CommandLine ParseCommandLine(int argc, char** argv);

// The exit status of a program that ended with `status`: 0 when OK; 2 for bad usage or input
// (InvalidArgument, NotFound, FailedPrecondition, OutOfRange, DataLoss); 1 otherwise (a lost
// node, an I/O failure, a cancelled run, an internal error).
int ExitCode(const absl::Status& status);

// For a program's main: sets the process's malloc policy (UseTensorMallocPolicy with one arena,
// core/base/process.h);
// parses the command line; prints `help` and returns 0 for --help;
// returns 2 naming an unexpected argument; otherwise runs `run`, prints "<name>: <message>" to
// stderr when it fails, and returns ExitCode of its status.
int RunProgram(int argc, char** argv, const ProgramHelp& help,
               const std::function<absl::Status()>& run);

}  // namespace tessera
