// net_ops: what the network costs a shard operation (issue 7). In one run over loopback, a PS node
// in a separate process (a forked child running its own actor system, configured as `tessera ps`
// is, publishing its node with PublishNode) serves shard operations to this process, which
// connects with ConnectToNode; the same child also runs a plain TCP server, the baseline:
//
//   gather       rows of a [16384, 64] float32 shard, as many as make a reply of N bytes
//   scatter_add  N bytes of rows (plus 8 bytes of id per 256-byte row) into the same shard
//   dense_read   a whole shard of N bytes
//   tcp_pull     a 24-byte request, an N-byte reply        (the baseline of gather and read)
//   tcp_push     a 24-byte header and N bytes, an 8-byte ack (the baseline of scatter_add)
//
// for N = 1 KiB .. 4 MiB, plus, for 1 KiB, ops/s with many requests in flight. TCP uses
// TCP_NODELAY and one connection; its server replies from a prefilled buffer and its client reads
// into a reused one (a transport's ceiling, not a tensor service). The actor side is timed from
// inside one event-based actor that keeps --inflight requests in flight, each a prebuilt message
// (so the client does not copy the payload per send, as a worker moving its gradient does not).
// Every figure is the median of --rounds rounds; within a round every size and path runs once,
// so the machine's noise falls on both sides of a ratio alike. MB = 10^6 bytes. The last line is
// one JSON object with every figure.
//
//   net_ops                          # 3 rounds, ~1 minute
//   net_ops --rounds=5 --inflight=4  # bandwidth rows with 4 requests in flight on both sides
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "actors/base/error.h"
#include "actors/base/messages.h"
#include "actors/ps/ps_node_actor.h"
#include "actors/ps/shard_actor.h"
#include "bench/internal/bench_main.h"
#include "bench/internal/socket_io.h"
#include "cluster/base/cluster.h"
#include "cluster/network/network.h"
#include "tessera/status.h"

ABSL_FLAG(std::vector<std::string>, sizes_kib,
          std::vector<std::string>({"1", "4", "16", "64", "256", "1024", "4096"}),
          "payload sizes in KiB");
ABSL_FLAG(int32_t, rounds, 3, "interleaved rounds; every figure is the median round");
ABSL_FLAG(
    int64_t, bytes_per_measurement, 128 << 20,
    "payload bytes moved per measurement (ops = this / size, clamped to --min_ops..--max_ops)");
ABSL_FLAG(int64_t, min_ops, 16, "least operations per measurement");
ABSL_FLAG(int64_t, max_ops, 1000, "most operations per measurement");
ABSL_FLAG(int64_t, inflight, 1, "bandwidth rows: requests in flight (both sides)");
ABSL_FLAG(std::vector<std::string>, pipeline_inflight, std::vector<std::string>({"16", "64"}),
          "1 KiB pipelined rows: requests in flight");
ABSL_FLAG(int64_t, pipeline_ops, 4000, "1 KiB pipelined rows: operations per measurement");
ABSL_FLAG(int32_t, settle_ms, 20, "pause before every measurement");

namespace tessera {
namespace {

using bench::Median;
using bench::ReadAll;
using bench::WriteAll;

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

constexpr int64_t kDim = 64;                         // floats per row
constexpr int64_t kRowBytes = kDim * sizeof(float);  // 256
constexpr char kTableName[] = "table";

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

absl::StatusOr<std::vector<int64_t>> ParseList(const std::vector<std::string>& items,
                                               const char* flag) {
  std::vector<int64_t> out;
  for (const std::string& item : items) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(item, &n) || n < 1) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", item, "' is not >= 1"));
    }
    out.push_back(n);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, " is empty"));
  return out;
}

// -- Raw TCP: the baseline ---------------------------------------------------------------------

// A request: the server reads `body_bytes` more bytes, then writes `reply_bytes` bytes.
struct TcpHeader {
  uint64_t reply_bytes;
  uint64_t body_bytes;
  uint64_t unused;
};

void SetNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Serves one connection until the peer closes it.
void ServeTcpConnection(int fd, size_t max_bytes) {
  SetNoDelay(fd);
  std::vector<char> reply(max_bytes, 'x');
  std::vector<char> body(max_bytes);
  TcpHeader h;
  while (ReadAll(fd, &h, sizeof(h))) {
    if (h.body_bytes > max_bytes || h.reply_bytes > max_bytes) break;
    if (!ReadAll(fd, body.data(), h.body_bytes)) break;
    if (!WriteAll(fd, reply.data(), h.reply_bytes)) break;
  }
  ::close(fd);
}

