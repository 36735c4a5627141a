#pragma once
// Accept / reject checks of one JSON instance against a compiled grammar, used by the
// JSON-Schema-Test-Suite and MaskBench tests: byte by byte, and token by token with the DeepSeek
// tokenizer's own encoding of the text, with the mask checked against accept_token at every step.
#include <map>
#include <optional>
#include <random>
#include <memory>
#include <string>
#include <vector>

#include "grammar/compiled_grammar.h"

namespace deepinfer::grammar::test {

struct InstanceVerdict {
    bool bytes_accepted = false;
    bool tokens_accepted = false;
    std::string mask_mismatch;  // empty when every mask agreed with accept_token
};

InstanceVerdict check_instance(const std::shared_ptr<const CompiledGrammar>& grammar, const std::string& text);

// A random output of the grammar: tokens drawn uniformly from each mask, steered towards closing
// tokens (EOS, and tokens made of '"', '}' and ']') after `free_steps`. Empty when no EOS came
// within max_tokens.
std::optional<std::string> random_output(const std::shared_ptr<const CompiledGrammar>& grammar, std::mt19937& rng,
                                         int free_steps, int max_tokens);

// Tallies of a conformance run.
struct ConformanceTally {
    int refused_cases = 0, refused_instances = 0;
    int valid_accepted = 0, invalid_rejected = 0;
    std::vector<std::string> blocked_valid, accepted_invalid, inconsistent, mask_mismatches;
    std::map<std::string, int> refusal_reasons;  // message -> cases

    void add(const InstanceVerdict& v, bool valid, const std::string& label);
    std::string summary(const std::string& title) const;
};

}  // namespace deepinfer::grammar::test
