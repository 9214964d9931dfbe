#include "tessera/command_line.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/base/process.h"
#include "tessera/version.h"

// Note [Usage errors exit 2]
// Abseil's parser reports a bad flag (unknown, a value that does not parse, an unreadable
// --flagfile) on stderr and ends the process with std::exit(1), which is the convention's
// "runtime failure". Before it exits it calls this hook for each such error (a weak symbol of
// Abseil's, declared in absl/flags/usage_config.h for exactly this: "additional report of fatal
// usage error message before we std::exit"). The hook only records the error; the atexit
// handler that ParseCommandLine registers turns that exit into _Exit(2) once stdio is flushed.
// Both act only while ParseCommandLine is parsing.
namespace {
std::atomic<bool> parsing{false};
std::atomic<bool> usage_error{false};

void ExitTwoOnUsageError() {
  if (!parsing.load() || !usage_error.load()) return;
  std::fflush(nullptr);
  std::_Exit(2);
}
}  // namespace

extern "C" void ABSL_INTERNAL_C_SYMBOL(AbslInternalReportFatalUsageError)(absl::string_view) {
  if (parsing.load()) usage_error = true;
}

namespace tessera {
namespace {

constexpr size_t kHelpColumn = 34;  // where a flag's description starts
constexpr size_t kWidth = 100;

// A source file's path as Abseil reports a flag's: Abseil drops the leading slashes of __FILE__,
// so an absolute __FILE__ (a compiler given absolute paths) and Filename() differ by them.
absl::string_view WithoutLeadingSlashes(absl::string_view path) {
  while (!path.empty() && (path.front() == '/' || path.front() == '\\')) path.remove_prefix(1);
  return path;
}

bool IsAbseilFlag(const absl::CommandLineFlag& flag) {
  return absl::StrContains(flag.Filename(), "absl/flags/");
}

// "  --name=default" then the help, wrapped at kWidth and indented to kHelpColumn.
void AppendFlag(std::string& out, absl::string_view name, absl::string_view value,
                absl::string_view help) {
  std::string line = absl::StrCat("  --", name, value.empty() ? "" : "=", value);
  if (line.size() + 2 > kHelpColumn) {
    absl::StrAppend(&out, line, "\n");
    line.clear();
  }
  line.resize(kHelpColumn, ' ');
  bool first = true;
  for (absl::string_view word : absl::StrSplit(help, ' ', absl::SkipEmpty())) {
    if (!first && line.size() + 1 + word.size() > kWidth) {
      absl::StrAppend(&out, line, "\n");
      line.assign(kHelpColumn, ' ');
      first = true;
    }
    absl::StrAppend(&line, first ? "" : " ", word);
    first = false;
  }
  absl::StrAppend(&out, line, "\n");
}

void AppendFlag(std::string& out, const absl::CommandLineFlag& flag) {
  std::string value = flag.DefaultValue();
  if (flag.IsOfType<std::string>()) value = absl::StrCat("\"", value, "\"");
  AppendFlag(out, flag.Name(), value, flag.Help());
}

// `text` with each paragraph (lines not starting with a space, up to an empty or an indented
// line) wrapped at kWidth; indented lines are kept as they are.
std::string Wrap(absl::string_view text) {
  std::string out;
  std::string line;
  const auto flush = [&] {
    if (!line.empty()) absl::StrAppend(&out, line, "\n");
    line.clear();
  };
  for (absl::string_view input : absl::StrSplit(text, '\n')) {
    if (input.empty() || absl::StartsWith(input, " ")) {
      flush();
      absl::StrAppend(&out, input, "\n");
      continue;
    }
    for (absl::string_view word : absl::StrSplit(input, ' ', absl::SkipEmpty())) {
      if (!line.empty() && line.size() + 1 + word.size() > kWidth) flush();
      absl::StrAppend(&line, line.empty() ? "" : " ", word);
    }
  }
  flush();
  while (absl::EndsWith(out, "\n\n")) out.pop_back();
  return out;
}

bool IsHelpFlag(absl::string_view arg) {
  if (absl::StartsWith(arg, "--")) {
    arg.remove_prefix(2);
  } else if (absl::StartsWith(arg, "-")) {
    arg.remove_prefix(1);
  } else {
    return false;
  }
  arg = arg.substr(0, arg.find('='));
  return arg == "help" || arg == "helpfull" || arg == "helpshort" || arg == "helppackage" ||
         arg == "helpmatch" || arg == "helpon";
}

}  // namespace

std::string FormatHelp(const ProgramHelp& help) {
  std::string out = absl::StrCat("usage: ", help.usage, "\n");
  if (!help.about.empty()) absl::StrAppend(&out, "\n", Wrap(help.about));
  const auto all = absl::GetAllFlags();
  std::set<std::string> listed;
  const auto section = [&](const std::string& title,
                           std::vector<const absl::CommandLineFlag*> flags) {
    if (flags.empty()) return;
    absl::StrAppend(&out, "\n", title, ":\n");
    for (const absl::CommandLineFlag* flag : flags) {
      AppendFlag(out, *flag);
      listed.insert(std::string(flag->Name()));
    }
  };
  for (const FlagGroup& group : help.groups) {
    std::vector<const absl::CommandLineFlag*> flags;
    for (const std::string& name : group.flags) {
      auto it = all.find(name);
      if (it != all.end() && !listed.count(name)) flags.push_back(it->second);
    }
    if (!group.file.empty()) {
      std::vector<const absl::CommandLineFlag*> from_file;
      for (const auto& [name, flag] : all) {
        if (WithoutLeadingSlashes(flag->Filename()) == WithoutLeadingSlashes(group.file) &&
            !listed.count(std::string(name)) &&
            std::find(flags.begin(), flags.end(), flag) == flags.end()) {
          from_file.push_back(flag);
        }
      }
      std::sort(from_file.begin(), from_file.end(),
                [](const auto* a, const auto* b) { return a->Name() < b->Name(); });
      flags.insert(flags.end(), from_file.begin(), from_file.end());
    }
    section(group.title, std::move(flags));
  }
  if (help.list_ungrouped) {
    std::vector<const absl::CommandLineFlag*> others;
    for (const auto& [name, flag] : all) {
      if (!IsAbseilFlag(*flag) && !listed.count(std::string(name))) others.push_back(flag);
    }
    std::sort(others.begin(), others.end(),
              [](const auto* a, const auto* b) { return a->Name() < b->Name(); });
    section("Other flags", std::move(others));
  }
  absl::StrAppend(&out, "\nFlags of every Tessera program:\n");
  AppendFlag(out, "flagfile", "FILE",
             "read flags from FILE, one --name=value a line (a configuration file; flags given "
             "after it override its lines)");
  AppendFlag(out, "help", "", "print this help and exit");
  AppendFlag(out, "version", "", "print the version and how it was built, and exit");
  absl::StrAppend(&out, "\nExit status: 0 on success, 2 for bad usage or input (a flag, argument, "
                        "file, model or\nconfiguration), 1 for a failure while running.\n");
  return out;
}

CommandLine ParseCommandLine(int argc, char** argv) {
  static const bool registered = std::atexit(ExitTwoOnUsageError) == 0;
  (void)registered;
  // A program's lines on stdout and its log and progress on stderr (unbuffered) arrive in the
  // order they were written, also when both are redirected to one file or pipe: stdout is line
  // buffered, as on a terminal. Before anything is written to it.
  std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
  // --version (Abseil's flag, handled by its parser, which then exits 0) prints this build's
  // version line (tessera/version.h) instead of Abseil's program name and NDEBUG note.
  absl::FlagsUsageConfig usage;
  usage.version_string = [] { return VersionLine() + "\n"; };
  absl::SetFlagsUsageConfig(usage);
  CommandLine line;
  std::vector<char*> args;
  bool flags_over = false;  // after "--", every argument is positional
  for (int i = 0; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (i > 0 && !flags_over && IsHelpFlag(arg)) {
      line.help = true;
      continue;
    }
    if (arg == "--") flags_over = true;
    args.push_back(argv[i]);
  }
  parsing = true;
  const std::vector<char*> positional =
      absl::ParseCommandLine(static_cast<int>(args.size()), args.data());
  parsing = false;
  line.arguments.assign(positional.begin() + (positional.empty() ? 0 : 1), positional.end());
  return line;
}

int ExitCode(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 0;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 2;
    default:
      return 1;
  }
}

int RunProgram(int argc, char** argv, const ProgramHelp& help,
               const std::function<absl::Status()>& run) {
  UseTensorMallocPolicy(MallocArenas::kOne);
  const CommandLine line = ParseCommandLine(argc, argv);
  if (line.help) {
    std::cout << FormatHelp(help) << std::flush;
    return 0;
  }
  if (!line.arguments.empty()) {
    std::cerr << help.name << ": unexpected argument '" << line.arguments[0]
              << "' (flags are --name=value; see --help)\n";
    return 2;
  }
  const absl::Status status = run();
  if (!status.ok()) std::cerr << help.name << ": " << status.message() << "\n";
  return ExitCode(status);
}

}  // namespace tessera