// Listens on 127.0.0.1:0; returns the socket and its port.
absl::StatusOr<std::pair<int, uint16_t>> ListenTcp() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(fd, 4) != 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return absl::UnavailableError(absl::StrCat("tcp server: ", std::strerror(errno)));
  }
  return std::make_pair(fd, ntohs(addr.sin_port));
}

class TcpClient {
 public:
  static absl::StatusOr<TcpClient> Connect(uint16_t port, size_t max_bytes) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      return absl::UnavailableError(absl::StrCat("tcp connect: ", std::strerror(errno)));
    }
    SetNoDelay(fd);
    return TcpClient(fd, max_bytes);
  }

  // Seconds for `ops` requests of `body` bytes answered by `reply` bytes, `inflight` at once
  // (more than one: a writer thread sends while this thread reads the replies).
  absl::StatusOr<double> Run(size_t body, size_t reply, int64_t ops, int64_t inflight) {
    std::vector<char>& out = *out_;
    std::vector<char>& in = *in_;
    TcpHeader h{reply, body, 0};
    std::memcpy(out.data(), &h, sizeof(h));
    const size_t request = sizeof(h) + body;
    const Clock::time_point start = Clock::now();
    if (inflight <= 1) {
      for (int64_t k = 0; k < ops; ++k) {
        if (!WriteAll(fd_, out.data(), request) || !ReadAll(fd_, in.data(), reply)) {
          return absl::UnavailableError("tcp: connection lost");
        }
      }
      return Seconds(Clock::now() - start);
    }
    std::mutex mu;
    std::condition_variable cv;
    int64_t window = inflight;  // requests that may still be sent
    bool failed = false;
    std::thread writer([&] {
      for (int64_t k = 0; k < ops; ++k) {
        {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return window > 0 || failed; });
          if (failed) return;
          --window;
        }
        if (!WriteAll(fd_, out.data(), request)) return;
      }
    });
    bool ok = true;
    for (int64_t k = 0; k < ops && ok; ++k) {
      ok = ReadAll(fd_, in.data(), reply);
      std::lock_guard<std::mutex> lock(mu);
      ++window;
      failed = !ok;
      cv.notify_one();
    }
    writer.join();
    if (!ok) return absl::UnavailableError("tcp: connection lost");
    return Seconds(Clock::now() - start);
  }

  void Close() { ::close(fd_); }

 private:
  TcpClient(int fd, size_t max_bytes)
      : fd_(fd),
        out_(std::make_shared<std::vector<char>>(max_bytes + sizeof(TcpHeader), 'y')),
        in_(std::make_shared<std::vector<char>>(max_bytes)) {}
  int fd_;
  std::shared_ptr<std::vector<char>> out_, in_;
};

// -- The PS process ----------------------------------------------------------------------------

NetworkOptions BenchNetwork() {
  NetworkOptions options;
  options.connect_timeout = absl::Seconds(10);
  return options;
}

// The child: a PS node published as `tessera ps` publishes it, and the TCP server. Writes its two
// ports to `report_fd`, then serves until `stop_fd` reaches EOF (the parent closed it or died).
int RunPsProcess(int report_fd, int stop_fd, size_t max_bytes) {
  caf::actor_system_config cfg;
  ConfigureActorSystem(cfg);
  if (absl::Status s = ConfigureNetwork(cfg, BenchNetwork()); !s.ok()) {
    std::fprintf(stderr, "net_ops ps: %s\n", s.ToString().c_str());
    return 1;
  }
  int status = 0;
  {
    caf::actor_system system(cfg);
    ps_node_actor node = SpawnPsNode(system, 0);
    absl::StatusOr<uint16_t> caf_port =
        PublishNode(system, "ps 0", caf::actor_cast<caf::actor>(node), 0, BenchNetwork());
    absl::StatusOr<std::pair<int, uint16_t>> tcp = ListenTcp();
    if (!caf_port.ok() || !tcp.ok()) {
      std::fprintf(stderr, "net_ops ps: %s %s\n", caf_port.status().ToString().c_str(),
                   tcp.status().ToString().c_str());
      status = 1;
    } else {
      const int listen_fd = tcp->first;
      std::vector<std::thread> connections;
      std::thread acceptor([&] {
        for (;;) {
          const int fd = ::accept(listen_fd, nullptr, nullptr);
          if (fd < 0) return;  // shut down
          connections.emplace_back(ServeTcpConnection, fd, max_bytes);
        }
      });
      const uint16_t ports[2] = {*caf_port, tcp->second};
      WriteAll(report_fd, ports, sizeof(ports));
      char c;
      while (::read(stop_fd, &c, 1) > 0) {
      }
      ::shutdown(listen_fd, SHUT_RDWR);
      acceptor.join();
      ::close(listen_fd);
      for (std::thread& t : connections) t.join();  // their peer has gone
    }
    caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
  }
  return status;
}

