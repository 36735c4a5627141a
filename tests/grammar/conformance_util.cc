#include "conformance_util.h"

#include <sstream>

#include "grammar/matcher.h"
#include "grammar_test_util.h"

namespace deepinfer::grammar::test {

InstanceVerdict check_instance(const std::shared_ptr<const CompiledGrammar>& grammar, const std::string& text) {
    InstanceVerdict v;
    {
        GrammarMatcher m(grammar);
        v.bytes_accepted = m.accept_bytes(text) && m.can_terminate();
    }
    auto ids = deepseek_tokenizer()->encode(text, false);
    if (!ids.ok()) {
        v.mask_mismatch = "tokenizer: " + ids.status().message();
        return v;
    }
    const Vocabulary& vocab = grammar->vocabulary();
    std::vector<uint32_t> mask(vocab.mask_words());
    GrammarMatcher m(grammar);
    std::vector<int32_t> tokens = ids.value();
    tokens.push_back(vocab.eos_ids().at(0));
    v.tokens_accepted = true;
    for (size_t i = 0; i < tokens.size(); ++i) {
        m.fill_next_token_bitmask(mask.data());
        bool allowed = mask_allows(mask, tokens[i]);
        bool accepted = m.accept_token(tokens[i]);
        if (allowed != accepted && v.mask_mismatch.empty())
            v.mask_mismatch = "token " + std::to_string(i) + " (id " + std::to_string(tokens[i]) + "): mask says " +
                              (allowed ? "allowed" : "forbidden") + ", accept_token says " + (accepted ? "accepted" : "rejected");
        if (!accepted) {
            v.tokens_accepted = false;
            break;
        }
    }
    return v;
}

std::optional<std::string> random_output(const std::shared_ptr<const CompiledGrammar>& grammar, std::mt19937& rng,
                                         int free_steps, int max_tokens) {
    const Vocabulary& v = grammar->vocabulary();
    std::vector<uint32_t> mask(v.mask_words());
    GrammarMatcher m(grammar);
    std::string text;
    std::vector<int32_t> allowed, closing;
    for (int step = 0; step < max_tokens; ++step) {
        m.fill_next_token_bitmask(mask.data());
        allowed.clear();
        closing.clear();
        for (int32_t w = 0; w < v.mask_words(); ++w)
            for (uint32_t bits = mask[w]; bits; bits &= bits - 1) {
                int32_t id = w * 32 + __builtin_ctz(bits);
                allowed.push_back(id);
                if (v.is_eos(id) || v.token_bytes(id).find_first_not_of("\"}]") == std::string::npos) closing.push_back(id);
            }
        if (allowed.empty()) return std::nullopt;
        const auto& from = step >= free_steps && !closing.empty() && rng() % 4 != 0 ? closing : allowed;
        int32_t id = from[rng() % from.size()];
        if (!m.accept_token(id)) return std::nullopt;
        if (v.is_eos(id)) return text;
        text += v.token_bytes(id);
    }
    return std::nullopt;
}

void ConformanceTally::add(const InstanceVerdict& v, bool valid, const std::string& label) {
    if (!v.mask_mismatch.empty()) mask_mismatches.push_back(label + ": " + v.mask_mismatch);
    if (v.bytes_accepted != v.tokens_accepted) inconsistent.push_back(label);
    bool accepted = v.bytes_accepted && v.tokens_accepted;
    if (valid) {
        if (accepted) ++valid_accepted;
        else blocked_valid.push_back(label);
    } else {
        if (!v.bytes_accepted && !v.tokens_accepted) ++invalid_rejected;
        else accepted_invalid.push_back(label);
    }
}

std::string ConformanceTally::summary(const std::string& title) const {
    std::ostringstream out;
    out << title << ": valid accepted " << valid_accepted << ", invalid rejected " << invalid_rejected << ", refused "
        << refused_instances << " instances in " << refused_cases << " schemas; blocked valid " << blocked_valid.size()
        << ", accepted invalid " << accepted_invalid.size() << ", byte/token disagreements " << inconsistent.size()
        << ", mask mismatches " << mask_mismatches.size() << "\n";
    for (const auto& [reason, n] : refusal_reasons) out << "  refused (" << n << "): " << reason << "\n";
    auto list = [&](const char* what, const std::vector<std::string>& items) {
        for (size_t i = 0; i < items.size() && i < 40; ++i) out << "  " << what << ": " << items[i] << "\n";
    };
    list("BLOCKED VALID", blocked_valid);
    list("ACCEPTED INVALID", accepted_invalid);
    list("BYTE/TOKEN DISAGREE", inconsistent);
    list("MASK MISMATCH", mask_mismatches);
    return out.str();
}

}  // namespace deepinfer::grammar::test
