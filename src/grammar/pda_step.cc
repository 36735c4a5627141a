#include "grammar/pda_step.h"

namespace deepinfer::grammar {

PdaStepper::PdaStepper(const Pda& pda) : pda_(pda), class_bytes_(pda.num_classes()) {
    for (int b = 0; b < 256; ++b) class_bytes_[pda.byte_class()[b]].add(static_cast<uint8_t>(b));
}

bool PdaStepper::can_end(std::span<const Config> configs, StackPool& pool) {
    bool ends = false;
    for (const Config& c : configs)
        expand(c, pool, [&](const Config& e) { ends = ends || (e.parent < 0 && pda_.accepting(e.state)); });
    return ends;
}

ByteSet PdaStepper::next_bytes(std::span<const Config> configs, StackPool& pool) {
    ByteSet out;
    for (const Config& c : configs)
        expand(c, pool, [&](const Config& e) {
            const int32_t* row = pda_.row(e.state);
            for (int32_t k = 0; k < pda_.num_classes(); ++k)
                if (row[k] != Pda::kDead) out.add(class_bytes_[k]);
        });
    return out;
}

}  // namespace deepinfer::grammar
