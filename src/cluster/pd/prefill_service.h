#pragma once
// Prefill/decode disaggregation, prefill side: POST /internal/prefill with
// {"prompts": [[token ids], ...]} runs each prompt to its first token on this engine and answers
// with the prompts' prefix-cache spans (span_wire.h, application/octet-stream), which a decode
// instance imports and continues from. The decode side recomputes the window replay itself (the
// sliding-window rings are rebuilt from the tokens, never shipped).
#include <functional>
#include <string>

#include "cluster/pd/ucx_channel.h"
#include "deepinfer/engine.h"

namespace deepinfer::cluster {

struct PrefillReply {
    int status = 200;
    std::string content_type = "application/octet-stream";
    std::string body;  // the spans, or a JSON error
    int spans = 0;
};

// Parses `body`, submits the prompts and calls `reply` once (from the engine's or the transport's
// thread, or at once for a bad body) when every prompt's spans were handed out. With
// "ucx_address" and "transfer" in the body and a `channel`, each span goes over UCX as soon as it
// exists, and the reply is {"transport": "ucx", "counts": [spans per prompt], "bytes": n}.
void run_prefill(Engine& engine, const std::string& body, std::function<void(PrefillReply)> reply, pd::UcxChannel* channel);

}  // namespace deepinfer::cluster
