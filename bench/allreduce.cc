// allreduce: the ring all-reduce's bandwidth (actors/mirrored/mirrored_replica_actor.h, Note [Ring
// all-reduce] in core/mirrored/collective.h) against the machine's ceilings. For each tensor size
// of --sizes_mib, ReplicaGroup::ProbeRing times --rounds all-reduces (SUM) of a float buffer of
// that size held by each of --replicas replicas, back to back; a round's figure is the slowest
// replica's seconds / rounds. Two settings:
//
//   in process  (--in_process) the replicas are actors of this process's actor system; the
//               baseline is std::memcpy of the same bytes on one thread between two pre-faulted
//               buffers
//   net         (--net) each replica in its own process (this program re-executed as
//               `allreduce --serve_replica=K --cluster_spec=FILE`, published as a worker of a
//               mirrored run publishes its replica), connected over loopback, each replica
//               connecting to its ring neighbour itself; the baseline is raw TCP carrying a
//               ring's traffic (tcp_ring): the same bytes streamed both ways at once over one
//               loopback connection between this process and another (this program as
//               `--tcp_sink_port`; write/read loops on large buffers, a 1-byte ack per
//               transfer), which is what a ring of 2 does: each replica sends its bytes and
//               receives as many at the same time. As context, the same bytes one way only
//               (tcp_one_way). On loopback both ends' copies are CPU work on the same cores, so
//               one way alone gets both cores for one direction: on the 2-vCPU host tcp_ring is
//               0.3-0.5x tcp_one_way, a ceiling no ring of 2 can pass whatever its transport.
//
// Figures, GB = 10^9 bytes: algorithm bandwidth = bytes / seconds per round; bus bandwidth =
// 2(n-1)/n * bytes / seconds per round (what each replica sends, and receives, per second: the
// ring's use of a link, comparable with one link's bandwidth whatever n is). ratio = bus /
// baseline. Every measurement is repeated --repeats times, the sizes and both sides of a ratio
// interleaved within a repeat; the ring's figure is its median repeat, a baseline's its best
// (the machine's ceiling). Each size is warmed up with one untimed all-reduce first. Targets
// (the issue): >= 0.5x memcpy in process and >= 0.5x raw TCP (tcp_ring) across processes, 4 to
// 64 MiB on 2 replicas. Progress goes to stderr; the last line of stdout is one JSON object with
// every figure.
//
//   allreduce                                   # 4, 16, 64 MiB, 2 replicas, both: ~12 s
//   allreduce --net=false --replicas=4          # in process only, a ring of 4
//   allreduce --in_process=false --repeats=5    # across processes only
//   allreduce --sizes_mib=1,4 --chunk_kib=256   # other sizes, smaller ring chunks
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "actors/base/messages.h"
#include "actors/mirrored/mirrored_replica_actor.h"
#include "bench/internal/bench_main.h"
#include "bench/internal/scratch_dir.h"
#include "bench/internal/socket_io.h"
#include "cluster/base/cluster.h"
#include "cluster/network/network.h"
#include "coordinator/mirrored/mirrored_training.h"
#include "coordinator/mirrored/replica_group.h"
#include "tessera/cluster.h"
#include "tessera/data.h"
#include "tessera/status.h"
#include "tessera/tensor.h"
#include "tessera/workloads/fashion_mnist.h"
#include "tessera/workloads/reference_models.h"

// The replicas' default ring chunk (kDefaultRingChunkElements floats), in KiB.
constexpr int64_t kDefaultChunkKib =
    tessera::kDefaultRingChunkElements * static_cast<int64_t>(sizeof(float)) / 1024;

ABSL_FLAG(std::vector<std::string>, sizes_mib, std::vector<std::string>({"4", "16", "64"}),
          "tensor sizes in MiB (float32)");
ABSL_FLAG(int32_t, replicas, 2, "replicas in the ring (>= 2)");
ABSL_FLAG(int32_t, rounds, 10, "all-reduces per timed probe (1..1000)");
ABSL_FLAG(int32_t, repeats, 3,
          "timed probes per size and setting, interleaved; the ring's median, the baselines' best");
ABSL_FLAG(int64_t, chunk_kib, kDefaultChunkKib,
          "the ring's chunk size in KiB (MirroredReplicaOptions::ring_chunk_elements x 4 bytes)");
ABSL_FLAG(int32_t, threads, 0, "CAF scheduler threads per actor system (0: one per core)");
ABSL_FLAG(bool, in_process, true, "measure in process (--in_process=false skips it)");
ABSL_FLAG(bool, net, true, "also measure across processes on loopback (--net=false skips it)");
ABSL_FLAG(int32_t, base_port, 0,
          "net: the cluster spec's ports: replica K listens on base_port + 2 + K (the spec's "
          "chief and ps, base_port and base_port + 1, are not listened on); 0: free ports");
