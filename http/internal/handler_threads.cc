// The handler threads of HttpServer::Loop (server_loop.h): each takes a complete request from
// the queue, runs the server's handler on it (Note [Out of memory]: its failures become a 500 or
// a 503 here), and hands the answer back to the loop thread.
#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <mutex>
#include <new>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "http/internal/diagnostics.h"
#include "http/internal/response_wire.h"
#include "http/internal/server_loop.h"

namespace tessera {

using http_internal::ErrorResponse;
using http_internal::ResponseWire;
using http_internal::Warn;

void HttpServer::Loop::Work() {
  // Note [Out of memory]: the thread's arena, while memory is plentiful. The volatile pointer
  // keeps the compiler from removing the pair.
  void* volatile arena_claim = std::malloc(1);
  std::free(arena_claim);
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(jobs_mutex_);
      jobs_ready_.wait(lock, [&] { return shutting_down_ || !jobs_.empty(); });
      if (shutting_down_) return;  // queued requests' connections are being closed anyway
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    Answer(job);
    {
      std::lock_guard<std::mutex> lock(done_mutex_);
      done_.splice(done_.end(), job.answer);
    }
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t written = ::write(server_.wake_fd_, &one, sizeof(one));
  }
}

void HttpServer::Loop::Answer(Job& job) {
  Done& done = job.answer.front();
  done.id = job.id;
  done.close = !job.request.keep_alive;
  done.budgeted = job.budgeted;
  const bool head_only = job.request.method == "HEAD";
  // Note [Out of memory]: an allocation that fails anywhere in the handler unwinds to here, where
  // nothing allocates until the request's memory is gone.
  int status = 500;
  std::exception_ptr error;
  try {
    HttpResponse response = server_.handler_(job.request);
    job.request = HttpRequest();
    done.status = response.status;
    done.wire = ResponseWire(std::move(response), head_only, done.close);
    return;
  } catch (const std::bad_alloc&) {
    status = 503;
  } catch (...) {
    error = std::current_exception();
  }
  job.request.body = std::string();
  try {
    std::string message = "out of memory answering this request";
    if (status != 503) {
      message = "internal error";
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        message = absl::StrCat("internal error: ", e.what());
      } catch (...) {
      }
    }
    done.status = status;
    done.wire = ResponseWire(ErrorResponse(status, server_.error_body_(status, message)), head_only,
                             done.close);
    Warn("http: {} {}: answered {}: {}", job.request.method, job.request.path, status, message);
  } catch (...) {
    done.failed = true;  // not even an error fits: the connection is closed
  }
}

}  // namespace tessera
