#include "tokenizer/tool_call_stream.h"

#include "tokenizer/chat_encoding.h"

namespace deepinfer::tokenizer {
namespace {

const std::string kInvoke = "<｜DSML｜invoke name=\"";
const std::string kInvokeEnd = "</｜DSML｜invoke>";
const std::string kBlockEnd = "</｜DSML｜tool_calls>";

// Length of the longest tail of `text` that is a proper prefix of `marker`.
size_t partial_marker_tail(const std::string& text, const std::string& marker) {
    for (size_t k = std::min(text.size(), marker.size() - 1); k > 0; --k)
        if (text.compare(text.size() - k, k, marker, 0, k) == 0) return k;
    return 0;
}

}  // namespace

ToolCallStream::Delta ToolCallStream::push(const std::string& piece) {
    Delta d;
    if (block_done_) return d;  // text after the block is not content (as parse_completion drops it)
    held_ += piece;
    if (!in_block_) {
        const std::string& opener = tool_calls_opener();
        size_t at = held_.find(opener);
        if (at == std::string::npos) {
            size_t keep = partial_marker_tail(held_, opener);
            d.content = held_.substr(0, held_.size() - keep);
            held_.erase(0, held_.size() - keep);
            return d;
        }
        d.content = held_.substr(0, at);
        held_.erase(0, at + opener.size());
        block_text_ = opener;
        in_block_ = true;
    }
    scan_block(d);
    return d;
}

// Takes every complete piece of the block off the front of held_.
void ToolCallStream::scan_block(Delta& d) {
    for (;;) {
        if (!call_open_) {
            size_t start = held_.find(kInvoke), end_block = held_.find(kBlockEnd);
            if (end_block != std::string::npos && (start == std::string::npos || end_block < start)) {
                block_done_ = true;
                held_.clear();
                return;
            }
            size_t name_end = start == std::string::npos ? start : held_.find("\">", start + kInvoke.size());
            if (name_end == std::string::npos) return;
            d.calls.push_back({calls_, held_.substr(start + kInvoke.size(), name_end - start - kInvoke.size()), "", true, false});
            block_text_ += held_.substr(0, name_end + 2);
            held_.erase(0, name_end + 2);
            call_open_ = true;
        }
        size_t end = held_.find(kInvokeEnd);
        if (end == std::string::npos) return;
        auto args = tool_call_arguments(std::string_view(held_).substr(0, end));
        CallDelta close{calls_, "", args.value_or("{}"), false, true};
        d.calls.push_back(std::move(close));
        block_text_ += held_.substr(0, end + kInvokeEnd.size());
        held_.erase(0, end + kInvokeEnd.size());
        call_open_ = false;
        ++calls_;
    }
}

ToolCallStream::Delta ToolCallStream::flush() {
    Delta d;
    if (!in_block_) {
        d.content = std::move(held_);
    } else if (calls_ == 0 && !call_open_) {
        d.content = block_text_ + held_;  // no call in it: the block was text after all
    } else if (call_open_) {
        auto args = tool_call_arguments(held_);  // cut off inside a call: what arrived of it
        d.calls.push_back({calls_++, "", args.value_or("{}"), false, true});
        call_open_ = false;
    }
    held_.clear();
    block_done_ = true;
    return d;
}

}  // namespace deepinfer::tokenizer