// Internal: the roles of the processes the benchmark starts.
ABSL_FLAG(int32_t, serve_replica, -1, "internal: serve replica K of --cluster_spec's workers");
ABSL_FLAG(std::string, cluster_spec, "", "internal: the cluster spec of --serve_replica");
ABSL_FLAG(int32_t, ready_fd, -1, "internal: --serve_replica reports its port on this fd");
ABSL_FLAG(int32_t, tcp_sink_port, 0, "internal: be the raw TCP baseline's receiver on this port");

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;
using bench::Median;
using bench::ReadAll;
using bench::WriteAll;

constexpr char kName[] = "allreduce";
// How long a child may take to exit once told to (EndRun, the TCP sink's end).
constexpr absl::Duration kChildExitTimeout = absl::Seconds(15);

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// -- Flags ---------------------------------------------------------------------------------------

// absl exits with status 1 on a flag it cannot parse; this benchmark's bad flags exit 2. So the
// command line is checked first, flag by flag, with absl's own parsers (its help flags and flag
// files are left to absl).
absl::Status CheckCommandLine(int argc, char** argv) {
  const std::vector<std::string> builtins = {
      "help",     "helpfull", "helpshort",  "helppackage", "version", "only_check_args",
      "flagfile", "fromenv",  "tryfromenv", "undefok"};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", arg, "'"));
    }
    const size_t dashes = arg[1] == '-' ? 2 : 1;
    const size_t eq = arg.find('=');
    const bool has_value = eq != std::string::npos;
    const std::string name = arg.substr(dashes, has_value ? eq - dashes : std::string::npos);
    if (std::find(builtins.begin(), builtins.end(), name) != builtins.end()) continue;  // absl's
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && !has_value && name.rfind("no", 0) == 0) {
      absl::CommandLineFlag* negated = absl::FindCommandLineFlag(name.substr(2));
      if (negated != nullptr && negated->IsOfType<bool>()) continue;  // --nonet
    }
    if (flag == nullptr || flag->IsRetired()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    std::string value;
    if (has_value) {
      value = arg.substr(eq + 1);
    } else if (flag->IsOfType<bool>()) {
      value = "true";
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, "=", value, ": ", error));
    }
  }
  return absl::OkStatus();
}

struct Settings {
  std::vector<int64_t> mib;
  int32_t replicas = 2;
  int32_t rounds = 10;
  int32_t repeats = 3;
  int64_t chunk_elements = kDefaultRingChunkElements;
  int32_t threads = 0;
  bool in_process = true;
  bool net = true;
  int32_t base_port = 0;
};

absl::StatusOr<Settings> ReadSettings() {
  Settings s;
  for (const std::string& item : absl::GetFlag(FLAGS_sizes_mib)) {
    int64_t mib = 0;
    // A probe holds at most kMaxProbeElements floats (4 GiB).
    if (!absl::SimpleAtoi(item, &mib) || mib < 1 || mib > (kMaxProbeElements >> 18)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--sizes_mib: '", item, "' is not a size from 1 to ", kMaxProbeElements >> 18, " MiB"));
    }
    s.mib.push_back(mib);
  }
  if (s.mib.empty()) return absl::InvalidArgumentError("--sizes_mib is empty");
  s.replicas = absl::GetFlag(FLAGS_replicas);
  s.rounds = absl::GetFlag(FLAGS_rounds);
  s.repeats = absl::GetFlag(FLAGS_repeats);
  const int64_t chunk_kib = absl::GetFlag(FLAGS_chunk_kib);
  s.threads = absl::GetFlag(FLAGS_threads);
  s.in_process = absl::GetFlag(FLAGS_in_process);
  s.net = absl::GetFlag(FLAGS_net);
  if (!s.in_process && !s.net) {
    return absl::InvalidArgumentError("--in_process=false and --net=false: nothing to measure");
  }
  s.base_port = absl::GetFlag(FLAGS_base_port);
  if (s.replicas < 2 || s.replicas > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("--replicas=", s.replicas, ": a ring needs 2 to 64 replicas"));
  }
  if (s.rounds < 1 || s.rounds > kMaxStepsPerRequest) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rounds=", s.rounds, ": 1 to ", kMaxStepsPerRequest));
  }
  if (s.repeats < 1 || s.repeats > 1000) {
    return absl::InvalidArgumentError(absl::StrCat("--repeats=", s.repeats, ": 1 to 1000"));
  }
  if (chunk_kib < 1 || chunk_kib > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(absl::StrCat("--chunk_kib=", chunk_kib, ": 1 to 1048576"));
  }
  s.chunk_elements = chunk_kib * 1024 / static_cast<int64_t>(sizeof(float));
  if (s.threads < 0) return absl::InvalidArgumentError("--threads must be >= 0");
  if (s.base_port < 0 || s.base_port + s.replicas + 1 > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--base_port=", s.base_port,
                                                   ": 0, or the first of ", s.replicas + 2,
                                                   " ports up to 65535"));
  }
  return s;
}

// -- The replicas --------------------------------------------------------------------------------

