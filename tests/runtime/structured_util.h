#pragma once
// Structured-output engine tests on the bundled model: its engine config and the grammars they use.
#include <string>

#include "deepinfer/engine.h"
#include "tests/test_util.h"

namespace deepinfer::test {

inline EngineConfig nano_structured_config() {
    EngineConfig c;
    c.model.path = std::string(DEEPINFER_SOURCE_DIR) + "/models/deepinfer-nano";
    on_test_device(c.model);  // DEEPINFER_TEST_DEVICE=cuda: the device argmax and mask kernels
    c.model.threads = 2;
    c.cache.memory_bytes = 256LL << 20;
    return c;
}

// A list of ids: a regex the grammar engine compiles to a token automaton.
inline constexpr const char* kIdListRegex = "[0-9]{3}-[a-z]{2,4}(, [0-9]{3}-[a-z]{2,4}){0,3}";

inline constexpr const char* kSchema = R"({"type": "object", "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 999},
    "tag": {"type": "string", "pattern": "^[a-z]{1,6}$"}, "ok": {"type": "boolean"}}, "required": ["id", "tag", "ok"],
    "additionalProperties": false})";

}  // namespace deepinfer::test