struct PsProcess {
  pid_t pid = -1;
  int stop_fd = -1;
  uint16_t caf_port = 0;
  uint16_t tcp_port = 0;
};

// Forks the PS process; call before this process starts any thread.
absl::StatusOr<PsProcess> StartPsProcess(size_t max_bytes) {
  int report[2], stop[2];
  if (::pipe(report) != 0 || ::pipe(stop) != 0) return absl::InternalError("pipe");
  std::fflush(stdout);
  const pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError("fork");
  if (pid == 0) {
    ::close(report[0]);
    ::close(stop[1]);
    std::_Exit(RunPsProcess(report[1], stop[0], max_bytes));
  }
  ::close(report[1]);
  ::close(stop[0]);
  PsProcess ps;
  ps.pid = pid;
  ps.stop_fd = stop[1];
  uint16_t ports[2];
  if (!ReadAll(report[0], ports, sizeof(ports))) {
    return absl::UnavailableError("the PS process did not start");
  }
  ::close(report[0]);
  ps.caf_port = ports[0];
  ps.tcp_port = ports[1];
  return ps;
}

void StopPsProcess(PsProcess& ps) {
  ::close(ps.stop_fd);
  int status = 0;
  ::waitpid(ps.pid, &status, 0);
}

// -- The actor side ----------------------------------------------------------------------------

// Seconds for `total` requests of `msg` to `target`, `inflight` at once, issued and completed
// inside one event-based actor (the clock runs on it). `check(reply)` validates a reply.
template <class Reply>
absl::StatusOr<double> RunActor(caf::actor_system& system, caf::actor target, caf::message msg,
                                int64_t total, int64_t inflight,
                                std::function<absl::Status(const Reply&)> check) {
  struct Run {
    caf::event_based_actor* self;
    caf::actor target;
    caf::message msg;
    int64_t total, issued = 0, completed = 0;
    bool finished = false;
    Clock::time_point begin;
    std::function<absl::Status(const Reply&)> check;
    std::promise<absl::StatusOr<double>> result;
    void Finish(absl::StatusOr<double> r) {
      finished = true;
      result.set_value(std::move(r));
    }
    static void Issue(std::shared_ptr<Run> run) {
      ++run->issued;
      run->self->request(run->target, caf::infinite, run->msg)
          .then(
              [run](const Reply& reply) {
                if (run->finished) return;
                if (absl::Status s = run->check(reply); !s.ok()) return run->Finish(s);
                if (++run->completed == run->total) {
                  return run->Finish(Seconds(Clock::now() - run->begin));
                }
                if (run->issued < run->total) Issue(run);
              },
              [run](caf::error& err) {
                if (!run->finished) run->Finish(ErrorToStatus(err));
              });
    }
  };
  auto run = std::make_shared<Run>();
  run->target = std::move(target);
  run->msg = std::move(msg);
  run->total = total;
  run->check = std::move(check);
  std::future<absl::StatusOr<double>> seconds = run->result.get_future();
  system.spawn(
      [run, inflight](caf::event_based_actor* self, int) {
        run->self = self;
        run->begin = Clock::now();
        for (int64_t i = 0; i < std::min(inflight, run->total); ++i) Run::Issue(run);
      },
      0);
  absl::StatusOr<double> out = seconds.get();
  return out;
}

absl::StatusOr<shard_actor> CreateShard(caf::actor_system& system, const caf::actor& node,
                                        const std::string& name, int64_t rows) {
  ShardSpec spec;
  spec.variable = name;
  spec.full_shape = Shape{rows, kDim};
  spec.rows = rows;
  spec.initializer = {"random_uniform", {{"minval", -0.05}, {"maxval", 0.05}}, 1};
  caf::scoped_actor self(system);
  absl::StatusOr<shard_actor> out = absl::InternalError("no reply");
  self->request(caf::actor_cast<ps_node_actor>(node), std::chrono::seconds(30),
                create_shard_atom::value, spec, caf::actor())
      .receive([&](shard_actor& shard) { out = std::move(shard); },
               [&](caf::error& err) { out = ErrorToStatus(err); });
  return out;
}