// What every replica is built from, in this process and in the replica processes alike: a tiny
// model (the probe all-reduces a buffer of its own, not the gradients) and 8 examples for it.
absl::StatusOr<MirroredReplicaOptions> ReplicaOptions(int64_t chunk_elements) {
  MlpModelOptions mlp;
  mlp.input_dim = 4;
  mlp.hidden_units = {4};
  mlp.num_classes = 2;
  MirroredReplicaOptions options;
  TESSERA_ASSIGN_OR_RETURN(options.model, MlpModelSpec(mlp));
  options.optimizer = {"sgd", {}};
  constexpr int64_t kExamples = 8;
  Batch examples;
  examples.size = kExamples;
  Tensor pixels(Shape{kExamples, 4});
  Tensor labels(Shape{kExamples, 1});
  for (int64_t i = 0; i < kExamples; ++i) {
    for (int64_t j = 0; j < 4; ++j) pixels.data()[i * 4 + j] = 0.25f * static_cast<float>(i - j);
    labels.data()[i] = static_cast<float>(i % 2);
  }
  examples.dense[kFashionMnistPixels] = std::move(pixels);
  examples.labels = std::move(labels);
  TESSERA_ASSIGN_OR_RETURN(options.train, Dataset::Create(std::move(examples)));
  options.job = JobDescription();  // the driver passes the same (empty) one
  options.ring_chunk_elements = chunk_elements;
  return options;
}

constexpr int64_t kBatchSize = 1;  // examples per replica per step: unused by the probe

// One size's figures: the seconds per round of every repeat, ring and baseline.
struct SizeFigures {
  int64_t mib = 0;
  std::vector<double> ring;      // seconds per all-reduce
  std::vector<double> baseline;  // seconds per copy / transfer: the target's baseline
  std::vector<double> context;   // net: seconds per transfer one way only
};

int64_t Bytes(int64_t mib) { return mib << 20; }

// Bus bandwidth, GB/s (Note: 2(n-1)/n of the buffer crosses each replica's link per round).
double BusGbps(int64_t bytes, int32_t n, double seconds) {
  return 2.0 * (n - 1) / n * static_cast<double>(bytes) / seconds / 1e9;
}
double Gbps(int64_t bytes, double seconds) { return static_cast<double>(bytes) / seconds / 1e9; }

// Prints the table of one setting and returns its JSON rows. `baseline` names the target's
// baseline ("memcpy", "tcp_ring"); `context`, when not empty, a second one shown beside it
// ("tcp_one_way") with the ring against it.
Json Report(const char* title, const std::string& baseline, const std::string& context,
            const Settings& s, const std::vector<SizeFigures>& figures, bool& met) {
  const bool has_context = !context.empty();
  std::printf(
      "\n%s: %d replicas, ring chunks of %lld KiB, %d all-reduces per probe; ring: median of %d "
      "repeats, %s: best\n",
      title, s.replicas, static_cast<long long>(s.chunk_elements * 4 / 1024), s.rounds, s.repeats,
      has_context ? absl::StrCat(baseline, " and ", context).c_str() : baseline.c_str());
  std::printf("%8s %12s %10s %10s %10s %12s %10s", "size", "ms/allreduce", "algo GB/s", "bus GB/s",
              "bus best", absl::StrCat(baseline, " GB/s").c_str(), "bus/base");
  if (has_context) std::printf(" %16s %12s", absl::StrCat(context, " GB/s").c_str(), "bus/context");
  std::printf("\n");
  Json rows = Json::array();
  // GB/s of each repeat.
  auto rates = [](const std::vector<double>& seconds, const std::function<double(double)>& rate) {
    std::vector<double> out;
    for (double x : seconds) out.push_back(rate(x));
    return out;
  };
  for (const SizeFigures& f : figures) {
    const int64_t bytes = Bytes(f.mib);
    auto bus_rate = [&](double seconds) { return BusGbps(bytes, s.replicas, seconds); };
    auto rate = [&](double seconds) { return Gbps(bytes, seconds); };
    const double ring_s = Median(f.ring);
    const double bus = bus_rate(ring_s);
    const double bus_best = bus_rate(*std::min_element(f.ring.begin(), f.ring.end()));
    const double base = rate(*std::min_element(f.baseline.begin(), f.baseline.end()));
    const double ratio = bus / base;
    met = met && ratio >= 0.5;
    std::printf("%5lldMiB %12.2f %10.3f %10.3f %10.3f %12.3f %10.3f", static_cast<long long>(f.mib),
                1e3 * ring_s, rate(ring_s), bus, bus_best, base, ratio);
    Json row;
    row["mib"] = f.mib;
    row["bytes"] = bytes;
    row["seconds_per_round"] = ring_s;
    row["algo_gbps"] = rate(ring_s);
    row["bus_gbps"] = bus;
    row["bus_gbps_best"] = bus_best;
    row[baseline + "_gbps"] = base;
    row[baseline + "_gbps_median"] = rate(Median(f.baseline));
    row["ratio"] = ratio;
    row["bus_gbps_repeats"] = rates(f.ring, bus_rate);
    row[baseline + "_gbps_repeats"] = rates(f.baseline, rate);
    if (has_context) {
      const double other = rate(*std::min_element(f.context.begin(), f.context.end()));
      std::printf(" %16.3f %12.3f", other, bus / other);
      row[context + "_gbps"] = other;
      row[context + "_gbps_median"] = rate(Median(f.context));
      row[context + "_gbps_repeats"] = rates(f.context, rate);
      row["ratio_vs_" + context] = bus / other;
    }
    std::printf("\n");
    rows.push_back(row);
  }
  std::fflush(stdout);
  return rows;
}

