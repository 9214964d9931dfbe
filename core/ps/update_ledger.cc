#include "core/ps/update_ledger.h"

#include <algorithm>
#include <limits>

namespace tessera {

UpdateId UpdateNamer::Next(const std::string& variable, int64_t shard) {
  int64_t& sent = sent_[{variable, shard}];
  return UpdateId{queue_, closure_, sent++, resolved_below_};
}

UpdateLedger::Queue& UpdateLedger::Find(uint64_t id) {
  ++clock_;
  for (Queue& q : queues_) {
    if (q.id == id) {
      q.last_used = clock_;
      return q;
    }
  }
  if (static_cast<int>(queues_.size()) == kMaxRememberedQueues) {
    auto oldest =
        std::min_element(queues_.begin(), queues_.end(),
                         [](const Queue& a, const Queue& b) { return a.last_used < b.last_used; });
    evicted_ += static_cast<int64_t>(oldest->applied.size());
    queues_.erase(oldest);
  }
  Queue& q = queues_.emplace_back();
  q.id = id;
  q.last_used = clock_;
  return q;
}

bool UpdateLedger::Applied(const UpdateId& id) {
  if (!id.tagged()) return false;
  Queue& q = Find(id.queue);
  if (id.resolved_below > q.resolved_below) {
    q.resolved_below = id.resolved_below;
    q.applied.erase(q.applied.begin(),
                    q.applied.lower_bound({q.resolved_below, std::numeric_limits<int64_t>::min()}));
  }
  return q.applied.count({id.closure, id.sequence}) > 0;
}

void UpdateLedger::Record(const UpdateId& id) {
  if (!id.tagged()) return;
  Queue& q = Find(id.queue);
  if (id.closure < q.resolved_below) return;  // resolved: never asked about again
  q.applied.emplace(id.closure, id.sequence);
  if (static_cast<int64_t>(q.applied.size()) > kMaxRememberedUpdates) {
    q.applied.erase(q.applied.begin());
    ++evicted_;
  }
}

std::vector<const UpdateLedger::Queue*> UpdateLedger::LeastRecentlyUsedFirst() const {
  std::vector<const Queue*> order;
  for (const Queue& q : queues_) order.push_back(&q);
  std::sort(order.begin(), order.end(),
            [](const Queue* a, const Queue* b) { return a->last_used < b->last_used; });
  return order;
}

std::vector<std::pair<uint64_t, int64_t>> UpdateLedger::Marks() const {
  std::vector<std::pair<uint64_t, int64_t>> out;
  for (const Queue* q : LeastRecentlyUsedFirst()) out.emplace_back(q->id, q->resolved_below);
  return out;
}

std::vector<RememberedQueue> UpdateLedger::Remembered() const {
  std::vector<RememberedQueue> out;
  for (const Queue* q : LeastRecentlyUsedFirst()) {
    out.push_back({q->id, q->resolved_below, {q->applied.begin(), q->applied.end()}});
  }
  return out;
}

void UpdateLedger::Replace(const std::vector<RememberedQueue>& queues) {
  queues_.clear();
  const size_t skipped = queues.size() > static_cast<size_t>(kMaxRememberedQueues)
                             ? queues.size() - kMaxRememberedQueues
                             : 0;
  for (size_t i = 0; i < queues.size(); ++i) {
    const RememberedQueue& given = queues[i];
    if (i < skipped) {
      evicted_ += static_cast<int64_t>(given.applied.size());
      continue;
    }
    Queue& q = Find(given.queue);  // a queue named twice is one queue
    q.resolved_below = std::max(q.resolved_below, given.resolved_below);
    for (const auto& [closure, sequence] : given.applied) {
      if (closure < q.resolved_below) continue;
      q.applied.emplace(closure, sequence);
    }
    while (static_cast<int64_t>(q.applied.size()) > kMaxRememberedUpdates) {
      q.applied.erase(q.applied.begin());
      ++evicted_;
    }
  }
}

int64_t UpdateLedger::size() const {
  int64_t n = 0;
  for (const Queue& q : queues_) n += static_cast<int64_t>(q.applied.size());
  return n;
}

}  // namespace tessera
