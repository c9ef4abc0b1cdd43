// Reporting requests given up behind their copy fence.
#include "give_ups.h"

#include <thread>

namespace kvstash::client {

void GiveUps::GiveUp(ClientRequest request, Status why, bool goodbye) {
  if (!request.copies_blocks || !request.sent || (goodbye && !request.fence)) {
    report_(request, std::move(why));
    return;
  }
  request.giving_up = std::move(why);
  if (!TryGiveUp(request)) waiting_.push_back(std::move(request));
}

bool GiveUps::TryGiveUp(ClientRequest& request) {
  const Clock::time_point now = Clock::now();
  if (request.fence) {
    switch (request.fence->TryGiveUp(request.id)) {
      case GiveUpFence::GiveUp::kDone:
        if (!ProcessAllowsReport(request, now)) return false;
        report_(request, *request.giving_up);
        return true;
      case GiveUpFence::GiveUp::kBusy: return false;  // kvstashd is copying it
      case GiveUpFence::GiveUp::kFailed: request.fence = nullptr; break;
    }
  }
  // Unfenced: kvstashd starts no copy unit of it past its deadline.
  if (now < request.deadline) return false;
  report_(request, *request.giving_up);
  return true;
}

bool GiveUps::ProcessAllowsReport(const ClientRequest& request, Clock::time_point now) {
  // kvstashd says Goodbye only once its copies have stopped.
  if (request.cause == GiveUpCause::kGoodbye) return true;
  // The byte is free because kvstashd let go of it, or because its process
  // is exiting, which drops every lock while copies it queued on a GPU may
  // still run until its files are all closed, i.e. until it is gone.
  switch (request.fence->daemon()) {
    case GiveUpFence::Daemon::kAlive:
    case GiveUpFence::Daemon::kGone: return true;
    case GiveUpFence::Daemon::kExiting:
      // A process whose exit outlasts this is stuck in a driver: the engine
      // is told at last, with the limits of an unfenced request.
      return now >= request.deadline + request.timeout;
    case GiveUpFence::Daemon::kUnknown:
      // Not watched: a daemon known alive (connected) let go of the byte;
      // a lost one may be exiting, so its deadline decides, as unfenced.
      return request.cause != GiveUpCause::kLostDaemon || now >= request.deadline;
  }
  return true;
}

void GiveUps::Retry() {
  std::vector<ClientRequest> trying;
  trying.swap(waiting_);
  for (ClientRequest& request : trying) {
    if (!TryGiveUp(request)) waiting_.push_back(std::move(request));
  }
}

void GiveUps::Finish() {
  while (!waiting_.empty()) {
    for (ClientRequest& request : waiting_) {
      if (Clock::now() >= request.deadline) request.fence = nullptr;
    }
    Retry();
    if (!waiting_.empty()) std::this_thread::sleep_for(kRetry);
  }
}

}  // namespace kvstash::client