// `rounds` all-reduces of `mib` MiB: seconds per round.
absl::StatusOr<double> ProbeSeconds(ReplicaGroup& strategy, int64_t mib, int32_t rounds) {
  TESSERA_ASSIGN_OR_RETURN(
      const double seconds,
      strategy.ProbeRing(Bytes(mib) / static_cast<int64_t>(sizeof(float)), rounds));
  return seconds / rounds;
}

// -- In process ----------------------------------------------------------------------------------

// A buffer whose pages are all in memory.
std::unique_ptr<char[]> Faulted(int64_t bytes) {
  std::unique_ptr<char[]> p(new char[static_cast<size_t>(bytes)]);
  std::memset(p.get(), 1, static_cast<size_t>(bytes));
  return p;
}

absl::StatusOr<Json> RunInProcess(const Settings& s, bool& met) {
  caf::actor_system_config cfg;
  ConfigureActorSystem(cfg, s.threads);
  caf::actor_system system{cfg};
  std::vector<ReplicaHandle> handles;
  for (int32_t k = 0; k < s.replicas; ++k) {
    TESSERA_ASSIGN_OR_RETURN(MirroredReplicaOptions options, ReplicaOptions(s.chunk_elements));
    options.cpu = InProcessReplicaCpu(k);  // as the simulation places its replicas
    TESSERA_ASSIGN_OR_RETURN(mirrored_replica_actor actor,
                             SpawnMirroredReplica(system, std::move(options)));
    handles.push_back({actor, ""});
  }
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<ReplicaGroup> strategy,
                           ReplicaGroup::Create(system, std::move(handles), kBatchSize, {}));
  const int64_t max_bytes = Bytes(*std::max_element(s.mib.begin(), s.mib.end()));
  std::unique_ptr<char[]> from = Faulted(max_bytes), to = Faulted(max_bytes);
  std::vector<SizeFigures> figures;
  for (int64_t mib : s.mib) {
    figures.push_back({mib, {}, {}});
    TESSERA_RETURN_IF_ERROR(strategy->ProbeRing(Bytes(mib) / 4, 1).status());  // warm-up
    std::memcpy(to.get(), from.get(), static_cast<size_t>(Bytes(mib)));
  }
  for (int32_t r = 0; r < s.repeats; ++r) {
    std::fprintf(stderr, "%s: in process, repeat %d of %d\n", kName, r + 1, s.repeats);
    for (SizeFigures& f : figures) {
      TESSERA_ASSIGN_OR_RETURN(const double ring, ProbeSeconds(*strategy, f.mib, s.rounds));
      f.ring.push_back(ring);
      const size_t bytes = static_cast<size_t>(Bytes(f.mib));
      const Clock::time_point start = Clock::now();
      for (int32_t k = 0; k < s.rounds; ++k) {
        std::memcpy(to.get(), from.get(), bytes);
        asm volatile("" : : "r"(to.get()) : "memory");  // every copy is made
      }
      f.baseline.push_back(Seconds(Clock::now() - start) / s.rounds);
    }
  }
  return Report("in process", "memcpy", "", s, figures, met);
}

// -- Child processes -----------------------------------------------------------------------------

// The processes this run started: each is reaped by Wait, or killed and reaped when this goes
// out of scope (an error path), so none outlives the benchmark.
class Children {
 public:
  Children() = default;
  Children(const Children&) = delete;
  Children& operator=(const Children&) = delete;
  ~Children() {
    for (pid_t pid : pids_) ::kill(pid, SIGTERM);
    for (pid_t pid : pids_) {
      if (!Reap(pid, absl::Seconds(3)).has_value()) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
    }
  }

