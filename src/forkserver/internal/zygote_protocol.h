// Between the fork-server and a zygote it started: a socketpair on the zygote's fd 3, frames
// of init/protocol.h's framing, payloads of its Writer/Reader encoding.
//   zygote -> server  kReady   {u32 version}                        once the preload ran
//   server -> zygote  kFork    {plan, env, code} + the plan's fds     one per request
//   zygote -> server  kForked  {i32 errno, message, i32 pid} + pidfd  the worker, or why not
// The zygote exits when the socket closes.
#ifndef AIRLOCK_FORKSERVER_INTERNAL_ZYGOTE_PROTOCOL_H_
#define AIRLOCK_FORKSERVER_INTERNAL_ZYGOTE_PROTOCOL_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "init/protocol.h"

namespace airlock::forkserver::internal {

inline constexpr int kZygoteFd = 3;
inline constexpr uint32_t kZygoteVersion = 2;  // 2: the EAGAIN reply

enum class ZygoteFrame : uint32_t { kReady = 101, kFork = 102, kForked = 103 };

struct ForkRequest {
  std::string plan;  // engine::WorkerLaunch::plan
  std::vector<std::string> env;
  std::string code;
};

struct ForkReply {
  // 0: pid (and a pidfd beside the frame) is the worker. EAGAIN: pid and pidfd are a worker to
  // discard (a helper thread ran during the clone; the zygote sent it SIGKILL while it waited for
  // its release): kill it, reap it and ask again.
  int32_t err = 0;
  std::string message;
  pid_t pid = -1;
};

inline std::string EncodeForkRequest(const ForkRequest& r) {
  init::Writer w;
  w.Bytes(r.plan);
  w.Strings(r.env);
  w.Bytes(r.code);
  return w.data();
}

inline bool DecodeForkRequest(std::string_view payload, ForkRequest* r) {
  init::Reader rd(payload);
  r->plan = rd.Bytes();
  r->env = rd.Strings();
  r->code = rd.Bytes();
  return rd.done();
}

inline std::string EncodeForkReply(const ForkReply& r) {
  init::Writer w;
  w.I32(r.err);
  w.Bytes(r.message);
  w.I32(r.pid);
  return w.data();
}

inline bool DecodeForkReply(std::string_view payload, ForkReply* r) {
  init::Reader rd(payload);
  r->err = rd.I32();
  r->message = rd.Bytes();
  r->pid = rd.I32();
  return rd.done();
}

}  // namespace airlock::forkserver::internal

#endif  // AIRLOCK_FORKSERVER_INTERNAL_ZYGOTE_PROTOCOL_H_
