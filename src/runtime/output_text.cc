#include "runtime/output_text.h"

#include <algorithm>

namespace deepinfer::runtime {

OutputText::OutputText(std::shared_ptr<const tokenizer::Tokenizer> tok, const SamplingParams& params,
                       std::vector<int32_t> eos_ids)
    : decoder_(std::move(tok), params.skip_special_tokens), params_(params) {
    stop_ids_ = params.stop_token_ids;
    if (!params.ignore_eos) stop_ids_.insert(stop_ids_.end(), eos_ids.begin(), eos_ids.end());
    for (const auto& s : params.stop) max_stop_len_ = std::max(max_stop_len_, s.size());
}

std::string OutputText::add(int32_t token, int num_generated) {
    if (finish_ != FinishReason::kNone) return {};
    if (std::find(stop_ids_.begin(), stop_ids_.end(), token) != stop_ids_.end()) {
        finish_ = FinishReason::kStop;
        return flush();
    }
    held_ += decoder_.push(token);
    size_t first = std::string::npos;
    for (const auto& s : params_.stop)
        if (!s.empty()) first = std::min(first, held_.find(s));
    if (first != std::string::npos) {
        finish_ = FinishReason::kStop;
        std::string out = held_.substr(0, first);
        held_.clear();
        return out;
    }
    if (num_generated >= params_.max_tokens) {
        finish_ = FinishReason::kLength;
        return flush();
    }
    return release_safe_prefix();
}

// Everything except the last max_stop_len - 1 bytes (which may begin a stop string), cut at a
// character boundary.
std::string OutputText::release_safe_prefix() {
    size_t keep = max_stop_len_ > 0 ? max_stop_len_ - 1 : 0;
    if (held_.size() <= keep) return {};
    size_t cut = held_.size() - keep;
    while (cut > 0 && (static_cast<uint8_t>(held_[cut]) & 0xC0) == 0x80) --cut;
    std::string out = held_.substr(0, cut);
    held_.erase(0, cut);
    return out;
}

std::string OutputText::flush() {
    std::string out = held_ + decoder_.flush();
    held_.clear();
    return out;
}

}  // namespace deepinfer::runtime