  // Runs this program again with `args`; its stdout goes to this process's stderr (this
  // process's stdout is the benchmark's figures). The child gets SIGTERM if this process dies.
  // With `ready`, the child also gets `--ready_fd=N`, the write end of a pipe whose read end
  // lands in *ready (the child reports on it that it is serving; EOF: it died).
  absl::StatusOr<pid_t> Start(const std::vector<std::string>& args, int* ready = nullptr) {
    std::vector<std::string> all = {kName};
    all.insert(all.end(), args.begin(), args.end());
    int pipe_fds[2] = {-1, -1};
    if (ready != nullptr) {
      if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
        return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
      }
      all.push_back(absl::StrCat("--ready_fd=", pipe_fds[1]));
    }
    std::vector<char*> argv;
    for (std::string& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();
    std::fflush(stdout);
    std::fflush(stderr);
    const pid_t pid = ::fork();
    if (pid == 0) {  // only async-signal-safe calls until exec
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) ::_exit(1);
      ::dup2(2, 1);
      if (pipe_fds[1] >= 0) ::fcntl(pipe_fds[1], F_SETFD, 0);  // the one fd it inherits
      ::execv("/proc/self/exe", argv.data());
      ::_exit(127);
    }
    const int fork_errno = errno;
    if (pipe_fds[1] >= 0) ::close(pipe_fds[1]);
    if (pid < 0) {
      if (pipe_fds[0] >= 0) ::close(pipe_fds[0]);
      return absl::InternalError(absl::StrCat("fork: ", std::strerror(fork_errno)));
    }
    if (ready != nullptr) *ready = pipe_fds[0];
    pids_.push_back(pid);
    return pid;
  }

  // Waits up to `timeout` for `pid` to exit. DeadlineExceeded (it is then killed) or Internal
  // when it failed.
  absl::Status Wait(pid_t pid, absl::Duration timeout, const std::string& what) {
    const std::optional<int> status = Reap(pid, timeout);
    if (!status.has_value()) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      Forget(pid);
      return absl::DeadlineExceededError(absl::StrCat(what, " (pid ", pid, ") did not exit within ",
                                                      absl::FormatDuration(timeout),
                                                      " of being told to: killed"));
    }
    Forget(pid);
    return CheckExit(*status, what, pid);
  }

  // OK while `pid` runs; an error describing how it ended otherwise (it is then reaped).
  absl::Status Alive(pid_t pid, const std::string& what) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) != pid) return absl::OkStatus();
    Forget(pid);
    absl::Status ended = CheckExit(status, what, pid);
    return ended.ok() ? absl::UnavailableError(absl::StrCat(what, " exited early")) : ended;
  }

 private:
  static absl::Status CheckExit(int status, const std::string& what, pid_t pid) {
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return absl::OkStatus();
    return absl::InternalError(
        absl::StrCat(what, " (pid ", pid, ") ",
                     WIFEXITED(status) ? absl::StrCat("exited with status ", WEXITSTATUS(status))
                                       : absl::StrCat("was killed by signal ", WTERMSIG(status)),
                     " (its messages are on stderr)"));
  }
  // The exit status, or nothing when `pid` still runs after `timeout`.
  static std::optional<int> Reap(pid_t pid, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    for (;;) {
      int status = 0;
      const pid_t done = ::waitpid(pid, &status, WNOHANG);
      if (done == pid || (done < 0 && errno != EINTR)) return status;
      if (absl::Now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  void Forget(pid_t pid) { pids_.erase(std::find(pids_.begin(), pids_.end(), pid)); }

  std::vector<pid_t> pids_;
};

// -- Raw TCP -------------------------------------------------------------------------------------

constexpr size_t kTcpBuffer = 4 << 20;  // the receiver's reads

void SetNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Reads `n` bytes from `fd` into `buffer` (of `capacity` bytes), over and over.
bool Drain(int fd, char* buffer, size_t capacity, uint64_t n) {
  while (n > 0) {
    const ssize_t k = ::read(fd, buffer, std::min<uint64_t>(n, capacity));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    n -= static_cast<uint64_t>(k);
  }
  return true;
}

// A transfer: `bytes` from the sender to the sink, and with `duplex` the same number back at the
// same time. Bytes 0 ends the sink.
struct TcpHeader {
  uint64_t bytes = 0;
  uint64_t duplex = 0;
};

// The receiver (`--tcp_sink_port`): connects to the sender; per transfer reads a header and
// the bytes it announces (with `duplex`, while a second thread sends as many back), then
// answers one byte.
int RunTcpSink(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    std::fprintf(stderr, "%s tcp sink: connect to port %d: %s\n", kName, port,
                 std::strerror(errno));
    return 1;
  }
  SetNoDelay(fd);
  std::vector<char> buffer(kTcpBuffer, 0);
  std::vector<char> reply;  // duplex: what goes back, grown (and faulted in) on demand
  for (;;) {
    TcpHeader h;
    if (!ReadAll(fd, &h, sizeof(h))) return 1;
    if (h.bytes == 0) break;
    if (h.duplex == 0) {
      if (!Drain(fd, buffer.data(), buffer.size(), h.bytes)) return 1;
    } else {
      if (reply.size() < h.bytes) reply.assign(h.bytes, 'r');
      bool sent = false;
      std::thread writer([&] { sent = WriteAll(fd, reply.data(), h.bytes); });
      const bool received = Drain(fd, buffer.data(), buffer.size(), h.bytes);
      writer.join();
      if (!sent || !received) return 1;
    }
    const char ack = 'k';
    if (!WriteAll(fd, &ack, 1)) return 1;
  }
  ::close(fd);
  return 0;
}

// The sender's side: a connection to a sink process.
class TcpSender {
 public:
  // Listens on loopback, starts the sink process and accepts its connection.
  static absl::StatusOr<std::unique_ptr<TcpSender>> Start(Children& children, int64_t max_bytes) {
    const int listen_fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (listen_fd < 0 || ::bind(listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(listen_fd, 1) != 0 ||
        ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      if (listen_fd >= 0) ::close(listen_fd);
      return absl::UnavailableError(absl::StrCat("tcp: listen: ", std::strerror(errno)));
    }
    std::unique_ptr<TcpSender> sender(new TcpSender(children, max_bytes));
    absl::StatusOr<pid_t> pid =
        children.Start({absl::StrCat("--tcp_sink_port=", ntohs(addr.sin_port))});
    if (!pid.ok()) {
      ::close(listen_fd);
      return pid.status();
    }
    sender->pid_ = *pid;
    pollfd p{listen_fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, 20000);
    sender->fd_ = ready == 1 ? ::accept(listen_fd, nullptr, nullptr) : -1;
    ::close(listen_fd);
    if (sender->fd_ < 0) {
      TESSERA_RETURN_IF_ERROR(children.Alive(*pid, "the TCP sink"));
      return absl::UnavailableError("tcp: the sink process did not connect within 20 s");
    }
    SetNoDelay(sender->fd_);
    return sender;
  }

  ~TcpSender() {
    if (fd_ >= 0) ::close(fd_);
  }

  // `rounds` transfers of `bytes` back to back, one way or (`duplex`) both ways at once:
  // seconds per transfer (from the first byte written to the sink's ack of the last).
  absl::StatusOr<double> Transfer(int64_t bytes, int32_t rounds, bool duplex) {
    const Clock::time_point start = Clock::now();
    for (int32_t k = 0; k < rounds; ++k) {
      const TcpHeader h{static_cast<uint64_t>(bytes), duplex ? uint64_t{1} : uint64_t{0}};
      char ack = 0;
      bool ok = WriteAll(fd_, &h, sizeof(h));
      if (ok && !duplex) {
        ok = WriteAll(fd_, data_.get(), h.bytes) && ReadAll(fd_, &ack, 1);
      } else if (ok) {
        bool sent = false;
        std::thread writer([&] { sent = WriteAll(fd_, data_.get(), h.bytes); });
        const bool received = Drain(fd_, in_.get(), kTcpBuffer, h.bytes) && ReadAll(fd_, &ack, 1);
        writer.join();
        ok = sent && received;
      }
      if (!ok) {
        TESSERA_RETURN_IF_ERROR(children_.Alive(pid_, "the TCP sink"));
        return absl::UnavailableError("tcp: the connection to the sink was lost");
      }
    }
    return Seconds(Clock::now() - start) / rounds;
  }

  // Tells the sink to exit and waits for it.
  absl::Status Stop() {
    const TcpHeader end;
    WriteAll(fd_, &end, sizeof(end));
    ::close(fd_);
    fd_ = -1;
    return children_.Wait(pid_, kChildExitTimeout, "the TCP sink");
  }

 private:
  TcpSender(Children& children, int64_t max_bytes)
      : children_(children), data_(Faulted(max_bytes)), in_(Faulted(kTcpBuffer)) {}
  Children& children_;
  std::unique_ptr<char[]> data_, in_;
  pid_t pid_ = -1;
  int fd_ = -1;
};

// -- Across processes ----------------------------------------------------------------------------

NetworkOptions BenchNetwork() {
  NetworkOptions options;  // loopback; messages up to 1 GiB (a ring message is one segment)
  options.connect_timeout = absl::Seconds(20);
  return options;
}

// `count` distinct ports free right now (bound to port 0 together, then released).
absl::StatusOr<std::vector<int>> FreePorts(int count) {
  std::vector<int> fds, ports;
  absl::Status status;
  for (int i = 0; i < count && status.ok(); ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      status = absl::UnavailableError(absl::StrCat("finding a free port: ", std::strerror(errno)));
    } else {
      ports.push_back(ntohs(addr.sin_port));
    }
    if (fd >= 0) fds.push_back(fd);
  }
  for (int fd : fds) ::close(fd);
  TESSERA_RETURN_IF_ERROR(status);
  return ports;
}

// The replica process (`--serve_replica=K --cluster_spec=FILE`), as a worker of a mirrored run
// serves (coordinator/mirrored/mirrored_training.cc, ServeAsReplica): publishes replica K at its
// address in the cluster spec and serves until the driver stops the replica (EndRun).
absl::Status ServeReplica(int32_t task) {
  ClusterSources sources;
  sources.spec_path = absl::GetFlag(FLAGS_cluster_spec);
  if (sources.spec_path.empty()) {
    return absl::InvalidArgumentError("--serve_replica needs --cluster_spec");
  }
  TESSERA_ASSIGN_OR_RETURN(const ClusterConfig config, ResolveClusterConfig(sources));
  if (!config.cluster.has_value() || task >= static_cast<int32_t>(config.cluster->workers.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica ", task, " is not one of the cluster spec's workers"));
  }
  TESSERA_ASSIGN_OR_RETURN(Settings settings, ReadSettings());
  const NetworkOptions network = BenchNetwork();
  caf::actor_system_config cfg;
  ConfigureActorSystem(cfg, settings.threads);
  TESSERA_RETURN_IF_ERROR(ConfigureNetwork(cfg, network));
  caf::actor_system system{cfg};
  const std::string me = ReplicaNodeName(task);
  TESSERA_ASSIGN_OR_RETURN(MirroredReplicaOptions options, ReplicaOptions(settings.chunk_elements));
  ConfigureNetworkedReplica(options, system, task, network);
  TESSERA_ASSIGN_OR_RETURN(mirrored_replica_actor replica,
                           SpawnMirroredReplica(system, std::move(options)));
  TESSERA_ASSIGN_OR_RETURN(const uint16_t port,
                           PublishNode(system, me, caf::actor_cast<caf::actor>(replica),
                                       config.cluster->workers[task].port, network));
  if (const int ready = absl::GetFlag(FLAGS_ready_fd); ready >= 0) {
    WriteAll(ready, &port, sizeof(port));
    ::close(ready);
  }
  std::fprintf(stderr, "%s: %s (pid %d) serving on 127.0.0.1:%d\n", kName, me.c_str(),
               static_cast<int>(::getpid()), port);
  caf::scoped_actor self{system};
  self->monitor(replica);
  bool ended = false;
  self->receive_while([&] { return !ended; })([&](caf::down_msg&) { ended = true; });
  return absl::OkStatus();
}

absl::StatusOr<Json> RunNet(const Settings& s, bool& met) {
  const int64_t max_bytes = Bytes(*std::max_element(s.mib.begin(), s.mib.end()));
  std::vector<int> ports;
  if (s.base_port != 0) {
    for (int k = 0; k < s.replicas + 2; ++k) ports.push_back(s.base_port + k);
  } else {
    TESSERA_ASSIGN_OR_RETURN(ports, FreePorts(s.replicas + 2));
  }
  // The spec names a coordinator and a PS too (its format needs them); nothing listens there.
  auto at = [](int port) { return absl::StrCat("127.0.0.1:", port); };
  Json spec;
  spec["cluster"]["chief"] = {at(ports[0])};
  spec["cluster"]["ps"] = {at(ports[1])};
  std::vector<std::string> workers;
  for (int32_t k = 0; k < s.replicas; ++k) workers.push_back(at(ports[2 + k]));
  spec["cluster"]["worker"] = workers;
  const bench::ScratchDir scratch("", "tessera_allreduce");
  const std::string spec_path = scratch.path() + "/cluster.json";
  {
    std::ofstream out(spec_path);
    out << spec.dump(2) << "\n";
    if (!out.good()) return absl::UnavailableError(absl::StrCat("cannot write ", spec_path));
  }

  Children children;
  std::vector<pid_t> pids;
  std::vector<int> ready(s.replicas, -1);
  auto close_ready = [&ready] {
    for (int& fd : ready) {
      if (fd >= 0) ::close(fd);
      fd = -1;
    }
  };
  for (int32_t k = 0; k < s.replicas; ++k) {
    absl::StatusOr<pid_t> pid = children.Start(
        {absl::StrCat("--serve_replica=", k), absl::StrCat("--cluster_spec=", spec_path),
         absl::StrCat("--chunk_kib=", s.chunk_elements * 4 / 1024),
         absl::StrCat("--threads=", s.threads)},
        &ready[k]);
    if (!pid.ok()) close_ready();
    TESSERA_RETURN_IF_ERROR(pid.status());
    pids.push_back(*pid);
  }
  // Every replica process reports its port once it serves, or dies trying (EOF).
  for (int32_t k = 0; k < s.replicas; ++k) {
    pollfd p{ready[k], POLLIN, 0};
    if (::poll(&p, 1, 60000) != 1) {
      close_ready();
      return absl::DeadlineExceededError(
          absl::StrCat(ReplicaNodeName(k), " did not report serving within 60 s"));
    }
    uint16_t port = 0;
    if (!ReadAll(ready[k], &port, sizeof(port))) {  // it ended before serving
      close_ready();
      absl::Status ended = children.Wait(pids[k], absl::Seconds(10), ReplicaNodeName(k));
      return ended.ok() ? absl::UnavailableError(
                              absl::StrCat(ReplicaNodeName(k), " exited before serving"))
                        : ended;
    }
  }
  close_ready();
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<TcpSender> tcp, TcpSender::Start(children, max_bytes));

  std::vector<SizeFigures> figures;
  {
    const NetworkOptions network = BenchNetwork();
    caf::actor_system_config cfg;
    ConfigureActorSystem(cfg, s.threads);
    TESSERA_RETURN_IF_ERROR(ConfigureNetwork(cfg, network));
    caf::actor_system system{cfg};
    std::vector<ReplicaHandle> handles;
    for (int32_t k = 0; k < s.replicas; ++k) {
      TESSERA_ASSIGN_OR_RETURN(NodeAddress address, ParseNodeAddress(workers[k]));
      absl::StatusOr<mirrored_replica_actor> replica =
          ConnectToReplica(system, address, k, network);
      if (!replica.ok()) {
        TESSERA_RETURN_IF_ERROR(children.Alive(pids[k], ReplicaNodeName(k)));
        return replica.status();
      }
      handles.push_back({*replica, workers[k]});
    }
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<ReplicaGroup> strategy,
                             ReplicaGroup::Create(system, std::move(handles), kBatchSize, {}));
    std::fprintf(stderr, "%s: net: the ring of %d replica processes is formed\n", kName,
                 s.replicas);
    absl::Status measured = [&]() -> absl::Status {
      for (int64_t mib : s.mib) {
        figures.push_back({mib, {}, {}});
        TESSERA_RETURN_IF_ERROR(strategy->ProbeRing(Bytes(mib) / 4, 1).status());  // warm-up
        TESSERA_RETURN_IF_ERROR(tcp->Transfer(Bytes(mib), 1, false).status());
        TESSERA_RETURN_IF_ERROR(tcp->Transfer(Bytes(mib), 1, true).status());
      }
      for (int32_t r = 0; r < s.repeats; ++r) {
        std::fprintf(stderr, "%s: net, repeat %d of %d\n", kName, r + 1, s.repeats);
        for (SizeFigures& f : figures) {
          TESSERA_ASSIGN_OR_RETURN(const double ring, ProbeSeconds(*strategy, f.mib, s.rounds));
          f.ring.push_back(ring);
          TESSERA_ASSIGN_OR_RETURN(const double both_ways,
                                   tcp->Transfer(Bytes(f.mib), s.rounds, true));
          f.baseline.push_back(both_ways);
          TESSERA_ASSIGN_OR_RETURN(const double one_way,
                                   tcp->Transfer(Bytes(f.mib), s.rounds, false));
          f.context.push_back(one_way);
        }
      }
      return absl::OkStatus();
    }();
    // The run is over either way: the replica processes exit once their replica stops. Wait for
    // them while this node is still up to deliver the stop.
    strategy->EndRun();
    absl::Status exited = absl::OkStatus();
    for (int32_t k = 0; k < s.replicas; ++k) {
      absl::Status e = children.Wait(pids[k], kChildExitTimeout, ReplicaNodeName(k));
      if (exited.ok()) exited = e;
    }
    TESSERA_RETURN_IF_ERROR(measured);
    TESSERA_RETURN_IF_ERROR(exited);
  }
  TESSERA_RETURN_IF_ERROR(tcp->Stop());
  return Report("net (one process per replica, loopback)", "tcp_ring", "tcp_one_way", s, figures,
                met);
}

