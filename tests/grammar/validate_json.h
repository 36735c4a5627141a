#pragma once
// Runs tests/grammar/validate_json.py (python-jsonschema, independent of the grammar engine) over
// cases [{"schema": ..., "text": "..."}]: one message per case, "" when the text parses and
// validates; empty when python3 or jsonschema is missing.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace deepinfer::test {

inline std::vector<std::string> validate_with_python(const nlohmann::json& cases) {
    namespace fs = std::filesystem;
    std::string input = (fs::temp_directory_path() / ("validate_json_" + std::to_string(::getpid()) + ".json")).string();
    std::ofstream(input) << cases.dump();
    std::string command = "python3 " + std::string(DEEPINFER_SOURCE_DIR) + "/tests/grammar/validate_json.py " + input;
    std::string output;
    if (FILE* pipe = popen(command.c_str(), "r")) {
        char buffer[65536];
        for (size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) output.append(buffer, n);
        pclose(pipe);
    }
    fs::remove(input);
    auto parsed = nlohmann::json::parse(output, nullptr, false);
    if (parsed.is_discarded()) return {};
    return parsed.get<std::vector<std::string>>();
}

}  // namespace deepinfer::test