// One measured path at one size: the seconds of every round.
struct Path {
  std::string key;  // JSON name: "gather"
  std::function<absl::StatusOr<double>(int64_t ops, int64_t inflight)> run;
};

absl::Status Run(int argc, char** argv, PsProcess& ps, size_t max_bytes,
                 const std::vector<int64_t>& sizes) {
  const int32_t rounds = absl::GetFlag(FLAGS_rounds);
  const int64_t inflight = absl::GetFlag(FLAGS_inflight);
  TESSERA_ASSIGN_OR_RETURN(std::vector<int64_t> pipeline_inflight,
                           ParseList(absl::GetFlag(FLAGS_pipeline_inflight), "pipeline_inflight"));
  const int64_t pipeline_ops = absl::GetFlag(FLAGS_pipeline_ops);
  if (rounds < 1 || inflight < 1 || pipeline_ops < 1 || absl::GetFlag(FLAGS_min_ops) < 1) {
    return absl::InvalidArgumentError("--rounds, --inflight, --pipeline_ops, --min_ops: >= 1");
  }
  caf::actor_system_config cfg;
  ConfigureActorSystem(cfg);
  TESSERA_RETURN_IF_ERROR(ConfigureNetwork(cfg, BenchNetwork()));
  caf::actor_system system(cfg);
  TESSERA_ASSIGN_OR_RETURN(caf::actor node, ConnectToNode(system, {"127.0.0.1", ps.caf_port},
                                                          "net_ops", BenchNetwork()));
  TESSERA_ASSIGN_OR_RETURN(TcpClient tcp, TcpClient::Connect(ps.tcp_port, max_bytes));
  const int64_t table_rows = static_cast<int64_t>(max_bytes) / kRowBytes;
  TESSERA_ASSIGN_OR_RETURN(shard_actor table, CreateShard(system, node, kTableName, table_rows));
  std::printf(
      "PS process %d: CAF node on 127.0.0.1:%u, TCP server on 127.0.0.1:%u; shard %s "
      "[%lld, %lld] float32\n",
      static_cast<int>(ps.pid), ps.caf_port, ps.tcp_port, kTableName,
      static_cast<long long>(table_rows), static_cast<long long>(kDim));

  std::mt19937_64 rng(7);
  // Per size: the prebuilt messages and the paths measuring them.
  struct Size {
    int64_t bytes;
    int64_t ops;
    std::vector<Path> paths;
  };
  std::vector<Size> plan;
  for (int64_t bytes : sizes) {
    const int64_t rows = bytes / kRowBytes;
    // rows distinct random ids, ascending (a worker's gather after dedup).
    Ids all(static_cast<size_t>(table_rows));
    for (int64_t i = 0; i < table_rows; ++i) all[i] = i;
    std::shuffle(all.begin(), all.end(), rng);
    Ids ids(all.begin(), all.begin() + rows);
    std::sort(ids.begin(), ids.end());
    Tensor values(Shape{rows, kDim});
    std::uniform_real_distribution<float> value(-1e-6f, 1e-6f);
    for (float& x : values.values()) x = value(rng);
    TESSERA_ASSIGN_OR_RETURN(shard_actor dense,
                             CreateShard(system, node, absl::StrCat("dense_", bytes), rows));
    caf::message gather_msg = caf::make_message(ShardOp(GatherOp{ids}));
    caf::message scatter_msg =
        caf::make_message(ShardOp(ScatterRowsOp{ScatterOp::kAdd, IndexedSlices{ids, values}}));
    caf::message read_msg = caf::make_message(ShardOp(ReadOp{}));
    const caf::actor table_actor = caf::actor_cast<caf::actor>(table);
    const caf::actor dense_actor = caf::actor_cast<caf::actor>(dense);
    auto check_value = [bytes](const ShardOpResult& result) -> absl::Status {
      const auto* v = std::get_if<ShardValue>(&result);
      if (v == nullptr) return absl::InternalError("a reply that is not a shard value");
      if (v->value.size() * static_cast<int64_t>(sizeof(float)) != bytes) {
        return absl::InternalError(
            absl::StrCat("a reply of ", v->value.size() * 4, " bytes, expected ", bytes));
      }
      return absl::OkStatus();
    };
    auto check_version = [](const ShardOpResult& result) {
      return std::holds_alternative<ShardVersion>(result)
                 ? absl::OkStatus()
                 : absl::InternalError("a reply that is not a version");
    };
    Size s;
    s.bytes = bytes;
    s.ops = std::clamp(absl::GetFlag(FLAGS_bytes_per_measurement) / bytes,
                       absl::GetFlag(FLAGS_min_ops), absl::GetFlag(FLAGS_max_ops));
    s.paths.push_back({"gather", [=, &system](int64_t ops, int64_t n) {
                         return RunActor<ShardOpResult>(system, table_actor, gather_msg, ops, n,
                                                        check_value);
                       }});
    s.paths.push_back({"tcp_pull", [=, &tcp](int64_t ops, int64_t n) {
                         return tcp.Run(0, static_cast<size_t>(bytes), ops, n);
                       }});
    s.paths.push_back({"scatter_add", [=, &system](int64_t ops, int64_t n) {
                         return RunActor<ShardOpResult>(system, table_actor, scatter_msg, ops, n,
                                                        check_version);
                       }});
    s.paths.push_back({"tcp_push", [=, &tcp](int64_t ops, int64_t n) {
                         return tcp.Run(static_cast<size_t>(bytes), 8, ops, n);
                       }});
    s.paths.push_back({"dense_read", [=, &system](int64_t ops, int64_t n) {
                         return RunActor<ShardOpResult>(system, dense_actor, read_msg, ops, n,
                                                        check_value);
                       }});
    plan.push_back(std::move(s));
  }

  auto settle = [] {
    std::this_thread::sleep_for(std::chrono::milliseconds(absl::GetFlag(FLAGS_settle_ms)));
  };
  // Warm-up: every path once, briefly (connections, allocator, page cache of the shards).
  for (Size& s : plan) {
    for (Path& p : s.paths)
      TESSERA_RETURN_IF_ERROR(p.run(std::min<int64_t>(s.ops, 16), inflight).status());
  }
  // mb_per_s[size index][path key]: one figure per round.
  std::vector<std::map<std::string, std::vector<double>>> mb_per_s(plan.size());
  // The 1 KiB pipelined rows: ops_per_s[path@inflight].
  std::map<std::string, std::vector<double>> pipelined;
  const auto small =
      std::find_if(plan.begin(), plan.end(), [](const Size& s) { return s.bytes == 1024; });
  for (int32_t r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < plan.size(); ++i) {
      for (Path& p : plan[i].paths) {
        settle();
        TESSERA_ASSIGN_OR_RETURN(double seconds, p.run(plan[i].ops, inflight));
        mb_per_s[i][p.key].push_back(plan[i].ops * plan[i].bytes / seconds / 1e6);
      }
    }
    if (small != plan.end()) {
      for (int64_t n : pipeline_inflight) {
        for (Path& p : small->paths) {
          settle();
          TESSERA_ASSIGN_OR_RETURN(double seconds, p.run(pipeline_ops, n));
          pipelined[absl::StrCat(p.key, "@", n)].push_back(pipeline_ops / seconds);
        }
      }
    }
    std::printf("round %d done\n", r);
    std::fflush(stdout);
  }

  Json out;
  out["rounds"] = rounds;
  out["inflight"] = inflight;
  out["row_bytes"] = kRowBytes;
  std::printf(
      "\nbandwidth, %lld in flight, MB/s (median of %d rounds); ratio = op / its raw TCP "
      "baseline\n",
      static_cast<long long>(inflight), rounds);
  std::printf("%9s %6s %9s %9s %9s %9s %9s %8s %8s %8s\n", "size", "ops", "gather", "scatter",
              "read", "tcp_pull", "tcp_push", "g/pull", "s/push", "r/pull");
  Json by_size = Json::array();
  for (size_t i = 0; i < plan.size(); ++i) {
    std::map<std::string, double> m;
    for (auto& [key, v] : mb_per_s[i]) m[key] = Median(v);
    const double g = m["gather"] / m["tcp_pull"], s = m["scatter_add"] / m["tcp_push"],
                 d = m["dense_read"] / m["tcp_pull"];
    std::printf("%6lldKiB %6lld %9.1f %9.1f %9.1f %9.1f %9.1f %8.3f %8.3f %8.3f\n",
                static_cast<long long>(plan[i].bytes / 1024), static_cast<long long>(plan[i].ops),
                m["gather"], m["scatter_add"], m["dense_read"], m["tcp_pull"], m["tcp_push"], g, s,
                d);
    Json row;
    row["bytes"] = plan[i].bytes;
    row["ops"] = plan[i].ops;
    for (auto& [key, v] : mb_per_s[i]) {
      row[key + "_mb_per_s"] = m[key];
      row[key + "_rounds"] = v;
    }
    row["gather_vs_tcp"] = g;
    row["scatter_add_vs_tcp"] = s;
    row["dense_read_vs_tcp"] = d;
    by_size.push_back(row);
  }
  out["sizes"] = by_size;
  // Target: >= 0.5x raw TCP for payloads >= 256 KiB.
  bool met = true;
  double worst = 1e9;
  for (const Json& row : by_size) {
    if (row["bytes"].get<int64_t>() < 256 * 1024) continue;
    for (const char* k : {"gather_vs_tcp", "scatter_add_vs_tcp", "dense_read_vs_tcp"}) {
      worst = std::min(worst, row[k].get<double>());
    }
  }
  if (worst < 1e9) {
    met = worst >= 0.5;
    out["worst_ratio_ge_256k"] = worst;
    out["target_bandwidth_met"] = met;
    std::printf("worst ratio at >= 256 KiB: %.3f (target >= 0.5: %s)\n", worst,
                met ? "met" : "MISSED");
  }
  if (small != plan.end()) {
    const size_t i = static_cast<size_t>(small - plan.begin());
    Json rt;
    std::printf("\n1 KiB, one at a time: round trip (median of %d rounds)\n", rounds);
    for (const char* key : {"gather", "tcp_pull", "scatter_add", "tcp_push", "dense_read"}) {
      const double us = 1024 / Median(mb_per_s[i][key]);  // MB/s -> us per op
      std::printf("  %-12s %8.1f us\n", key, us);
      if (inflight == 1) rt[std::string(key) + "_rtt_us"] = us;
    }
    out["small"] = rt;
    std::printf("1 KiB, pipelined: ops/s (median of %d rounds)\n", rounds);
    Json pj;
    for (int64_t n : pipeline_inflight) {
      std::map<std::string, double> m;
      for (const Path& p : small->paths) {
        m[p.key] = Median(pipelined[absl::StrCat(p.key, "@", n)]);
        pj[absl::StrCat(p.key, "_ops_per_s_inflight", n)] = m[p.key];
      }
      std::printf(
          "  %3lld in flight: gather %.0f, tcp_pull %.0f (%.3f); scatter_add %.0f, "
          "tcp_push %.0f (%.3f); dense_read %.0f\n",
          static_cast<long long>(n), m["gather"], m["tcp_pull"], m["gather"] / m["tcp_pull"],
          m["scatter_add"], m["tcp_push"], m["scatter_add"] / m["tcp_push"], m["dense_read"]);
      pj[absl::StrCat("gather_vs_tcp_inflight", n)] = m["gather"] / m["tcp_pull"];
      pj[absl::StrCat("scatter_add_vs_tcp_inflight", n)] = m["scatter_add"] / m["tcp_push"];
    }
    out["pipelined_1k"] = pj;
  }
  tcp.Close();
  caf::anon_send_exit(table, caf::exit_reason::user_shutdown);
  std::printf("%s\n", out.dump().c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::signal(SIGPIPE, SIG_IGN);  // a closed peer is an error return, not a signal
  std::printf("command: %s\n", absl::StrJoin(argv, argv + argc, " ").c_str());
  absl::StatusOr<std::vector<int64_t>> kib =
      tessera::ParseList(absl::GetFlag(FLAGS_sizes_kib), "sizes_kib");
  if (!kib.ok()) {
    std::fprintf(stderr, "net_ops: %s\n", kib.status().ToString().c_str());
    return 1;
  }
  std::vector<int64_t> sizes;
  for (int64_t k : *kib) sizes.push_back(k * 1024);
  const size_t max_bytes = static_cast<size_t>(*std::max_element(sizes.begin(), sizes.end()));
  // The PS process is forked before this process starts any thread.
  absl::StatusOr<tessera::PsProcess> ps = tessera::StartPsProcess(max_bytes);
  if (!ps.ok()) {
    std::fprintf(stderr, "net_ops: %s\n", ps.status().ToString().c_str());
    return 1;
  }
  absl::Status status = tessera::Run(argc, argv, *ps, max_bytes, sizes);
  tessera::StopPsProcess(*ps);
  if (!status.ok()) {
    std::fprintf(stderr, "net_ops: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