absl::Status Run(const Settings& s) {
  const Clock::time_point start = Clock::now();
  bool in_process_met = true, net_met = true;
  Json out;
  out["benchmark"] = kName;
  out["replicas"] = s.replicas;
  out["rounds"] = s.rounds;
  out["repeats"] = s.repeats;
  out["chunk_kib"] = s.chunk_elements * 4 / 1024;
  std::vector<std::string> verdicts;
  auto verdict = [&](const char* what, bool met) {
    verdicts.push_back(absl::StrCat(what, " ", met ? "met" : "MISSED"));
    return met;
  };
  if (s.in_process) {
    TESSERA_ASSIGN_OR_RETURN(out["in_process"], RunInProcess(s, in_process_met));
    out["in_process_target_met"] = verdict("in process", in_process_met);
  } else {
    out["in_process"] = Json::array();
  }
  if (s.net) {
    TESSERA_ASSIGN_OR_RETURN(out["net"], RunNet(s, net_met));
    out["net_target_met"] = verdict("net", net_met);
  } else {
    out["net"] = Json::array();
  }
  const double seconds = Seconds(Clock::now() - start);
  std::printf("\ntargets (bus >= 0.5x the baseline at every size): %s; total %.1f s\n",
              absl::StrJoin(verdicts, ", ").c_str(), seconds);
  out["total_seconds"] = seconds;
  std::printf("%s\n", out.dump().c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  using tessera::kName;
  std::vector<std::string> args(argv, argv + argc);
  std::signal(SIGPIPE, SIG_IGN);  // a closed peer is an error return, not a signal
  if (absl::Status flags = tessera::CheckCommandLine(argc, argv); !flags.ok()) {
    std::fprintf(stderr, "%s: %s\n", kName, std::string(flags.message()).c_str());
    return 2;
  }
  absl::ParseCommandLine(argc, argv);
  if (const int port = absl::GetFlag(FLAGS_tcp_sink_port); port != 0) {
    if (port < 1 || port > 65535) {
      std::fprintf(stderr, "%s: --tcp_sink_port=%d is not a port\n", kName, port);
      return 2;
    }
    return tessera::RunTcpSink(port);
  }
  if (const int32_t task = absl::GetFlag(FLAGS_serve_replica); task != -1) {
    if (task < 0) {
      std::fprintf(stderr, "%s: --serve_replica=%d is not a replica\n", kName, task);
      return 2;
    }
    if (absl::Status s = tessera::ServeReplica(task); !s.ok()) {
      std::fprintf(stderr, "%s: replica %d: %s\n", kName, task, s.ToString().c_str());
      return 1;
    }
    return 0;
  }
  absl::StatusOr<tessera::Settings> settings = tessera::ReadSettings();
  if (!settings.ok()) {
    std::fprintf(stderr, "%s: %s\n", kName, std::string(settings.status().message()).c_str());
    return 2;
  }
  std::printf("command: %s\n", absl::StrJoin(args, " ").c_str());
  std::fflush(stdout);
  if (absl::Status s = tessera::Run(*settings); !s.ok()) {
    std::fprintf(stderr, "%s: %s\n", kName, s.ToString().c_str());
    return 1;
  }
  return 0;
}
