// Starting and stopping the client's I/O thread.
#include "transport.h"

#include <cstring>

namespace kvstash::client {

Result<std::unique_ptr<Transport>> Transport::Start(SessionOptions options,
                                                    std::future<Result<ServerInfo>>& first_hello) {
  if (options.timeout.count() <= 0) {
    return Status::InvalidArgument("request timeout must be positive, got " +
                                   std::to_string(options.timeout.count()) + " ms");
  }
  std::unique_ptr<Transport> transport(new Transport());
  if (transport->queue_.fd() < 0) {
    return Status::Unavailable(std::string("eventfd failed: ") + std::strerror(errno));
  }
  transport->timeout_ = options.timeout;
  transport->ipc_ = options.endpoint.rfind("ipc://", 0) == 0;
  transport->trace_ = StageTrace::FromEnvironment("client");
  options.trace = transport->trace_.get();
  std::promise<Result<ServerInfo>> hello;
  first_hello = hello.get_future();
  transport->loop_ =
      std::make_unique<IoLoop>(std::move(options), transport->context_, transport->queue_,
                               transport->next_id_, transport->registrations_, std::move(hello));
  try {
    transport->thread_ = std::thread([loop = transport->loop_.get()] { loop->Run(); });
  } catch (const std::system_error& e) {
    return Status::Unavailable(std::string("cannot start the client I/O thread: ") + e.what());
  }
  return transport;
}

Transport::~Transport() {
  queue_.Close();
  if (thread_.joinable()) thread_.join();
}

void Transport::Submit(ClientRequest request) {
  if (request.timeout.count() == 0) {
    request.timeout = timeout_;
    request.deadline = Clock::now() + timeout_;
  }
  MarkStage(trace_.get(), request.id, TraceStage::kClientSubmit);
  if (!queue_.Push(request)) {
    ReplyHandler handler = std::move(request.on_reply);
    handler(Status::Cancelled(request.Name() + " was submitted after the client shut down"));
  }
}

}  // namespace kvstash::client
