// The future-returning forms of the Tier calls.
#include "kvstash/tiers/tier.h"

#include <memory>

namespace kvstash::tiers {
namespace {

// Wraps a callback-taking call into a future of its results.
template <typename R, typename Call>
std::future<std::vector<R>> ToFuture(Call call) {
  auto promise = std::make_shared<std::promise<std::vector<R>>>();
  std::future<std::vector<R>> future = promise->get_future();
  call([promise](std::vector<R> results) { promise->set_value(std::move(results)); });
  return future;
}

}  // namespace

std::future<std::vector<PutResult>> PutAsync(Tier& tier, std::vector<PutRequest> batch) {
  return ToFuture<PutResult>(
      [&](Tier::PutDone done) { tier.Put(std::move(batch), std::move(done)); });
}

std::future<std::vector<GetResult>> GetAsync(Tier& tier, std::vector<GetRequest> batch) {
  return ToFuture<GetResult>(
      [&](Tier::GetDone done) { tier.Get(std::move(batch), std::move(done)); });
}

std::future<std::vector<Presence>> ContainsAsync(Tier& tier, std::vector<ChunkId> ids) {
  return ToFuture<Presence>(
      [&](Tier::ContainsDone done) { tier.Contains(std::move(ids), std::move(done)); });
}

std::future<std::vector<Status>> RemoveAsync(Tier& tier, std::vector<ChunkId> ids) {
  return ToFuture<Status>(
      [&](Tier::RemoveDone done) { tier.Remove(std::move(ids), std::move(done)); });
}

}  // namespace kvstash::tiers
