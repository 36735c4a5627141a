#pragma once
// Engine test helpers: a model directory = a fixture checkpoint plus a synthetic byte-level
// BPE tokenizer.json whose vocabulary exactly covers the fixture's (256 byte tokens, then merges),
// so generated ids decode to text and stop strings can be exercised.
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/test_util.h"
#include "tokenizer/bpe.h"

namespace deepinfer::test {

// `fixture` is a directory under tests/data ("v4/v4_tiny_a").
// Removes `dir` when the process exits normally (ctest runs every test in a process of its own:
// each left its model directories behind).
inline void remove_at_exit(const std::filesystem::path& dir) {
    static struct Cleanup {
        std::vector<std::filesystem::path> dirs;
        ~Cleanup() {
            for (const auto& d : dirs) {
                std::error_code ec;
                std::filesystem::remove_all(d, ec);
            }
        }
    } cleanup;
    cleanup.dirs.push_back(dir);
}

inline std::string make_model_dir(const std::string& fixture, int vocab) {
    namespace fs = std::filesystem;
    std::string name = fs::path(fixture).filename().string();
    fs::path dir = fs::temp_directory_path() / ("di_model_" + name + "_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    remove_at_exit(dir);
    for (const auto& e : fs::directory_iterator(data_path(fixture)))
        fs::copy_file(e.path(), dir / e.path().filename(), fs::copy_options::overwrite_existing);
    nlohmann::json vocab_map = nlohmann::json::object(), merges = nlohmann::json::array();
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) {
        tokens.push_back(tokenizer::byte_to_chars()[b]);
        vocab_map[tokens.back()] = b;
    }
    std::mt19937 rng(11);
    std::set<std::string> seen(tokens.begin(), tokens.end());
    const std::string letters = "etaoinshrdlu ";
    while (static_cast<int>(tokens.size()) < vocab) {  // merges of printable pieces, so text is readable
        std::string a = tokens[static_cast<uint8_t>(letters[rng() % letters.size()])];
        std::string b = tokens.size() == 256 || rng() % 3 == 0 ? tokens[static_cast<uint8_t>(letters[rng() % letters.size()])]
                                                                : tokens[256 + rng() % (tokens.size() - 256)];
        if (seen.count(a + b)) continue;
        seen.insert(a + b);
        merges.push_back(a + " " + b);
        vocab_map[a + b] = static_cast<int>(tokens.size());
        tokens.push_back(a + b);
    }
    nlohmann::json tok = {
        {"version", "1.0"},
        {"added_tokens", nlohmann::json::array()},
        {"normalizer", nullptr},
        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
        {"decoder", {{"type", "ByteLevel"}}},
        {"model", {{"type", "BPE"}, {"vocab", vocab_map}, {"merges", merges}}},
    };
    std::ofstream(dir / "tokenizer.json") << tok.dump();
    return dir.string();
}

}  // namespace deepinfer::test
