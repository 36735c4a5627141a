#pragma once
// DeepSeek-V4 chat encoding (the format of DeepSeek's encoding_dsv4): BOS, the system text as is
// (tools rendered into it as a "## Tools" section with the DSML call syntax), user turns after
// <｜User｜> (tool results merged into user turns as <tool_result>…</tool_result>), assistant turns
// as [reasoning</think>]content[tool calls]<｜end▁of▁sentence｜>, and after the last user turn
// <｜Assistant｜> followed by <think> (thinking mode) or </think> (chat mode).
// Also parses a completion back into reasoning, content and tool calls, at once or streaming.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::tokenizer {

struct ToolCall {
    std::string id;
    std::string name;
    std::string arguments;  // JSON object text
};

struct ChatMessage {
    std::string role;  // system, developer, user, assistant, tool
    std::string content;
    std::string reasoning_content;   // assistant
    std::vector<ToolCall> tool_calls;  // assistant
    std::string tool_call_id;        // tool
};

struct ChatTool {
    std::string json;  // the function object {"name", "description", "parameters"} as JSON text
};

struct ChatOptions {
    bool thinking = false;
    std::string reasoning_effort;  // "", "high" or "max"
    bool add_bos = true;
    std::optional<std::string> response_format;  // JSON schema text
};

// Throws deepinfer::Error for an unknown role or an ill-formed conversation.
std::string encode_chat(const std::vector<ChatMessage>& messages, const std::vector<ChatTool>& tools,
                        const ChatOptions& options);

struct ParsedCompletion {
    std::string reasoning_content;
    std::string content;
    std::vector<ToolCall> tool_calls;  // ids are assigned by the caller
};

// Splits a finished completion (EOS already stripped). Malformed tool-call blocks are left in
// the content rather than failing the request.
ParsedCompletion parse_completion(const std::string& text, bool thinking);

// The arguments (a JSON object's text) of one tool call from the text between its
// <｜DSML｜invoke name="..."> and </｜DSML｜invoke>; nullopt when a parameter is malformed.
std::optional<std::string> tool_call_arguments(std::string_view invoke_body);
// "\n\n<｜DSML｜tool_calls>": where a completion's tool calls start.
const std::string& tool_calls_opener();

// Streaming split of a completion into reasoning and content deltas: in thinking mode text is
// reasoning until </think>; a possible prefix of </think> is held back between pieces.
class ReasoningStream {
public:
    explicit ReasoningStream(bool thinking) : in_reasoning_(thinking) {}
    struct Delta {
        std::string reasoning, content;
    };
    Delta push(const std::string& piece);
    Delta flush();

private:
    bool in_reasoning_;
    std::string held_;
};

}  // namespace deepinfer::tokenizer
