// DeepSeek-V4 chat encoding against hand-written expected prompts (the encoding_dsv4 format),
// and parsing of completions: reasoning split (also streamed in arbitrary pieces) and DSML tool calls.
#include "tokenizer/chat_encoding.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace deepinfer::tokenizer {
namespace {

const std::string B = "<｜begin▁of▁sentence｜>", E = "<｜end▁of▁sentence｜>", U = "<｜User｜>", A = "<｜Assistant｜>";

TEST(ChatEncoding, ChatModeTurns) {
    std::vector<ChatMessage> m = {{"system", "You are terse."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "2+2?"}};
    EXPECT_EQ(encode_chat(m, {}, {}), B + "You are terse." + U + "Hi" + A + "</think>Hello!" + E + U + "2+2?" + A + "</think>");
}

TEST(ChatEncoding, ThinkingModeDropsEarlierReasoning) {
    std::vector<ChatMessage> m = {{"user", "a"}, {"assistant", "b", "old thoughts"}, {"user", "c"}};
    ChatOptions opt;
    opt.thinking = true;
    EXPECT_EQ(encode_chat(m, {}, opt), B + U + "a" + A + "</think>b" + E + U + "c" + A + "<think>");
    opt.reasoning_effort = "max";
    EXPECT_EQ(encode_chat(m, {}, opt).rfind(B + "Reasoning Effort: Absolute maximum", 0), 0u);
}

TEST(ChatEncoding, ToolsToolCallsAndResults) {
    ChatMessage call{"assistant", ""};
    call.tool_calls.push_back({"call_1", "get_weather", R"({"city": "Paris", "days": 2})"});
    std::vector<ChatMessage> m = {{"user", "weather?"}, call, {"tool", "sunny"}, {"tool", "warm"}};
    std::string p = encode_chat(m, {{R"({"name":"get_weather","parameters":{}})"}}, {});
    EXPECT_EQ(p.rfind(B + "\n\n## Tools\n\n", 0), 0u);  // an empty system turn carries the tools
    EXPECT_NE(p.find("### Available Tool Schemas\n\n{\"name\":\"get_weather\",\"parameters\":{}}\n"), std::string::npos);
    std::string dsml = "｜DSML｜";
    std::string expected_call = "\n\n<" + dsml + "tool_calls>\n<" + dsml + "invoke name=\"get_weather\">\n<" + dsml +
                                "parameter name=\"city\" string=\"true\">Paris</" + dsml + "parameter>\n<" + dsml +
                                "parameter name=\"days\" string=\"false\">2</" + dsml + "parameter>\n</" + dsml +
                                "invoke>\n</" + dsml + "tool_calls>" + E;
    EXPECT_NE(p.find(A + "</think>" + expected_call), std::string::npos) << p;
    EXPECT_NE(p.find(U + "<tool_result>sunny</tool_result>\n\n<tool_result>warm</tool_result>" + A + "</think>"), std::string::npos);
}

TEST(ChatEncoding, ParsesReasoningAndToolCalls) {
    std::string dsml = "｜DSML｜";
    std::string text = "let me think</think>Calling.\n\n<" + dsml + "tool_calls>\n<" + dsml + "invoke name=\"f\">\n<" + dsml +
                       "parameter name=\"x\" string=\"false\">[1, 2]</" + dsml + "parameter>\n<" + dsml +
                       "parameter name=\"s\" string=\"true\">hi \"there\"</" + dsml + "parameter>\n</" + dsml + "invoke>\n</" +
                       dsml + "tool_calls>";
    ParsedCompletion p = parse_completion(text, true);
    EXPECT_EQ(p.reasoning_content, "let me think");
    EXPECT_EQ(p.content, "Calling.");
    ASSERT_EQ(p.tool_calls.size(), 1u);
    EXPECT_EQ(p.tool_calls[0].name, "f");
    EXPECT_EQ(nlohmann::json::parse(p.tool_calls[0].arguments), nlohmann::json::parse(R"({"x": [1, 2], "s": "hi \"there\""})"));
    EXPECT_EQ(parse_completion("no tools here", false).content, "no tools here");
    EXPECT_EQ(parse_completion("unfinished thought", true).reasoning_content, "unfinished thought");
}

TEST(ChatEncoding, ReasoningStreamSplitsAcrossPieces) {
    std::string text = "abc</think>def</think>g";
    for (size_t cut = 0; cut <= text.size(); ++cut)
        for (size_t cut2 = cut; cut2 <= text.size(); cut2 += 3) {
            ReasoningStream rs(true);
            std::string reasoning, content;
            for (auto piece : {text.substr(0, cut), text.substr(cut, cut2 - cut), text.substr(cut2)}) {
                auto d = rs.push(piece);
                reasoning += d.reasoning;
                content += d.content;
            }
            auto d = rs.flush();
            reasoning += d.reasoning;
            content += d.content;
            EXPECT_EQ(reasoning, "abc");
            EXPECT_EQ(content, "def</think>g");
        }
}

}  // namespace
}  // namespace deepinfer::tokenizer
