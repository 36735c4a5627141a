#pragma once
// Streaming split of chat content into text and tool calls while the model writes them: text is
// passed on at once, except a tail that could still become the tool-calls opener; inside the
// block each call is reported as soon as its name is known, and again when its arguments are
// complete. For well-formed output the pieces add up to parse_completion() of the whole text.
#include <string>
#include <vector>

namespace deepinfer::tokenizer {

class ToolCallStream {
public:
    struct CallDelta {
        int index = 0;
        std::string name;       // set in the call's first delta
        std::string arguments;  // set in its last delta (a JSON object's text)
        bool opens = false, closes = false;
    };
    struct Delta {
        std::string content;
        std::vector<CallDelta> calls;
    };
    Delta push(const std::string& piece);
    // End of output: held text is released (a block without one complete call is content, as
    // parse_completion treats it).
    Delta flush();
    int num_calls() const { return calls_; }

private:
    void scan_block(Delta& d);

    bool in_block_ = false, block_done_ = false, call_open_ = false;
    std::string held_;
    std::string block_text_;  // the block as received, for a block that turns out malformed
    int calls_ = 0;
};

}  // namespace deepinfer::tokenizer
