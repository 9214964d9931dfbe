// The doctest entry point shared by every test binary. ctest runs each test case on its own
// (`--test-case=NAME`); a filter that matches nothing (a name CMake split at a ';', a renamed
// test) would pass without running anything, so a run whose filters leave no test case fails.
//
// Note [A hung test explains itself]: ctest kills a test that outlives its timeout and shows
// only what the test printed, and doctest reports at the end, so a hang used to leave nothing
// but a log line. Here stdout is line-buffered (an assertion that failed before the hang is
// shown), and a watchdog thread, once a test case has run TESSERA_TEST_WATCHDOG_SECONDS
// (default 240, inside ctest's 300), prints the test case, its failed assertions so far and
// every thread's stack (gdb, when installed), then aborts.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

namespace {

unsigned test_cases_run = 0;

// What the watchdog reports: the running test case, when it started, what failed in it.
struct Progress {
  std::mutex mu;
  std::string test_case;
  std::chrono::steady_clock::time_point started;
  bool running = false;
  std::string failures;
};
Progress progress;

// Records how many test cases passed the filters and feeds `progress`; reports nothing itself.
struct RunCounter : doctest::IReporter {
  explicit RunCounter(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& stats) override {
    test_cases_run = stats.numTestCasesPassingFilters;
  }
  void test_case_start(const doctest::TestCaseData& data) override {
    std::lock_guard<std::mutex> lock(progress.mu);
    progress.test_case = data.m_name;
    progress.started = std::chrono::steady_clock::now();
    progress.running = true;
    progress.failures.clear();
  }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {
    std::lock_guard<std::mutex> lock(progress.mu);
    progress.running = false;
  }
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData& data) override {
    if (!data.m_failed) return;
    std::lock_guard<std::mutex> lock(progress.mu);
    progress.failures += std::string("  ") + data.m_file + ":" + std::to_string(data.m_line) +
                         ": " + data.m_expr + "\n";
  }
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};
REGISTER_LISTENER("run_counter", 1, RunCounter);

// Prints every thread's stack through gdb, if it is installed and may attach.
void PrintStacks() {
  if (std::system("command -v gdb >/dev/null 2>&1") != 0) {
    std::fprintf(stderr, "(install gdb to see the threads' stacks)\n");
    return;
  }
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);  // Yama: let a non-ancestor attach
  const std::string command = "gdb -p " + std::to_string(getpid()) +
                              " -batch -nx -ex 'thread apply all bt 30' 1>&2 2>/dev/null";
  if (std::system(command.c_str()) != 0) std::fprintf(stderr, "(gdb could not attach)\n");
}

// Aborts the process, after saying why, once a test case has run longer than `limit`.
void Watch(std::chrono::seconds limit) {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    std::string name;
    std::string failures;
    {
      std::lock_guard<std::mutex> lock(progress.mu);
      if (!progress.running || std::chrono::steady_clock::now() - progress.started < limit) {
        continue;
      }
      name = progress.test_case;
      failures = progress.failures;
    }
    std::fflush(stdout);
    std::fprintf(stderr,
                 "\nwatchdog: test case \"%s\" still running after %lld s; failed assertions "
                 "so far:\n%s",
                 name.c_str(), static_cast<long long>(limit.count()),
                 failures.empty() ? "  (none)\n" : failures.c_str());
    PrintStacks();
    std::abort();
  }
}

std::chrono::seconds WatchdogLimit() {
  const char* given = std::getenv("TESSERA_TEST_WATCHDOG_SECONDS");
  const long seconds = given != nullptr ? std::strtol(given, nullptr, 10) : 240;
  return std::chrono::seconds(seconds);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  doctest::Context context(argc, argv);
  if (const std::chrono::seconds limit = WatchdogLimit(); limit.count() > 0) {
    std::thread(Watch, limit).detach();
  }
  const int result = context.run();
  if (context.shouldExit()) return result;  // --list-test-cases, --help, ...
  if (result == 0 && test_cases_run == 0) {
    std::fprintf(stderr, "no test case matched the filters: nothing was tested\n");
    return 1;
  }
  return result;
}
