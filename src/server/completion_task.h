#pragma once
// One completion call in flight: connects a CompletionStream to its HTTP exchange without
// blocking any thread. Engine events post a poll to the task's strand; the poll writes SSE
// chunks (or, at the end, the whole response); a client that goes away cancels the call; a
// streaming reply sends an SSE comment when it has been silent for a while.
#include "server/asio.h"

#include <atomic>
#include <functional>
#include <memory>

#include "server/completion_stream.h"
#include "server/http_server.h"

namespace deepinfer::server {

class CompletionTask : public std::enable_shared_from_this<CompletionTask> {
public:
    // `on_end(status)` runs once, on the strand, when the reply is complete or abandoned.
    CompletionTask(boost::asio::io_context& io, std::shared_ptr<Exchange> exchange, std::unique_ptr<CompletionStream> stream,
                   std::function<void(int status)> on_end);
    void start();
    // From any thread: stop generating (the reply then ends with an error).
    void cancel();

private:
    void schedule_poll();
    void poll();
    void finish(int status);
    void arm_keepalive();

    boost::asio::strand<boost::asio::io_context::executor_type> strand_;
    boost::asio::steady_timer keepalive_;
    std::shared_ptr<Exchange> exchange_;
    std::unique_ptr<CompletionStream> stream_;
    std::function<void(int)> on_end_;
    std::atomic<bool> poll_posted_{false};
    bool ended_ = false, aborted_ = false, wrote_since_keepalive_ = false;
};

}  // namespace deepinfer::server
