// The frontend's shared-memory channels (docs/protocol.md "Shared-memory
// channel"): every attached client's rings, the doorbell, and the routing of
// replies through a reply ring or over ZeroMQ. The frontend loop calls it;
// it hands the requests of the socket and of the rings to the Service,
// answers AttachChannel itself, and routes their replies. Its counters are
// the frontend's own (FrontendStats).
//
// A channel costs the frontend nothing while idle: only awake channels (a
// request lately, or found holding one after their process rang the
// doorbell or their connection sent a message) are polled on each turn and
// have their awake words written; a bounded sweep per tick finds the ended
// ones. Each channel is charged to its peer (PeerBudget) while attached.
//
// Frontend thread only, like the ROUTER socket it sends through.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "doorbell.h"
#include "kvstash/config/server_config.h"
#include "kvstash/proto/codec.h"
#include "mapped_channel.h"
#include "peer.h"
#include "peer_budget.h"
#include "service.h"
#include "stats.h"
#include "wire_codec.h"

namespace kvstash::server {

class FrontendChannels {
 public:
  // A message over ZeroMQ to `peer` (the frontend's ROUTER).
  using Send = std::function<void(const PeerId& peer, const proto::Bytes& bytes)>;

  // `doorbell` may be null (none could be bound, or no channels): clients
  // then wake the frontend over the socket.
  FrontendChannels(const config::ServerConfig& config, Service& service, FrontendStats& stats,
                   std::unique_ptr<Doorbell> doorbell, Send send);
  // Unmaps every channel (their charges go back) and removes the doorbell.
  ~FrontendChannels();
  FrontendChannels(const FrontendChannels&) = delete;
  FrontendChannels& operator=(const FrontendChannels&) = delete;

  int doorbell_fd() const { return doorbell_ ? doorbell_->fd() : -1; }
  bool empty() const { return channels_.empty(); }
  bool any_awake() const { return !awake_channels_.empty(); }
  bool Has(const PeerId& peer) const { return channels_.count(peer) != 0; }

  // One message from `peer`, handled by the Service, or here when it is an
  // AttachChannel: its reply now, or nullopt when it comes through the reply
  // queue.
  std::optional<proto::Bytes> Handle(const Peer& peer, const uint8_t* data, size_t size);
  // A message came over the socket from `peer`: what it wrote to its ring
  // before comes first, and its channel is polled from now on.
  void FromSocket(const PeerId& peer);
  // The doorbell is readable: looks into the rings of the processes that
  // rang; returns whether they are drained (false: more may wait).
  bool Rang(bool* handled);
  // Reads and handles what waits in the awake channels' rings.
  bool DrainAwake(bool* handled);
  // Before a blocking poll (sleeping) or while polling: writes the awake
  // words of the awake channels (the others hold 0: their clients ring);
  // returns whether a ring holds a request (then do not block).
  bool Sleeping(bool sleeping);
  // Each tick: lets channels idle past kIdle sleep, and looks at a few
  // channels (round robin) for an end: closed by the client, its process
  // exited, or its connection silent past --peer-timeout-ms.
  void Tick(Clock::time_point now);
  // A reply to `peer`: through its reply ring when it has one and polls it,
  // otherwise over ZeroMQ.
  void Route(const PeerId& peer, const proto::Bytes& bytes);

  // A channel without a request for this long is no longer polled on every
  // turn; its client rings the doorbell (or sends a message) for the next.
  static constexpr auto kIdle = std::chrono::milliseconds(20);
  // Channels looked at for an end on each tick: a constant cost per tick,
  // whatever their number (4096 are all seen within about 5 s).
  static constexpr size_t kSweptPerTick = 8;

 private:
  struct AttachedChannel {
    std::unique_ptr<MappedChannel> channel;
    PeerBudget::Hold charge;  // its mapping and bytes, on its peer's budget
    bool awake = false;       // listed in awake_channels_
    Clock::time_point last_used;
  };
  // AttachChannel: returns the doorbell's path for the reply ("" for none).
  Result<std::string> Attach(const Peer& peer, const AttachChannelRequest& request);
  // Unmaps a peer's channel and forgets it everywhere.
  // Detaches the channels of process `pid` whose clients ended.
  void DetachEnded(pid_t pid);
  void Forget(const PeerId& peer);
  // Ends a peer's channel; `tell` sends it ChannelClosed naming `why`.
  void Detach(const PeerId& peer, const std::string& why, bool tell);
  // Polls the peer's channel from now on (until it idles).
  void Wake(const PeerId& peer, Clock::time_point now);
  // Reads and handles what waits in the peer's request ring; returns
  // whether it is drained (false: more may wait).
  bool Drain(const PeerId& peer, bool* handled);

  const config::ServerConfig& config_;
  Service& service_;
  FrontendStats& stats_;
  std::unique_ptr<Doorbell> doorbell_;
  Send send_;
  std::map<PeerId, AttachedChannel> channels_;  // ordered: the sweep resumes after a key
  std::vector<PeerId> awake_channels_;
  std::unordered_multimap<pid_t, PeerId> channels_of_pid_;  // whom a doorbell wakes
  PeerId sweep_after_;                                      // the sweep's place
  Clock::time_point last_full_look_;  // every ring looked at after a full doorbell queue
  std::vector<pid_t> rang_;           // reused by each doorbell drain
  std::vector<uint64_t> frame_;       // one request frame copied out of a ring, 8-aligned
  bool reading_ring_ = false;         // handling a request read from a ring
};

}  // namespace kvstash::server
