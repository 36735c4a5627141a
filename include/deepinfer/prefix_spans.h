#pragma once
// A prompt's cached state as portable spans, for prefill/decode disaggregation: a prefill engine
// hands out the spans its prefix cache keeps for a prompt (checksummed blobs: every layer group's
// compressed-KV blocks and the compressor carries at the span's end, keyed by a hash chain over
// the tokens), and a decode engine of the same model, cache layout and device kind takes them in
// (Engine::import_prefix_spans), so a request for that prompt starts from them as a prefix-cache
// hit and recomputes only the window replay (the sliding-window rings are never shipped).
#include <cstddef>
#include <vector>

namespace deepinfer {

class PrefixSpanSink {
public:
    virtual ~PrefixSpanSink() = default;
    // Span `index` of the prompt (0 first, in order). Runs on the engine's thread: it must only
    // hand the blob on.
    virtual void on_span(int index, std::vector<std::byte> blob) = 0;
    // No more spans come: `count` were handed over (fewer than the prompt has when a span left
    // the cache before it could be copied out, or the engine has no prefix cache).
    virtual void on_done(int count) = 0;
};

}  // namespace deepinfer
