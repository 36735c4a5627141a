#include "grammar/stacks.h"

#include <algorithm>
#include <cstring>

namespace deepinfer::grammar {

void StackSet::add(const Config& config, const StackPool& pool) {
    scratch_.clear();
    scratch_.push_back(config.state);
    for (int32_t f = config.parent; f >= 0; f = pool[f].parent) scratch_.push_back(pool[f].state);
    std::reverse(scratch_.begin(), scratch_.end());
    size_t depth = scratch_.size();
    for (size_t i = 0; i < data_.size(); i += 1 + data_[i]) {
        if (size_t(data_[i]) == depth && std::memcmp(&data_[i + 1], scratch_.data(), depth * sizeof(int32_t)) == 0)
            return;
    }
    data_.push_back(static_cast<int32_t>(depth));
    data_.insert(data_.end(), scratch_.begin(), scratch_.end());
}

void StackSet::load(StackPool& pool, std::vector<Config>& out) const {
    for (size_t i = 0; i < data_.size(); i += 1 + data_[i]) {
        int32_t depth = data_[i];
        int32_t parent = -1;
        for (int32_t k = 0; k + 1 < depth; ++k) parent = pool.push(data_[i + 1 + k], parent);
        out.push_back({data_[i + depth], parent});
    }
}

size_t StackSet::num_stacks() const {
    size_t n = 0;
    for (size_t i = 0; i < data_.size(); i += 1 + data_[i]) ++n;
    return n;
}

}  // namespace deepinfer::grammar
